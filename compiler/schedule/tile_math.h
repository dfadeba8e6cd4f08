// Small arithmetic the CPU schedules share when they size register and
// cache tiles.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tunefarm::schedule {

// The largest divisor of n that is at most `limit`.
inline int64_t DivisorAtMost(int64_t n, int64_t limit) {
  for (int64_t d = std::min(n, limit); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

// The widest vector of `lanes`, lanes / 2, ... down to 4 lanes that divides
// n (how GenVectorLoop splits a loop), or 0.
inline int64_t WidestDividingLanes(int64_t n, int64_t lanes) {
  for (int64_t v = lanes; v >= 4; v /= 2) {
    if (n % v == 0) return v;
  }
  return 0;
}

// The vector registers a register tile's accumulators may take, leaving the
// rest of the register file to the loaded vectors and a broadcast: 12 of
// AVX2's 16, 24 of the 32 of AVX-512 and NEON.
inline int64_t AccumulatorBudget(int64_t float_lanes) { return float_lanes == 8 ? 12 : 24; }

}  // namespace tunefarm::schedule
