#include "proto/farm_session.h"

#include <signal.h>
#include <unistd.h>

#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/protocol.h"

namespace tunefarm {

FarmSession::FarmSession(Options options, std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), log_(std::move(log)) {}

void FarmSession::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  cv_.notify_all();
}

bool FarmSession::SleepUnlessStopped(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoNanoseconds(d), [this] { return stop_; });
  return !stop_;
}

void FarmSession::WaitForConnection(grpc::Channel& channel, absl::Time deadline) {
  // In slices, so that Stop() is seen within one.
  while (channel.GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return;
    channel.WaitForConnected(absl::ToChronoTime(std::min(deadline, now + absl::Milliseconds(500))));
  }
}

absl::Status FarmSession::Run(const WorkHandler& handler) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(options_.client);
  if (!channel.ok()) return channel.status();
  auto stub = v1::FarmService::NewStub(*channel);
  std::mt19937_64 rng{std::random_device{}()};
  absl::Duration backoff = options_.min_backoff;
  absl::Time offline_since = absl::Now();
  bool offline_reported = false;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return absl::OkStatus();
    }
    WaitForConnection(**channel, absl::Now() + absl::Seconds(10));
    int before = registrations_.load();
    bool refused = false;
    absl::Status s = RunOnce(*stub, handler, &refused);
    if (refused) {
      std::string fix;
      if (s.code() == absl::StatusCode::kUnauthenticated) {
        fix = options_.client.token.empty()
                  ? " (give --token_file=FILE with a token of this role: `tunefarm token`, "
                    "docs/security.md)"
                  : " (the server's tokens file has no line for the secret in --token_file: "
                    "add the line `tunefarm token` printed with it, or give the right file)";
      }
      return absl::Status(s.code(),
                          absl::StrCat("the server ", options_.client.server,
                                       " refused to register this process: ", s.message(), fix));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return absl::OkStatus();
    }
    // A session that got as far as registering resets the back-off.
    if (registrations_.load() != before) {
      backoff = options_.min_backoff;
      offline_since = absl::Now();
      offline_reported = false;
    }
    double jitter = std::uniform_real_distribution<double>(0.8, 1.2)(rng);
    absl::Duration wait = backoff * jitter;
    // Held by another token: not a connection problem, and it takes a
    // person to mend; ask seldom.
    if (s.code() == absl::StatusCode::kAlreadyExists) wait = std::max(wait, absl::Seconds(15));
    // A mistake of set-up (TLS on one side only, another CA) is named at
    // once; the offline report below says it again after a while.
    const std::string fix = ConnectionHint(s.message());
    log_->warn("event=disconnected server={} error=\"{}\" retry_in_ms={}{}", options_.client.server,
               std::string(s.message()), absl::ToInt64Milliseconds(wait),
               fix.empty() ? "" : absl::StrCat(" hint=\"", fix, "\""));
    if (!offline_reported && absl::Now() - offline_since >= options_.report_offline_after) {
      offline_reported = true;
      const std::string hint =
          s.code() == absl::StatusCode::kAlreadyExists
              ? "another token registered this device id first: give this process its own "
                "--device_id, or name the id in this token's devices= in the server's tokens file"
              : fix;
      log_->error("event=offline server={} for_s={} error=\"{}\"{}{}", options_.client.server,
                  absl::ToInt64Seconds(absl::Now() - offline_since), std::string(s.message()),
                  hint.empty() ? "" : " hint=", hint.empty() ? "" : absl::StrCat("\"", hint, "\""));
    }
    if (!SleepUnlessStopped(wait)) return absl::OkStatus();
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::Status FarmSession::Register(v1::FarmService::Stub& stub, v1::RegisterResponse* resp,
                                   bool* refused) {
  v1::RegisterRequest reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.set_role(options_.role);
  reg.set_device_id(options_.device_id);
  reg.set_device_key(options_.device_key);
  *reg.mutable_capabilities() = options_.capabilities;
  {
    auto ctx = MakeContext(options_.client, absl::Seconds(10));
    grpc::Status s = stub.Register(ctx.get(), reg, resp);
    *refused = s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
               s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
    if (!s.ok()) return FromGrpcStatus(s);
  }
  registrations_.fetch_add(1);
  log_->info("event=registered server={} device={} key={} session={}", options_.client.server,
             options_.device_id, options_.device_key, resp->session_id());
  return absl::OkStatus();
}

void FarmSession::HeartbeatLoop(v1::FarmService::Stub& stub, const std::string& session_id,
                                absl::Duration interval, HeldLeases& held, HeartbeatStop& stop,
                                grpc::ClientContext& stream_ctx) {
  int failures = 0;
  std::unique_lock<std::mutex> lock(stop.mu);
  while (!stop.cv.wait_for(lock, absl::ToChronoNanoseconds(interval), [&] { return stop.done; })) {
    lock.unlock();
    v1::HeartbeatRequest hb;
    hb.set_protocol_version(kProtocolVersion);
    hb.set_session_id(session_id);
    {
      std::lock_guard<std::mutex> h(held.mu);
      for (const std::string& id : held.ids) hb.add_held_lease_ids(id);
    }
    v1::HeartbeatResponse hb_resp;
    auto ctx = MakeContext(options_.client, interval * 2);
    grpc::Status s = stub.Heartbeat(ctx.get(), hb, &hb_resp);
    failures = s.ok() ? 0 : failures + 1;
    if (s.ok() && hb_resp.revoked_lease_ids_size() > 0) {
      // Only leases named in this heartbeat, i.e. still being worked on.
      std::set<std::string> sent(hb.held_lease_ids().begin(), hb.held_lease_ids().end());
      std::lock_guard<std::mutex> r(revoked_mu_);
      for (const std::string& id : hb_resp.revoked_lease_ids()) {
        if (sent.count(id)) revoked_.insert(id);
      }
    }
    bool lost = hb_resp.register_again() || failures >= 3;
    lock.lock();
    if (lost) {
      log_->warn("event=session_lost register_again={} heartbeat_failures={}",
                 hb_resp.register_again(), failures);
      stream_ctx.TryCancel();
      return;
    }
  }
}

void FarmSession::WorkOnLease(v1::FarmService::Stub& stub, const WorkHandler& handler,
                              const std::string& session_id, const v1::WorkLease& lease,
                              HeldLeases& held) {
  v1::ReportResultRequest result = handler(lease);
  result.set_protocol_version(kProtocolVersion);
  result.set_session_id(session_id);
  result.set_lease_id(lease.lease_id());
  // A few tries across a brief outage; after that the lease expires on
  // the server and the work is re-issued.
  for (int attempt = 0; attempt < 5; ++attempt) {
    v1::ReportResultResponse resp;
    auto ctx = MakeContext(options_.client, absl::Seconds(30));
    grpc::Status s = stub.ReportResult(ctx.get(), result, &resp);
    if (s.ok()) {
      reported_.fetch_add(1);
      break;
    }
    log_->warn("event=report_failed lease={} attempt={} error=\"{}\"", lease.lease_id(),
               attempt + 1, s.error_message());
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      break;  // the server refused it (expired, cancelled): nothing to retry
    }
    if (!SleepUnlessStopped(absl::Milliseconds(200 << attempt))) break;
  }
  {
    std::lock_guard<std::mutex> h(held.mu);
    held.ids.erase(lease.lease_id());
  }
  std::lock_guard<std::mutex> r(revoked_mu_);
  revoked_.erase(lease.lease_id());
}

grpc::Status FarmSession::ReadLeases(grpc::ClientReader<v1::WorkLease>& reader,
                                     v1::FarmService::Stub& stub, const WorkHandler& handler,
                                     const std::string& session_id, HeldLeases& held) {
  std::vector<std::thread> workers;
  v1::WorkLease lease;
  while (reader.Read(&lease)) {
    {
      std::lock_guard<std::mutex> h(held.mu);
      held.ids.insert(lease.lease_id());
    }
    workers.emplace_back([this, &stub, &handler, &session_id, &held, lease] {
      WorkOnLease(stub, handler, session_id, lease, held);
    });
  }
  grpc::Status status = reader.Finish();
  for (std::thread& t : workers) t.join();
  return status;
}

absl::Status FarmSession::RunOnce(v1::FarmService::Stub& stub, const WorkHandler& handler,
                                  bool* refused) {
  v1::RegisterResponse reg_resp;
  if (absl::Status s = Register(stub, &reg_resp, refused); !s.ok()) return s;
  const std::string& session_id = reg_resp.session_id();

  grpc::ClientContext stream_ctx;
  if (!options_.client.token.empty()) {
    stream_ctx.AddMetadata("authorization", "Bearer " + options_.client.token);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return absl::CancelledError("stopping");
    stream_ctx_ = &stream_ctx;
  }
  v1::StreamWorkRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_session_id(session_id);
  req.set_max_in_flight(options_.max_in_flight);
  std::unique_ptr<grpc::ClientReader<v1::WorkLease>> reader = stub.StreamWork(&stream_ctx, req);

  // Leases being worked on: named in heartbeats, so the server keeps them.
  HeldLeases held;
  // Heartbeats run beside the blocking stream read; a heartbeat that fails or
  // that the server answers with register_again cancels the stream.
  HeartbeatStop hb_stop;
  absl::Duration interval = absl::Milliseconds(std::max(reg_resp.heartbeat_interval_ms(), 50));
  std::thread heartbeat(
      [&] { HeartbeatLoop(stub, session_id, interval, held, hb_stop, stream_ctx); });

  grpc::Status status = ReadLeases(*reader, stub, handler, session_id, held);
  {
    std::lock_guard<std::mutex> lock(hb_stop.mu);
    hb_stop.done = true;
    hb_stop.cv.notify_all();
  }
  heartbeat.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream_ctx_ = nullptr;
  }
  if (status.ok()) return absl::UnavailableError("work stream closed by the server");
  return FromGrpcStatus(status);
}

bool FarmSession::Revoked(const std::string& lease_id) const {
  std::lock_guard<std::mutex> r(revoked_mu_);
  return revoked_.count(lease_id) > 0;
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags(const std::string& server,
                                                     const std::string& tls_ca_file,
                                                     const std::string& token_file, bool insecure) {
  ClientOptions o;
  o.server = WithDefaultPort(server);
  o.tls_ca_file = tls_ca_file;
  if (absl::Status s = CheckTransport(o, insecure); !s.ok()) return s;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(token_file);
    if (!token.ok()) return token.status();
    o.token = *token;
  }
  return o;
}

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

absl::Status RunUntilSignalled(FarmSession& session, const FarmSession::WorkHandler& handler,
                               spdlog::logger& log) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    log.info("event=signal signal={}", sig);
    session.Stop();
  });
  absl::Status s = session.Run(handler);
  // Run returns OK only after Stop(), which the signal thread calls; on an
  // error, wake that thread with a signal of our own.
  if (!s.ok()) kill(getpid(), SIGTERM);
  signals.join();
  return s;
}

}  // namespace tunefarm
