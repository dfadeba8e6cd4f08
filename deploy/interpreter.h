// Runs an imported model node by node on the native operators and keeps
// every value: in float64 it is the reference a built package is checked
// against (value by value, wherever the package materialises the same value).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"

namespace tunefarm::deploy {

template <typename T>
using Values = std::map<std::string, std::vector<T>>;

// `inputs` holds one tensor per model input (row-major, the model's shape).
// Returns every value the nodes produced, plus the inputs.
template <typename T>
absl::StatusOr<Values<T>> Interpret(const frontend::Model& model, const Values<T>& inputs);

// Random inputs for a model (uniform in [-1, 1), seeded), one per input.
Values<float> RandomModelInputs(const frontend::Model& model, uint64_t seed);

}  // namespace tunefarm::deploy
