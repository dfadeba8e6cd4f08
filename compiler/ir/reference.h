// The float64 reference: interprets a compute DAG directly, stage by stage,
// in double precision. Slow and obviously right; generated kernels are
// checked against it. Big stages are split across threads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"

namespace tunefarm::ir {

// Which reference a workload's kernels are checked against: the float64
// interpreter (EvaluateReference) up to kMaxInterpretedFlops and an output
// of at most kMaxInterpretedOutput elements (it travels with every
// measurement), else the default schedule's build, run once on the
// measuring machine.
inline constexpr double kMaxInterpretedFlops = 5e7;
inline constexpr int64_t kMaxInterpretedOutput = int64_t{1} << 20;
bool InterpretReference(const ComputeDAG& dag, double flops);

// `inputs` holds one buffer per kernel input (dag.args without the output),
// row-major. Returns the output tensor.
absl::StatusOr<std::vector<double>> EvaluateReference(
    const ComputeDAG& dag, const std::vector<std::vector<float>>& inputs);

// Random inputs for `dag` (one buffer per kernel input): the values
// RandomInputs(SignatureOf(dag), seed) of proto/kernel_signature.h makes,
// uniform in [-1, 1), never zero, the same on every machine.
std::vector<std::vector<float>> RandomInputs(const ComputeDAG& dag, uint64_t seed);

}  // namespace tunefarm::ir
