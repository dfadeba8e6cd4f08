// Which task of a job to tune next (Ansor's gradient task scheduler).
//
// The objective is the weighted end-to-end latency f = sum_i w_i * best_i
// (w_i: occurrences of task i in the model). After a warm-up round per task
// (heaviest first: tasks with no known latency, then by w_i * latency_i,
// the latency its default or its records gave; so a time-limited job
// reaches the tasks where the model's time is), the next round goes to the
// task with the most negative estimated
// df/dtrial: w_i * (alpha * backward + (1 - alpha) * forward), where
// backward is the best latency's change per round over the last `window`
// rounds of that task and forward the optimistic -best_i / rounds_i. A task
// whose best has not improved for `early_stop_rounds` of its rounds stops,
// and so does one with nothing valid after `failed_rounds` rounds (it would
// otherwise stay the most urgent and take every round).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::search {

struct TaskSchedulerOptions {
  int warmup_rounds = 1;  // rounds per task before the gradient rule
  int window = 3;
  double alpha = 0.2;
  int early_stop_rounds = 0;  // 0: never stop a task early
  // A task with nothing valid measured after this many rounds stops (0:
  // never). Only where a failure is the candidates' own (on this machine):
  // in a farm, rounds lost to an outage read the same.
  int failed_rounds = 0;
};

class TaskScheduler {
 public:
  TaskScheduler(std::vector<double> weights, TaskSchedulerOptions options = {});

  // The latency `task` has before any round (its default schedule's, or the
  // best of its records; 0: unknown). It orders the warm-up only.
  void SetInitialLatency(int task, double seconds) { initial_[task] = seconds; }
  // The task for the next round, or -1 when every task has stopped.
  int Next() const;
  // After a round of `task`: its best latency so far (0: nothing valid yet).
  void Update(int task, double best_seconds);
  // No more candidates for `task` (space exhausted) or stopped by the caller.
  void Stop(int task) { stopped_[task] = true; }

  int rounds(int task) const { return int(history_[task].size()); }
  bool stopped(int task) const { return stopped_[task]; }

  // The rounds so far, and back (a resumed job continues its allocation).
  void SaveTo(::tunefarm::v1::SearchSnapshot* snapshot) const;
  absl::Status RestoreFrom(const ::tunefarm::v1::SearchSnapshot& snapshot);

 private:
  double Gradient(int task) const;
  std::vector<double> weights_;
  std::vector<double> initial_;  // SetInitialLatency; 0: unknown
  TaskSchedulerOptions options_;
  std::vector<std::vector<double>> history_;  // best latency after each round
  std::vector<int> since_improved_;
  std::vector<bool> stopped_;
};

}  // namespace tunefarm::search
