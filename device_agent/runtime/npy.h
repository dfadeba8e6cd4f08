// NumPy .npy files (format 1.0-3.0, little-endian float32 or float64, C
// order) for model inputs and outputs: what `tunefarm run` reads and writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tunefarm::runtime {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // float64 files are converted
};

// Errors say what is wrong with the file (never a crash: fuzzed).
absl::StatusOr<NpyArray> ParseNpy(const std::string& bytes);
std::string WriteNpy(const std::vector<int64_t>& shape, const std::vector<float>& data);

// The file an output value is written to (`tunefarm run --output-dir`, and
// bench/ort_run.js, which must agree): the value's name with every character
// other than [A-Za-z0-9_.-] replaced by '_', plus ".npy".
std::string NpyFileName(const std::string& value);

}  // namespace tunefarm::runtime
