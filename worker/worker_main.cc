// tunefarm-worker: a compile worker. Dials out to the tuning server and
// builds the candidates it is handed.
//
//   tunefarm-worker --server=HOST:PORT [--token_file=F] [--tls_ca=F]
//
// Reconnects with back-off when the server goes away. Stops on SIGINT/SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "worker/worker_capabilities.h"
#include "google/protobuf/util/json_util.h"
#include "proto/farm_session.h"

ABSL_FLAG(std::string, server, "127.0.0.1:7070", "tuning server address HOST:PORT");
ABSL_FLAG(std::string, device_id, "", "stable name of this worker (default: worker-<host name>)");
ABSL_FLAG(std::string, token_file, "", "file holding the bearer token");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate; connect with TLS");
ABSL_FLAG(bool, print_capabilities, false, "print the detected capabilities as JSON and exit");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");

namespace {
int Fail(const std::string& msg, int code) {
  std::fprintf(stderr, "tunefarm-worker: %s\n", msg.c_str());
  return code;
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("the tunefarm compile worker");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = tunefarm::InitLogging(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    return Fail(std::string(s.message()), 2);
  }
  tunefarm::v1::Capabilities caps = tunefarm::worker::DetectWorkerCapabilities();
  if (absl::GetFlag(FLAGS_print_capabilities)) {
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.add_whitespace = true;
    o.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(caps, &json, o);
    std::printf("%s", json.c_str());
    return 0;
  }

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  tunefarm::FarmSession::Options opts;
  opts.client.server = absl::GetFlag(FLAGS_server);
  opts.client.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    auto token = tunefarm::ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!token.ok()) return Fail(std::string(token.status().message()), 2);
    opts.client.token = *token;
  }
  opts.role = tunefarm::v1::ROLE_WORKER;
  opts.device_id = absl::GetFlag(FLAGS_device_id);
  if (opts.device_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    opts.device_id = std::string("worker-") + host;
  }
  opts.capabilities = caps;
  auto log = tunefarm::Logger("worker");
  log->info("event=starting device={} triples={} cuda_archs={} cores={}", opts.device_id,
            caps.build_triples_size(), caps.cuda_archs_size(), caps.cores());
  tunefarm::FarmSession session(opts, log);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    log->info("event=signal signal={}", sig);
    session.Stop();
  });
  session.Run([&](const tunefarm::v1::WorkLease& lease) {
    // Building candidates is not wired yet; the server hands out no leases
    // until it is.
    log->error("event=lease_ignored lease={} reason=\"builds not wired in this worker\"",
               lease.lease_id());
  });
  signals.join();
  return 0;
}
