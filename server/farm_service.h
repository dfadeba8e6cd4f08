// FarmService: where compile workers and device agents dial in. Register
// and Heartbeat are served by the DeviceRegistry. StreamWork holds the
// process's work stream open for as long as its session lives and writes
// down it the leases the WorkQueue hands the session: builds for the
// triples a worker can build, measurements for an agent's device key.
// ReportResult completes a lease; Heartbeat keeps the session's leases
// alive and names those it holds that were taken back. A session lives
// while the token that registered it may serve its device: after the
// tokens file is reloaded, RecheckSessions ends those it no longer lets.
// Thread safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/device_registry.h"
#include "server/request_gate.h"
#include "server/work_queue.h"
#include "tunefarm/v1/farm.grpc.pb.h"

namespace tunefarm::server {

class FarmService final : public v1::FarmService::Service {
 public:
  FarmService(DeviceRegistry& devices, WorkQueue& queue, const RequestGate& gate)
      : devices_(devices), queue_(queue), gate_(gate) {}

  // Ends open work streams promptly; call before grpc::Server::Shutdown.
  void Shutdown();

  // Checks every live session against the gate's current tokens: a session
  // whose token is gone from the tokens file (UNAUTHENTICATED), or whose
  // token's line no longer lets it serve the device (role, keys=,
  // devices=, another token's devices=: PERMISSION_DENIED), ends: the
  // device goes offline, its leases go back to the queue, its work stream
  // and later calls on it end with that status, saying why. Sessions of
  // tokens that may still serve their devices go on untouched (a renamed
  // token keeps its sessions). Returns how many sessions ended.
  int RecheckSessions();

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status StreamWork(grpc::ServerContext* ctx, const v1::StreamWorkRequest* req,
                          grpc::ServerWriter<v1::WorkLease>* writer) override;
  grpc::Status ReportResult(grpc::ServerContext* ctx, const v1::ReportResultRequest* req,
                            v1::ReportResultResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;

 private:
  DeviceRegistry& devices_;
  WorkQueue& queue_;
  const RequestGate& gate_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ = false;  // guarded by mu_
  struct SessionInfo {
    std::string device_id;
    std::string device_key;  // agents
    v1::Role role = v1::ROLE_UNSPECIFIED;
    std::string owner;         // the name of the token that registered it
    std::string token_digest;  // that token's; empty without a tokens file
    std::vector<std::string> queues;
    grpc::Status ended;  // not OK once RecheckSessions ended it: why
  };
  // The caller's session `session_id`: NOT_FOUND when unknown,
  // PERMISSION_DENIED when another token registered it, the reason it
  // ended when RecheckSessions ended it.
  grpc::Status OwnSession(const Caller& caller, const std::string& session_id, SessionInfo* info);
  // OK when the current tokens file still lets the token that registered
  // `info` serve its device, and then *owner is that token's name now;
  // otherwise why not (see RecheckSessions).
  grpc::Status StillAllowed(const SessionInfo& info, std::string* owner) const;
  std::map<std::string, SessionInfo> sessions_;  // guarded by mu_
};

}  // namespace tunefarm::server
