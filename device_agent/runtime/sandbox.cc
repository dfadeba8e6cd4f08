#include "device_agent/runtime/sandbox.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/subprocess.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/confine.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace tunefarm::runner {
namespace {

static_assert(wire::kRequestFd == kChildRequestFd && wire::kReportFd == kChildReportFd);

using Status = SandboxOutcome::Status;

// The request in a memfd (sandbox_wire.h); -1 on failure.
// `signature` non-empty: the runner makes the inputs (args then empty).
int WriteRequest(const std::string& so, const std::vector<const std::vector<float>*>& args,
                 const std::string& signature, uint64_t input_seed, int64_t n_out,
                 const std::vector<float>& reference, const SandboxOptions& o, bool want_output) {
  int fd = NewRequestFile("tunefarm-run");
  if (fd < 0) return -1;
  wire::RunRequestHeader h{};
  h.magic = wire::kMagic;
  h.device = o.cuda ? wire::Device::kCuda : wire::Device::kCpu;
  h.threads = o.threads;
  h.repeats = o.repeats;
  h.want_output = want_output;
  h.number = o.number;
  h.flush_cache = o.flush_cache;
  h.min_repeat_ms = o.min_repeat_ms;
  h.warmup_ms = o.warmup_ms;
  h.max_timing_s = o.max_timing_s;
  h.tolerance = o.tolerance;
  h.memory_limit_bytes = o.memory_limit_bytes;
  h.cpu_limit_s = o.time_limit_s * std::max(1, o.threads) + 1;
  h.n_out = n_out;
  h.n_args = int64_t(args.size());
  h.so_bytes = int64_t(so.size());
  h.reference_count = int64_t(reference.size());
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
  ok = ok && wire::WriteAll(fd, reference.data(), reference.size() * 4);
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
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

SandboxOutcome MeasureWith(const std::string& shared_object,
                           const std::vector<const std::vector<float>*>& args,
                           const std::string& signature, uint64_t input_seed, int64_t n_out,
                           const std::vector<float>& reference, const SandboxOptions& options,
                           std::vector<float>* output) {
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
  const bool want_output = output != nullptr;
  int req = WriteRequest(shared_object, args, signature, input_seed, n_out, reference, options,
                         want_output);
  if (req < 0) {
    result.error = "cannot set up the measurement process (request file failed)";
    return result;
  }
  const size_t want = sizeof(wire::RunReport) + (want_output ? size_t(n_out) * 4 : 0);
  ChildExchange x =
      ExchangeWithChild(runner, req, start + options.time_limit_s, want, options.cancelled);
  result.run_s = MonotonicSeconds() - start;
  if (!x.started) {
    result.error = "cannot set up the measurement process: " + x.error;
    return result;
  }
  const bool timed_out = x.timed_out;
  const int wstatus = x.wait_status;
  const size_t got = x.report.size();
  wire::RunReport rep{};
  if (got >= sizeof(rep)) memcpy(&rep, x.report.data(), sizeof(rep));
  const bool have_report = got >= sizeof(rep) && rep.magic == wire::kMagic;
  result.namespaces = have_report && rep.namespaces != 0;
  result.filtered = have_report && rep.filtered != 0;
  if (x.cancelled) {
    result.status = Status::kRuntimeError;
    result.error = "cancelled: the server took the lease back (the job was cancelled or moved on)";
  } else if (timed_out) {
    result.status = Status::kTimeout;
    result.error = absl::StrFormat("no result within %.2f s", options.time_limit_s);
  } else if (have_report && rep.refused) {
    result.status = Status::kSandboxViolation;
    const char* name = SyscallName(rep.refused_syscall);
    result.error = absl::StrCat(
        options.cuda ? "the CUDA driver made a system call the GPU sandbox does not allow: "
                     : "the kernel made a system call the sandbox does not allow: ",
        *name != '\0' ? absl::StrCat(name, " (", rep.refused_syscall, ")")
                      : absl::StrCat("number ", rep.refused_syscall),
        "; killed by SIGSYS");
  } else if (!have_report && WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGSYS) {
    result.status = Status::kSandboxViolation;
    result.error = "the kernel made a system call the sandbox does not allow (killed by SIGSYS)";
  } else if (!have_report) {
    result.status = Status::kRuntimeError;
    result.error = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127
                       ? absl::StrCat("cannot run ", runner)
                       : absl::StrCat("kernel process ", DescribeWaitStatus(wstatus));
  } else if (rep.not_confined) {
    result.status = Status::kRuntimeError;
    result.error = std::string(rep.message, strnlen(rep.message, sizeof(rep.message)));
  } else if (rep.bad_request) {
    result.status = Status::kRuntimeError;
    result.error = absl::StrCat(
        "runner: ", std::string(rep.message, strnlen(rep.message, sizeof(rep.message))));
  } else if (rep.load_failed) {
    result.status = Status::kLoadError;
    result.error =
        absl::StrCat("the kernel library did not load: ",
                     std::string(rep.message, strnlen(rep.message, sizeof(rep.message))));
  } else {
    switch (rep.status) {
      case wire::RunStatus::kWrongResult:
        result.status = Status::kWrongResult;
        result.error =
            absl::StrCat("output ", rep.bad_index, " off by ", rep.worst_error, " (relative)");
        break;
      case wire::RunStatus::kOk: {
        result.status = Status::kOk;
        result.costs.assign(rep.costs, rep.costs + std::clamp(rep.repeats, 1, wire::kMaxRepeats));
        std::vector<double> sorted = result.costs;
        std::sort(sorted.begin(), sorted.end());
        result.seconds = sorted[sorted.size() / 2];
        break;
      }
      default:
        result.status = Status::kRuntimeError;
        result.error = rep.message[0] != '\0'
                           ? std::string(rep.message, strnlen(rep.message, sizeof(rep.message)))
                           : absl::StrCat("kernel returned ", rep.rc);
    }
    if (want_output && got == want && rep.rc == 0) {
      output->resize(size_t(n_out));
      memcpy(output->data(), x.report.data() + sizeof(rep), size_t(n_out) * 4);
    }
  }
  return result;
}

}  // namespace

SandboxOutcome MeasureInSandbox(const std::string& shared_object,
                                const std::vector<const std::vector<float>*>& args, int64_t n_out,
                                const std::vector<float>& reference, const SandboxOptions& options,
                                std::vector<float>* output) {
  return MeasureWith(shared_object, args, "", 0, n_out, reference, options, output);
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
  return MeasureWith(shared_object, {}, signature, input_seed, n_out, reference, options, output);
}

}  // namespace tunefarm::runner
