#include "common/random_fill.h"

namespace tunefarm {

namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

void FillUniform(uint64_t seed, uint64_t stream, float* out, int64_t n) {
  uint64_t state = seed;
  SplitMix64(state);
  state ^= stream * 0xd1b54a32d192ed03ULL;
  for (int64_t i = 0; i < n; ++i) {
    // 24 random bits -> [0, 2^24) -> [-1, 1) in steps of 2^-23: exact in float.
    const int32_t k = int32_t(SplitMix64(state) >> 40);
    const float x = float(k - (1 << 23)) * (1.0f / float(1 << 23));
    out[i] = x == 0.0f ? 0.5f : x;
  }
}

}  // namespace tunefarm
