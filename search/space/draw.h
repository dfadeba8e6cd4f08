// Random draws shared by the sketches and the random schedules. Each draws
// from the generator exactly as written here, so a seeded search proposes
// the same schedules wherever these are used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace tunefarm::search::space {

// Uniform in [lo, hi].
inline int64_t Pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// One of `v` (not empty), uniformly.
inline int64_t PickOf(std::mt19937_64& rng, const std::vector<int64_t>& v) {
  return v[size_t(Pick(rng, 0, int64_t(v.size()) - 1))];
}

// The divisors of `extent` in [lo, hi], ascending.
inline std::vector<int64_t> Divisors(int64_t extent, int64_t lo, int64_t hi) {
  std::vector<int64_t> divisors;
  for (int64_t d = lo; d <= std::min(hi, extent); ++d) {
    if (extent % d == 0) divisors.push_back(d);
  }
  return divisors;
}

// A divisor of max(1, n) up to max(1, limit), uniformly.
inline int64_t RandomDivisor(std::mt19937_64& rng, int64_t n, int64_t limit) {
  return PickOf(rng, Divisors(std::max<int64_t>(1, n), 1, std::max<int64_t>(1, limit)));
}

}  // namespace tunefarm::search::space
