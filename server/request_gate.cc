#include "server/request_gate.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "proto/protocol.h"

namespace tunefarm::server {

absl::StatusOr<RequestGate> RequestGate::FromTokensFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read tokens file ", path));
  std::set<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    std::string t(absl::StripAsciiWhitespace(line));
    if (t.empty() || t[0] == '#') continue;
    tokens.insert(t);
  }
  if (tokens.empty())
    return absl::InvalidArgumentError(absl::StrCat("tokens file ", path, " has no tokens"));
  return RequestGate(std::move(tokens));
}

grpc::Status RequestGate::Check(const grpc::ServerContext* context,
                                uint32_t protocol_version) const {
  if (!tokens_.empty()) {
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this server requires a token (authorization: Bearer <token>)");
    }
    std::string value(it->second.data(), it->second.size());
    const std::string prefix = "Bearer ";
    if (value.rfind(prefix, 0) != 0 || tokens_.count(value.substr(prefix.size())) == 0) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "token not accepted");
    }
  }
  return CheckProtocolVersion(protocol_version);
}

}  // namespace tunefarm::server
