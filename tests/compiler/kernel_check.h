// Compiles a (workload, schedule) pair for a CPU target, runs it on random
// inputs and compares the output with the float64 reference.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::testing {

struct KernelCheck {
  double max_abs_error = 0;
  double max_rel_error = 0;  // |out - ref| / max(1, |ref|)
  int64_t outputs = 0;
  double compile_ms = 0;
};

// Runs a kernel shared object on `inputs` and returns its output.
using KernelRunFn = std::function<absl::StatusOr<std::vector<float>>(
    const std::string& shared_object, const std::vector<std::vector<float>>& inputs,
    int64_t output_size)>;

// The same check with another way of running the kernel (e.g. under qemu).
absl::StatusOr<KernelCheck> CheckKernelWith(const ::tunefarm::v1::Workload& workload,
                                            const schedule::Trace* schedule, const ir::Target& target,
                                            uint64_t seed, double tolerance,
                                            const KernelRunFn& run);

// Builds (workload, schedule or the default when null) for `target` and runs
// it once on `inputs` (one per kernel input, in their original layouts; the
// ones the schedule packs are packed here). Every output must be written:
// the buffer starts as NaN.
absl::StatusOr<std::vector<float>> RunKernel(const ::tunefarm::v1::Workload& workload,
                                             const schedule::Trace* schedule, const ir::Target& target,
                                             const std::vector<std::vector<float>>& inputs,
                                             int threads = 2);

// schedule == nullptr: the default schedule. Errors: the schedule did not
// apply, the kernel did not build or load, or an output is off by more than
// `tolerance` (relative to max(1, |ref|)).
absl::StatusOr<KernelCheck> CheckKernel(const ::tunefarm::v1::Workload& workload,
                                        const schedule::Trace* schedule, const ir::Target& target,
                                        uint64_t seed, double tolerance = 1e-4, int threads = 2);

}  // namespace tunefarm::testing
