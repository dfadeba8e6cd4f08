// The arena plan of a package's values (PlanMemory, package_build.h).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "deploy/package_build.h"

namespace tunefarm::deploy {

int64_t PlanMemory(const std::vector<std::pair<int, int>>& lifetimes,
                   const std::vector<int64_t>& bytes, std::vector<int64_t>* offsets) {
  const size_t n = lifetimes.size();
  offsets->assign(n, 0);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  // Largest first, then earliest: the classic greedy by size.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bytes[a] != bytes[b]) return bytes[a] > bytes[b];
    return lifetimes[a].first < lifetimes[b].first;
  });
  auto round = [](int64_t v) { return (v + 63) / 64 * 64; };
  std::vector<size_t> placed;
  int64_t arena = 0;
  for (size_t i : order) {
    // Intervals taken by placed values alive at the same time, sorted.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      if (lifetimes[j].first <= lifetimes[i].second && lifetimes[i].first <= lifetimes[j].second)
        busy.push_back({(*offsets)[j], (*offsets)[j] + round(bytes[j])});
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0, best = -1, best_gap = INT64_MAX;
    const int64_t need = round(bytes[i]);
    for (const auto& [b, e] : busy) {
      if (b - at >= need && b - at < best_gap) {
        best = at;
        best_gap = b - at;
      }
      at = std::max(at, e);
    }
    (*offsets)[i] = best >= 0 ? best : at;
    arena = std::max(arena, (*offsets)[i] + need);
    placed.push_back(i);
  }
  return arena;
}

}  // namespace tunefarm::deploy
