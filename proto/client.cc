#include "proto/client.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "proto/protocol.h"

namespace tunefarm {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path));
  std::string line;
  while (std::getline(in, line)) {
    std::string t(absl::StripAsciiWhitespace(line));
    if (!t.empty() && t[0] != '#') return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("token file ", path, " has no token"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.tls_ca_file.empty()) {
    std::ifstream in(options.tls_ca_file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read CA file ", options.tls_ca_file));
    std::stringstream ss;
    ss << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ss.str();
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(options.server, creds, DefaultChannelArguments());
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ClientOptions& options,
                                                 absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options.token);
  return ctx;
}

}  // namespace tunefarm
