#include "proto/job_progress.h"

namespace tunefarm {

int64_t TrialBudget(const v1::Job& job) {
  const v1::Budget& b = job.spec().budget();
  if (b.max_trials() > 0) return b.max_trials();
  return b.max_trials_per_task() > 0 ? b.max_trials_per_task() * job.tasks_size() : 0;
}

JobProgress ProgressOf(const v1::Job& job, int64_t recent_trials, double minutes) {
  JobProgress p;
  p.tasks = job.tasks_size();
  for (const v1::Task& t : job.tasks()) {
    if (t.best_cost_sec() <= 0) continue;
    p.model_best_sec += t.weight() * t.best_cost_sec();
    ++p.tasks_with_best;
  }
  if (recent_trials <= 0 || minutes <= 0) return p;
  p.trials_per_minute = double(recent_trials) / minutes;
  const int64_t total = TrialBudget(job);
  if (total > job.trials_done() && job.state() == v1::JOB_STATE_RUNNING)
    p.eta_sec = double(total - job.trials_done()) / p.trials_per_minute * 60;
  return p;
}

}  // namespace tunefarm
