// The log database as the search's memory: what a new run on a target
// starts from (warm start), and how a trial becomes a record.
//
//   records of the run's own workloads   history: never measured again,
//                                         the best are mutation parents;
//   successful records of other workloads  cost-model training data
//                                         (transfer across tasks and jobs).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/target.h"
#include "search/tuner.h"
#include "store/tuning_log.h"

namespace tunefarm::search {

// A stored record as a search result: the median of its costs when OK
// (the second device's, when it measured a disputed one slower); any
// failure, and an OK timing still pending or disputed without a second
// one, is a runtime error (never a parent).
MeasureResult ResultFromRecord(const v1::Record& r);

struct WarmStartCounts {
  int64_t history = 0;   // records of the tuner's own workloads
  int64_t transfer = 0;  // records of other workloads, for the cost model
  int64_t skipped = 0;   // refused by `keep`
};

// Feeds `tuner` every record of `target_spec` in `log`. `task_of` maps the
// tuner's workload keys to task indices. `keep` (optional) refuses records:
// made on other hardware, or of workloads a benchmark holds out.
absl::StatusOr<WarmStartCounts> WarmStart(
    store::TuningLog& log, const ir::Target& target, const std::string& target_spec,
    const std::map<std::string, int>& task_of, Tuner& tuner,
    const std::function<bool(const v1::Record&)>& keep = nullptr);

// The newest cost model stored for `target_spec` as the tuner's starting
// model (Tuner::SetInitialModel). `note` says which model, or why a stored
// one was skipped (another feature layout); empty when there is none.
struct StoredModelStart {
  bool loaded = false;
  std::string note;
};
absl::StatusOr<StoredModelStart> StartFromStoredModel(store::TuningLog& log,
                                                      const std::string& target_spec,
                                                      Tuner& tuner);

// Stores the tuner's model for `target_spec`, the next run's starting model,
// with the count of programs it was trained on; nothing unless this run
// retrained it (an initial or restored model is already stored, or came
// from a file). `bytes`: the model already serialized (empty: serialized here).
absl::Status StoreModel(store::TuningLog& log, const std::string& target_spec, const Tuner& tuner,
                        std::string bytes = "");

}  // namespace tunefarm::search
