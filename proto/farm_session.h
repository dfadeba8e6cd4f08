// FarmSession: the dial-out loop of a compile worker or a device agent.
//
// Run() registers with the server, opens the StreamWork call and sends
// heartbeats, handing each work lease to the handler. When the server goes
// away, restarts, or forgets the session, it registers again after an
// exponential back-off (capped, with jitter), forever, until Stop(). Nothing
// ever dials the process: it works behind NAT, WSL or Docker.
//
// Each attempt first waits for the channel to connect, so that this thread
// drives the connection: gRPC advances a connection attempt (the TCP
// connect, the TLS handshake) only while some call or watcher polls the
// channel, and otherwise only when its backup poller runs, every 5 s,
// too seldom for a TLS handshake to finish within its connect timeout.
// A process that stays out for Options::report_offline_after says why in
// one log line. Run() blocks; Stop() may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "spdlog/logger.h"
#include "tunefarm/v1/farm.grpc.pb.h"

namespace tunefarm {

class FarmSession {
 public:
  struct Options {
    ClientOptions client;
    v1::Role role = v1::ROLE_AGENT;
    std::string device_id;
    std::string device_key;
    v1::Capabilities capabilities;
    absl::Duration min_backoff = absl::Milliseconds(200);
    absl::Duration max_backoff = absl::Milliseconds(kReconnectBackoffMs);
    int max_in_flight = 1;
    // How long the process may stay unregistered before one error line
    // says why (the last error and its likely cause); once per outage.
    absl::Duration report_offline_after = absl::Seconds(60);
  };
  // Called for every lease, on a thread of its own (at most max_in_flight
  // at once); returns the result to report (the build or measure field set).
  // The session reports it, retrying while the server is briefly away.
  using WorkHandler = std::function<v1::ReportResultRequest(const v1::WorkLease&)>;

  FarmSession(Options options, std::shared_ptr<spdlog::logger> log);

  // Returns OK after Stop(); an error when it cannot even try (a bad TLS CA
  // file, say) or when the server refuses the registration itself
  // (UNAUTHENTICATED: the token; PERMISSION_DENIED: its role, or a device
  // id or key its token does not allow), which retrying cannot mend.
  // Connection failures are retried, never returned, and so is
  // ALREADY_EXISTS (the device id is held by another token: an operator
  // may release it), at a slower pace.
  absl::Status Run(const WorkHandler& handler);
  void Stop();

  // Whether the server took lease `lease_id` back (a heartbeat named it:
  // its job was cancelled, or it expired and went elsewhere). Handlers ask
  // it to stop work nobody waits for.
  bool Revoked(const std::string& lease_id) const;

  // How many times Register succeeded (for status output and tests).
  int registrations() const { return registrations_.load(); }
  // Results the server acknowledged.
  int reported() const { return reported_.load(); }

 private:
  // One connected period: register, stream, heartbeat. Returns when the
  // stream ends for any reason.
  // `refused`: the server answered Register with a refusal.
  absl::Status RunOnce(v1::FarmService::Stub& stub, const WorkHandler& handler, bool* refused);
  // Leases being worked on in one connected period (named in heartbeats).
  struct HeldLeases {
    std::mutex mu;
    std::set<std::string> ids;  // guarded by mu
  };
  // Tells RunOnce's heartbeat thread to end.
  struct HeartbeatStop {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;  // guarded by mu
  };
  // RunOnce's first step: registers into `resp`, counting and logging a
  // success; sets `refused` as RunOnce documents.
  absl::Status Register(v1::FarmService::Stub& stub, v1::RegisterResponse* resp, bool* refused);
  // Heartbeats every `interval` until `stop`; records revoked leases, and
  // cancels `stream_ctx` when the session is lost (3 failures, register_again).
  void HeartbeatLoop(v1::FarmService::Stub& stub, const std::string& session_id,
                     absl::Duration interval, HeldLeases& held, HeartbeatStop& stop,
                     grpc::ClientContext& stream_ctx);
  // One lease's worker thread: runs `handler`, reports the result (retrying
  // across a brief outage), then forgets the lease in `held` and revoked_.
  void WorkOnLease(v1::FarmService::Stub& stub, const WorkHandler& handler,
                   const std::string& session_id, const v1::WorkLease& lease, HeldLeases& held);
  // Starts a worker per lease read from `reader` until the stream ends;
  // returns its final status once every worker has finished.
  grpc::Status ReadLeases(grpc::ClientReader<v1::WorkLease>& reader, v1::FarmService::Stub& stub,
                          const WorkHandler& handler, const std::string& session_id,
                          HeldLeases& held);
  // Waits `d` or until Stop(); false when stopping.
  bool SleepUnlessStopped(absl::Duration d);
  // Polls `channel` until it is connected, `deadline` passes or Stop().
  void WaitForConnection(grpc::Channel& channel, absl::Time deadline);

  const Options options_;
  std::shared_ptr<spdlog::logger> log_;
  std::atomic<int> registrations_{0};
  std::atomic<int> reported_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                          // guarded by mu_
  grpc::ClientContext* stream_ctx_ = nullptr;  // guarded by mu_
  mutable std::mutex revoked_mu_;
  std::set<std::string> revoked_;  // guarded by revoked_mu_; leases being worked on
};

// The connection options from the usual --server, --tls_ca, --token_file
// and --insecure flags; an unreadable or empty token file is an error, and
// so is plain text beyond loopback without `insecure` (CheckTransport).
absl::StatusOr<ClientOptions> ClientOptionsFromFlags(const std::string& server,
                                                     const std::string& tls_ca_file,
                                                     const std::string& token_file, bool insecure);

// This machine's host name.
std::string HostName();

// Blocks SIGINT and SIGTERM in the calling thread (and so in the threads it
// starts later), runs `session` and stops it when one of them arrives.
// Returns Run()'s status.
absl::Status RunUntilSignalled(FarmSession& session, const FarmSession::WorkHandler& handler,
                               spdlog::logger& log);

}  // namespace tunefarm
