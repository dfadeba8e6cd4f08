// The one timing loop of whole models (packages loaded in a GraphRuntime):
// `tunefarm run` and its profile, the model runner on a board, and the
// paired A/B timing the whole-model build and the models bench compare
// builds with. Runs in the caller's process; the model runner calls it
// confined (model_run.h).
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

}  // namespace tunefarm::runtime
