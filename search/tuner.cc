#include "search/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/schedule/tiling.h"
#include "search/space/cpu_sketch.h"

namespace tunefarm::search {

namespace v1 = ::tunefarm::v1;

Tuner::Tuner(std::vector<Task> tasks, Measurer* measurer, TuneOptions options)
    : tasks_(std::move(tasks)),
      measurer_(measurer),
      options_(options),
      histories_(tasks_.size()),
      default_seconds_(tasks_.size(), 0),
      policy_(options.strategy, options.evolution, options.seed),
      scheduler_(
          [&] {
            std::vector<double> w;
            for (const Task& t : tasks_) w.push_back(t.weight);
            return w;
          }(),
          [&] {
            TaskSchedulerOptions so = options.scheduler;
            if (options.early_stop_trials > 0) {
              so.early_stop_rounds = (options.early_stop_trials + std::max(1, options.batch) - 1) /
                                     std::max(1, options.batch);
            }
            return so;
          }()),
      model_(std::make_unique<cost_model::CostModel>(options.objective)),
      task_trials_(tasks_.size(), 0),
      ok_hashes_(tasks_.size()),
      seeds_(tasks_.size(), 0) {}

double Tuner::seconds() const {
  if (!running_) return seconds_before_;
  return seconds_before_ +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Tuner::SetInitialModel(std::unique_ptr<cost_model::CostModel> model) {
  if (model == nullptr) return;
  model_ = std::move(model);
  initial_model_ = true;
  model_trained_on_ = 0;
}

absl::StatusOr<v1::SearchSnapshot> Tuner::Snapshot() const {
  v1::SearchSnapshot snap;
  snap.set_trials(trials_);
  snap.set_seconds(seconds());
  snap.set_rng_state(policy_.RngState());
  scheduler_.SaveTo(&snap);
  for (size_t t = 0; t < tasks_.size(); ++t) {
    for (int at : policy_.PairedAt(tasks_[t].key)) snap.mutable_tasks(int(t))->add_paired_at(at);
  }
  if (model_ != nullptr && model_->trained()) {
    TF_ASSIGN_OR_RETURN(std::string bytes, model_->Serialize());
    snap.set_cost_model(std::move(bytes));
  }
  return snap;
}

absl::Status Tuner::Restore(const v1::SearchSnapshot& snapshot) {
  // Everything is checked before anything is applied.
  if (size_t(snapshot.tasks_size()) != tasks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot has ", snapshot.tasks_size(), " tasks, this run ", tasks_.size()));
  }
  std::unique_ptr<cost_model::CostModel> model;
  if (!snapshot.cost_model().empty()) {
    TF_ASSIGN_OR_RETURN(model, cost_model::CostModel::Deserialize(snapshot.cost_model()));
  }
  if (!policy_.SetRngState(snapshot.rng_state())) {
    return absl::InvalidArgumentError("snapshot: not a random-generator state");
  }
  for (const auto& rounds : snapshot.tasks()) {
    for (int at : rounds.paired_at()) {
      if (at < -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("snapshot: paired trial count ", at, " is not a trial count"));
      }
    }
  }
  TF_RETURN_IF_ERROR(scheduler_.RestoreFrom(snapshot));
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const auto& at = snapshot.tasks(int(t)).paired_at();
    policy_.SetPairedAt(tasks_[t].key, std::vector<int>(at.begin(), at.end()));
  }
  if (model != nullptr) {
    model_ = std::move(model);
    restored_model_ = true;
    model_trained_on_ = 0;
  }
  seconds_before_ = std::max(0.0, snapshot.seconds());
  return absl::OkStatus();
}

void Tuner::Record(int task, const schedule::Trace& s, const MeasureResult& r) {
  histories_[task].Add(s, r);
  if (r.status == MeasureResult::Status::kOk) ok_hashes_[task].insert(schedule::TraceHash(s));
  if (!options_.keep_features && options_.strategy == Strategy::kRandom) return;
  absl::StatusOr<cost_model::ProgramFeatures> f = FeaturesOf(tasks_[task], s);
  if (f.ok()) {
    measured_.push_back(
        {task, task, *std::move(f), r.status == MeasureResult::Status::kOk ? r.seconds : 0});
  }
}

void Tuner::AddHistory(int task, const schedule::Trace& schedule, const MeasureResult& result) {
  Record(task, schedule, result);
  if (schedule.is_default && result.status == MeasureResult::Status::kOk &&
      (default_seconds_[task] <= 0 || result.seconds < default_seconds_[task]))
    default_seconds_[task] = result.seconds;
}

void Tuner::AddTransferRecord(const Task& other, const schedule::Trace& schedule, double seconds) {
  // The model's training data (a random search without keep_features
  // trains none), then the seeds' source.
  if (options_.keep_features || options_.strategy != Strategy::kRandom) {
    absl::StatusOr<cost_model::ProgramFeatures> f = FeaturesOf(other, schedule);
    if (!f.ok()) return;
    auto [it, fresh] =
        transfer_groups_.emplace(other.key, int(tasks_.size() + transfer_groups_.size()));
    measured_.push_back({-1, it->second, *std::move(f), seconds});
  }
  if (seconds <= 0 || other.target.is_gpu() || schedule.sketch_id != schedule::kTilingSketchId ||
      schedule.decisions.empty())
    return;
  auto o = others_.find(other.key);
  if (o == others_.end()) o = others_.emplace(other.key, OtherWorkload{other, {}}).first;
  auto& best = o->second.best;
  std::vector<int64_t> d(schedule.decisions.begin(), schedule.decisions.end());
  // A schedule measured twice keeps one place, at its better time.
  auto same = std::find_if(best.begin(), best.end(), [&](const auto& b) { return b.second == d; });
  if (same != best.end()) {
    same->first = std::min(same->first, seconds);
  } else {
    best.emplace_back(seconds, std::move(d));
  }
  std::sort(best.begin(), best.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (best.size() > kKeptPerWorkload) best.resize(kKeptPerWorkload);
}

namespace {

// What must match for one workload's schedules to seed another's search:
// the operator, the dtypes, and what orders or reads the loops differently
// (a convolution's layout and grouping, a matmul's transposes).
std::string SeedClass(const v1::Workload& w) {
  std::string c = absl::StrCat(w.op(), ":", w.out_dtype());
  for (const v1::TensorSpec& t : w.inputs()) absl::StrAppend(&c, ",", t.dtype());
  if (w.has_conv2d()) {
    const v1::Conv2dAttrs& a = w.conv2d();
    const auto& ds = w.inputs(0).shape();
    const int64_t channels =
        ds.size() == 4 ? (a.layout() == v1::DATA_LAYOUT_NHWC ? ds[3] : ds[1]) : 0;
    absl::StrAppend(&c, ":", a.layout(), ":",
                    a.groups() <= 1 ? "dense" : a.groups() == channels ? "depthwise" : "grouped");
  } else if (w.has_matmul()) {
    absl::StrAppend(&c, ":", w.matmul().transpose_a(), w.matmul().transpose_b());
  }
  return c;
}

// The extents of the tiling sketch's main stage: spatial axes, then -1,
// then reduction axes (equal lengths: the same decision layout).
std::vector<int64_t> LoopExtents(const ir::ComputeDAG& dag) {
  std::vector<int64_t> out;
  const int main = schedule::TilingMainStage(dag);
  if (main < 0) return out;
  for (const ir::IterVar& a : dag.stages[main].axes) out.push_back(a.extent);
  out.push_back(-1);
  for (const ir::IterVar& a : dag.stages[main].reduce_axes) out.push_back(a.extent);
  return out;
}

}  // namespace

void Tuner::SeedFromOtherWorkloads() {
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const Task& task = tasks_[t];
    if (task.target.is_gpu() || !schedule::HasTilingSketch(task.dag)) continue;
    const std::vector<int64_t> mine = LoopExtents(task.dag);
    const std::string mine_class = SeedClass(task.workload);
    const space::CpuSketch sketch(task.dag, task.target);
    // (rank within its workload, distance, decisions): every workload's
    // best before any second best, nearer workloads first.
    struct Seed {
      size_t rank;
      double distance;
      std::vector<int64_t> decisions;
    };
    std::vector<Seed> seeds;
    for (const auto& [key, other] : others_) {
      if (SeedClass(other.task.workload) != mine_class) continue;
      const std::vector<int64_t> theirs = LoopExtents(other.task.dag);
      if (theirs.size() != mine.size()) continue;
      // Sum of |log ratio| of the extents: a ResNet C256 3x3 layer is
      // nearer to C128's than a 1x1 layer with C128's channels.
      double distance = 0;
      bool same_layout = true;
      for (size_t i = 0; i < mine.size(); ++i) {
        if ((mine[i] < 0) != (theirs[i] < 0)) same_layout = false;
        if (mine[i] > 0 && theirs[i] > 0)
          distance += std::abs(std::log(double(mine[i]) / double(theirs[i])));
      }
      if (!same_layout) continue;
      for (size_t r = 0; r < other.best.size(); ++r) {
        if (std::optional<schedule::CpuTiling> d = sketch.Fit(other.best[r].second))
          seeds.push_back({r, distance, d->Encode()});
      }
    }
    std::stable_sort(seeds.begin(), seeds.end(), [](const Seed& a, const Seed& b) {
      return a.rank != b.rank ? a.rank < b.rank : a.distance < b.distance;
    });
    std::vector<std::vector<int64_t>> out;
    for (Seed& s : seeds) out.push_back(std::move(s.decisions));
    // A task with a tiling schedule of its own that ran starts from that.
    const bool own = !histories_[t].BestDecisions(schedule::kTilingSketchId, 1).empty();
    seeds_[t] = own ? 0 : int(out.size());
    policy_.SetTransferred(task.key, std::move(out));
  }
}

absl::Status Tuner::Retrain() {
  if (options_.strategy != Strategy::kEvolutionary || int(measured_.size()) < options_.min_train_records)
    return absl::OkStatus();
  std::vector<double> best(tasks_.size() + transfer_groups_.size(),
                           std::numeric_limits<double>::infinity());
  // The run's own records weigh as much, together, as the transfer records
  // of other workloads: a warm database holds thousands of those, and with
  // equal weights they outvoted what the run learns of its own tasks (a
  // GEMM run stayed in the schedules the convolutions favour).
  int64_t own = 0, transfer = 0;
  for (const MeasuredProgram& m : measured_) {
    if (m.seconds > 0) best[m.group] = std::min(best[m.group], m.seconds);
    ++(m.task < 0 ? transfer : own);
  }
  const float own_weight = own > 0 ? std::max(1.0f, float(transfer) / float(own)) : 1.0f;
  std::vector<cost_model::Sample> samples;
  for (const MeasuredProgram& m : measured_) {
    float label = m.seconds > 0 ? float(best[m.group] / m.seconds) : 0.0f;
    samples.push_back({&m.features, label, m.group, m.task < 0 ? 1.0f : own_weight});
  }
  auto model = std::make_unique<cost_model::CostModel>(options_.objective);
  TF_RETURN_IF_ERROR(model->Train(samples));
  model_ = std::move(model);
  model_trained_on_ = int64_t(samples.size());
  return absl::OkStatus();
}

absl::Status Tuner::Run(const std::function<void(const Trial&)>& on_trial) {
  start_ = std::chrono::steady_clock::now();
  running_ = true;
  struct NotRunning {
    Tuner* t;
    ~NotRunning() {
      t->seconds_before_ = t->seconds();
      t->running_ = false;
    }
  } not_running{this};
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  };
  // The trials max_trials counts, and whether a result counts.
  auto used = [&] { return options_.failed_trials_count ? trials_ : ok_trials_; };
  auto counts = [&](const MeasureResult& r) {
    return options_.failed_trials_count || r.status == MeasureResult::Status::kOk;
  };
  auto out_of_budget = [&] {
    if (options_.stop && options_.stop()) {
      end_ = End::kStopped;
    } else if (used() >= options_.max_trials) {
      end_ = End::kTrials;
    } else if (trials_ >= options_.max_attempts) {
      end_ = End::kAttempts;
    } else if (options_.max_seconds > 0 && seconds() >= options_.max_seconds) {
      end_ = End::kSeconds;
    } else {
      return false;
    }
    return true;
  };
  // Trials `task` may still take under max_trials_per_task.
  auto task_left = [&](int task) {
    return options_.max_trials_per_task > 0
               ? std::max<int64_t>(0, options_.max_trials_per_task - task_trials_[task])
               : int64_t{kNoTrialLimit};
  };
  auto measure = [&](int task, const std::vector<schedule::Trace>& batch) {
    std::vector<MeasureResult> results = measurer_->Measure(tasks_[task], batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      Record(task, batch[i], results[i]);
      if (on_trial) on_trial({task, trials_, int(i), batch[i], results[i], elapsed()});
      ++trials_;
      ok_trials_ += results[i].status == MeasureResult::Status::kOk;
      task_trials_[task] += counts(results[i]);
    }
    return results;
  };
  // How many more schedules of `task` the budget lets one batch take.
  auto batch_room = [&](int task) {
    return int(std::min<int64_t>({options_.batch, int64_t(options_.max_trials) - used(),
                                  int64_t(options_.max_attempts) - trials_, task_left(task)}));
  };
  // Schedules measured again in this run (defaults and retries): once each.
  std::set<std::pair<int, std::string>> again;
  if (options_.measure_default) {
    // A default whose earlier measurement failed is measured again.
    for (size_t t = 0; t < tasks_.size() && !out_of_budget(); ++t) {
      schedule::Trace def = schedule::DefaultSchedule(tasks_[t].dag, tasks_[t].target);
      const std::string hash = schedule::TraceHash(def);
      if (default_seconds_[t] > 0 || ok_hashes_[t].count(hash) || task_left(int(t)) == 0) continue;
      again.insert({int(t), hash});
      std::vector<MeasureResult> r = measure(int(t), {def});
      if (r[0].status == MeasureResult::Status::kOk) default_seconds_[t] = r[0].seconds;
    }
  }
  // An earlier run's failed schedules, a batch of one task at a time.
  std::stable_sort(retries_.begin(), retries_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < retries_.size() && !out_of_budget();) {
    const int task = retries_[i].first;
    const int room = batch_room(task);
    std::vector<schedule::Trace> batch;
    for (; i < retries_.size() && retries_[i].first == task && int(batch.size()) < room; ++i) {
      const std::string hash = schedule::TraceHash(retries_[i].second);
      if (ok_hashes_[task].count(hash) || !again.insert({task, hash}).second) continue;
      batch.push_back(retries_[i].second);
    }
    if (room <= 0) {
      // This task is at its limit: skip its retries.
      while (i < retries_.size() && retries_[i].first == task) ++i;
    }
    if (!batch.empty()) measure(task, batch);
  }
  retries_.clear();
  // A restored model is the one the interrupted run would have used next;
  // an initial one was trained on what the database holds (retraining on
  // the same records would only cost time).
  if (!restored_model_ && !initial_model_) TF_RETURN_IF_ERROR(Retrain());
  SeedFromOtherWorkloads();
  // The warm-up goes to the tasks where the model's time is first.
  for (size_t t = 0; t < tasks_.size(); ++t)
    scheduler_.SetInitialLatency(int(t), histories_[t].best_seconds());
  while (!out_of_budget()) {
    int task = scheduler_.Next();
    if (task < 0) {
      end_ = End::kTasksDone;
      break;
    }
    if (task_left(task) == 0) {
      scheduler_.Stop(task);
      continue;
    }
    const int n = batch_room(task);
    std::vector<schedule::Trace> batch = policy_.Propose(tasks_[task], histories_[task], model_.get(), n);
    if (batch.empty()) {
      scheduler_.Stop(task);  // nothing new left to try
      continue;
    }
    measure(task, batch);
    scheduler_.Update(task, histories_[task].best_seconds());
    TF_RETURN_IF_ERROR(Retrain());
    if (options_.on_batch) options_.on_batch();
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::search
