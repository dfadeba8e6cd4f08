#include "server/job_runner.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"
#include "server/job_records.h"
#include "server/metrics.h"
#include "server/remote_measurer.h"
#include "search/tuner.h"
#include "search/session.h"

namespace tunefarm::server {

JobRunner::~JobRunner() { Shutdown(); }

void JobRunner::Reap() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->exited) {
      it->second->thread.join();
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->exited) {
      (*it)->thread.join();
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

void JobRunner::Start(int64_t job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;
    Reap();
    if (auto it = jobs_.find(job_id); it != jobs_.end() && !it->second->done) return;
    if (std::find(waiting_.begin(), waiting_.end(), job_id) != waiting_.end()) return;
    int running = 0;
    for (const auto& [id, r] : jobs_) running += !r->done;
    if (running < options_.max_running_jobs) {
      LaunchLocked(job_id);
      return;
    }
    waiting_.push_back(job_id);
  }
  log_.UpdateActiveJob(job_id, v1::JOB_STATE_QUEUED,
                       absl::StrCat("waiting for a slot: the server tunes ",
                                    options_.max_running_jobs, " jobs at once"))
      .IgnoreError();
  on_change_();
}

void JobRunner::LaunchLocked(int64_t job_id) {
  // A previous run of the job whose thread is still on its way out.
  if (auto old = jobs_.find(job_id); old != jobs_.end()) {
    retired_.push_back(std::move(old->second));
    jobs_.erase(old);
  }
  auto r = std::make_unique<Running_>();
  Running_* raw = r.get();
  jobs_[job_id] = std::move(r);
  raw->thread = std::thread([this, job_id, raw] {
    RunJob(job_id, raw);
    raw->done = true;
    LaunchWaiting();
    raw->exited = true;
  });
}

void JobRunner::LaunchWaiting() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  int running = 0;
  for (const auto& [id, r] : jobs_) running += !r->done;
  while (running < options_.max_running_jobs && !waiting_.empty()) {
    const int64_t next = waiting_.front();
    waiting_.pop_front();
    LaunchLocked(next);
    ++running;
  }
}

void JobRunner::Stop(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second->stop = true;
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), job_id), waiting_.end());
}

bool JobRunner::Running(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return (it != jobs_.end() && !it->second->done) ||
         std::find(waiting_.begin(), waiting_.end(), job_id) != waiting_.end();
}

void JobRunner::Shutdown() {
  std::map<int64_t, std::unique_ptr<Running_>> jobs;
  std::vector<std::unique_ptr<Running_>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    jobs.swap(jobs_);
    retired.swap(retired_);
    waiting_.clear();  // still QUEUED in the database: the next server starts them
  }
  for (auto& r : retired) r->thread.join();
  for (auto& [id, r] : jobs) r->stop = true;
  for (auto& [id, r] : jobs) {
    r->thread.join();
    absl::StatusOr<v1::Job> job = log_.GetJob(id);
    if (job.ok() &&
        (job->state() == v1::JOB_STATE_RUNNING || job->state() == v1::JOB_STATE_QUEUED ||
         job->state() == v1::JOB_STATE_WAITING_FOR_DEVICE)) {
      log_.UpdateActiveJob(id, v1::JOB_STATE_INTERRUPTED,
                           absl::StrCat("the server stopped after ", job->trials_done(),
                                        " trials; `tunefarm resume ", id, "` continues it"))
          .IgnoreError();
    }
  }
}

namespace {

// The job's tasks, and the index of each by workload key.
struct JobTasks {
  std::vector<search::Task> tasks;
  std::map<std::string, int> index;
};

absl::StatusOr<JobTasks> TasksOf(const v1::Job& job, const ir::Target& target) {
  JobTasks out;
  for (int i = 0; i < job.tasks_size(); ++i) {
    const v1::Task& t = job.tasks(i);
    absl::StatusOr<search::Task> st = search::Task::Make(t.workload(), target, "", t.weight());
    if (!st.ok()) {
      // Numbered as `tunefarm job ID` lists the tasks.
      return absl::InvalidArgumentError(
          absl::StrCat("task #", i + 1, ": ", st.status().message()));
    }
    out.index[st->key] = int(out.tasks.size());
    out.tasks.push_back(*std::move(st));
  }
  return out;
}

// The trial budget over all tasks: the spec's; none when it sets only a
// per-task limit or a wall time; else `default_per_task` per task.
int64_t TrialBudget(const v1::Budget& b, size_t tasks, int default_per_task) {
  if (b.max_trials() > 0) return b.max_trials();
  if (b.max_trials_per_task() > 0 || b.max_seconds() > 0) return search::kNoTrialLimit;
  return int64_t(default_per_task) * int64_t(tasks);
}

// The search's options for a run of a job of `tasks` tasks that starts
// after `done_before` trials that ran and `attempts_before` in all. Failed
// trials do not count against the budget; a run makes at most
// kAttemptsPerTrial times the trials its budget has left (or, with only a
// per-task limit, the tasks' limits).
constexpr int64_t kAttemptsPerTrial = 2;
search::TuneOptions TuneOptionsFor(const v1::JobSpec& spec, int64_t budget, int64_t done_before,
                                   int64_t attempts_before, size_t tasks, int batch) {
  const v1::Budget& b = spec.budget();
  search::TuneOptions o;
  o.strategy = spec.strategy() == v1::SEARCH_STRATEGY_RANDOM ? search::Strategy::kRandom
                                                             : search::Strategy::kEvolutionary;
  o.max_trials = int(std::clamp<int64_t>(budget - done_before, 0, search::kNoTrialLimit));
  o.max_seconds = double(b.max_seconds());
  o.max_trials_per_task = int(std::min<int64_t>(b.max_trials_per_task(), search::kNoTrialLimit));
  o.early_stop_trials = int(std::min<int64_t>(b.early_stop_trials(), search::kNoTrialLimit));
  o.failed_trials_count = false;
  const int64_t limit =
      budget != search::kNoTrialLimit ? budget - done_before
      : b.max_trials_per_task() > 0
          ? std::min<int64_t>(b.max_trials_per_task(), search::kNoTrialLimit) * int64_t(tasks) -
                done_before
          : -1;
  if (limit >= 0) {
    o.max_attempts =
        int(std::clamp<int64_t>(kAttemptsPerTrial * limit, 0, search::kNoTrialLimit - 1));
  }
  o.batch = batch;
  o.keep_features = false;  // the job trains no model beyond its own search's
  // A resumed job draws from a fresh stream (its earlier draws are in the records).
  o.seed = spec.seed() + uint64_t(attempts_before);
  return o;
}

// What a farm measurement's record says beyond its result: the job, the
// agent, the worker's and the agent's fingerprint, every repeat's time.
search::RecordSource SourceOf(int64_t job_id, const v1::JobSpec& spec,
                              const RemoteMeasurer::Detail& d) {
  search::RecordSource src;
  src.job_id = job_id;
  src.device_key = spec.device_key();
  src.device_id = d.device_id;
  src.fingerprint = d.fingerprint;
  src.costs = d.costs;
  src.status = d.status;
  src.build_sec = d.build_sec;
  src.run_sec = d.run_sec;
  src.confirmation = d.confirmation;
  return src;
}

}  // namespace

namespace {

// The major version of "12.6" (0 when it does not parse).
int Major(const std::string& version) {
  int major = 0;
  return absl::SimpleAtoi(version.substr(0, version.find('.')), &major) ? major : 0;
}

}  // namespace

bool NeedsLlvmPtx(const std::vector<v1::Device>& devices, const std::string& device_key,
                  std::string* why) {
  int oldest_toolkit = 0;
  std::string toolkit;
  for (const v1::Device& d : devices) {
    if (d.role() != v1::ROLE_WORKER || d.state() != v1::DEVICE_STATE_ONLINE) continue;
    const int major = Major(d.capabilities().fingerprint().cuda_toolkit());
    if (major > 0 && (oldest_toolkit == 0 || major < oldest_toolkit)) {
      oldest_toolkit = major;
      toolkit = d.capabilities().fingerprint().cuda_toolkit();
    }
  }
  if (oldest_toolkit == 0) return false;  // no NVRTC: every build is LLVM's anyway
  for (const v1::Device& d : devices) {
    if (d.role() != v1::ROLE_AGENT || d.device_key() != device_key ||
        d.state() != v1::DEVICE_STATE_ONLINE || !d.capabilities().has_gpu()) {
      continue;
    }
    const std::string& driver = d.capabilities().fingerprint().cuda_driver();
    const int major = Major(driver);
    if (major > 0 && major < oldest_toolkit) {
      if (why != nullptr) {
        *why = absl::StrCat(d.device_id(), "'s CUDA driver is ", driver, ", the workers' NVRTC ",
                            toolkit, ": PTX through LLVM");
      }
      return true;
    }
  }
  return false;
}

std::string FailureKind(absl::string_view error) {
  std::string kind;
  for (absl::string_view word : absl::StrSplit(error, ' ', absl::SkipEmpty())) {
    if (!kind.empty()) kind += ' ';
    if (word.find('/') != absl::string_view::npos) {
      kind += "<path>";
      continue;
    }
    // Runs of letters and digits: one with a digit in it becomes '#'.
    for (size_t i = 0; i < word.size();) {
      size_t j = i;
      bool digit = false;
      while (j < word.size() && absl::ascii_isalnum(word[j]))
        digit |= absl::ascii_isdigit(word[j++]);
      if (j == i) {
        kind += word[i++];
        continue;
      }
      if (digit) {
        kind += '#';
      } else {
        kind.append(word.data() + i, j - i);
      }
      i = j;
    }
  }
  return kind;
}

namespace {

// Whether a failure may be the board's or the farm's rather than the
// schedule's: all but a build error or a wrong result.
bool DeviceFailure(v1::MeasureStatus s) {
  return s != v1::MEASURE_STATUS_OK && s != v1::MEASURE_STATUS_COMPILE_ERROR &&
         s != v1::MEASURE_STATUS_WRONG_RESULT;
}

// The schedules job `job_id` measured without success, for a reason a
// board may have had (DeviceFailure), and never ran, for `tuner` to measure
// again (Tuner::AddRetry); how many.
absl::StatusOr<int> AddRetries(store::TuningLog& log, int64_t job_id,
                               const std::map<std::string, int>& task_of, search::Tuner& tuner) {
  std::map<std::pair<int, std::string>, schedule::Trace> failed;  // by task and schedule hash
  std::set<std::pair<int, std::string>> ran;
  store::TuningLog::RecordQuery q;
  q.job_id = job_id;
  q.limit = 1000;
  for (;;) {
    absl::StatusOr<std::vector<v1::Record>> page = log.ListRecords(q);
    if (!page.ok()) return page.status();
    for (const v1::Record& r : *page) {
      auto t = task_of.find(r.workload_key());
      if (t == task_of.end()) continue;
      std::pair<int, std::string> key{t->second, r.schedule_hash()};
      if (r.status() == v1::MEASURE_STATUS_OK) {
        ran.insert(std::move(key));
      } else if (DeviceFailure(r.status()) && !failed.count(key)) {
        absl::StatusOr<schedule::Trace> trace = schedule::TraceFromProto(r.schedule());
        if (trace.ok()) failed.emplace(std::move(key), *std::move(trace));
      }
    }
    if (int(page->size()) < q.limit) break;
    q.after_record_id = page->back().record_id();
  }
  int n = 0;
  for (const auto& [key, trace] : failed) {
    if (ran.count(key)) continue;
    tuner.AddRetry(key.first, trace);
    ++n;
  }
  return n;
}

// The job's closing message after a run of `trials` trials that ran and
// `failed` that did not (`failures`: their counts by status).
std::string EndNote(const search::Tuner& tuner, int64_t trials, int64_t failed,
                    const std::string& failures, const v1::Budget& b,
                    const search::SessionStart& start, bool restored,
                    const ForeignRecords& foreign, int64_t done_before) {
  std::string note;
  if (tuner.end() == search::Tuner::End::kSeconds) {
    note = absl::StrCat("; wall-time budget of ", b.max_seconds(), " s reached");
  } else if (tuner.end() == search::Tuner::End::kTasksDone) {
    note =
        "; every task stopped (at its trial limit, no better schedule for the early-stop "
        "trials, or none left to try)";
  }
  if (start.model_loaded && !restored) {
    absl::StrAppend(&note, "; the search started from ", start.model_note);
  }
  const char* fate = foreign.refused ? "left out" : "reused";
  const char* policy = foreign.refused ? "refuse" : "warn";
  if (foreign.hardware > 0) {
    absl::StrAppend(&note, "; ", foreign.hardware, " records measured on other hardware ", fate,
                    " (fingerprint policy ", policy, ")");
  }
  if (foreign.toolchain > 0) {
    absl::StrAppend(&note, "; ", foreign.toolchain, " records built by another compiler ", fate,
                    " (fingerprint policy ", policy, ")");
  }
  if (done_before > 0) {
    note = absl::StrCat(note, "; resumed after ", done_before, " trials",
                        restored ? " from its saved search state" : " (search state rebuilt)");
  }
  return absl::StrCat(trials, " trials this run",
                      failed > 0 ? absl::StrCat(" (and ", failed, " that did not run: ", failures,
                                                "; not counted in the budget)")
                                 : "",
                      note);
}

// A job's view of its session: its start logged and shown, every trial
// shown (the job's counts changed).
class JobObserver : public search::SessionObserver {
 public:
  JobObserver(std::function<void(const search::SessionStart&)> on_start,
              std::function<void()> on_change)
      : on_start_(std::move(on_start)), on_change_(std::move(on_change)) {}
  void OnStart(const search::Tuner&, const search::SessionStart& start) override {
    on_start_(start);
  }
  void OnTrial(const search::Tuner&, const search::Trial&) override { on_change_(); }

 private:
  std::function<void(const search::SessionStart&)> on_start_;
  std::function<void()> on_change_;
};

// The measurer's options for job `job_id`: results go to `sink` as they
// arrive; waits for a device are shown in the job's state.
RemoteMeasurer::Options MeasureOptionsFor(int64_t job_id, const v1::JobSpec& spec,
                                          const ir::Target& target, const std::string& target_spec,
                                          const JobRunner::Options& options,
                                          store::TuningLog& log, std::function<void()> on_change,
                                          std::function<bool()> stopped, ResultSink& sink) {
  RemoteMeasurer::Options mo;
  mo.job_id = job_id;
  mo.priority = spec.priority();
  mo.device_key = spec.device_key();
  mo.measure = spec.measure();
  mo.input_seed = spec.seed();
  mo.threads = target.num_cores;  // -num-cores of the target; 0: all of the board's
  if (target.is_gpu() && options.live_devices) {
    std::string why;
    if (NeedsLlvmPtx(options.live_devices(), spec.device_key(), &why)) {
      mo.llvm_ptx = true;
      Logger("server")->info("event=llvm_ptx job={} why=\"{}\"", job_id, why);
    }
  }
  mo.stopped = std::move(stopped);
  mo.on_wait = [&log, on_change, job_id](const std::string& why) {
    log.UpdateActiveJob(job_id,
                        why.empty() ? v1::JOB_STATE_RUNNING : v1::JOB_STATE_WAITING_FOR_DEVICE,
                        why)
        .IgnoreError();
    on_change();
  };
  mo.on_result = [&sink, target_spec, job_id, spec](const search::Task& task,
                                                    const v1::Schedule& schedule,
                                                    const search::MeasureResult& result,
                                                    const RemoteMeasurer::Detail& d) {
    sink.Add(search::RecordOf(task, target_spec, schedule, result, SourceOf(job_id, spec, d)));
  };
  // New bests rank once another device of the key measured them alike.
  mo.known_best = [&log, target_spec](const search::Task& task) {
    absl::StatusOr<std::vector<v1::Record>> best = log.TopK(task.key, target_spec, 1);
    if (!best.ok() || best->empty() || (*best)[0].costs_sec().empty()) return 0.0;
    const auto& c = (*best)[0].costs_sec();
    return std::accumulate(c.begin(), c.end(), 0.0) / double(c.size());
  };
  mo.confirm_tolerance = options.confirm_tolerance;
  mo.on_confirmation = [&log, on_change, job_id](
                           const v1::Workload& workload, const v1::Schedule& schedule,
                           const RemoteMeasurer::Detail& first,
                           const RemoteMeasurer::Options::Confirmation& outcome) {
    store::TuningLog::Confirmation c;
    c.job_id = job_id;
    c.workload = workload;
    c.schedule = schedule;
    c.device_id = first.device_id;
    c.state = outcome.outcome;
    c.confirmed_by = outcome.confirmed_by;
    c.confirm_cost_sec = outcome.confirm_seconds;
    c.suspect = outcome.suspect;
    if (absl::Status s = log.SetConfirmation(c); !s.ok()) {
      Logger("server")->error("event=confirmation_not_stored job={} error=\"{}\"", job_id,
                              std::string(s.message()));
    }
    on_change();
  };
  return mo;
}

// What a finished run leaves the job as, and why.
struct JobOutcome {
  v1::JobState state;
  std::string message;
};

// How job `job_id`'s run ended: the session's end, its results' sink, and a
// failed save of the search state (`snapshot_error`, when not OK).
JobOutcome OutcomeOf(int64_t job_id, const search::SessionEnd& ended, const ResultSink& sink,
                     const absl::Status& snapshot_error, const search::Session& session,
                     const v1::Budget& budget, bool restored, const ForeignRecords& foreign,
                     int64_t done_before) {
  const search::Tuner& tuner = session.tuner();
  if (absl::Status e = sink.store_error(); !e.ok()) {
    return {v1::JOB_STATE_FAILED, absl::StrCat("storing records: ", e.message())};
  }
  if (!snapshot_error.ok()) {
    return {v1::JOB_STATE_FAILED,
            absl::StrCat("stopped after ", tuner.trials(),
                         " trials: saving the search state failed: ", snapshot_error.message(),
                         "; then `tunefarm resume ", job_id, "`")};
  }
  if (!ended.run.ok()) return {v1::JOB_STATE_FAILED, std::string(ended.run.message())};
  // Failed trials leave budget for a resume, which measures again those a
  // board may have failed (DeviceFailure).
  const int64_t failed = tuner.trials() - tuner.ok_trials();
  const std::string again = absl::StrCat(
      "; `tunefarm resume ", job_id, "` goes on, measuring again those the board may have failed");
  if (tuner.trials() > 0 && tuner.ok_trials() == 0) {
    return {v1::JOB_STATE_FAILED,
            absl::StrCat("all ", tuner.trials(), " trials", done_before > 0 ? " of this run" : "",
                         " failed: ", sink.FailureCounts(), "; ",
                         sink.device_broken() ? sink.BrokenDevice() : sink.FailureGroups(),
                         again)};
  }
  if (sink.device_broken()) {
    return {v1::JOB_STATE_FAILED,
            absl::StrCat("stopped after ", tuner.trials(), " trials, ", failed, " failed (",
                         sink.FailureCounts(), "): ", sink.BrokenDevice(), again)};
  }
  if (tuner.end() == search::Tuner::End::kAttempts) {
    return {v1::JOB_STATE_FAILED,
            absl::StrCat("stopped after ", tuner.trials(), " trials, ", kAttemptsPerTrial,
                         " times the trials left in the budget: ", failed, " failed (",
                         sink.FailureCounts(), ")", again)};
  }
  // The final model is the next job's (or `tunefarm tune`'s) starting model
  // on this target (stored by the session).
  if (!ended.model.ok()) {
    Logger("server")->warn("event=cost_model_not_stored job={} error=\"{}\"", job_id,
                           std::string(ended.model.message()));
  }
  return {v1::JOB_STATE_SUCCEEDED,
          EndNote(tuner, tuner.ok_trials(), failed, sink.FailureCounts(), budget,
                  session.start(), restored, foreign, done_before)};
}


}  // namespace

void JobRunner::RunJob(int64_t job_id, Running_* running) {
  auto log = Logger("server");
  auto finish = [&](v1::JobState state, const std::string& msg) {
    if (absl::StatusOr<bool> u = log_.UpdateActiveJob(job_id, state, msg); !u.ok()) {
      log->error("event=job_state_failed job={} error=\"{}\"", job_id,
                 std::string(u.status().message()));
    }
    log->info("event=job_ended job={} state={} message=\"{}\"", job_id, v1::JobState_Name(state),
              msg);
    on_change_();
    running->done = true;
  };
  auto fail = [&](const absl::Status& s) {
    finish(v1::JOB_STATE_FAILED, std::string(s.message()));
  };
  absl::StatusOr<v1::Job> job = log_.GetJob(job_id);
  if (!job.ok()) return fail(job.status());
  const v1::JobSpec& spec = job->spec();
  absl::StatusOr<ir::Target> target = ir::Target::Parse(spec.target().spec());
  if (!target.ok()) return fail(target.status());
  const std::string target_spec = target->ToString();
  absl::StatusOr<JobTasks> tasks = TasksOf(*job, *target);
  if (!tasks.ok()) return fail(tasks.status());
  const int64_t budget =
      TrialBudget(spec.budget(), tasks->tasks.size(), options_.default_trials_per_task);
  const int64_t done_before = job->trials_done();
  const int64_t attempts_before = job->trials_done() + job->failed_trials();

  ResultSink sink(commits_);
  RemoteMeasurer measurer(
      queue_, MeasureOptionsFor(job_id, spec, *target, target_spec, options_, log_, on_change_,
                                [running] { return running->stop.load(); }, sink));

  search::TuneOptions o = TuneOptionsFor(spec, budget, done_before, attempts_before,
                                         tasks->tasks.size(), options_.batch);
  // After every batch the search's own state goes to the database beside the
  // records, so a resume continues exactly where this run stops; a job whose
  // state cannot be saved stops (a resume could not continue it).
  search::Tuner* tuner_ptr = nullptr;
  absl::Status snapshot_error;  // set on the tuner's thread, read after Run
  std::atomic<bool> snapshot_failed{false};
  o.stop = [running, &sink, &snapshot_failed] {
    return running->stop.load() || sink.device_broken() || snapshot_failed.load();
  };
  o.on_batch = [&] {
    absl::StatusOr<v1::SearchSnapshot> snap = tuner_ptr->Snapshot();
    absl::Status s =
        snap.ok() ? log_.SaveJobSnapshot(job_id, snap->SerializeAsString()) : snap.status();
    if (!s.ok()) {
      log->error("event=snapshot_failed job={} error=\"{}\"", job_id, std::string(s.message()));
      snapshot_error = s;
      snapshot_failed = true;
    }
  };
  // Warm start and resume: what the database knows about this target.
  absl::StatusOr<std::vector<v1::Device>> devices = log_.ListDevices();
  const Provenance provenance(devices.ok() ? *devices : std::vector<v1::Device>{},
                              spec.device_key(), *target);
  ForeignRecords foreign;
  foreign.refused = options_.fingerprint_policy == Options::FingerprintPolicy::kRefuse;
  bool restored = false;
  search::SessionOptions so;
  so.tune = o;
  so.log = &log_;
  so.keep_record = [&](const v1::Record& r) {
    const bool hardware = provenance.OtherHardware(r);
    const bool toolchain = !hardware && provenance.OtherToolchain(r);
    foreign.hardware += hardware;
    foreign.toolchain += toolchain;
    return !((hardware || toolchain) && foreign.refused);
  };
  so.commit_records = false;  // the measurer's sink stores them, with the devices' detail
  // A resumed job measures its failed trials again first (those a board
  // may have failed), and continues from its saved search state, which
  // replaces the stored starting model.
  so.prepare = [&](search::Tuner& tuner) -> absl::Status {
    // tasks[i] is job->tasks(i): a resumed job's trials count towards the per-task limit.
    for (int i = 0; i < job->tasks_size(); ++i) tuner.AddEarlierTrials(i, job->tasks(i).trials());
    if (attempts_before > done_before) {
      absl::StatusOr<int> retries = AddRetries(log_, job_id, tasks->index, tuner);
      if (!retries.ok()) return retries.status();
      log->info("event=job_retries job={} schedules={}", job_id, *retries);
    }
    restored = attempts_before > 0 && RestoreSearch(job_id, &tuner);
    return absl::OkStatus();
  };
  search::Session session(tasks->tasks, &measurer, std::move(so));
  tuner_ptr = &session.tuner();
  JobObserver observer([&](const search::SessionStart& start) {
    if (!start.model_note.empty()) {
      log->info("event=cost_model job={} {}", job_id, start.model_note);
    }
    log_.UpdateActiveJob(job_id, v1::JOB_STATE_RUNNING,
                         done_before > 0
                             ? absl::StrCat("resumed after ", done_before, " trials",
                                            restored ? " from its saved search state" : "")
                             : "")
        .IgnoreError();
    on_change_();
    log->info(
        "event=job_started job={} tasks={} strategy={} budget={} done_before={} device_key={}",
        job_id, tasks->tasks.size(), search::StrategyName(o.strategy), budget, done_before,
        spec.device_key());
    if (foreign.hardware + foreign.toolchain > 0) {
      log->warn("event=foreign_records job={} other_hardware={} other_toolchain={} policy={}",
                job_id, foreign.hardware, foreign.toolchain, foreign.refused ? "refuse" : "warn");
    }
  }, on_change_);
  absl::StatusOr<search::SessionEnd> ended = session.Run(&observer);
  if (!ended.ok()) return fail(ended.status());
  if (running->stop) {
    running->done = true;
    return;  // cancelled or shutting down: the state was set by whoever stopped it
  }
  const JobOutcome outcome =
      OutcomeOf(job_id, *ended, sink, snapshot_error, session, spec.budget(), restored, foreign,
                done_before);
  finish(outcome.state, outcome.message);
}

bool JobRunner::RestoreSearch(int64_t job_id, search::Tuner* tuner) {
  absl::StatusOr<std::string> bytes = log_.LoadJobSnapshot(job_id);
  v1::SearchSnapshot snap;
  absl::Status s = !bytes.ok()                     ? bytes.status()
                   : !snap.ParseFromString(*bytes) ? absl::DataLossError("unreadable snapshot")
                                                   : tuner->Restore(snap);
  if (!s.ok()) {
    Logger("server")->warn(
        "event=search_state_not_restored job={} error=\"{}\" (continuing from the records)",
        job_id, std::string(s.message()));
  }
  return s.ok();
}

}  // namespace tunefarm::server
