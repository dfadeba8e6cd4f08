// RequestGate: the checks every RPC passes before its handler runs: the
// protocol version and, when the server has a tokens file, the bearer token
// in the "authorization" metadata and whether its role grants what the call
// needs (common/access_tokens.h). Immutable after construction; thread safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/access_tokens.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"

namespace tunefarm::server {

// Who is calling. Without a tokens file every caller is "anonymous" with
// the admin role and no limits.
struct Caller {
  std::string name = "anonymous";
  TokenRole role = TokenRole::kAdmin;
  const AccessToken* token = nullptr;  // nullptr: the server has no tokens file

  bool MayRegister(const std::string& device_id, const std::string& device_key) const {
    return token == nullptr || token->MayRegister(device_id, device_key);
  }
};

class RequestGate {
 public:
  RequestGate() = default;
  explicit RequestGate(AccessTokens tokens) : tokens_(std::move(tokens)) {}

  // Reads a tokens file (common/access_tokens.h); every problem in it is an
  // error, so a typo cannot lock everyone out or let everyone in. Lines
  // worth a warning (a token with no role) are logged.
  static absl::StatusOr<RequestGate> FromTokensFile(const std::string& path);

  // OK when the call's protocol version is served and its token grants
  // `need`; `rpc` names the call in the error. Fills `caller` when given.
  grpc::Status Check(const grpc::ServerContext* context, uint32_t protocol_version, Permission need,
                     absl::string_view rpc, Caller* caller = nullptr) const;

  // The same check of a bearer token given another way (the HTTP pages):
  // OK without a tokens file; UNAUTHENTICATED for a missing or unknown
  // token, PERMISSION_DENIED for a role without `need`.
  absl::Status CheckToken(absl::string_view token, Permission need, absl::string_view what) const;

  // The tokens whose devices= names `device_id` (AccessTokens::Reserving);
  // empty without a tokens file.
  std::vector<std::string> Reserving(const std::string& device_id) const;

 private:
  std::optional<AccessTokens> tokens_;
};

// Requests whose bytes are not their method's message never reach a
// handler: gRPC answers them INTERNAL with an empty message. This server
// interceptor makes that INVALID_ARGUMENT naming the method, the client's
// fault it is.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MalformedRequestInterceptorFactory();

}  // namespace tunefarm::server
