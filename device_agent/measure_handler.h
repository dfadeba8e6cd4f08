// The device agent's work: a MeasureRequest in, a MeasureResult out.
// CPU shared objects, and CUDA builds (cubin or PTX in a GpuModule) on an
// agent with a GPU: those run in the same sandbox, timed with CUDA events.
//
// The inputs are random (from the request's seed, never zeros); the output
// is checked against a reference before anything is timed: the float64
// interpreter for small workloads, else the default schedule shipped in the
// request (run once per workload and seed, then cached). The kernel runs in
// the sandbox (forked child, time limit from the start of the measurement,
// memory limit), so a crash, hang or runaway allocation is a result and the
// agent keeps serving. One measurement at a time per agent (a mutex): timings
// must not disturb each other. Thread safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "device_agent/runtime/gpu_plan.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::agent {

struct MeasureHandlerOptions {
  int64_t memory_limit_bytes = int64_t{4} << 30;  // beyond what the agent has mapped
  double default_timeout_s = 10;
  ::tunefarm::v1::Fingerprint fingerprint;  // stamped on every result
  bool gpu = false;  // the board has a CUDA device (Capabilities.has_gpu)
  // Workloads up to this many flops are checked against the float64
  // interpreter; bigger ones against the request's reference artifact.
  double max_interpreted_flops = 5e7;
};

// The runner's plan of a CUDA build (GpuModule) for the scheduled DAG
// `dag`: each kernel parameter, a tensor id, becomes the index of the
// argument (dag.args order, the output last) or of the workspace it names.
absl::StatusOr<runner::GpuPlan> PlanFromModule(const ::tunefarm::v1::GpuModule& module,
                                               const ir::ComputeDAG& dag);

class MeasureHandler {
 public:
  // The default of MeasureHandlerOptions::max_interpreted_flops.
  static constexpr double kMaxInterpretedFlops = 5e7;

  explicit MeasureHandler(MeasureHandlerOptions options) : options_(std::move(options)) {}

  ::tunefarm::v1::MeasureResult Measure(const ::tunefarm::v1::MeasureRequest& request);

 private:
  MeasureHandlerOptions options_;
  std::mutex mu_;                                         // one measurement at a time
  std::map<std::string, std::vector<float>> references_;  // by workload key + seed
};

}  // namespace tunefarm::agent
