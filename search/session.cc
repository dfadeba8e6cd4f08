#include "search/session.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace tunefarm::search {

v1::Record RecordOf(const Task& task, const std::string& target_spec, const v1::Schedule& schedule,
                    const MeasureResult& result, const RecordSource& source) {
  v1::Record r;
  *r.mutable_workload() = task.workload;
  r.mutable_target()->set_spec(target_spec);
  *r.mutable_schedule() = schedule;
  r.set_job_id(source.job_id);
  r.set_device_key(source.device_key);
  r.set_device_id(source.device_id);
  const v1::MeasureStatus status = source.status != v1::MEASURE_STATUS_UNSPECIFIED
                                       ? source.status
                                       : StatusToProto(result.status);
  r.set_status(status);
  if (status == v1::MEASURE_STATUS_OK) {
    if (source.costs.empty()) {
      r.add_costs_sec(result.seconds);
    } else {
      for (double c : source.costs) r.add_costs_sec(c);
    }
  }
  r.set_error(result.error);
  r.set_build_sec(source.build_sec >= 0 ? source.build_sec : result.compile_ms * 1e-3);
  r.set_run_sec(source.run_sec);
  *r.mutable_fingerprint() = source.fingerprint;
  r.set_timestamp_unix_ms(absl::ToUnixMillis(absl::Now()));
  r.set_confirmation(source.confirmation);
  return r;
}

namespace {

std::map<std::string, int> TaskIndex(const std::vector<Task>& tasks) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < tasks.size(); ++i) index.emplace(tasks[i].key, int(i));
  return index;
}

}  // namespace

Session::Session(std::vector<Task> tasks, Measurer* measurer, SessionOptions options)
    : options_(std::move(options)),
      target_spec_(tasks.empty() ? "" : tasks.front().target.ToString()),
      task_of_(TaskIndex(tasks)),
      tuner_(std::move(tasks), measurer, options_.tune) {}

absl::Status Session::Prepare() {
  const bool evolutionary = options_.tune.strategy == Strategy::kEvolutionary;
  if (options_.log != nullptr && !tuner_.tasks().empty()) {
    TF_ASSIGN_OR_RETURN(start_.warm,
                        WarmStart(*options_.log, tuner_.tasks().front().target, target_spec_,
                                  task_of_, tuner_, options_.keep_record));
  }
  if (options_.given_model != nullptr) {
    tuner_.SetInitialModel(std::move(options_.given_model));
    start_.model_loaded = true;
    start_.model_note = options_.given_name;
  } else if (evolutionary && options_.stored_model && options_.log != nullptr) {
    TF_ASSIGN_OR_RETURN(StoredModelStart stored,
                        StartFromStoredModel(*options_.log, target_spec_, tuner_));
    start_.model_loaded = stored.loaded;
    start_.model_note = stored.note;
  }
  if (options_.prepare) TF_RETURN_IF_ERROR(options_.prepare(tuner_));
  tuner_.SeedFromOtherWorkloads();
  for (size_t i = 0; i < tuner_.tasks().size(); ++i) start_.seeds += tuner_.seeds(int(i));
  return absl::OkStatus();
}

absl::StatusOr<SessionEnd> Session::Run(SessionObserver* observer) {
  TF_RETURN_IF_ERROR(Prepare());
  if (observer != nullptr) observer->OnStart(tuner_, start_);
  SessionEnd end;
  const bool commit = options_.commit_records && options_.log != nullptr;
  end.run = tuner_.Run([&](const Trial& t) {
    if (commit) {
      const v1::Record r = RecordOf(tuner_.tasks()[t.task], target_spec_, schedule::ToProto(t.schedule),
                                    t.result, options_.source);
      if (auto c = options_.log->CommitRecords({r}); !c.ok() && end.records.ok()) {
        end.records = c.status();
      }
    }
    if (observer != nullptr) observer->OnTrial(tuner_, t);
  });
  // A run that ended on its failures, or was stopped, leaves the stored
  // model as it was.
  const bool stopped = options_.tune.stop && options_.tune.stop();
  if (end.run.ok() && options_.store_model && options_.log != nullptr && !stopped &&
      tuner_.ok_trials() > 0 && tuner_.end() != Tuner::End::kAttempts) {
    end.model = StoreModel(*options_.log, target_spec_, tuner_);
  }
  return end;
}

}  // namespace tunefarm::search
