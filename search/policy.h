// Search policies: which schedules of a task to measure next.
//
//   random        fresh samples of the space (every sketch of the target:
//                 CPU tiling and plain primitives; GPU tiling and fused);
//   evolutionary  a population of sketch decisions (fresh samples plus
//                 mutations of the best measured), evolved for a few
//                 generations under the cost model's score; the best-scored
//                 unmeasured candidates are proposed, with an epsilon of
//                 fresh random ones for exploration.
// Neither ever proposes a schedule whose hash the task's history holds.
#pragma once

#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cost_model/xgb_model.h"
#include "search/space/sketch.h"
#include "search/task.h"

namespace tunefarm::search {

enum class Strategy { kRandom, kEvolutionary };
const char* StrategyName(Strategy s);
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name);

struct EvolutionOptions {
  int population = 128;
  int generations = 3;
  double mutate_fraction = 0.7;  // of the initial population, when there are parents
  int parents = 8;               // best measured schedules mutated
  double epsilon = 0.25;         // fraction of each batch drawn at random
  // Candidates in one batch differ in at least this many decisions while
  // enough such candidates exist (1: no constraint).
  int min_distance = 2;
  // Fraction drawn at random once the task has gone two batches without a
  // new best (1% better).
  double stalled_epsilon = 0.5;
  // Of that stalled share, this fraction goes to one-decision mutations of
  // the best schedule, unranked (the model holds back the neighbours it
  // scores low, and random samples rarely land near the best).
  double stalled_neighbors = 0.5;
  // Each batch opens with the best-scored candidate of every stratum of the
  // tiling sketch (space::Sketch::Stratum: tile shape, packed or not) until the
  // stratum has this many measurements and its best is below
  // `stratum_keep` of the task's best (throughput); then it competes on
  // score alone.
  int stratum_trials = 4;
  double stratum_keep = 0.8;
  // The best measured schedules moved into each other stratum (packing
  // toggled, tile shape changed) join the population. Each time the task's
  // best improves by 1%, every judged stratum gets the move of that best
  // into it once: a paired trial of the new best's shape and packing.
  int moved_parents = 2;
  // No two candidates of a batch have the same tiles (space::Sketch::Structure:
  // they differ only in unrolling or padding) while others remain.
  bool distinct_tiles = true;
  // A task with no measured sketch schedule that ran opens its batch with
  // up to this many best schedules of similar workloads (SetTransferred),
  // unranked and no two with the same tiles; all of those it was handed are
  // its mutation parents until then (better parents, nearer workloads, more
  // often). A model trained on other workloads ranks a
  // new task's candidates poorly: warm from the bench's pool, ResNet C128's
  // first batch of 16 reached 94-108 GFLOP/s, twice led by w-vectorized
  // tiles at 27-38; the fitted bests of the pool's 1x1 and strided layers
  // ran at 111-113 as its second to fourth trials (docs/search.md).
  int transferred = 4;
};

// What has been measured for a task.
struct TaskHistory {
  std::set<std::string> measured;  // schedule hashes, any outcome
  struct Entry {
    schedule::Trace schedule;
    double seconds;
  };
  std::vector<Entry> ok;  // successful measurements, best first
  int trials = 0;
  int plain_trials = 0;      // of schedules outside every sketch (no decisions), any outcome
  int last_improvement = 0;  // `trials` when the best last improved by 1%
  double best_seconds() const { return ok.empty() ? 0 : ok.front().seconds; }
  // The decisions of the best (at most `n`) successful schedules of sketch
  // `sketch_id` that carry decisions, best first: the mutation parents.
  std::vector<std::vector<int64_t>> BestDecisions(int sketch_id, int n) const;
  void Add(const schedule::Trace& schedule, const MeasureResult& result);
};

// Program features of a schedule, or an error if it does not lower.
absl::StatusOr<cost_model::ProgramFeatures> FeaturesOf(const Task& task, const schedule::Trace& s);

class SearchPolicy {
 public:
  SearchPolicy(Strategy strategy, EvolutionOptions options, uint64_t seed)
      : strategy_(strategy), options_(options), rng_(seed) {}

  // Up to `n` unmeasured, distinct schedules. `model` may be null or
  // untrained (then candidates are not ranked).
  std::vector<schedule::Trace> Propose(const Task& task, const TaskHistory& history,
                                 const cost_model::CostModel* model, int n);

  // The random generator's state as text, and back (false: not a state).
  std::string RngState() const;
  bool SetRngState(const std::string& state);

  // Per stratum of `task_key`'s tiling sketch: the task's `last_improvement`
  // when its best was last moved into the stratum (-1: never); empty when
  // none was. Saved with a job's search state and restored with it.
  std::vector<int> PairedAt(const std::string& task_key) const;
  void SetPairedAt(const std::string& task_key, std::vector<int> at);

  // The decisions (CPU tiling sketch) of the best schedules of other
  // workloads like `task_key`'s, fitted to it, nearest first: where its
  // search starts while it has no measured schedule of its own.
  void SetTransferred(const std::string& task_key, std::vector<std::vector<int64_t>> decisions);

  // GPU candidates dropped before measurement for exceeding the target's
  // launch limits, and the last reason.
  int64_t rejected() const { return rejected_; }
  const std::string& last_rejection() const { return last_rejection_; }

 private:
  class Proposal;  // one batch of Propose, in stages (policy.cc)

  std::vector<schedule::Trace> Random(const Task& task, const TaskHistory& history, int n,
                                std::set<std::string>* taken);
  // The first min(n, EvolutionOptions::transferred) seeds of `task`
  // (SetTransferred) that are unmeasured and not in `taken`, as schedules
  // (each added to `taken`), as evolution opens with them; none once the
  // task has a tiling schedule of its own that ran.
  std::vector<schedule::Trace> TransferredSeeds(const Task& task, const TaskHistory& history, int n,
                                                std::set<std::string>* taken);
  // Up to `n` distinct schedules from `draw` (errors skipped), none measured
  // or in `taken`; each is added to `taken`.
  std::vector<schedule::Trace> Fresh(const TaskHistory& history, int n, std::set<std::string>* taken,
                               const std::function<absl::StatusOr<schedule::Trace>()>& draw);
  // Up to `n` unmeasured samples of `sketch`.
  std::vector<schedule::Trace> SketchSamples(const space::Sketch& sketch, const TaskHistory& history,
                                       int n, std::set<std::string>* taken);
  Strategy strategy_;
  EvolutionOptions options_;
  std::mt19937_64 rng_;
  int64_t rejected_ = 0;
  std::string last_rejection_;
  // Per task key and stratum: the task's `last_improvement` when its best
  // was last moved into the stratum (-1: never).
  std::map<std::string, std::vector<int>> paired_at_;
  std::map<std::string, std::vector<std::vector<int64_t>>> transferred_;
};

}  // namespace tunefarm::search
