#include "server/server.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/signing.h"
#include "common/status_macros.h"
#include "proto/protocol.h"
#include "server/dashboard.h"
#include "server/device_registry.h"
#include "server/farm_service.h"
#include "server/http_server.h"
#include "server/job_manager.h"
#include "server/job_runner.h"
#include "server/metrics.h"
#include "server/request_gate.h"
#include "search/store_canon.h"
#include "server/server_certificate.h"
#include "store/tuning_log.h"
#include "server/tuning_service.h"
#include "server/work_queue.h"

namespace tunefarm::server {
namespace {

// The HTTP pages: /metrics for a reader's token (bearer header or ?token=).
HttpResponse ServePage(const HttpRequest& r, const MetricsSources& sources, const RequestGate& gate,
                       DashboardCache& cache) {
  std::string token;
  if (auto it = r.headers.find("authorization"); it != r.headers.end()) {
    absl::string_view v = it->second;
    if (absl::ConsumePrefix(&v, "Bearer ")) token = std::string(v);
  }
  if (token.empty()) {
    if (auto it = r.query.find("token"); it != r.query.end()) token = it->second;
  }
  if (absl::Status s = gate.CheckToken(token, Permission::kRead, r.path); !s.ok()) {
    return {absl::IsUnauthenticated(s) ? 401 : 403, "text/plain; charset=utf-8",
            std::string(s.message()) + "\n"};
  }
  if (r.path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics(sources)};
  }
  if (r.path == "/") return {200, "text/html; charset=utf-8", DashboardHtml()};
  if (r.path == "/api/state") {
    auto job = r.query.find("job");
    if (job == r.query.end()) return {200, "application/json", DashboardState(sources, cache)};
    int64_t id = 0;
    if (!absl::SimpleAtoi(job->second, &id) || id <= 0) {
      return {400, "text/plain; charset=utf-8", "job= takes a job id\n"};
    }
    absl::StatusOr<std::string> one = DashboardJobState(sources, cache, id);
    if (!one.ok()) {
      return {absl::IsNotFound(one.status()) ? 404 : 500, "text/plain; charset=utf-8",
              std::string(one.status().message()) + "\n"};
    }
    return {200, "application/json", *std::move(one)};
  }
  return {404, "text/plain; charset=utf-8", absl::StrCat("no page ", r.path, "\n")};
}

}  // namespace

absl::StatusOr<std::unique_ptr<TunefarmServer>> TunefarmServer::Start(const Options& options) {
  std::unique_ptr<TunefarmServer> s(new TunefarmServer());
  store::TuningLog::Options db_opts;
  db_opts.canon = search::CompilerCanon();
  db_opts.path = options.db_path;
  TF_ASSIGN_OR_RETURN(s->log_, store::TuningLog::Open(db_opts));
  if (!options.tokens_file.empty()) {
    TF_ASSIGN_OR_RETURN(s->gate_, RequestGate::FromTokensFile(options.tokens_file));
  } else {
    s->gate_ = std::make_unique<RequestGate>();
  }
  s->devices_ = std::make_unique<DeviceRegistry>(*s->log_, options.heartbeat_interval);
  WorkQueue::Options qo;
  qo.lease_timeout = 3 * options.heartbeat_interval;
  const std::string key_file = options.signing_key_file.empty() ? options.db_path + ".signing-key"
                                                                : options.signing_key_file;
  TF_ASSIGN_OR_RETURN(Signer signer, Signer::LoadOrCreate(key_file));
  qo.on_lease = [signer](v1::WorkLease* lease) {
    const std::string message = SignedPartOf(*lease);
    if (message.empty()) return;  // a build carries no code
    absl::StatusOr<std::string> sig = signer.Sign(message);
    if (sig.ok()) lease->set_server_signature(*sig);
  };
  Logger("server")->info("event=signing_key file={} public={}.pub", key_file, key_file);
  s->queue_ = std::make_unique<WorkQueue>(qo);
  // Devices drained before a restart stay drained.
  TF_ASSIGN_OR_RETURN(std::vector<v1::Device> known, s->log_->ListDevices());
  for (const v1::Device& d : known) {
    if (d.drained()) s->queue_->SetDrained(d.device_id(), true);
  }
  TunefarmServer* raw = s.get();
  JobRunner::Options jo;
  jo.max_running_jobs = std::max(1, options.max_running_jobs);
  jo.confirm_tolerance = options.confirm_tolerance;
  if (options.fingerprint_policy == "refuse") {
    jo.fingerprint_policy = JobRunner::Options::FingerprintPolicy::kRefuse;
  } else if (options.fingerprint_policy != "warn") {
    return absl::InvalidArgumentError(absl::StrCat(
        "fingerprint policy '", options.fingerprint_policy, "' is not one of warn, refuse"));
  }
  DeviceRegistry* registry = s->devices_.get();
  jo.live_devices = [registry] {
    absl::StatusOr<std::vector<v1::Device>> devices = registry->List();
    return devices.ok() ? *devices : std::vector<v1::Device>{};
  };
  s->jobs_ = std::make_unique<JobRunner>(
      *s->log_, *s->queue_, [raw] { raw->tuning_->NotifyJobsChanged(); }, jo);
  s->manager_ = std::make_unique<JobManager>(*s->log_, *s->devices_, *s->queue_, *s->jobs_,
                                             [raw] { raw->tuning_->NotifyJobsChanged(); });
  s->manager_->set_max_jobs_per_owner(std::max(1, options.max_jobs_per_token));
  s->tuning_ = std::make_unique<TuningService>(*s->log_, *s->devices_, *s->manager_, *s->gate_);
  s->farm_ = std::make_unique<FarmService>(*s->devices_, *s->queue_, *s->gate_);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (!options.tls_cert_file.empty()) {
    TF_ASSIGN_OR_RETURN(s->tls_,
                        ServerCertificate::Load(options.tls_cert_file, options.tls_key_file));
    const ServerCertificate::Info cert = s->tls_->current();
    Logger("server")->info(
        "event=certificate file={} subject=\"{}\" serial={} not_after=\"{}\" sha256={}",
        options.tls_cert_file, cert.subject, cert.serial, cert.not_after, cert.sha256);
    creds = s->tls_->Credentials();
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &s->port_);
  int max_bytes = options.max_message_bytes > 0 ? options.max_message_bytes : kMaxMessageBytes;
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(s->tuning_.get());
  builder.RegisterService(s->farm_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MalformedRequestInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  Logger("server")->info("event=started listen={} port={} db={} tls={} tokens={}", options.listen,
                         s->port_, options.db_path, !options.tls_cert_file.empty(),
                         !options.tokens_file.empty());
  if (!options.http_listen.empty()) {
    MetricsSources sources{s->queue_.get(), s->devices_.get(), s->log_.get(), &s->jobs_->commits()};
    const RequestGate* gate = s->gate_.get();
    auto cache = std::make_shared<DashboardCache>();
    TF_ASSIGN_OR_RETURN(s->http_, HttpServer::Start(options.http_listen,
                                                    [sources, gate, cache](const HttpRequest& r) {
                                                      return ServePage(r, sources, *gate, *cache);
                                                    },
                                                    options.http));
    Logger("server")->info("event=http listen={} port={}", options.http_listen, s->http_->port());
  }
  // Jobs left behind: queued ones start; ones the last server was running
  // are interrupted (or resumed with auto_resume).
  TF_RETURN_IF_ERROR(s->manager_->Recover(options.auto_resume));
  return s;
}

int TunefarmServer::http_port() const { return http_ == nullptr ? 0 : http_->port(); }

absl::Status TunefarmServer::Reload() {
  std::vector<std::string> done;  // what was replaced, for the event=reloaded line
  absl::Status first_error;
  if (gate_->has_tokens()) {
    absl::StatusOr<RequestGate::TokensReload> t = gate_->ReloadTokensFile();
    if (t.ok()) {
      const int ended = farm_->RecheckSessions();
      done.push_back(absl::StrCat("tokens=", t->tokens, " added=", t->added, " removed=",
                                  t->removed, " changed=", t->changed, " sessions_ended=", ended));
    } else {
      Logger("server")->error(
          "event=reload_failed what=tokens error=\"{}\" kept=\"the tokens loaded before\"",
          std::string(t.status().message()));
      first_error.Update(t.status());
    }
  }
  if (tls_ != nullptr) {
    const ServerCertificate::Info before = tls_->current();
    absl::StatusOr<ServerCertificate::Info> cert = tls_->Reload();
    if (cert.ok()) {
      done.push_back(absl::StrCat("cert_subject=\"", cert->subject, "\" cert_serial=", cert->serial,
                                  " cert_not_after=\"", cert->not_after,
                                  "\" cert_sha256=", cert->sha256));
    } else {
      Logger("server")->error(
          "event=reload_failed what=certificate error=\"{}\" kept=\"the certificate of serial "
          "{}\"",
          std::string(cert.status().message()), before.serial);
      first_error.Update(cert.status());
    }
  }
  if (!gate_->has_tokens() && tls_ == nullptr) {
    done.push_back("nothing=\"no --tokens_file, no --tls_cert\"");
  }
  if (!done.empty()) Logger("server")->info("event=reloaded {}", absl::StrJoin(done, " "));
  return first_error;
}

void TunefarmServer::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;  // stopped, or never started
  shut_down_ = true;
  if (http_ != nullptr) http_->Stop();
  jobs_->Shutdown();  // running jobs become INTERRUPTED
  manager_->Shutdown();
  tuning_->Shutdown();
  farm_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  Logger("server")->info("event=stopped");
}

void TunefarmServer::Wait() { server_->Wait(); }

TunefarmServer::~TunefarmServer() { Shutdown(); }

}  // namespace tunefarm::server
