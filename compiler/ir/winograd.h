// Winograd F(2x2, 3x3) weights: the transformed weight a conv2d workload
// with winograd = 2 takes (compute_conv.cc defines the rest of the algorithm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tunefarm::ir {

// U = G g G^T per (input channel, output channel): `hwio` holds g as
// [3, 3, C, K] (row-major), the result is [4, 4, C, K]. Computed in double.
std::vector<float> WinogradWeight(const std::vector<float>& hwio, int64_t c, int64_t k);

}  // namespace tunefarm::ir
