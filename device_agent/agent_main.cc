// tunefarm-agent: runs on a board, dials out to the tuning server and
// measures the kernels it is handed, and runs whole built models it is
// handed (end-to-end timing, tunefarm-model-runner).
//
//   tunefarm-agent --server=HOST:PORT --key=jetson-orin-nano --server_key=F.pub
//                  [--token_file=F] [--tls_ca=F]
//
// Reconnects with back-off when the server goes away. Every kernel runs in a
// sandboxed child process; one measurement at a time. Stops on SIGINT/SIGTERM.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/signing.h"
#include "device_agent/measure_handler.h"
#include "device_agent/runtime/capabilities.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/model_run.h"
#include "device_agent/runtime/sandbox.h"
#include "google/protobuf/util/json_util.h"
#include "proto/farm_session.h"
#include "proto/protocol.h"

ABSL_FLAG(std::string, server, "127.0.0.1:7070", "tuning server address HOST:PORT");
ABSL_FLAG(std::string, key, "", "device key: the pool this board measures for (required)");
ABSL_FLAG(std::string, device_id, "", "stable name of this board (default: the host name)");
ABSL_FLAG(std::string, token_file, "", "file holding the bearer token");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate; connect with TLS");
ABSL_FLAG(bool, insecure, false,
          "allow plain text to a server beyond loopback (the token crosses the network readable) "
          "and, without a server key, run code nobody signed");
ABSL_FLAG(std::string, server_key, "",
          "the server's public signing key (its --signing_key file's .pub): run only code the "
          "server signed; required unless the token file carries it or --insecure is given");
ABSL_FLAG(absl::Duration, report_offline_after, absl::Seconds(60),
          "unregistered this long, say why in one line (e.g. 60s, 5m)");
ABSL_FLAG(bool, print_capabilities, false, "print the detected capabilities as JSON and exit");
ABSL_FLAG(int64_t, memory_limit_mb, 4096, "address space a measured kernel may add, in MiB");
ABSL_FLAG(std::string, runner_wrapper, "",
          "run the runners through this program and its arguments, e.g. qemu-aarch64 for an "
          "aarch64 agent on an x86-64 host (default: $TUNEFARM_RUNNER_WRAPPER, else none)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(bool, seccomp_optional, false,
          "run code even where the system refuses the runners' seccomp filter (qemu-user does): "
          "for emulated boards; namespaces and limits still apply, system calls are not "
          "filtered");

namespace {
// An emulated runner (qemu-user) takes seconds to start on a loaded host.
constexpr double kProbeTimeoutS = 60;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tunefarm-agent: %s\n", msg.c_str());
  return 2;
}

// --print_capabilities: `caps` as JSON on stdout. Returns the exit code (0).
int PrintCapabilities(const tunefarm::v1::Capabilities& caps) {
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(caps, &json, o);
  std::printf("%s", json.c_str());
  return 0;
}

// The helper programs this agent runs its leases in.
struct Runners {
  std::string runner;                // tunefarm-runner (kernels)
  std::string model_runner;          // tunefarm-model-runner (whole models); may be empty
  std::vector<std::string> wrapper;  // --runner_wrapper (or its variable), split into words
  std::string model_runner_problem;  // why whole-model runs will fail; empty: none
};

// Finds the runners and checks that the kernel runner runs here (the model
// runner's problem is only noted). Returns the exit code (2) when it does not, else nullopt.
std::optional<int> FindRunners(Runners* r) {
  // The runners beside this program, or where the environment says: never
  // the build tree's (a copied agent would run another build's runner).
  r->runner = tunefarm::runtime::FindHelper("TUNEFARM_RUNNER", "tunefarm-runner", nullptr);
  r->model_runner =
      tunefarm::runtime::FindHelper("TUNEFARM_MODEL_RUNNER", "tunefarm-model-runner", nullptr);
  if (r->runner.empty()) {
    return Fail("tunefarm-runner not found beside tunefarm-agent (install both, or set "
                "TUNEFARM_RUNNER)");
  }
  std::string wrapper_flag = absl::GetFlag(FLAGS_runner_wrapper);
  if (const char* env = getenv("TUNEFARM_RUNNER_WRAPPER"); wrapper_flag.empty() && env) {
    wrapper_flag = env;
  }
  r->wrapper = absl::StrSplit(wrapper_flag, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  // Every trial would fail the same way: find out now, and say why.
  if (std::string why = tunefarm::runtime::ProbeHelper(
          tunefarm::runtime::HelperCommand(r->wrapper, r->runner), kProbeTimeoutS);
      !why.empty()) {
    return Fail("the kernel runner does not run here: " + why);
  }
  r->model_runner_problem =
      r->model_runner.empty()
          ? "tunefarm-model-runner not found beside tunefarm-agent (install it there, or set "
            "TUNEFARM_MODEL_RUNNER)"
          : tunefarm::runtime::ProbeHelper(
                tunefarm::runtime::HelperCommand(r->wrapper, r->model_runner), kProbeTimeoutS);
  return std::nullopt;
}

// The server's key: --server_key, else the one the token file carries; none
// only with --insecure. Returns the exit code (2) when there is no usable key, else nullopt.
std::optional<int> LoadServerKey(std::optional<tunefarm::Verifier>* verifier) {
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!absl::GetFlag(FLAGS_server_key).empty()) {
    absl::StatusOr<tunefarm::Verifier> v =
        tunefarm::Verifier::FromPemFile(absl::GetFlag(FLAGS_server_key));
    if (!v.ok()) return Fail(std::string(v.status().message()));
    *verifier = *std::move(v);
  } else if (std::string pem = token_file.empty() ? "" : tunefarm::ReadPublicKeyPem(token_file);
             !pem.empty()) {
    absl::StatusOr<tunefarm::Verifier> v = tunefarm::Verifier::FromPem(pem);
    if (!v.ok()) {
      return Fail(absl::StrCat("the server key in token file ", token_file, ": ",
                               v.status().message()));
    }
    *verifier = *std::move(v);
  } else if (!absl::GetFlag(FLAGS_insecure)) {
    return Fail(
        "no server key: give --server_key=SERVER_DB.signing-key.pub (the server's public key), "
        "or a token file made with `tunefarm token --server_key`, so that only code the server "
        "signed runs here; or --insecure to run any code a lease carries (docs/security.md)");
  }
  return std::nullopt;
}

// The session's options: this board, its key and capabilities, from the flags.
tunefarm::FarmSession::Options SessionOptions(const tunefarm::ClientOptions& client,
                                              const tunefarm::v1::Capabilities& caps) {
  tunefarm::FarmSession::Options opts;
  opts.client = client;
  opts.role = tunefarm::v1::ROLE_AGENT;
  opts.device_key = absl::GetFlag(FLAGS_key);
  opts.device_id = absl::GetFlag(FLAGS_device_id);
  if (opts.device_id.empty()) opts.device_id = tunefarm::HostName();
  opts.capabilities = caps;
  opts.report_offline_after = absl::GetFlag(FLAGS_report_offline_after);
  return opts;
}

// How kernels are measured: the runner, its limits and this board's fingerprint.
tunefarm::agent::MeasureHandlerOptions MeasureOptions(const Runners& runners,
                                                      const tunefarm::v1::Capabilities& caps) {
  tunefarm::agent::MeasureHandlerOptions mo;
  mo.memory_limit_bytes = absl::GetFlag(FLAGS_memory_limit_mb) << 20;
  mo.fingerprint = caps.fingerprint();
  mo.gpu = caps.has_gpu();
  mo.filter_optional = absl::GetFlag(FLAGS_seccomp_optional);
  mo.runner_path = runners.runner;
  mo.runner_wrapper = runners.wrapper;
  return mo;
}

// Logs a warning for each way this set-up is weaker than it should be.
void WarnAboutSetup(spdlog::logger& log, bool verified, const std::string& model_runner_problem,
                    bool filter_optional) {
  if (!verified) {
    log.warn(
        "event=unverified_code --insecure and no server key: this agent runs whatever code a "
        "lease carries, signed or not (docs/security.md)");
  }
  if (!model_runner_problem.empty()) {
    log.warn("event=no_model_runner whole-model runs will fail: {}", model_runner_problem);
  }
  if (filter_optional) {
    log.warn(
        "event=seccomp_optional --seccomp_optional: where the system refuses the runners' "
        "filter, code runs without it (for emulated boards only)");
  }
}

// Answers the leases the server hands out: refuses code the server did not
// sign, runs a whole model in the model runner, or measures a kernel.
class LeaseHandler {
 public:
  LeaseHandler(const std::optional<tunefarm::Verifier>& verifier, const Runners& runners,
               const tunefarm::v1::Capabilities& caps,
               const tunefarm::agent::MeasureHandlerOptions& mo,
               tunefarm::agent::MeasureHandler& handler, tunefarm::FarmSession& session,
               spdlog::logger& log)
      : verifier_(verifier), runners_(runners), caps_(caps), mo_(mo), handler_(handler),
        session_(session), log_(log) {}

  // The result to report for `lease`.
  tunefarm::v1::ReportResultRequest Handle(const tunefarm::v1::WorkLease& lease) {
    tunefarm::v1::ReportResultRequest r;
    if (RefuseUnsigned(lease, &r)) return r;
    if (lease.has_model_run()) return RunModel(lease);
    if (!lease.has_measure()) {
      r.mutable_measure()->set_status(tunefarm::v1::MEASURE_STATUS_RUNTIME_ERROR);
      r.mutable_measure()->set_error("an agent measures; this lease is not a measurement");
      return r;
    }
    return Measure(lease);
  }

 private:
  // Code the server did not sign never runs here (with --server_key): true,
  // with the refusal in `r`, when the lease's code is not signed by its key.
  bool RefuseUnsigned(const tunefarm::v1::WorkLease& lease,
                      tunefarm::v1::ReportResultRequest* r) {
    if (!verifier_ || !(lease.has_model_run() || lease.has_measure())) return false;
    if (verifier_->Verify(tunefarm::SignedPartOf(lease), lease.server_signature())) return false;
    log_.error("event=unsigned_code lease={} refused: not signed by the server's key",
               lease.lease_id());
    const std::string why =
        "refused: the lease's code is not signed by the server's key (--server_key)";
    if (lease.has_measure()) {
      r->mutable_measure()->set_status(tunefarm::v1::MEASURE_STATUS_UPLOAD_ERROR);
      r->mutable_measure()->set_error(why);
    } else {
      r->mutable_model_run()->set_status(tunefarm::v1::MEASURE_STATUS_UPLOAD_ERROR);
      r->mutable_model_run()->set_error(why);
    }
    return true;
  }

  // A whole-model run, in a child process of the model runner.
  tunefarm::v1::ReportResultRequest RunModel(const tunefarm::v1::WorkLease& lease) {
    tunefarm::v1::ReportResultRequest r;
    log_.info("event=model_run lease={} package_bytes={} threads={} repeats={}",
              lease.lease_id(), lease.model_run().package().size(), lease.model_run().threads(),
              lease.model_run().repeats());
    if (!runners_.model_runner_problem.empty()) {
      r.mutable_model_run()->set_status(tunefarm::v1::MEASURE_STATUS_RUNTIME_ERROR);
      r.mutable_model_run()->set_error(runners_.model_runner_problem);
      return r;
    }
    tunefarm::runtime::ModelRunOptions ro;
    ro.runner_path = runners_.model_runner;
    ro.runner_wrapper = runners_.wrapper;
    ro.memory_limit_bytes = mo_.memory_limit_bytes;
    ro.filter_optional = mo_.filter_optional;
    ro.cancelled = [this, id = lease.lease_id()] { return session_.Revoked(id); };
    *r.mutable_model_run() = tunefarm::runtime::MeasureModel(lease.model_run(), ro);
    *r.mutable_model_run()->mutable_fingerprint() = caps_.fingerprint();
    log_.info("event=model_ran lease={} status={} runs={} load_ms={:.1f} error=\"{}\"",
              lease.lease_id(), tunefarm::v1::MeasureStatus_Name(r.model_run().status()),
              r.model_run().latencies_sec_size(), r.model_run().load_sec() * 1e3,
              r.model_run().error());
    return r;
  }

  // A kernel measurement, in the sandboxed kernel runner.
  tunefarm::v1::ReportResultRequest Measure(const tunefarm::v1::WorkLease& lease) {
    tunefarm::v1::ReportResultRequest r;
    log_.info("event=measuring lease={} job={}", lease.lease_id(), lease.job_id());
    *r.mutable_measure() = handler_.Measure(
        lease.measure(), [this, id = lease.lease_id()] { return session_.Revoked(id); });
    log_.info("event=measured lease={} job={} status={} median_us={:.1f} error=\"{}\"",
              lease.lease_id(), lease.job_id(),
              tunefarm::v1::MeasureStatus_Name(r.measure().status()),
              r.measure().costs_sec_size() ? r.measure().costs_sec(0) * 1e6 : 0.0,
              r.measure().error());
    return r;
  }

  const std::optional<tunefarm::Verifier>& verifier_;
  const Runners& runners_;
  const tunefarm::v1::Capabilities& caps_;
  const tunefarm::agent::MeasureHandlerOptions& mo_;
  tunefarm::agent::MeasureHandler& handler_;
  tunefarm::FarmSession& session_;
  spdlog::logger& log_;
};

}  // namespace

int main(int argc, char** argv) {
  tunefarm::SetDaemonUsage(
      "the tunefarm device agent\n\n  tunefarm-agent --key=KEY (required) "
      "--server=HOST[:PORT] --server_key=F.pub|--insecure [--token_file=F] [--tls_ca=F]\n"
      "  [--device_id=ID] [--runner_wrapper=qemu-aarch64]\n\nExit codes: 0 "
      "stopped by SIGINT/SIGTERM, 1 refused by the server, 2 bad flags or set-up (docs/cli.md)");
  tunefarm::ParseDaemonFlags(argc, argv);
  if (absl::Status s = tunefarm::InitLogging(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  tunefarm::v1::Capabilities caps = tunefarm::runtime::DetectCapabilities();
  if (absl::GetFlag(FLAGS_print_capabilities)) return PrintCapabilities(caps);
  if (absl::GetFlag(FLAGS_key).empty()) return Fail("--key is required (e.g. --key=x86-avx512)");
  Runners runners;
  if (std::optional<int> code = FindRunners(&runners)) return *code;
  auto client = tunefarm::ClientOptionsFromFlags(
      absl::GetFlag(FLAGS_server), absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_token_file),
      absl::GetFlag(FLAGS_insecure));
  if (!client.ok()) return Fail(std::string(client.status().message()));
  std::optional<tunefarm::Verifier> verifier;
  if (std::optional<int> code = LoadServerKey(&verifier)) return *code;

  const tunefarm::FarmSession::Options opts = SessionOptions(*client, caps);
  auto log = tunefarm::Logger("agent");
  log->info("event=starting device={} key={} cpu=\"{}\" cores={} gpu=\"{}\"", opts.device_id,
            opts.device_key, caps.cpu_model(), caps.cores(),
            caps.has_gpu() ? caps.gpu_name() : "no GPU");
  const tunefarm::agent::MeasureHandlerOptions mo = MeasureOptions(runners, caps);
  tunefarm::agent::MeasureHandler handler(mo);
  WarnAboutSetup(*log, verifier.has_value(), runners.model_runner_problem, mo.filter_optional);
  tunefarm::FarmSession session(opts, log);
  LeaseHandler leases(verifier, runners, caps, mo, handler, session, *log);
  absl::Status run = tunefarm::RunUntilSignalled(
      session, [&leases](const tunefarm::v1::WorkLease& lease) { return leases.Handle(lease); },
      *log);
  if (!run.ok()) {
    std::fprintf(stderr, "tunefarm-agent: %s\n", std::string(run.message()).c_str());
    return 1;
  }
  return 0;
}
