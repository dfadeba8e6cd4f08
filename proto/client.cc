#include "proto/client.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/protocol.h"

namespace tunefarm {

bool IsLoopbackAddress(const std::string& address) {
  absl::string_view a = address;
  if (absl::StartsWith(a, "unix:") || absl::StartsWith(a, "unix-abstract:")) return true;
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::StartsWith(a, scheme)) {
      a.remove_prefix(scheme.size());
      break;
    }
  }
  absl::string_view host;
  if (absl::StartsWith(a, "[")) {
    size_t end = a.find(']');
    if (end == absl::string_view::npos) return false;
    host = a.substr(1, end - 1);
  } else {
    size_t colon = a.rfind(':');
    host = colon == absl::string_view::npos ? a : a.substr(0, colon);
  }
  if (host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1") return true;
  // 127.0.0.0/8, as four numbers of 0..255.
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (absl::string_view p : parts) {
    int v = 0;
    if (p.empty() || p.size() > 3 || !absl::SimpleAtoi(p, &v) || v > 255) return false;
  }
  return true;
}

std::string WithDefaultPort(const std::string& address) {
  if (address.empty() || absl::StrContains(address, ':') && !absl::EndsWith(address, "]")) {
    return address;
  }
  return absl::StrCat(address, ":", kDefaultPort);
}

absl::Status CheckTransport(const ClientOptions& options, bool insecure) {
  if (insecure || !options.tls_ca_file.empty() || IsLoopbackAddress(options.server)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to talk to ", options.server,
      " in plain text (the token would cross the network readable): give --tls_ca=CA.pem, the "
      "CA of the server's certificate (docs/security.md), or --insecure"));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path));
  std::string line;
  bool in_pem = false;
  while (std::getline(in, line)) {
    std::string t(absl::StripAsciiWhitespace(line));
    if (absl::StartsWith(t, "-----BEGIN ")) in_pem = true;
    if (in_pem) {
      in_pem = !absl::StartsWith(t, "-----END ");
      continue;
    }
    if (!t.empty() && t[0] != '#') return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("token file ", path, " has no token"));
}

std::string ReadPublicKeyPem(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string kBegin = "-----BEGIN PUBLIC KEY-----";
  const std::string kEnd = "-----END PUBLIC KEY-----";
  const size_t begin = text.find(kBegin);
  const size_t end = begin == std::string::npos ? begin : text.find(kEnd, begin);
  if (end == std::string::npos) return "";
  return text.substr(begin, end + kEnd.size() - begin) + "\n";
}

std::string ConnectionHint(absl::string_view message) {
  auto has = [&](absl::string_view text) { return absl::StrContains(message, text); };
  if (has("Ssl handshake failed") && (has("wrong version number") || has("WRONG_VERSION_NUMBER"))) {
    return "the server speaks plain text, not TLS: drop --tls_ca, or start the server with "
           "--tls_cert and --tls_key";
  }
  if (has("CERTIFICATE_VERIFY_FAILED") || has("certificate verify failed")) {
    return "its certificate is not from the CA of --tls_ca, or does not name the host dialled "
           "(dial a name or address its certificate holds; scripts/make-certs.sh)";
  }
  if (has("Socket closed")) {
    return "a server that serves TLS closes plain-text connections: give --tls_ca=CA.pem";
  }
  if (has("Connection refused")) {
    return "nothing listens there: a wrong port, or the server is not running";
  }
  if (has("DNS resolution failed") || has("Name or service not known")) {
    return "the server's host name does not resolve";
  }
  if (has("Deadline Exceeded") || has("handshaker shutdown") || has("Timeout occurred")) {
    return "no answer in time: a firewall, a wrong address, or an overloaded server";
  }
  return "";
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.tls_ca_file.empty()) {
    std::ifstream in(options.tls_ca_file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read CA file ", options.tls_ca_file));
    std::stringstream ss;
    ss << in.rdbuf();
    if (!absl::StrContains(ss.str(), "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CA file ", options.tls_ca_file,
          " holds no PEM certificate: give --tls_ca the CA's certificate (ca.pem from "
          "scripts/make-certs.sh, docs/security.md)"));
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ss.str();
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(WithDefaultPort(options.server), creds,
                                   DefaultChannelArguments());
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ClientOptions& options,
                                                 absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options.token);
  return ctx;
}

}  // namespace tunefarm
