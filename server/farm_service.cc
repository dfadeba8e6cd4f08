#include "server/farm_service.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/access_tokens.h"
#include "common/logging.h"
#include "server/limits.h"

namespace tunefarm::server {
namespace {
grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

bool ValidId(const std::string& s) { return !s.empty() && s.size() <= 128 && IsNameText(s); }

// Whether the caller's role serves the farm, as an agent (`agent`) or a
// worker; `what` starts the message.
grpc::Status RoleMayServe(const Caller& caller, bool agent, absl::string_view what) {
  if (!Grants(caller.role, Permission::kFarm)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(what, ": token '", caller.name, "' has the ", TokenRoleName(caller.role),
                     " role; serving the farm needs a worker or agent token"));
  }
  if ((caller.role == TokenRole::kWorker && agent) ||
      (caller.role == TokenRole::kAgent && !agent)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(what, ": token '", caller.name, "' is ", agent ? "a worker" : "an agent",
                     " token; it cannot register as ", agent ? "an agent" : "a worker"));
  }
  return grpc::Status::OK;
}

// Whether the caller's keys= and devices= allow device `device_id` (of
// `device_key`, for an agent), and no other token's devices= reserves it;
// *reserved_for_caller (when given): whether the caller's devices= does.
grpc::Status IdsMayServe(const Caller& caller, const RequestGate& gate, bool agent,
                         const std::string& device_id, const std::string& device_key,
                         absl::string_view what, bool* reserved_for_caller) {
  if (!caller.MayRegister(device_id, agent ? device_key : "")) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(what, ": token '", caller.name, "' may not register device id '", device_id,
                     "'", agent ? absl::StrCat(" for key '", device_key, "'") : "",
                     " (see its devices= and keys= in the tokens file)"));
  }
  // An id some token's devices= names is that token's (or those tokens'):
  // no other may take it, whatever the database says.
  const std::vector<std::string> reserving = gate.Reserving(device_id);
  const bool reserved =
      std::find(reserving.begin(), reserving.end(), caller.name) != reserving.end();
  if (!reserving.empty() && !reserved) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(what, ": device id '", device_id,
                                     "' is reserved by the devices= of token(s) '",
                                     absl::StrJoin(reserving, "', '"), "'; token '", caller.name,
                                     "' cannot register it"));
  }
  if (reserved_for_caller != nullptr) *reserved_for_caller = reserved;
  return grpc::Status::OK;
}

}  // namespace

void FarmService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

grpc::Status FarmService::OwnSession(const Caller& caller, const std::string& session_id,
                                     SessionInfo* info) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown or expired session; register again");
  }
  if (it->second.owner != caller.name) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("session of device '", it->second.device_id,
                                     "' belongs to another token than '", caller.name, "'"));
  }
  if (!it->second.ended.ok()) return it->second.ended;
  if (info != nullptr) *info = it->second;
  return grpc::Status::OK;
}

grpc::Status FarmService::StillAllowed(const SessionInfo& info, std::string* owner) const {
  if (!gate_.has_tokens()) {
    *owner = info.owner;
    return grpc::Status::OK;
  }
  std::shared_ptr<const AccessToken> token = gate_.CurrentToken(info.token_digest);
  if (token == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("token '", info.owner, "' is no longer in the tokens file"));
  }
  const Caller now{token->name, token->role, token};
  const bool agent = info.role == v1::ROLE_AGENT;
  constexpr absl::string_view kWhat = "the tokens file changed";
  if (grpc::Status s = RoleMayServe(now, agent, kWhat); !s.ok()) return s;
  grpc::Status ids =
      IdsMayServe(now, gate_, agent, info.device_id, info.device_key, kWhat, nullptr);
  if (!ids.ok()) return ids;
  *owner = token->name;
  return grpc::Status::OK;
}

int FarmService::RecheckSessions() {
  int ended = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, info] : sessions_) {
    if (!info.ended.ok() || !devices_.SessionAlive(id)) continue;
    std::string owner;
    grpc::Status now = StillAllowed(info, &owner);
    if (now.ok()) {
      info.owner = owner;
      continue;
    }
    info.ended = grpc::Status(
        now.error_code(),
        absl::StrCat(now.error_message(), "; the session of device '", info.device_id, "' ended"));
    devices_.EndSession(id);
    Logger("server")->warn("event=session_ended device={} error=\"{}\"", info.device_id,
                           info.ended.error_message());
    ++ended;
  }
  return ended;
}

grpc::Status FarmService::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                   v1::RegisterResponse* resp) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kFarm, "Register", &caller);
  if (!gate.ok()) return gate;
  if (req->role() != v1::ROLE_WORKER && req->role() != v1::ROLE_AGENT) {
    return Invalid("Register: role must be ROLE_WORKER or ROLE_AGENT");
  }
  if (absl::Status c = CheckCapabilities(req->capabilities()); !c.ok()) {
    return Invalid(std::string(c.message()));
  }
  const bool agent = req->role() == v1::ROLE_AGENT;
  if (grpc::Status role = RoleMayServe(caller, agent, "Register"); !role.ok()) return role;
  if (!ValidId(req->device_id())) {
    return Invalid(absl::StrCat("Register: device_id '", req->device_id(),
                                "' must be 1-128 characters of [A-Za-z0-9._:-]"));
  }
  if (req->role() == v1::ROLE_AGENT && !ValidId(req->device_key())) {
    return Invalid(absl::StrCat("Register: an agent needs a device_key of [A-Za-z0-9._:-], got '",
                                req->device_key(), "'"));
  }
  bool reserved_for_caller = false;
  if (grpc::Status ids = IdsMayServe(caller, gate_, agent, req->device_id(), req->device_key(),
                                     "Register", &reserved_for_caller);
      !ids.ok()) {
    return ids;
  }
  v1::Device d;
  d.set_device_id(req->device_id());
  d.set_role(req->role());
  d.set_device_key(req->device_key());
  *d.mutable_capabilities() = req->capabilities();
  d.set_peer(ctx->peer());
  absl::StatusOr<std::string> session = devices_.Register(d, caller.name, reserved_for_caller);
  if (!session.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(session.status().code()),
                        std::string(session.status().message()));
  }
  SessionInfo info;
  info.device_id = req->device_id();
  info.device_key = req->device_key();
  info.role = req->role();
  info.owner = caller.name;
  info.token_digest = caller.token == nullptr ? "" : caller.token->digest;
  if (req->role() == v1::ROLE_WORKER) {
    for (const std::string& t : req->capabilities().build_triples())
      info.queues.push_back(WorkQueue::BuildQueue(t));
    for (const std::string& a : req->capabilities().cuda_archs())
      info.queues.push_back(WorkQueue::CudaBuildQueue(a));
  } else {
    info.queues.push_back(WorkQueue::MeasureQueue(req->device_key()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A reload between the gate's check and here is not covered by
    // RecheckSessions (this session is not in sessions_ yet): check again.
    if (grpc::Status now = StillAllowed(info, &info.owner); !now.ok()) {
      devices_.EndSession(*session);
      return now;
    }
    sessions_[*session] = std::move(info);
  }
  resp->set_session_id(*session);
  resp->set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(devices_.heartbeat_interval())));
  resp->set_lease_timeout_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(3 * devices_.heartbeat_interval())));
  Logger("server")->info("event=registered device={} role={} key={} peer={}", req->device_id(),
                         v1::Role_Name(req->role()), req->device_key(), ctx->peer());
  return grpc::Status::OK;
}

grpc::Status FarmService::StreamWork(grpc::ServerContext* ctx, const v1::StreamWorkRequest* req,
                                     grpc::ServerWriter<v1::WorkLease>* writer) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kFarm, "StreamWork", &caller);
  if (!gate.ok()) return gate;
  SessionInfo info;
  grpc::Status own = OwnSession(caller, req->session_id(), &info);
  if (!own.ok()) return own;
  if (!devices_.SessionAlive(req->session_id())) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown or expired session; register again");
  }
  // Send the initial metadata now, so the client sees the stream is open.
  writer->SendInitialMetadata();
  queue_.OpenSession(req->session_id(), info.device_id, info.queues,
                     std::max(1, req->max_in_flight()));
  grpc::Status end(grpc::StatusCode::UNAVAILABLE, "server shutting down");
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) break;
      auto it = sessions_.find(req->session_id());
      if (it != sessions_.end() && !it->second.ended.ok()) {
        end = it->second.ended;
        break;
      }
    }
    if (ctx->IsCancelled()) {
      end = grpc::Status::CANCELLED;
      break;
    }
    if (!devices_.SessionAlive(req->session_id())) {
      end = grpc::Status(grpc::StatusCode::NOT_FOUND, "session expired; register again");
      break;
    }
    std::optional<v1::WorkLease> lease = queue_.Next(req->session_id(), absl::Milliseconds(300));
    if (!lease) continue;
    if (!writer->Write(*lease)) {
      end = grpc::Status::CANCELLED;
      break;
    }
  }
  // Whatever the session still holds goes back to the queue.
  queue_.CloseSession(req->session_id());
  return end;
}

grpc::Status FarmService::ReportResult(grpc::ServerContext* ctx, const v1::ReportResultRequest* req,
                                       v1::ReportResultResponse* resp) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kFarm, "ReportResult", &caller);
  if (!gate.ok()) return gate;
  if (req->result_case() == v1::ReportResultRequest::RESULT_NOT_SET) {
    return Invalid("ReportResult: neither a build, a measure nor a model-run result");
  }
  SessionInfo info;
  grpc::Status own = OwnSession(caller, req->session_id(), &info);
  if (!own.ok()) return own;
  // Workers report builds; agents report measurements and model runs.
  if (req->has_build() != (info.role == v1::ROLE_WORKER)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("ReportResult: a ", v1::Role_Name(info.role), " session cannot report a ",
                     req->has_build() ? "build" : "measurement or model run"));
  }
  const v1::ReportResultRequest* result = req;
  v1::ReportResultRequest stamped;
  if (req->has_measure() || req->has_model_run()) {
    stamped = *req;
    if (req->has_measure()) stamped.mutable_measure()->set_device_id(info.device_id);
    if (req->has_model_run()) stamped.mutable_model_run()->set_device_id(info.device_id);
    result = &stamped;
  }
  absl::StatusOr<bool> live = queue_.Complete(req->session_id(), *result);
  if (!live.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(live.status().code()),
                        std::string(live.status().message()));
  }
  resp->set_lease_was_live(*live);
  return grpc::Status::OK;
}

grpc::Status FarmService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                    v1::HeartbeatResponse* resp) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kFarm, "Heartbeat", &caller);
  if (!gate.ok()) return gate;
  // Another token's session is refused; an unknown one is told to register.
  if (grpc::Status own = OwnSession(caller, req->session_id(), nullptr);
      own.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return own;
  }
  if (!devices_.Heartbeat(req->session_id())) {
    resp->set_register_again(true);
    return grpc::Status::OK;
  }
  std::vector<std::string> held(req->held_lease_ids().begin(), req->held_lease_ids().end());
  for (const std::string& id : queue_.Heartbeat(req->session_id(), held))
    resp->add_revoked_lease_ids(id);
  return grpc::Status::OK;
}

}  // namespace tunefarm::server
