// ONNX Runtime as a test oracle: onnxruntime-node (fetched, sha256-pinned, by
// scripts/fetch-models.sh into $TUNEFARM_CACHE, default ~/.cache/tunefarm)
// runs a model through bench/ort_run.js on given inputs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/interpreter.h"

namespace tunefarm::testing {

// The cache scripts/fetch-models.sh fills.
std::string ModelCache();

// OK when ONNX Runtime and node are here; FailedPrecondition saying what is missing.
absl::Status OrtAvailable();

// The model's outputs, by name, for `inputs` (shapes in `shapes`), run by
// ONNX Runtime on one thread; `scratch` is a directory for the files passed.
// `fixed` are inputs given as values (what ImportOptions::input_values fixed
// in our import), passed in the input's own element type.
absl::StatusOr<deploy::Values<float>> RunOrt(
    const std::string& model_path, const deploy::Values<float>& inputs,
    const std::map<std::string, std::vector<int64_t>>& shapes,
    const std::vector<std::string>& outputs, const std::string& scratch,
    const std::map<std::string, std::vector<double>>& fixed = {});

// Largest |ours - theirs| over every output, relative to each output's
// largest |theirs| but at least 0.01 (outputs that are all near 0 compare
// absolutely: ONNX Runtime's sigmoid returns exactly 0 below about -16,
// where the true value is 1e-7, and a saturated probability map would
// otherwise read as a 15% error); +inf for a missing output, a size
// mismatch or NaN.
double MaxOutputError(const deploy::Values<float>& ours, const deploy::Values<float>& theirs,
                      const std::vector<std::string>& outputs);

}  // namespace tunefarm::testing
