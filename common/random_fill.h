// The one generator of test and measurement inputs: the same values for a
// (seed, stream) on every compiler, standard library and machine (a
// splitmix64 sequence, unlike std::uniform_real_distribution), so a server,
// a worker and an agent on a board agree on a kernel's inputs.
#pragma once

#include <cstdint>

namespace tunefarm {

// Fills out[0..n) with uniform values in [-1, 1) on a 2^-23 grid, never
// exactly zero (a zero is replaced by 0.5): a kernel that drops a term
// cannot pass by multiplying it with zero. `stream` tells apart the tensors
// made from one seed (a kernel's argument index).
void FillUniform(uint64_t seed, uint64_t stream, float* out, int64_t n);

}  // namespace tunefarm
