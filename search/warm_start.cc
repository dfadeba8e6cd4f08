#include "search/warm_start.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tunefarm::search {

MeasureResult ResultFromRecord(const v1::Record& r) {
  MeasureResult m;
  // A timing no second device stood by is not one to learn from.
  const bool unchecked = r.confirmation() == v1::CONFIRMATION_PENDING ||
                         (r.confirmation() == v1::CONFIRMATION_DISPUTED &&
                          !(r.confirm_cost_sec() > 0));
  if (r.status() == v1::MEASURE_STATUS_OK && r.costs_sec_size() > 0 && !unchecked) {
    std::vector<double> c(r.costs_sec().begin(), r.costs_sec().end());
    std::sort(c.begin(), c.end());
    m.seconds = c[c.size() / 2];
    // A timing a second device measured slower: the slower one holds.
    if (r.confirmation() == v1::CONFIRMATION_DISPUTED) {
      m.seconds = std::max(m.seconds, r.confirm_cost_sec());
    }
  } else {
    m.status = MeasureResult::Status::kRuntimeError;
    m.error = unchecked ? "timing not confirmed by a second device" : r.error();
  }
  return m;
}

absl::StatusOr<WarmStartCounts> WarmStart(store::TuningLog& log, const ir::Target& target,
                                          const std::string& target_spec,
                                          const std::map<std::string, int>& task_of,
                                          Tuner& tuner,
                                          const std::function<bool(const v1::Record&)>& keep) {
  WarmStartCounts counts;
  std::map<std::string, Task> others;
  store::TuningLog::RecordQuery q;
  q.target_spec = target_spec;
  q.limit = 1000;
  for (;;) {
    absl::StatusOr<std::vector<v1::Record>> page = log.ListRecords(q);
    if (!page.ok()) return page.status();
    for (const v1::Record& r : *page) {
      if (keep && !keep(r)) {
        ++counts.skipped;
        continue;
      }
      absl::StatusOr<schedule::Trace> trace = schedule::TraceFromProto(r.schedule());
      if (!trace.ok()) {
        ++counts.skipped;
        continue;
      }
      auto t = task_of.find(r.workload_key());
      if (t != task_of.end()) {
        tuner.AddHistory(t->second, *trace, ResultFromRecord(r));
        ++counts.history;
      } else if (r.status() == v1::MEASURE_STATUS_OK) {
        auto it = others.find(r.workload_key());
        if (it == others.end()) {
          absl::StatusOr<Task> other = Task::Make(r.workload(), target);
          if (!other.ok()) continue;
          it = others.emplace(r.workload_key(), *std::move(other)).first;
        }
        tuner.AddTransferRecord(it->second, *trace, ResultFromRecord(r).seconds);
        ++counts.transfer;
      }
    }
    if (int(page->size()) < q.limit) break;
    q.after_record_id = page->back().record_id();
  }
  return counts;
}

absl::StatusOr<StoredModelStart> StartFromStoredModel(store::TuningLog& log,
                                                      const std::string& target_spec,
                                                      Tuner& tuner) {
  absl::StatusOr<store::TuningLog::StoredCostModel> stored = log.LatestCostModel(target_spec);
  if (absl::IsNotFound(stored.status())) return StoredModelStart{};
  if (!stored.ok()) return stored.status();
  absl::StatusOr<std::unique_ptr<cost_model::CostModel>> m =
      cost_model::CostModel::Deserialize(stored->bytes);
  if (!m.ok()) {
    return StoredModelStart{false, absl::StrCat("ignoring stored cost model #", stored->id, ": ",
                                                m.status().message())};
  }
  tuner.SetInitialModel(*std::move(m));
  return StoredModelStart{
      true, absl::StrCat("stored model #", stored->id, " (", stored->trained_on, " records)")};
}

absl::Status StoreModel(store::TuningLog& log, const std::string& target_spec, const Tuner& tuner,
                        std::string bytes) {
  if (!tuner.model().trained() || tuner.model_trained_on() == 0) return absl::OkStatus();
  store::TuningLog::StoredCostModel m;
  m.target_spec = target_spec;
  m.objective = cost_model::ObjectiveName(tuner.model().objective());
  m.trained_on = tuner.model_trained_on();
  if (bytes.empty()) {
    TF_ASSIGN_OR_RETURN(m.bytes, tuner.model().Serialize());
  } else {
    m.bytes = std::move(bytes);
  }
  return log.SaveCostModel(m).status();
}

}  // namespace tunefarm::search
