// One tuning session: the sequence every driver runs (a farm job,
// `tunefarm tune`, the search bench), in this order and nowhere else:
//
//   1. warm start: the log's records of the target; the tasks' own are
//      history (never measured again, the best are parents), the others'
//      train the cost model;
//   2. the starting cost model (evolutionary search only): the caller's,
//      else the target's newest stored one;
//   3. the caller's preparation (a resumed job: its failed trials to
//      measure again and its saved search state);
//   4. seeds: the best schedules of similar workloads, fitted to the tasks;
//   5. the run; each result committed to the log as a record as it
//      arrives, unless the measurer stores its own (a farm's, with what
//      the devices report);
//   6. the final cost model stored as the target's next starting model
//      (not after a run that was stopped, had no trial that ran, or ended
//      out of attempts).
//
// Records are made in one place, RecordOf.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model/xgb_model.h"
#include "search/tuner.h"
#include "search/warm_start.h"
#include "store/tuning_log.h"

namespace tunefarm::search {

// Where a result came from, beyond the MeasureResult: what its record says.
struct RecordSource {
  int64_t job_id = 0;                // 0: none (local tuning)
  std::string device_key = "local";  // the job's device key
  std::string device_id;             // the agent that measured it
  v1::Fingerprint fingerprint;       // the compiler's and the device's
  // Every repeat's time; empty: the result's median alone.
  std::vector<double> costs;
  // UNSPECIFIED: the result's status.
  v1::MeasureStatus status = v1::MEASURE_STATUS_UNSPECIFIED;
  double build_sec = -1;  // < 0: the result's compile time
  double run_sec = 0;
  v1::Confirmation confirmation = v1::CONFIRMATION_NOT_NEEDED;
};

// A result for `task` on `target_spec` as the record the log keeps,
// stamped now.
v1::Record RecordOf(const Task& task, const std::string& target_spec, const v1::Schedule& schedule,
                    const MeasureResult& result, const RecordSource& source = {});

struct SessionOptions {
  TuneOptions tune;
  // The log database: warm start, records, cost models. Null: none of them
  // (a cold benchmark run: the tuner starts from nothing, stores nothing).
  store::TuningLog* log = nullptr;
  // Refuses warm-start records (another board's; a benchmark's held-out
  // workloads); null: every record of the target.
  std::function<bool(const v1::Record&)> keep_record;
  // Starting model: `given` (named by `given_name`), else the stored one
  // when `stored_model`.
  std::unique_ptr<cost_model::CostModel> given_model;
  std::string given_name;
  bool stored_model = true;
  // Whether the session commits a record of each result (with `source`
  // stamped on it); false: the measurer stores its own.
  bool commit_records = true;
  RecordSource source;
  bool store_model = true;
  // Step 3; an error ends the session before the run.
  std::function<absl::Status(Tuner&)> prepare;
};

// What steps 1-4 found.
struct SessionStart {
  WarmStartCounts warm;
  bool model_loaded = false;
  std::string model_note;  // which starting model, or why a stored one was skipped
  int seeds = 0;           // schedules of similar workloads the tasks start from
};

// How it ended: the run's status and what could not be stored.
struct SessionEnd {
  absl::Status run;
  absl::Status records;  // the first record that did not commit
  absl::Status model;    // the cost model that did not store
};

class SessionObserver {
 public:
  virtual ~SessionObserver() = default;
  // After steps 1-4, before the first measurement.
  virtual void OnStart(const Tuner& tuner, const SessionStart& start) {}
  // Every result, after its record is committed.
  virtual void OnTrial(const Tuner& tuner, const Trial& trial) {}
};

// An observer of each trial only.
class TrialObserver : public SessionObserver {
 public:
  explicit TrialObserver(std::function<void(const Trial&)> on_trial)
      : on_trial_(std::move(on_trial)) {}
  void OnTrial(const Tuner&, const Trial& trial) override { on_trial_(trial); }

 private:
  std::function<void(const Trial&)> on_trial_;
};

class Session {
 public:
  Session(std::vector<Task> tasks, Measurer* measurer, SessionOptions options);

  // Runs steps 1-6. An error before the run (warm start, the stored model,
  // the preparation) is returned as is; after it, SessionEnd says.
  absl::StatusOr<SessionEnd> Run(SessionObserver* observer = nullptr);

  Tuner& tuner() { return tuner_; }
  const Tuner& tuner() const { return tuner_; }
  const SessionStart& start() const { return start_; }
  const std::string& target_spec() const { return target_spec_; }

 private:
  absl::Status Prepare();

  SessionOptions options_;
  std::string target_spec_;
  std::map<std::string, int> task_of_;
  Tuner tuner_;
  SessionStart start_;
};

}  // namespace tunefarm::search
