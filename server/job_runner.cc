#include "server/job_runner.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "compiler/ir/target.h"
#include "server/remote_measurer.h"
#include "server/search/tuner.h"
#include "server/search/warm_start.h"

namespace tunefarm::server {

JobRunner::~JobRunner() { Shutdown(); }

void JobRunner::Reap() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->done) {
      it->second->thread.join();
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void JobRunner::Start(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  Reap();
  if (jobs_.count(job_id)) return;
  auto r = std::make_unique<Running_>();
  Running_* raw = r.get();
  jobs_[job_id] = std::move(r);
  raw->thread = std::thread([this, job_id, raw] { RunJob(job_id, raw); });
}

void JobRunner::Stop(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second->stop = true;
}

bool JobRunner::Running(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && !it->second->done;
}

void JobRunner::Shutdown() {
  std::map<int64_t, std::unique_ptr<Running_>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    jobs.swap(jobs_);
  }
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
  absl::StatusOr<v1::Job> job = log_.GetJob(job_id);
  if (!job.ok()) return finish(v1::JOB_STATE_FAILED, std::string(job.status().message()));
  const v1::JobSpec& spec = job->spec();
  absl::StatusOr<ir::Target> target = ir::Target::Parse(spec.target().spec());
  if (!target.ok()) return finish(v1::JOB_STATE_FAILED, std::string(target.status().message()));
  const std::string target_spec = target->ToString();

  std::vector<search::Task> tasks;
  std::map<std::string, int> task_of;
  for (const v1::Task& t : job->tasks()) {
    absl::StatusOr<search::Task> st = search::Task::Make(t.workload(), *target, "", t.weight());
    if (!st.ok()) {
      return finish(v1::JOB_STATE_FAILED,
                    absl::StrCat("task ", t.task_id(), ": ", st.status().message()));
    }
    task_of[st->key] = int(tasks.size());
    tasks.push_back(*std::move(st));
  }
  // The trial budget over all tasks: the spec's; none when it sets only a
  // per-task limit or a wall time; else the server's default per task.
  const v1::Budget& b = spec.budget();
  const int64_t budget = b.max_trials() > 0 ? b.max_trials()
                         : b.max_trials_per_task() > 0 || b.max_seconds() > 0
                             ? int64_t{search::kNoTrialLimit}
                             : int64_t(options_.default_trials_per_task) * int64_t(tasks.size());
  const int64_t done_before = job->trials_done();

  RemoteMeasurer::Options mo;
  mo.job_id = job_id;
  mo.priority = spec.priority();
  mo.device_key = spec.device_key();
  mo.measure = spec.measure();
  mo.input_seed = spec.seed();
  mo.threads = target->num_cores;  // -num-cores of the target; 0: all of the board's
  mo.stopped = [running] { return running->stop.load(); };
  mo.on_wait = [&](const std::string& why) {
    log_.UpdateActiveJob(
            job_id, why.empty() ? v1::JOB_STATE_RUNNING : v1::JOB_STATE_WAITING_FOR_DEVICE, why)
        .IgnoreError();
    on_change_();
  };
  std::mutex store_mu;
  absl::Status store_error;
  // A device that fails every candidate the same way (an agent without the
  // GPU the target needs, a runner it cannot start) would spend the whole
  // budget on that error: after kSameDeviceFailures in a row the job stops.
  constexpr int kSameDeviceFailures = 16;
  int same_failures = 0;
  std::string last_failure;
  std::atomic<bool> device_broken{false};
  mo.on_result = [&](const search::Task& task, const v1::Schedule& schedule,
                     const search::MeasureResult& result, const RemoteMeasurer::Detail& d) {
    v1::Record r;
    *r.mutable_workload() = task.workload;
    r.mutable_target()->set_spec(target_spec);
    *r.mutable_schedule() = schedule;
    r.set_job_id(job_id);
    r.set_device_key(spec.device_key());
    r.set_device_id(d.device_id);
    r.set_status(d.status);
    if (d.status == v1::MEASURE_STATUS_OK) {
      for (double c : d.costs) r.add_costs_sec(c);
    }
    r.set_error(result.error);
    r.set_build_sec(d.build_sec);
    r.set_run_sec(d.run_sec);
    *r.mutable_fingerprint() = d.fingerprint;
    r.set_timestamp_unix_ms(absl::ToUnixMillis(absl::Now()));
    absl::Status c = commits_.Commit(r);
    std::lock_guard<std::mutex> l(store_mu);
    if (!c.ok() && store_error.ok()) store_error = c;
    const bool device_failure = d.status == v1::MEASURE_STATUS_RUNTIME_ERROR ||
                                d.status == v1::MEASURE_STATUS_UPLOAD_ERROR;
    if (!device_failure) {
      same_failures = 0;
    } else if (result.error == last_failure) {
      if (++same_failures >= kSameDeviceFailures) device_broken = true;
    } else {
      same_failures = 1;
      last_failure = result.error;
    }
  };
  RemoteMeasurer measurer(queue_, mo);

  search::TuneOptions o;
  o.strategy = spec.strategy() == v1::SEARCH_STRATEGY_RANDOM ? search::Strategy::kRandom
                                                             : search::Strategy::kEvolutionary;
  o.max_trials = int(std::clamp<int64_t>(budget - done_before, 0, search::kNoTrialLimit));
  o.max_seconds = double(b.max_seconds());
  o.max_trials_per_task = int(std::min<int64_t>(b.max_trials_per_task(), search::kNoTrialLimit));
  o.early_stop_trials = int(std::min<int64_t>(b.early_stop_trials(), search::kNoTrialLimit));
  o.batch = options_.batch;
  o.keep_features = false;  // the job trains no model beyond its own search's
  // A resumed job draws from a fresh stream (its earlier draws are in the records).
  o.seed = spec.seed() + uint64_t(done_before);
  o.stop = [running, &device_broken] { return running->stop.load() || device_broken.load(); };
  // After every batch the search's own state goes to the database beside the
  // records, so a resume continues exactly where this run stops.
  search::Tuner* tuner_ptr = nullptr;
  o.on_batch = [&] {
    absl::StatusOr<v1::SearchSnapshot> snap = tuner_ptr->Snapshot();
    absl::Status s =
        snap.ok() ? log_.SaveJobSnapshot(job_id, snap->SerializeAsString()) : snap.status();
    if (!s.ok()) {
      log->warn("event=snapshot_failed job={} error=\"{}\"", job_id, std::string(s.message()));
    }
  };
  search::Tuner tuner(tasks, &measurer, o);
  tuner_ptr = &tuner;
  // tasks[i] is job->tasks(i): a resumed job's trials count towards the per-task limit.
  for (int i = 0; i < job->tasks_size(); ++i) tuner.AddEarlierTrials(i, job->tasks(i).trials());

  // Warm start and resume: what the database knows about this target.
  // Per fingerprint field, the values the job's agents (board: CPU, GPU,
  // CUDA driver, L4T release) and the target's workers (compiler, CUDA
  // toolkit) report. A record whose field has a value none of them reports
  // was made elsewhere; an empty field on either side says nothing.
  using Field = std::string (*)(const v1::Fingerprint&);
  const std::vector<Field> board = {[](const v1::Fingerprint& f) { return f.cpu_model(); },
                                    [](const v1::Fingerprint& f) { return f.gpu_name(); },
                                    [](const v1::Fingerprint& f) { return f.cuda_driver(); },
                                    [](const v1::Fingerprint& f) { return f.l4t_release(); }};
  const std::vector<Field> toolchain = {[](const v1::Fingerprint& f) { return f.compiler(); },
                                        [](const v1::Fingerprint& f) { return f.cuda_toolkit(); }};
  std::vector<std::set<std::string>> seen_board(board.size()), seen_tools(toolchain.size());
  if (absl::StatusOr<std::vector<v1::Device>> devices = log_.ListDevices(); devices.ok()) {
    for (const v1::Device& d : *devices) {
      const v1::Capabilities& c = d.capabilities();
      if (d.role() == v1::ROLE_AGENT && d.device_key() == spec.device_key()) {
        v1::Fingerprint f = c.fingerprint();
        if (f.cpu_model().empty()) f.set_cpu_model(c.cpu_model());
        for (size_t i = 0; i < board.size(); ++i) {
          if (!board[i](f).empty()) seen_board[i].insert(board[i](f));
        }
      }
      const auto& builds = target->is_gpu() ? c.cuda_archs() : c.build_triples();
      const std::string want = target->is_gpu() ? target->arch() : target->triple;
      if (d.role() == v1::ROLE_WORKER &&
          std::find(builds.begin(), builds.end(), want) != builds.end()) {
        for (size_t i = 0; i < toolchain.size(); ++i) {
          if (!toolchain[i](c.fingerprint()).empty())
            seen_tools[i].insert(toolchain[i](c.fingerprint()));
        }
      }
    }
  }
  auto differs = [](const v1::Record& r, const std::vector<Field>& fields,
                    const std::vector<std::set<std::string>>& seen) {
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string v = fields[i](r.fingerprint());
      if (!v.empty() && !seen[i].empty() && !seen[i].count(v)) return true;
    }
    return false;
  };
  auto other_hardware = [&](const v1::Record& r) { return differs(r, board, seen_board); };
  auto other_toolchain = [&](const v1::Record& r) { return differs(r, toolchain, seen_tools); };
  const bool refuse = options_.fingerprint_policy == Options::FingerprintPolicy::kRefuse;
  int64_t n_hardware = 0, n_toolchain = 0;
  absl::StatusOr<search::WarmStartCounts> warm =
      search::WarmStart(log_, *target, target_spec, task_of, tuner, [&](const v1::Record& r) {
        const bool hardware = other_hardware(r);
        const bool toolchain = !hardware && other_toolchain(r);
        n_hardware += hardware;
        n_toolchain += toolchain;
        return !((hardware || toolchain) && refuse);
      });
  if (!warm.ok()) return finish(v1::JOB_STATE_FAILED, std::string(warm.status().message()));
  // The target's newest stored cost model ranks the first batch (a resumed
  // job's own snapshot, restored below, replaces it).
  absl::StatusOr<search::StoredModelStart> model_start;
  if (o.strategy == search::Strategy::kEvolutionary) {
    model_start = search::StartFromStoredModel(log_, target_spec, tuner);
    if (!model_start.ok()) {
      return finish(v1::JOB_STATE_FAILED, std::string(model_start.status().message()));
    }
    if (!model_start->note.empty()) {
      log->info("event=cost_model job={} {}", job_id, model_start->note);
    }
  }
  bool restored = false;
  if (done_before > 0) {
    absl::StatusOr<std::string> bytes = log_.LoadJobSnapshot(job_id);
    v1::SearchSnapshot snap;
    absl::Status s = !bytes.ok()                     ? bytes.status()
                     : !snap.ParseFromString(*bytes) ? absl::DataLossError("unreadable snapshot")
                                                     : tuner.Restore(snap);
    restored = s.ok();
    if (!restored) {
      log->warn("event=search_state_not_restored job={} error=\"{}\" (continuing from the records)",
                job_id, std::string(s.message()));
    }
  }
  log_.UpdateActiveJob(job_id, v1::JOB_STATE_RUNNING,
                       done_before > 0
                           ? absl::StrCat("resumed after ", done_before, " trials",
                                          restored ? " from its saved search state" : "")
                           : "")
      .IgnoreError();
  on_change_();
  log->info("event=job_started job={} tasks={} strategy={} budget={} done_before={} device_key={}",
            job_id, tasks.size(), search::StrategyName(o.strategy), budget, done_before,
            spec.device_key());
  if (n_hardware + n_toolchain > 0) {
    log->warn("event=foreign_records job={} other_hardware={} other_toolchain={} policy={}", job_id,
              n_hardware, n_toolchain, refuse ? "refuse" : "warn");
  }

  absl::Status s = tuner.Run([&](const search::Trial&) { on_change_(); });
  if (running->stop) {
    running->done = true;
    return;  // cancelled or shutting down: the state was set by whoever stopped it
  }
  if (std::lock_guard<std::mutex> l(store_mu); !store_error.ok()) {
    return finish(v1::JOB_STATE_FAILED, absl::StrCat("storing records: ", store_error.message()));
  }
  if (!s.ok()) return finish(v1::JOB_STATE_FAILED, std::string(s.message()));
  if (device_broken) {
    std::lock_guard<std::mutex> l(store_mu);
    return finish(v1::JOB_STATE_FAILED,
                  absl::StrCat("stopped after ", tuner.trials(), " trials: the last ",
                               same_failures, " failed on the device with the same error: ",
                               last_failure));
  }
  // The final model is the next job's (or `tunefarm tune`'s) starting model
  // on this target.
  if (absl::Status m = search::StoreModel(log_, target_spec, tuner); !m.ok()) {
    log->warn("event=cost_model_not_stored job={} error=\"{}\"", job_id, std::string(m.message()));
  }
  std::string note;
  if (tuner.end() == search::Tuner::End::kSeconds) {
    note = absl::StrCat("; wall-time budget of ", b.max_seconds(), " s reached");
  } else if (tuner.end() == search::Tuner::End::kTasksDone) {
    note =
        "; every task stopped (at its trial limit, no better schedule for the early-stop "
        "trials, or none left to try)";
  }
  if (model_start.ok() && model_start->loaded && !restored) {
    absl::StrAppend(&note, "; the search started from ", model_start->note);
  }
  const char* fate = refuse ? "left out" : "reused";
  const char* policy = refuse ? "refuse" : "warn";
  if (n_hardware > 0) {
    absl::StrAppend(&note, "; ", n_hardware, " records measured on other hardware ", fate,
                    " (fingerprint policy ", policy, ")");
  }
  if (n_toolchain > 0) {
    absl::StrAppend(&note, "; ", n_toolchain, " records built by another compiler ", fate,
                    " (fingerprint policy ", policy, ")");
  }
  if (done_before > 0) {
    note = absl::StrCat(note, "; resumed after ", done_before, " trials",
                        restored ? " from its saved search state" : " (search state rebuilt)");
  }
  finish(v1::JOB_STATE_SUCCEEDED, absl::StrCat(tuner.trials(), " trials this run", note));
}

}  // namespace tunefarm::server
