// tunefarm-worker: a compile worker. Dials out to the tuning server and
// builds the candidates it is handed.
//
//   tunefarm-worker --server=HOST:PORT [--token_file=F] [--tls_ca=F]
//
// Reconnects with back-off when the server goes away. Stops on SIGINT/SIGTERM.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "proto/farm_session.h"
#include "worker/artifact_cache.h"
#include "worker/builder.h"
#include "worker/worker_capabilities.h"

ABSL_FLAG(std::string, server, "127.0.0.1:7070", "tuning server address HOST:PORT");
ABSL_FLAG(std::string, device_id, "", "stable name of this worker (default: worker-<host name>)");
ABSL_FLAG(std::string, token_file, "", "file holding the bearer token");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate; connect with TLS");
ABSL_FLAG(bool, insecure, false,
          "allow plain text to a server beyond loopback (the token crosses the network readable)");
ABSL_FLAG(int64_t, cache_mb, 512, "artifact cache size in MiB (content-addressed)");
ABSL_FLAG(int, threads, 0, "builds at once (default: one per core)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(absl::Duration, report_offline_after, absl::Seconds(60),
          "unregistered this long, say why in one line (e.g. 60s, 5m)");

int main(int argc, char** argv) {
  tunefarm::SetDaemonUsage(
      "the tunefarm compile worker\n\n  tunefarm-worker --server=HOST[:PORT] [--token_file=F] "
      "[--tls_ca=F]\n\nExit codes: 0 stopped by SIGINT/SIGTERM, 1 refused by the server, 2 bad "
      "flags or set-up (docs/cli.md)");
  tunefarm::ParseDaemonFlags(argc, argv);
  absl::Status logging = tunefarm::InitLogging(absl::GetFlag(FLAGS_log_level));
  auto client = tunefarm::ClientOptionsFromFlags(
      absl::GetFlag(FLAGS_server), absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_token_file),
      absl::GetFlag(FLAGS_insecure));
  if (!logging.ok() || !client.ok()) {
    std::fprintf(stderr, "tunefarm-worker: %s\n",
                 std::string((logging.ok() ? client.status() : logging).message()).c_str());
    return 2;
  }
  tunefarm::FarmSession::Options opts;
  opts.client = *client;
  opts.role = tunefarm::v1::ROLE_WORKER;
  opts.device_id = absl::GetFlag(FLAGS_device_id);
  if (opts.device_id.empty()) opts.device_id = "worker-" + tunefarm::HostName();
  opts.capabilities = tunefarm::worker::DetectWorkerCapabilities();
  opts.report_offline_after = absl::GetFlag(FLAGS_report_offline_after);
  opts.max_in_flight = absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                                                        : std::max(1, opts.capabilities.cores());
  auto log = tunefarm::Logger("worker");
  log->info("event=starting device={} triples={} cuda_archs={} cores={}", opts.device_id,
            opts.capabilities.build_triples_size(), opts.capabilities.cuda_archs_size(),
            opts.capabilities.cores());
  tunefarm::worker::ArtifactCache cache(absl::GetFlag(FLAGS_cache_mb) << 20);
  tunefarm::FarmSession session(opts, log);
  absl::Status run = tunefarm::RunUntilSignalled(
      session,
      [&](const tunefarm::v1::WorkLease& lease) {
        tunefarm::v1::ReportResultRequest r;
        if (!lease.has_build()) {
          r.mutable_build()->set_error("a worker builds; this lease is not a build");
          return r;
        }
        const std::string key = tunefarm::worker::ArtifactCache::Key(lease.build());
        if (std::optional<tunefarm::v1::BuildResult> hit = cache.Find(key)) {
          *r.mutable_build() = *std::move(hit);
          r.mutable_build()->set_compile_sec(0);
          return r;
        }
        *r.mutable_build() = tunefarm::worker::Build(lease.build());
        cache.Insert(key, r.build());
        log->debug("event=built lease={} job={} bytes={} sec={:.3f} error=\"{}\"", lease.lease_id(),
                   lease.job_id(), r.build().artifact().size(), r.build().compile_sec(),
                   r.build().error());
        return r;
      },
      *log);
  if (!run.ok()) {
    std::fprintf(stderr, "tunefarm-worker: %s\n", std::string(run.message()).c_str());
    return 1;
  }
  return 0;
}
