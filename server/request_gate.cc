#include "server/request_gate.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "proto/protocol.h"

namespace tunefarm::server {
namespace {

// The lowest role that grants `need`, for the error message.
absl::string_view RoleFor(Permission need) {
  switch (need) {
    case Permission::kRead:
      return "a reader, submitter or admin";
    case Permission::kSubmit:
      return "a submitter or admin";
    case Permission::kAdmin:
      return "an admin";
    case Permission::kFarm:
      return "a worker or agent";
  }
  return "another";
}

}  // namespace

absl::StatusOr<RequestGate> RequestGate::FromTokensFile(const std::string& path) {
  std::vector<std::string> warnings;
  absl::StatusOr<AccessTokens> tokens = AccessTokens::FromFile(path, &warnings);
  if (!tokens.ok()) return tokens.status();
  for (const std::string& w : warnings) Logger("server")->warn("{}", w);
  return RequestGate(*std::move(tokens));
}

grpc::Status RequestGate::Check(const grpc::ServerContext* context, uint32_t protocol_version,
                                Permission need, absl::string_view rpc, Caller* caller) const {
  if (tokens_) {
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this server requires a token (authorization: Bearer <token>)");
    }
    absl::string_view value(it->second.data(), it->second.size());
    constexpr absl::string_view kPrefix = "Bearer ";
    const AccessToken* token = value.substr(0, kPrefix.size()) == kPrefix
                                   ? tokens_->Find(value.substr(kPrefix.size()))
                                   : nullptr;
    if (token == nullptr)
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "token not accepted");
    if (!Grants(token->role, need)) {
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat(rpc, ": token '", token->name, "' has the ", TokenRoleName(token->role),
                       " role; this call needs ", RoleFor(need), " token"));
    }
    if (caller != nullptr) *caller = Caller{token->name, token->role, token};
  } else if (caller != nullptr) {
    *caller = Caller{};
  }
  return CheckProtocolVersion(protocol_version);
}

}  // namespace tunefarm::server
