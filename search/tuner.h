// The tuning loop over the tasks of a job:
//
//   measure each task's default schedule (the floor a tuned build keeps)
//     unless one of its measurements ran;
//   measure the retries (AddRetry) that have not run;
//   repeat until the trial or time budget is spent:
//     task = the task scheduler's pick
//     batch = the policy's proposals for it (never anything measured before)
//     results = measurer.Measure(batch)
//     histories and the cost model (retrained on every result) updated
//
// Records already measured (a resumed job, or the database's records for
// the target: warm start) enter through AddHistory and are never proposed
// again. `on_trial` sees every result as it arrives (to store it).
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cost_model/xgb_model.h"
#include "search/policy.h"
#include "search/task.h"
#include "search/task_scheduler.h"

namespace tunefarm::search {

constexpr int kNoTrialLimit = std::numeric_limits<int>::max();

struct TuneOptions {
  Strategy strategy = Strategy::kEvolutionary;
  int max_trials = 64;          // measurements, defaults included (kNoTrialLimit: none)
  double max_seconds = 0;       // wall time, a restored run's earlier time included; 0: no limit
  int max_trials_per_task = 0;  // this task's measurements, earlier ones included; 0: no limit
  // Whether failed measurements count towards max_trials and
  // max_trials_per_task. Without, only those that ran do, and the run also
  // ends after max_attempts measurements of any outcome.
  bool failed_trials_count = true;
  int max_attempts = kNoTrialLimit;
  // A task whose best has not improved for this many of its trials stops
  // (TaskSchedulerOptions::early_stop_rounds, in batches); 0: never.
  int early_stop_trials = 0;
  int batch = 16;
  uint64_t seed = 1;
  EvolutionOptions evolution;
  TaskSchedulerOptions scheduler;
  cost_model::Objective objective = cost_model::Objective::kRegression;  // docs/benchmarks.md
  // The cost model is (re)trained once this many programs are measured
  // (transfer records included); before that, candidates are not ranked.
  int min_train_records = 32;
  bool measure_default = true;
  // Keep the features of every measured program (the cost model's training
  // data, measured()). Off for a random search whose caller trains no model
  // from it: extracting features is most of the search's own cost per trial.
  bool keep_features = true;
  // Checked between batches: true ends the run (a cancelled or stopping job).
  std::function<bool()> stop;
  // Called after every batch is recorded and the model retrained (a job
  // saves its Snapshot() here).
  std::function<void()> on_batch;
};

struct Trial {
  int task;
  int index;        // 0-based over the whole run
  int batch_index;  // position in the batch the measurer was handed
  schedule::Trace schedule;
  MeasureResult result;
  double elapsed_s;  // since Run started
};

class Tuner {
 public:
  Tuner(std::vector<Task> tasks, Measurer* measurer, TuneOptions options);

  void AddHistory(int task, const schedule::Trace& schedule, const MeasureResult& result);
  // Trials of `task` an earlier run of the same job made (a resumed job):
  // they count towards max_trials_per_task.
  void AddEarlierTrials(int task, int64_t n) { task_trials_[task] += n; }
  // A schedule of `task` an earlier run of the same job measured without
  // success (also given to AddHistory): Run measures it again, after the
  // default schedules and before searching, unless it has run since.
  void AddRetry(int task, const schedule::Trace& schedule) { retries_.push_back({task, schedule}); }
  // A record of another workload on the same target: training data for the
  // cost model (transfer across tasks and jobs); the best two CPU tiling
  // schedules of each such workload also seed the evolutionary search of
  // this run's tasks of the same operator and loop layout, fitted to them
  // (EvolutionOptions::transferred), nearest workload first.
  void AddTransferRecord(const Task& other, const schedule::Trace& schedule, double seconds);
  absl::Status Run(const std::function<void(const Trial&)>& on_trial = {});
  // Hands the policy each task's fitted schedules of other workloads (the
  // transfer records' best; Run does this too, after any AddTransferRecord).
  void SeedFromOtherWorkloads();
  // How many of them `task` starts from: 0 before, where no similar
  // workload has a tiling schedule, or where the task has one of its own
  // that ran (its own best are the parents then). A random search opens
  // with the same seeds (SearchPolicy::Propose), then draws at random.
  int seeds(int task) const { return seeds_[task]; }

  const std::vector<Task>& tasks() const { return tasks_; }
  const TaskHistory& history(int task) const { return histories_[task]; }
  // The default schedule's time: as this run measured it, else the best of
  // the earlier measurements AddHistory was given; 0 while unknown.
  double default_seconds(int task) const { return default_seconds_[task]; }
  int trials() const { return trials_; }        // measurements of this run, any outcome
  int ok_trials() const { return ok_trials_; }  // of them, those that ran
  int64_t task_trials(int task) const { return task_trials_[task]; }
  // Why the last Run ended. kTasksDone: every task at its per-task limit,
  // stopped early (no better schedule for early_stop_trials) or out of new
  // schedules. kAttempts: max_attempts measurements made.
  enum class End { kNotRun, kTrials, kSeconds, kStopped, kTasksDone, kAttempts };
  End end() const { return end_; }
  // Wall time spent tuning: this run's, plus a restored run's earlier time.
  double seconds() const;
  const cost_model::CostModel& model() const { return *model_; }
  // Programs the model was last retrained on in this process (measured()
  // then); 0 while it is an initial or restored model, or untrained.
  int64_t model_trained_on() const { return model_trained_on_; }
  // A model trained before this run (the database's newest for the target,
  // or a file): it ranks the first batch as it is, and is replaced by a
  // model retrained on everything after that batch (or, with fewer than
  // min_train_records, once there are enough). Without one, a run with
  // enough warm-start records trains its first model before the first batch.
  void SetInitialModel(std::unique_ptr<cost_model::CostModel> model);

  // The search's own state (random generator, task rounds, cost model):
  // with the records, what a resumed run needs to continue exactly as the
  // interrupted one would have. Restore before Run, after AddHistory; the
  // restored model is used as is (not retrained at the start of Run).
  absl::StatusOr<::tunefarm::v1::SearchSnapshot> Snapshot() const;
  absl::Status Restore(const ::tunefarm::v1::SearchSnapshot& snapshot);

  // Every measured candidate's features and outcome (seconds 0: failed).
  struct MeasuredProgram {
    int task;   // -1: a transfer record
    int group;  // labels are normalised per group (task or other workload)
    cost_model::ProgramFeatures features;
    double seconds;
  };
  const std::vector<MeasuredProgram>& measured() const { return measured_; }

 private:
  absl::Status Retrain();
  void Record(int task, const schedule::Trace& s, const MeasureResult& r);

  std::vector<Task> tasks_;
  Measurer* measurer_;
  TuneOptions options_;
  std::vector<TaskHistory> histories_;
  std::vector<double> default_seconds_;
  SearchPolicy policy_;
  TaskScheduler scheduler_;
  std::unique_ptr<cost_model::CostModel> model_;
  bool restored_model_ = false;
  bool initial_model_ = false;
  int64_t model_trained_on_ = 0;
  std::vector<MeasuredProgram> measured_;  // the model's training data
  std::map<std::string, int> transfer_groups_;
  // Per other workload: its task, and its best tiling decisions with their
  // seconds (at most kKeptPerWorkload, best first).
  struct OtherWorkload {
    Task task;
    std::vector<std::pair<double, std::vector<int64_t>>> best;
  };
  static constexpr size_t kKeptPerWorkload = 2;
  std::map<std::string, OtherWorkload> others_;
  int trials_ = 0;
  int ok_trials_ = 0;
  std::vector<int64_t> task_trials_;              // what max_trials_per_task counts
  std::vector<std::set<std::string>> ok_hashes_;  // per task: schedules that ran
  std::vector<std::pair<int, schedule::Trace>> retries_;
  std::vector<int> seeds_;  // per task: schedules of other workloads handed to the policy
  double seconds_before_ = 0;  // restored
  std::chrono::steady_clock::time_point start_;
  bool running_ = false;
  End end_ = End::kNotRun;
};

}  // namespace tunefarm::search
