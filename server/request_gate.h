// RequestGate: the checks every RPC passes before its handler runs: the
// protocol version and, when the server has a tokens file, the bearer token
// in the "authorization" metadata and whether its role grants what the call
// needs (common/access_tokens.h). The tokens file can be read again while
// the server runs (ReloadTokensFile); each check sees one whole set of
// tokens, the one current when it starts. Thread safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/access_tokens.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"

namespace tunefarm::server {

// Who is calling. Without a tokens file every caller is "anonymous" with
// the admin role and no limits.
struct Caller {
  std::string name = "anonymous";
  TokenRole role = TokenRole::kAdmin;
  // The line of the tokens file that let the call in, as it was then (a
  // reload does not change it); nullptr: the server has no tokens file.
  std::shared_ptr<const AccessToken> token;

  bool MayRegister(const std::string& device_id, const std::string& device_key) const {
    return token == nullptr || token->MayRegister(device_id, device_key);
  }
};

class RequestGate {
 public:
  // No tokens file: every caller is "anonymous", an admin.
  RequestGate() = default;
  // The tokens of the file at `path` (read again by ReloadTokensFile).
  RequestGate(AccessTokens tokens, std::string path);

  // Reads a tokens file (common/access_tokens.h); every problem in it is an
  // error, so a typo cannot lock everyone out or let everyone in. Lines
  // worth a warning (a token with no role) are logged.
  static absl::StatusOr<std::unique_ptr<RequestGate>> FromTokensFile(const std::string& path);

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

  // Whether calls need a token (the server has a tokens file).
  bool has_tokens() const;

  // The current line of the token whose secret's digest is `digest`;
  // nullptr when the tokens file no longer has it (or there is none).
  std::shared_ptr<const AccessToken> CurrentToken(absl::string_view digest) const;

  // What a reload changed, by token (its digest): tokens now in the file,
  // ones new to it, ones gone, and ones whose line changed (role, name,
  // keys=, devices=).
  struct TokensReload {
    size_t tokens = 0;
    size_t added = 0;
    size_t removed = 0;
    size_t changed = 0;
  };
  // Reads the tokens file again. When it parses, its tokens replace the
  // current ones for every check that starts afterwards: a new token is
  // accepted, a removed one is UNAUTHENTICATED, a changed line gives its
  // new rights. When it does not (or cannot be read), the current tokens
  // stay and the error names the file and the problem. FAILED_PRECONDITION
  // without a tokens file.
  absl::StatusOr<TokensReload> ReloadTokensFile();

 private:
  std::shared_ptr<const AccessTokens> Tokens() const;

  const std::string path_;  // the tokens file; empty: none
  mutable absl::Mutex mu_;
  std::shared_ptr<const AccessTokens> tokens_ ABSL_GUARDED_BY(mu_);  // nullptr: no tokens file
};

// Requests whose bytes are not their method's message never reach a
// handler: gRPC answers them INTERNAL with an empty message. This server
// interceptor makes that INVALID_ARGUMENT naming the method, the client's
// fault it is.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MalformedRequestInterceptorFactory();

}  // namespace tunefarm::server
