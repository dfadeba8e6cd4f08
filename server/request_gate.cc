#include "server/request_gate.h"

#include <utility>

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

RequestGate::RequestGate(AccessTokens tokens, std::string path)
    : path_(std::move(path)), tokens_(std::make_shared<const AccessTokens>(std::move(tokens))) {}

absl::StatusOr<std::unique_ptr<RequestGate>> RequestGate::FromTokensFile(const std::string& path) {
  std::vector<std::string> warnings;
  absl::StatusOr<AccessTokens> tokens = AccessTokens::FromFile(path, &warnings);
  if (!tokens.ok()) return tokens.status();
  for (const std::string& w : warnings) Logger("server")->warn("{}", w);
  return std::make_unique<RequestGate>(*std::move(tokens), path);
}

std::shared_ptr<const AccessTokens> RequestGate::Tokens() const {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

bool RequestGate::has_tokens() const { return Tokens() != nullptr; }

std::shared_ptr<const AccessToken> RequestGate::CurrentToken(absl::string_view digest) const {
  std::shared_ptr<const AccessTokens> tokens = Tokens();
  const AccessToken* token = tokens == nullptr ? nullptr : tokens->FindDigest(digest);
  if (token == nullptr) return nullptr;
  return std::shared_ptr<const AccessToken>(tokens, token);  // keeps the whole set alive
}

absl::StatusOr<RequestGate::TokensReload> RequestGate::ReloadTokensFile() {
  if (path_.empty()) return absl::FailedPreconditionError("the server has no tokens file");
  std::vector<std::string> warnings;
  absl::StatusOr<AccessTokens> fresh = AccessTokens::FromFile(path_, &warnings);
  if (!fresh.ok()) return fresh.status();
  for (const std::string& w : warnings) Logger("server")->warn("{}", w);
  auto next = std::make_shared<const AccessTokens>(*std::move(fresh));
  std::shared_ptr<const AccessTokens> previous;
  {
    absl::MutexLock lock(&mu_);
    previous = std::exchange(tokens_, next);
  }
  TokensReload r;
  r.tokens = next->size();
  for (const AccessToken& t : next->tokens()) {
    const AccessToken* before = previous->FindDigest(t.digest);
    if (before == nullptr) {
      ++r.added;
    } else if (*before != t) {
      ++r.changed;
    }
  }
  for (const AccessToken& t : previous->tokens()) {
    r.removed += next->FindDigest(t.digest) == nullptr;
  }
  return r;
}

grpc::Status RequestGate::Check(const grpc::ServerContext* context, uint32_t protocol_version,
                                Permission need, absl::string_view rpc, Caller* caller) const {
  if (std::shared_ptr<const AccessTokens> tokens = Tokens()) {
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this server requires a token (authorization: Bearer <token>)");
    }
    absl::string_view value(it->second.data(), it->second.size());
    constexpr absl::string_view kPrefix = "Bearer ";
    const AccessToken* token = value.substr(0, kPrefix.size()) == kPrefix
                                   ? tokens->Find(value.substr(kPrefix.size()))
                                   : nullptr;
    if (token == nullptr)
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "token not accepted");
    if (!Grants(token->role, need)) {
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat(rpc, ": token '", token->name, "' has the ", TokenRoleName(token->role),
                       " role; this call needs ", RoleFor(need), " token"));
    }
    if (caller != nullptr) {
      *caller = Caller{token->name, token->role, std::shared_ptr<const AccessToken>(tokens, token)};
    }
  } else if (caller != nullptr) {
    *caller = Caller{};
  }
  return CheckProtocolVersion(protocol_version);
}

absl::Status RequestGate::CheckToken(absl::string_view secret, Permission need,
                                     absl::string_view what) const {
  std::shared_ptr<const AccessTokens> tokens = Tokens();
  if (tokens == nullptr) return absl::OkStatus();
  if (secret.empty()) {
    return absl::UnauthenticatedError(
        "this server requires a token (authorization: Bearer <token>, or ?token=)");
  }
  const AccessToken* token = tokens->Find(secret);
  if (token == nullptr) return absl::UnauthenticatedError("token not accepted");
  if (!Grants(token->role, need)) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": token '", token->name, "' has the ",
                                                    TokenRoleName(token->role),
                                                    " role; this needs ", RoleFor(need), " token"));
  }
  return absl::OkStatus();
}

namespace {

class MalformedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MalformedRequestInterceptor(std::string method) : method_(std::move(method)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status st = methods->GetSendStatus();
      // The codes gRPC's protobuf deserializer gives (an empty message for
      // proto3, "No payload" for none); handlers here always say why.
      if (st.error_code() == grpc::StatusCode::INTERNAL &&
          (st.error_message().empty() || st.error_message() == "No payload")) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat(method_, ": the request's bytes are not a valid message of this call")));
      }
    }
    methods->Proceed();
  }

 private:
  std::string method_;
};

class MalformedRequestFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MalformedRequestInterceptor(info->method());
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MalformedRequestInterceptorFactory() {
  return std::make_unique<MalformedRequestFactory>();
}

std::vector<std::string> RequestGate::Reserving(const std::string& device_id) const {
  std::shared_ptr<const AccessTokens> tokens = Tokens();
  return tokens != nullptr ? tokens->Reserving(device_id) : std::vector<std::string>{};
}

}  // namespace tunefarm::server
