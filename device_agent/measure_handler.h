// The device agent's work: a MeasureRequest in, a MeasureResult out.
// CPU shared objects, and CUDA builds (cubin or PTX in a GpuModule) on an
// agent with a GPU: those run in the same sandbox, timed with CUDA events.
//
// The agent needs no compiler: the request carries the kernel's signature,
// and the reference comes with it, from whoever holds the compiler: the
// expected output itself, or a reference build (the default schedule) run
// here once. Either is kept per reference_key (workload and seed). The
// inputs are random from the request's seed (never zeros), the same values
// on every machine. The output is checked against the reference before
// anything is timed. The kernel runs in the sandbox (forked child, time
// limit from the start of the measurement, memory limit), so a crash, hang
// or runaway allocation is a result and the agent keeps serving. One
// measurement at a time per agent (a mutex): timings must not disturb each
// other. Thread safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device_agent/runtime/sandbox.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::agent {

struct MeasureHandlerOptions {
  int64_t memory_limit_bytes = int64_t{4} << 30;  // beyond what the agent has mapped
  double default_timeout_s = 10;
  ::tunefarm::v1::Fingerprint fingerprint;  // stamped on every result
  bool gpu = false;  // the board has a CUDA device (Capabilities.has_gpu)
  size_t max_cached_references = 64;  // the oldest is dropped past this
  bool filter_optional = false;       // SandboxOptions::filter_optional
  std::string runner_path;            // SandboxOptions::runner_path
  std::vector<std::string> runner_wrapper;  // SandboxOptions::runner_wrapper
};

class MeasureHandler {
 public:
  explicit MeasureHandler(MeasureHandlerOptions options) : options_(std::move(options)) {}

  // `cancelled` (optional) is asked while a kernel runs: true kills it.
  ::tunefarm::v1::MeasureResult Measure(const ::tunefarm::v1::MeasureRequest& request,
                                        const std::function<bool()>& cancelled = nullptr);

 private:
  // Logs how the runner was confined (namespaces, PID namespace, filter)
  // the first time and whenever it changes, as a warning when a layer is
  // missing. Called with mu_ held.
  void NoteConfinement(const runtime::SandboxOutcome& o);

  MeasureHandlerOptions options_;
  std::mutex mu_;  // one measurement at a time
  std::string confinement_logged_;  // the last line NoteConfinement logged
  std::map<std::string, std::vector<float>> references_;  // by reference_key
  std::vector<std::string> reference_order_;              // oldest first
};

}  // namespace tunefarm::agent
