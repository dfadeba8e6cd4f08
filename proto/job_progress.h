// A job's progress as `tunefarm watch` (through WatchJob's events) and the
// server's dashboard report it: the model's time by the best so far, the
// trial rate and the time left to the trial budget.
#pragma once

#include <cstdint>

#include "tunefarm/v1/records.pb.h"

namespace tunefarm {

struct JobProgress {
  // Sum of weight x best cost over the tasks_with_best tasks that have one.
  double model_best_sec = 0;
  int tasks_with_best = 0;
  int tasks = 0;
  double trials_per_minute = 0;  // 0: cannot tell
  double eta_sec = 0;            // seconds left at that rate; 0: unknown or not running
};

// The trials the job's budget allows: max_trials, else max_trials_per_task
// x its tasks; 0 when the budget sets neither.
int64_t TrialBudget(const v1::Job& job);

// `job` as it is now, having run `recent_trials` trials (OK ones, what
// trials_done counts) in the last `minutes`. The rate is 0 unless both are
// positive; the time left is set only for a running job with a budget it
// has not reached.
JobProgress ProgressOf(const v1::Job& job, int64_t recent_trials, double minutes);

}  // namespace tunefarm
