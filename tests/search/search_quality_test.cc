// Search quality on a synthetic, noise-free machine: the measurer returns a
// known function of the schedule's tiling (register tile, cache tile,
// reduction tile, unrolling, with interactions between them) whose optimum
// is known, so how fast a strategy gets near it is a deterministic fact of
// the search, not of a loaded machine. The real tuner runs it (policy,
// cost model retrained on every batch, task scheduler); only the
// measurement is synthetic.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/schedule.h"
#include "gtest/gtest.h"
#include "search/task.h"
#include "search/tuner.h"

namespace tunefarm {
namespace {

using search::MeasureResult;

// matmul(M=N=K=256) on a fixed x86-64 target (so the space does not depend
// on the machine the test runs on).
constexpr const char* kWorkload = "matmul(M=256,N=256,K=256)";
constexpr const char* kTarget = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=1";

// The synthetic machine's optimum (seconds) and the cost of each unit of
// distance from it.
constexpr double kOptimumSeconds = 1e-3;
constexpr double kPerUnit = 0.08;

double Log2(int64_t v) { return std::log2(double(std::max<int64_t>(v, 1))); }
double Sq(double v) { return v * v; }

// The tiling a schedule of the register-tiled sketch sets: the inner
// factors of the output's i and j loops (stage 1, the cache-written
// output) and of the reduction (stage 0, iterator 8), and the auto-unroll
// limit. found: the schedule has that structure.
struct Tiling {
  bool found = false;
  std::vector<int64_t> i, j;
  int64_t k_inner = 1;
  int64_t unroll = 0;
};

Tiling TilingOf(const schedule::Trace& t) {
  Tiling x;
  for (const schedule::Step& step : t.steps) {
    if (const auto* s = std::get_if<schedule::SplitStep>(&step)) {
      if (s->stage == 1 && s->iter == 0 && x.i.empty()) x.i = s->lengths;
      if (s->stage == 1 && s->iter == 4 && x.j.empty()) x.j = s->lengths;
      if (s->stage == 0 && s->iter == 8 && !s->lengths.empty()) x.k_inner = s->lengths.back();
    }
    if (const auto* p = std::get_if<schedule::PragmaStep>(&step)) {
      if (p->kind == v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP) x.unroll = p->value;
    }
  }
  x.found = x.i.size() == 3 && x.j.size() == 3;
  return x;
}

// Distance from the optimum, in units: a register tile of 8 x 16 (i x j),
// a cache tile of 32 x 64 whose area also counts on its own (the
// interaction: a tall tile and a wide one of the same area cost alike), a
// reduction tile of 16, unrolling up to 64 steps. A schedule without the
// tiling is 12 units away.
double Distance(const schedule::Trace& t) {
  const Tiling x = TilingOf(t);
  if (!x.found) return 12;
  const double ri = Log2(x.i.back()), rj = Log2(x.j.back());
  const double ti = Log2(x.i[0] * x.i[1] * x.i[2]), tj = Log2(x.j[0] * x.j[1] * x.j[2]);
  double d = Sq(ri - 3) + 1.5 * Sq(rj - 4);
  if (ri + rj > 8) d += 4;  // more than 256 accumulators: spills
  d += 0.5 * Sq(ti - 5) + 0.5 * Sq(tj - 6) + 0.5 * Sq(ti + tj - 11);
  d += 0.3 * Sq(Log2(x.k_inner) - 4);
  d += x.unroll == 64 ? 0 : 0.4;
  return d;
}

double SyntheticSeconds(const schedule::Trace& t) {
  return kOptimumSeconds * (1 + kPerUnit * Distance(t));
}

class SyntheticMeasurer : public search::Measurer {
 public:
  std::vector<MeasureResult> Measure(const search::Task& task,
                                     const std::vector<schedule::Trace>& schedules) override {
    std::vector<MeasureResult> out;
    for (const schedule::Trace& t : schedules) {
      MeasureResult r;
      r.seconds = SyntheticSeconds(t);
      out.push_back(r);
    }
    return out;
  }
};

struct RunResult {
  int trials_to_90 = 0;  // first trial (1-based) within 90% of the optimum; 0: never
  double best = 0, default_seconds = 0;
};

// One tuning run of `budget` trials, ended early once a trial is within 90%
// of the optimum where `stop_at_90`.
RunResult Tune(search::Strategy strategy, uint64_t seed, int budget, bool stop_at_90) {
  absl::StatusOr<v1::Workload> w = ir::ParseWorkloadSpec(kWorkload);
  absl::StatusOr<ir::Target> target = ir::Target::Parse(kTarget);
  EXPECT_TRUE(w.ok() && target.ok());
  absl::StatusOr<search::Task> task = search::Task::Make(*w, *target, kWorkload);
  EXPECT_TRUE(task.ok()) << task.status();
  SyntheticMeasurer measurer;
  RunResult r;
  search::TuneOptions o;
  o.strategy = strategy;
  o.max_trials = budget;
  o.seed = seed;
  o.keep_features = strategy == search::Strategy::kEvolutionary;
  // The default (a tiling 8.6 units away) is left out of the search: as a
  // mutation parent it would decide how soon evolution gets near, which
  // is the default's doing, not the model's. It is still the bar to beat.
  o.measure_default = false;
  o.stop = [&] { return stop_at_90 && r.trials_to_90 > 0; };
  search::Tuner tuner({*task}, &measurer, o);
  absl::Status s = tuner.Run([&](const search::Trial& t) {
    if (r.trials_to_90 == 0 && t.result.seconds <= kOptimumSeconds / 0.9) r.trials_to_90 = t.index + 1;
  });
  EXPECT_TRUE(s.ok()) << s;
  r.best = tuner.history(0).best_seconds();
  r.default_seconds = SyntheticSeconds(schedule::DefaultSchedule(task->dag, task->target));
  return r;
}

// Over 3 seeds, evolutionary search with its cost model gets within 90% of
// the optimum in fewer trials than random search's median (a run that
// never gets there counts as budget + 1) and beats the default schedule;
// and over 8 seeds it gets there in at most kMaxMeanTrials on average,
// which a cost model that ranks nothing (every score equal) does not:
// measured, 60 trials on average with the model (seeds 1-8: 116 68 57 26 57
// 56 72 30), where a constant one took 102 (89 178 130 172 55 90 74 31, with
// a generic default measured first, which no search mutates), while random
// search got there in 1 of 3 runs of 320 trials.
TEST(SearchQuality, EvolutionWithItsModelNearsTheOptimumFirst) {
  constexpr int kBudget = 320;
  constexpr double kMaxMeanTrials = 85;
  std::vector<int> random;
  for (uint64_t seed : {1, 2, 3}) {
    RunResult r = Tune(search::Strategy::kRandom, seed, kBudget, false);
    random.push_back(r.trials_to_90 > 0 ? r.trials_to_90 : kBudget + 1);
    std::printf("random seed %d: 90%% after %s trials, best %.3f of the optimum\n", int(seed),
                r.trials_to_90 > 0 ? std::to_string(r.trials_to_90).c_str() : "no",
                kOptimumSeconds / r.best);
  }
  std::sort(random.begin(), random.end());
  const int random_median = random[1];
  double sum = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    RunResult r = Tune(search::Strategy::kEvolutionary, seed, kBudget, true);
    std::printf("evolutionary seed %d: 90%% after %d trials, best %.3f of the optimum, default "
                "%.3f\n",
                int(seed), r.trials_to_90, kOptimumSeconds / r.best,
                kOptimumSeconds / r.default_seconds);
    ASSERT_GT(r.trials_to_90, 0) << "seed " << seed << ": never within 90% in " << kBudget;
    sum += r.trials_to_90;
    EXPECT_LT(r.best, r.default_seconds) << "seed " << seed;
    if (seed <= 3) {
      EXPECT_LT(r.trials_to_90, random_median)
          << "seed " << seed << ": no sooner than random search's median";
    }
  }
  EXPECT_LE(sum / 8, kMaxMeanTrials) << "the cost model no longer steers the search";
}

}  // namespace
}  // namespace tunefarm
