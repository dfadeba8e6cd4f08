// RequestGate: the checks every RPC passes before its handler runs: the
// protocol version and, when the server has a tokens file, the bearer token
// in the "authorization" metadata. Immutable after construction; thread safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace tunefarm::server {

class RequestGate {
 public:
  RequestGate() = default;
  explicit RequestGate(std::set<std::string> tokens) : tokens_(std::move(tokens)) {}

  // Reads one token per line; blank lines and lines starting with '#' are
  // skipped. An empty or unreadable file is an error (it would lock everyone out).
  static absl::StatusOr<RequestGate> FromTokensFile(const std::string& path);

  grpc::Status Check(const grpc::ServerContext* context, uint32_t protocol_version) const;

 private:
  std::set<std::string> tokens_;
};

}  // namespace tunefarm::server
