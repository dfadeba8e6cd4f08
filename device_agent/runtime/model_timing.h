// The one timing loop of whole models (packages loaded in a GraphRuntime),
// and the check of a paired run's outputs. Only tunefarm-model-runner calls
// them, confined (model_run.h); `tunefarm run`, its profile, a board's model
// runs, the whole-model build's A/B timings and the models bench all reach
// them through runtime::MeasureModel.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device_agent/runtime/graph_runtime.h"

namespace tunefarm::runtime {

using ModelInputs = std::map<std::string, std::vector<float>>;

// How many runs: `runs` at most; past `min_runs`, no new run starts once
// the runs took `max_seconds` (0: no bound).
struct ModelRunCount {
  int64_t runs = 10;
  int64_t min_runs = 10;
  double max_seconds = 0;
};

struct ModelTimes {
  std::vector<double> latencies;  // seconds, one per run
  // Each step's median seconds over the runs (a runtime loaded with
  // Options::profile; empty otherwise).
  std::vector<double> step_seconds;
};

// Times runs of `rt` on `inputs` (warm-up is the caller's: every run here
// is timed).
absl::StatusOr<ModelTimes> TimeModel(GraphRuntime& rt, const ModelInputs& inputs,
                                     const ModelRunCount& count);

struct PairedModelTimes {
  double a_seconds = 0, b_seconds = 0;  // each build's median
  double a_over_b = 0;                  // the median of the pairs' ratios
  int pairs = 0;
  // Each step's median, per build (runtimes loaded with Options::profile).
  std::vector<double> a_steps, b_steps;
};

// Times `a` and `b` alternately, the order flipping every pair (so neither
// always runs on the other's warm caches), after one warm-up run of each:
// `pairs` pairs, or as many as fill kMinPairedSeconds where that is more
// (a model of microseconds timed 15 times ends before its caches, the
// pool's workers and the core's clock settle).
absl::StatusOr<PairedModelTimes> TimeModelsPaired(GraphRuntime& a, GraphRuntime& b,
                                                  const ModelInputs& inputs, int pairs);
constexpr double kMinPairedSeconds = 0.2;

// How far `got` is from `expected` (one output of two builds of a model):
// the largest |got - expected|, relative to the largest |expected| but at
// least 0.01 (a saturated sigmoid's 1e-7 is 0 in another build); infinity
// where the sizes differ or one side is NaN where the other is not.
double OutputError(const std::vector<float>& expected, const std::vector<float>& got);

}  // namespace tunefarm::runtime
