#include "device_agent/runtime/sandbox.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/float16.h"
#include "common/subprocess.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/gpu_plan.h"
#include "device_agent/runtime/sandbox_wire.h"
#include "proto/kernel_signature.h"

namespace tunefarm::runtime {
namespace {

static_assert(wire::kRequestFd == kChildRequestFd && wire::kReportFd == kChildReportFd &&
              wire::kGoFd == kChildAnswerFd);

using Status = SandboxOutcome::Status;

// The request in a memfd (sandbox_wire.h); -1 on failure.
// `signature` non-empty: the runner makes the inputs (args then empty).
int WriteRequest(const std::string& so, const std::vector<const std::vector<float>*>& args,
                 const std::string& signature, uint64_t input_seed, int64_t n_out,
                 const SandboxOptions& o) {
  int fd = NewRequestFile("tunefarm-run");
  if (fd < 0) return -1;
  wire::RunRequestHeader h{};
  h.magic = wire::kMagic;
  h.device = o.cuda ? wire::Device::kCuda : wire::Device::kCpu;
  h.threads = o.threads;
  h.repeats = o.repeats;
  h.number = o.number;
  h.flush_cache = o.flush_cache;
  h.min_repeat_ms = o.min_repeat_ms;
  h.warmup_ms = o.warmup_ms;
  h.max_timing_s = o.max_timing_s;
  h.memory_limit_bytes = o.memory_limit_bytes;
  h.cpu_limit_s = o.time_limit_s * std::max(1, o.threads) + 1;
  h.n_out = n_out;
  h.n_args = int64_t(args.size());
  h.so_bytes = int64_t(so.size());
  h.signature_bytes = int64_t(signature.size());
  h.input_seed = input_seed;
  h.filter_optional = o.filter_optional;
  bool ok = wire::WriteAll(fd, &h, sizeof(h)) && wire::WriteAll(fd, so.data(), so.size());
  for (const std::vector<float>* a : args) {
    int64_t count = int64_t(a->size());
    ok = ok && wire::WriteAll(fd, &count, sizeof(count)) &&
         wire::WriteAll(fd, a->data(), a->size() * 4);
  }
  ok = ok && wire::WriteAll(fd, signature.data(), signature.size());
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

// The output against the reference: wrong at the first element off by more
// than `tolerance` (relative to max(1, |reference|)) or NaN; "" when right.
std::string CompareOutput(const float* out, const std::vector<float>& reference,
                          double tolerance) {
  for (size_t i = 0; i < reference.size(); ++i) {
    // NaN where the reference has NaN (sqrt or log of a random negative
    // input) and an infinity equal to the reference's are right.
    if (std::isnan(out[i]) && std::isnan(reference[i])) continue;
    if (std::isinf(out[i]) && out[i] == reference[i]) continue;
    const double e = std::fabs(double(out[i]) - reference[i]) /
                     std::max(1.0, std::fabs(double(reference[i])));
    if (!(e <= tolerance)) {  // NaN too
      return absl::StrCat("output ", i, " off by ", std::isnan(e) ? INFINITY : e, " (relative)");
    }
  }
  return "";
}

// The tolerance for a kernel's output: a CUDA plan whose output is held in
// 16 bits is checked within its format's rounding. `n_args`: the inputs.
double OutputTolerance(const std::string& kernel, int64_t n_args, const SandboxOptions& o) {
  if (!o.cuda) return o.tolerance;
  absl::StatusOr<GpuPlan> plan = DecodeGpuPlan(kernel.data(), kernel.size(), n_args);
  if (!plan.ok()) return o.tolerance;  // the runner refuses it
  const std::vector<int>& half = plan->float16_buffers;
  return std::find(half.begin(), half.end(), int(n_args)) != half.end()
             ? std::max(o.tolerance, HalfTolerance(plan->half))
             : o.tolerance;
}

// What this side learns from the runner's messages as they arrive
// (sandbox_wire.h), and what it answers.
class Exchange {
 public:
  Exchange(int64_t n_out, const std::vector<float>& reference, double tolerance,
           std::vector<float>* output)
      : n_out_(n_out), reference_(reference), tolerance_(tolerance), output_(output) {}

  // Bytes the runner may send: its output's message, then a report.
  size_t max_bytes() const { return checked_bytes() + sizeof(wire::RunReport); }

  ReportStep OnReport(const std::string& got) {
    if (!shown_) {
      wire::Checked c{};
      if (got.size() < sizeof(c)) return {};
      std::memcpy(&c, got.data(), sizeof(c));
      if (c.magic != wire::kMagic || c.kind != wire::MessageKind::kChecked) return {};
      if (got.size() < checked_bytes()) return {};
      shown_ = true;
      confinement_ = c.confinement;
      std::vector<float> out(static_cast<size_t>(n_out_));
      std::memcpy(out.data(), got.data() + sizeof(c), out.size() * 4);
      if (!reference_.empty()) wrong_ = CompareOutput(out.data(), reference_, tolerance_);
      if (output_ != nullptr) *output_ = std::move(out);
      ReportStep step;
      if (!wrong_.empty()) {
        step.stop = true;
      } else {
        go_at_ = MonotonicSeconds();
        step.answer = std::string(1, wire::kGo);
      }
      return step;
    }
    if (report_at_ == 0 && got.size() >= max_bytes()) report_at_ = MonotonicSeconds();
    return {};
  }

  // The report that followed the output (or came instead of it), if whole.
  bool Report(const std::string& got, wire::RunReport* rep) const {
    const size_t at = shown_ ? checked_bytes() : 0;
    if (got.size() < at + sizeof(*rep)) return false;
    std::memcpy(rep, got.data() + at, sizeof(*rep));
    return rep->magic == wire::kMagic && rep->kind == wire::MessageKind::kReport;
  }

  bool shown() const { return shown_; }
  const std::string& wrong() const { return wrong_; }
  const wire::Confinement& confinement() const { return confinement_; }
  // Seconds from the go-ahead to the report's arrival (0: no such span).
  double timing_span() const { return report_at_ > 0 ? report_at_ - go_at_ : 0; }

 private:
  size_t checked_bytes() const { return sizeof(wire::Checked) + size_t(n_out_) * 4; }

  const int64_t n_out_;
  const std::vector<float>& reference_;
  const double tolerance_;
  std::vector<float>* output_;
  bool shown_ = false;
  std::string wrong_;  // why the output is wrong ("": right, or not checked)
  wire::Confinement confinement_{};
  double go_at_ = 0, report_at_ = 0;
};

// The timings of an OK report, held to what was asked for and to the span
// this side saw (Exchange::timing_span); "" when they hold.
std::string CheckTimings(const wire::RunReport& rep, const SandboxOptions& o, double span) {
  const int most = std::clamp(o.repeats, 1, wire::kMaxRepeats);
  if (rep.repeats < 1 || rep.repeats > most) {
    return absl::StrCat("the runner reported ", rep.repeats, " repeats, at most ", most,
                        " were asked for");
  }
  const int64_t inner = o.number > 0 ? o.number : o.flush_cache ? 1 : 0;
  if (rep.inner < 1 || (inner > 0 && rep.inner != inner)) {
    return absl::StrCat("the runner reported ", rep.inner, " runs per repeat",
                        inner > 0 ? absl::StrCat(", ", inner, " were asked for") : "");
  }
  double total = 0;
  for (int r = 0; r < rep.repeats; ++r) {
    const double c = rep.costs[r];
    if (!(c > 0) || !std::isfinite(c)) {
      return absl::StrCat("the runner reported a cost of ", c, " s");
    }
    total += c * double(rep.inner);
  }
  // The GPU's event clock and this one may differ by parts per million.
  if (total > span * 1.001 + 1e-6) {
    return absl::StrFormat(
        "the runner's timings add up to %.6f s, more than the %.6f s the agent saw it time",
        total, span);
  }
  return "";
}

}  // namespace

const std::string& RunnerPath() {
#ifdef TF_RUNNER_BUILD_PATH
  static const std::string path =
      FindHelper("TUNEFARM_RUNNER", "tunefarm-runner", TF_RUNNER_BUILD_PATH);
#else
  static const std::string path = FindHelper("TUNEFARM_RUNNER", "tunefarm-runner", nullptr);
#endif
  return path;
}

namespace {

// `n_args`: the kernel's inputs (given in `args`, or made by the runner from
// `signature`).
SandboxOutcome MeasureWith(const std::string& shared_object,
                           const std::vector<const std::vector<float>*>& args,
                           const std::string& signature, int64_t n_args, uint64_t input_seed,
                           int64_t n_out, const std::vector<float>& reference,
                           const SandboxOptions& options, std::vector<float>* output) {
  SandboxOutcome result;
  const double start = MonotonicSeconds();
  if (!reference.empty() && int64_t(reference.size()) != n_out) {
    result.error = absl::StrCat("reference has ", reference.size(), " values, the output ", n_out);
    return result;
  }
  const std::string runner = options.runner_path.empty() ? RunnerPath() : options.runner_path;
  if (!Executable(runner)) {
    result.error =
        "tunefarm-runner not found (install it beside this program or set "
        "TUNEFARM_RUNNER)";
    return result;
  }
  int req = WriteRequest(shared_object, args, signature, input_seed, n_out, options);
  if (req < 0) {
    result.error = "cannot set up the measurement process (request file failed)";
    return result;
  }
  Exchange exchange(n_out, reference, OutputTolerance(shared_object, n_args, options), output);
  ChildExchange x = ExchangeWithChild(
      HelperCommand(options.runner_wrapper, runner), req, start + options.time_limit_s, exchange.max_bytes(), options.cancelled,
      [&](const std::string& got) { return exchange.OnReport(got); });
  result.run_s = MonotonicSeconds() - start;
  if (!x.started) {
    result.error = "cannot set up the measurement process: " + x.error;
    return result;
  }
  const int wstatus = x.wait_status;
  wire::RunReport rep{};
  const bool have_report = exchange.Report(x.report, &rep);
  const wire::Confinement& how = have_report ? rep.confinement : exchange.confinement();
  result.namespaces = how.namespaces != 0;
  result.pid_namespace = how.pid_namespace != 0;
  result.filtered = how.filtered != 0;
  auto message = [&] {
    return std::string(rep.message, strnlen(rep.message, sizeof(rep.message)));
  };
  if (x.cancelled) {
    result.status = Status::kRuntimeError;
    result.error = "cancelled: the server took the lease back (the job was cancelled or moved on)";
  } else if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGSYS) {
    result.status = Status::kSandboxViolation;
    result.error =
        options.cuda
            ? "the CUDA driver or the kernel made a system call the GPU sandbox does not allow "
              "(killed by SIGSYS)"
            : "the kernel made a system call the sandbox does not allow (killed by SIGSYS)";
  } else if (x.stopped) {
    result.status = Status::kWrongResult;
    result.error = exchange.wrong();
  } else if (x.timed_out) {
    result.status = Status::kTimeout;
    result.error = absl::StrFormat("no result within %.2f s", options.time_limit_s);
  } else if (!have_report || !WIFEXITED(wstatus)) {
    result.status = Status::kRuntimeError;
    result.error = x.exec_errno != 0
                       ? DescribeExecFailure(HelperCommand(options.runner_wrapper, runner),
                                             x.exec_errno)
                       : absl::StrCat("kernel process ", DescribeWaitStatus(wstatus),
                                      have_report ? "" : " with no report");
  } else if (rep.not_confined) {
    result.status = Status::kRuntimeError;
    result.error = message();
  } else if (rep.bad_request) {
    result.status = Status::kRuntimeError;
    result.error = absl::StrCat("runner: ", message());
  } else if (rep.load_failed) {
    result.status = Status::kLoadError;
    result.error = absl::StrCat("the kernel library did not load: ", message());
  } else if (rep.status != wire::RunStatus::kOk) {
    result.status = Status::kRuntimeError;
    result.error = rep.message[0] != '\0' ? message() : absl::StrCat("kernel returned ", rep.rc);
  } else if (!exchange.shown()) {
    result.status = Status::kRuntimeError;
    result.error = "the runner reported timings without showing the kernel's output";
  } else if (std::string bad = CheckTimings(rep, options, exchange.timing_span());
             !bad.empty()) {
    result.status = Status::kRuntimeError;
    result.error = bad;
  } else {
    result.status = Status::kOk;
    result.costs.assign(rep.costs, rep.costs + rep.repeats);
    std::vector<double> sorted = result.costs;
    std::sort(sorted.begin(), sorted.end());
    result.seconds = sorted[sorted.size() / 2];
  }
  return result;
}

}  // namespace

SandboxOutcome MeasureInSandbox(const std::string& shared_object,
                                const std::vector<const std::vector<float>*>& args, int64_t n_out,
                                const std::vector<float>& reference, const SandboxOptions& options,
                                std::vector<float>* output) {
  return MeasureWith(shared_object, args, "", int64_t(args.size()), 0, n_out, reference, options,
                     output);
}

SandboxOutcome MeasureInSandboxFromSeed(const std::string& shared_object,
                                        const std::string& signature, uint64_t input_seed,
                                        int64_t n_out, const std::vector<float>& reference,
                                        const SandboxOptions& options, std::vector<float>* output) {
  if (signature.empty()) {
    SandboxOutcome bad;
    bad.error = "no kernel signature to make the inputs from";
    return bad;
  }
  v1::KernelSignature sig;
  const int64_t n_args = sig.ParseFromString(signature) ? sig.args_size() - 1 : 0;
  return MeasureWith(shared_object, {}, signature, n_args, input_seed, n_out, reference, options,
                     output);
}

}  // namespace tunefarm::runtime
