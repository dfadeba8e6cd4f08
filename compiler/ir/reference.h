// The float64 reference: interprets a compute DAG directly, stage by stage,
// in double precision. Slow and obviously right; generated kernels are
// checked against it. Big stages are split across threads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"

namespace tunefarm::ir {

// `inputs` holds one buffer per kernel input (dag.args without the output),
// row-major. Returns the output tensor.
absl::StatusOr<std::vector<double>> EvaluateReference(
    const ComputeDAG& dag, const std::vector<std::vector<float>>& inputs);

// Random inputs for `dag` (one buffer per kernel input), uniform in [-1, 1)
// and never zero, deterministic for a seed.
std::vector<std::vector<float>> RandomInputs(const ComputeDAG& dag, uint64_t seed);

}  // namespace tunefarm::ir
