// The measurement sandbox: runs one kernel shared object in a child process
// (fork, then exec of tunefarm-runner, so none of the caller's threads or
// locks are inherited), with a wall-time limit counted from the start of this
// measurement and an address-space limit, checks its output against a
// reference and times it. A kernel that crashes, hangs, exhausts memory or returns an error
// becomes an outcome; the calling process (agent, local tuner) carries on.
// Links no compiler code.
//
// The runner runs the code it measures, so what it says is not trusted:
// the outcome is decided here. The runner never sees the reference; it
// sends the output of its first run and this side compares it (and stops
// the runner when it is wrong). A refused system call is read from how the
// runner died (SIGSYS), never from its report. The timings are the
// runner's own (native code cannot be timed from outside it), held to this
// process's clock: their sum (every repeat's cost times the runs per
// repeat) may not exceed the time from this side's go-ahead to the report's
// arrival, and the repeats and runs per repeat must be what was asked for.
// What loaded code can still do to its own timings: docs/security.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tunefarm::runtime {

struct SandboxOptions {
  int threads = 1;                 // kernel threads
  double min_repeat_ms = 20;       // the repeats together run the kernel at least this long
  // Untimed runs before the timing, at least one, until this much has run:
  // in a fresh process the first ~20 ms of a kernel run slower
  // (docs/tuning-guide.md).
  double warmup_ms = 30;
  int repeats = 5;                 // timings kept; the median is the result
  int number = 0;                  // runs per repeat; 0: enough for min_repeat_ms
  bool flush_cache = false;        // flush the last-level cache before every timed run
  double max_timing_s = 0.5;       // fewer repeats for kernels slower than this / repeats
  double time_limit_s = 10;        // from the fork: check and timing included
  int64_t memory_limit_bytes = 0;  // RLIMIT_AS of the child; 0: none
  double tolerance = 1e-3;         // relative to max(1, |reference|)
  std::string runner_path;         // empty: RunnerPath()
  // A program and its arguments the runner is run through (qemu-aarch64 for
  // an emulated board); empty: the runner is executed directly.
  std::vector<std::string> runner_wrapper;
  // The kernel bytes are a GpuPlan (EncodeGpuPlan), run on GPU 0 and timed
  // with CUDA events; flush_cache then flushes the GPU's L2, and
  // memory_limit_bytes does not apply (the driver reserves address space).
  bool cuda = false;
  // Asked every 100 ms while the kernel runs; true kills it (the server
  // revoked the lease: the job was cancelled).
  std::function<bool()> cancelled;
  // Run without the seccomp filter where it is refused (confine.h): for
  // agents under an emulator (qemu-user) only.
  bool filter_optional = false;
};

struct SandboxOutcome {
  // kLoadError: the bytes did not load as a kernel library on this machine
  // (corrupt, or built for another one). kSandboxViolation: the kernel made
  // a system call the sandbox does not allow (confine.h) and was killed
  // (the runner died of SIGSYS; which call is not known).
  enum class Status { kOk, kWrongResult, kRuntimeError, kTimeout, kLoadError, kSandboxViolation };
  Status status = Status::kRuntimeError;
  double seconds = 0;         // median of the repeats (kOk)
  std::vector<double> costs;  // every repeat, seconds per run
  double run_s = 0;           // wall time of the whole measurement
  // How the runner says it was confined (informational: a kernel could
  // forge these; confine.h).
  bool namespaces = false;     // its own empty root and no network
  bool pid_namespace = false;  // its own PID namespace
  bool filtered = false;       // under the seccomp filter
  std::string error;          // one line (not kOk)
};

// `args`: the kernel's input buffers in ABI order (already packed where the
// schedule packs constants); the output buffer of `n_out` floats is added
// last. `reference` (n_out values, or empty: no check). When `output` is not
// null it receives the kernel's output (for making a reference), when its
// first run finished.
SandboxOutcome MeasureInSandbox(const std::string& shared_object,
                                const std::vector<const std::vector<float>*>& args, int64_t n_out,
                                const std::vector<float>& reference, const SandboxOptions& options,
                                std::vector<float>* output = nullptr);

// The same with the inputs made by the runner, after it is confined, from
// `signature` (a serialized KernelSignature: RandomInputs(input_seed),
// packed as it says), so the calling process never holds them and inputs
// too large for the runner's memory limit are its outcome.
SandboxOutcome MeasureInSandboxFromSeed(const std::string& shared_object,
                                        const std::string& signature, uint64_t input_seed,
                                        int64_t n_out, const std::vector<float>& reference,
                                        const SandboxOptions& options,
                                        std::vector<float>* output = nullptr);

// The tunefarm-runner executable the sandbox runs: $TUNEFARM_RUNNER, else
// beside the current executable, else the one in the build tree; empty when
// none is found (measurements then fail with a runtime error saying so).
const std::string& RunnerPath();

}  // namespace tunefarm::runtime
