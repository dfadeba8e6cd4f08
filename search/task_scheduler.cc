#include "search/task_scheduler.h"

#include <cstddef>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tunefarm::search {

TaskScheduler::TaskScheduler(std::vector<double> weights, TaskSchedulerOptions options)
    : weights_(std::move(weights)),
      initial_(weights_.size(), 0),
      options_(options),
      history_(weights_.size()),
      since_improved_(weights_.size(), 0),
      stopped_(weights_.size(), false) {}

int TaskScheduler::Next() const {
  // Warm-up: round robin, heaviest first (unknown latencies first, in task
  // order; then by weight x latency, ties in task order).
  for (int r = 0; r < options_.warmup_rounds; ++r) {
    int pick = -1;
    double pick_cost = 0;
    for (size_t t = 0; t < weights_.size(); ++t) {
      if (stopped_[t] || int(history_[t].size()) > r) continue;
      const double cost = initial_[t] > 0 ? weights_[t] * initial_[t]
                                          : std::numeric_limits<double>::infinity();
      if (pick < 0 || cost > pick_cost) pick = int(t), pick_cost = cost;
    }
    if (pick >= 0) return pick;
  }
  int best = -1;
  double best_grad = std::numeric_limits<double>::infinity();
  for (size_t t = 0; t < weights_.size(); ++t) {
    if (stopped_[t]) continue;
    double g = Gradient(int(t));
    if (g < best_grad) best_grad = g, best = int(t);
  }
  return best;
}

double TaskScheduler::Gradient(int task) const {
  const std::vector<double>& h = history_[task];
  if (h.empty() || h.back() <= 0) {
    // Nothing valid measured yet: as urgent as it gets.
    return -std::numeric_limits<double>::max();
  }
  int n = int(h.size());
  double backward = 0;
  if (n > options_.window) {
    double before = h[n - 1 - options_.window];
    if (before > 0) backward = (h.back() - before) / options_.window;
  }
  double forward = -h.back() / n;
  return weights_[task] * (options_.alpha * backward + (1 - options_.alpha) * forward);
}

void TaskScheduler::Update(int task, double best_seconds) {
  std::vector<double>& h = history_[task];
  bool improved = h.empty() || h.back() <= 0 || (best_seconds > 0 && best_seconds < h.back());
  h.push_back(best_seconds);
  since_improved_[task] = improved ? 0 : since_improved_[task] + 1;
  if (options_.early_stop_rounds > 0 && since_improved_[task] >= options_.early_stop_rounds) {
    stopped_[task] = true;
  }
  if (options_.failed_rounds > 0 && int(h.size()) >= options_.failed_rounds && h.back() <= 0) {
    stopped_[task] = true;
  }
}

void TaskScheduler::SaveTo(::tunefarm::v1::SearchSnapshot* snapshot) const {
  snapshot->clear_tasks();
  for (size_t t = 0; t < weights_.size(); ++t) {
    auto* rounds = snapshot->add_tasks();
    for (double b : history_[t]) rounds->add_best_after_round(b);
    rounds->set_since_improved(since_improved_[t]);
    rounds->set_stopped(stopped_[t]);
  }
}

absl::Status TaskScheduler::RestoreFrom(const ::tunefarm::v1::SearchSnapshot& snapshot) {
  if (size_t(snapshot.tasks_size()) != weights_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot has ", snapshot.tasks_size(), " tasks, the job ", weights_.size()));
  }
  for (size_t t = 0; t < weights_.size(); ++t) {
    const auto& rounds = snapshot.tasks(int(t));
    history_[t].assign(rounds.best_after_round().begin(), rounds.best_after_round().end());
    since_improved_[t] = rounds.since_improved();
    stopped_[t] = rounds.stopped();
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::search
