// TuningLog's jobs (create, load, list, state changes, cancel) and the
// search state stored for them: job snapshots and per-target cost models.
#include "store/tuning_log.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "store/sqlite_db.h"
#include "store/tuning_log_internal.h"

namespace tunefarm::store {
namespace {

using internal::DeterministicBytes;
using internal::NowMs;
using internal::Stmt;

}  // namespace

absl::StatusOr<int64_t> TuningLog::CreateJob(const v1::JobSpec& in,
                                             const std::string& owner_token) {
  v1::JobSpec spec = in;
  if (spec.onnx_model().size() > 0) {
    return absl::InvalidArgumentError(
        "a job is stored with its tasks: extract them from the ONNX model first "
        "(SubmitJob does)");
  }
  if (spec.tasks().empty()) return absl::InvalidArgumentError("job has no tasks");
  absl::StatusOr<Canon::Target> target = canon_.target(spec.target().spec());
  if (!target.ok()) return target.status();
  spec.mutable_target()->set_spec(target->spec);
  if (spec.device_key().empty()) {
    return absl::InvalidArgumentError("job has no device_key (which agents measure it)");
  }
  const v1::Budget& b = spec.budget();
  if (b.max_trials() < 0 || b.max_seconds() < 0 || b.max_trials_per_task() < 0 ||
      b.early_stop_trials() < 0) {
    return absl::InvalidArgumentError("budget values must not be negative");
  }
  if (!v1::SearchStrategy_IsValid(spec.strategy())) {
    return absl::InvalidArgumentError("unknown search strategy");
  }
  if (spec.strategy() == v1::SEARCH_STRATEGY_UNSPECIFIED) {
    spec.set_strategy(v1::SEARCH_STRATEGY_EVOLUTIONARY);
  }
  if (spec.seed() == 0) {
    std::random_device rd;
    spec.set_seed((uint64_t{rd()} << 32 | rd()) | 1);
  }
  // Canonical workloads; the same workload twice adds up its weight.
  std::vector<std::pair<Canon::Workload, double>> tasks;
  for (int i = 0; i < spec.tasks_size(); ++i) {
    const v1::TaskSpec& t = spec.tasks(i);
    absl::StatusOr<Canon::Workload> cw = canon_.workload(t.workload());
    if (!cw.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("task ", i, ": ", cw.status().message()));
    }
    double weight = t.weight() == 0 ? 1 : t.weight();
    if (!std::isfinite(weight) || weight < 0) {
      return absl::InvalidArgumentError(absl::StrCat("task ", i, ": weight ", t.weight()));
    }
    bool merged = false;
    for (auto& [existing, w] : tasks) {
      if (existing.key == cw->key) w += weight, merged = true;
    }
    if (!merged) tasks.emplace_back(*std::move(cw), weight);
  }
  spec.clear_tasks();
  for (auto& [cw, w] : tasks) {
    v1::TaskSpec* t = spec.add_tasks();
    *t->mutable_workload() = cw.workload;
    t->set_weight(w);
  }

  std::lock_guard<std::mutex> lock(mu_);
  TF_RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  absl::StatusOr<int64_t> job_id = [&]() -> absl::StatusOr<int64_t> {
    std::string canonical;
    TF_ASSIGN_OR_RETURN(int64_t tid, InternTarget(spec.target().spec(), &canonical));
    int64_t now = NowMs();
    Stmt ins(db_->raw(), path_);
    TF_RETURN_IF_ERROR(ins.Prepare(
        "INSERT INTO jobs (name, spec, target_id, device_key, seed, state, status_message, "
        "created_unix_ms, updated_unix_ms, owner_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    ins.Bind(1, spec.name()).BindBlob(2, DeterministicBytes(spec)).Bind(3, tid);
    ins.Bind(4, spec.device_key()).Bind(5, static_cast<int64_t>(spec.seed()));
    ins.Bind(6, int64_t{v1::JOB_STATE_QUEUED})
        .Bind(7, "stored; starting")
        .Bind(8, now)
        .Bind(9, now)
        .Bind(10, owner_token);
    TF_RETURN_IF_ERROR(ins.Run());
    int64_t id = sqlite3_last_insert_rowid(db_->raw());
    Stmt task(db_->raw(), path_);
    TF_RETURN_IF_ERROR(
        task.Prepare("INSERT INTO tasks (job_id, workload_id, weight) VALUES (?, ?, ?)"));
    for (const v1::TaskSpec& t : spec.tasks()) {
      std::string key;
      TF_ASSIGN_OR_RETURN(int64_t wid, InternWorkload(t.workload(), &key));
      task.Bind(1, id).Bind(2, wid).Bind(3, t.weight());
      TF_RETURN_IF_ERROR(task.Run());
    }
    TF_RETURN_IF_ERROR(db_->Exec("COMMIT"));
    return id;
  }();
  if (!job_id.ok()) db_->Exec("ROLLBACK").IgnoreError();
  return job_id;
}

absl::StatusOr<v1::Job> TuningLog::LoadJobLocked(int64_t job_id) {
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      st.Prepare("SELECT spec, state, status_message, created_unix_ms, updated_unix_ms, target_id "
                 "FROM jobs WHERE id = ?"));
  st.Bind(1, job_id);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  v1::Job job;
  job.set_job_id(job_id);
  if (!job.mutable_spec()->ParseFromString(st.Blob(0))) {
    return absl::DataLossError(absl::StrCat("job ", job_id, " spec does not decode"));
  }
  job.set_state(static_cast<v1::JobState>(st.Int(1)));
  job.set_status_message(st.Text(2));
  job.set_created_unix_ms(st.Int(3));
  job.set_updated_unix_ms(st.Int(4));
  int64_t target_id = st.Int(5);

  Stmt tasks(db_->raw(), path_);
  TF_RETURN_IF_ERROR(tasks.Prepare(
      "SELECT k.id, w.id, w.key, w.workload, k.weight, w.flops, "
      "(SELECT count(*) FROM records r WHERE r.job_id = k.job_id AND r.workload_id = w.id "
      " AND r.status = 1), "
      "(SELECT min(mean_cost) FROM records r WHERE r.workload_id = w.id AND r.target_id = ?2 "
      " AND r.status = 1 AND r.confirmation < 3), "
      "(SELECT count(*) FROM records r WHERE r.job_id = k.job_id AND r.workload_id = w.id "
      " AND r.status != 1) "
      "FROM tasks k JOIN workloads w ON w.id = k.workload_id WHERE k.job_id = ?1 ORDER BY k.id"));
  tasks.Bind(1, job_id).Bind(2, target_id);
  while (true) {
    TF_ASSIGN_OR_RETURN(bool more, tasks.Step());
    if (!more) break;
    v1::Task* t = job.add_tasks();
    t->set_task_id(tasks.Int(0));
    t->set_workload_key(tasks.Text(2));
    t->mutable_workload()->ParseFromString(tasks.Blob(3));
    t->set_weight(tasks.Double(4));
    t->set_flops(tasks.Double(5));
    t->set_trials(tasks.Int(6));
    t->set_best_cost_sec(tasks.IsNull(7) ? 0 : tasks.Double(7));
    t->set_failed_trials(tasks.Int(8));
    job.set_trials_done(job.trials_done() + t->trials());
    job.set_failed_trials(job.failed_trials() + t->failed_trials());
  }
  return job;
}

absl::StatusOr<v1::Job> TuningLog::GetJob(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return LoadJobLocked(job_id);
}

absl::StatusOr<std::string> TuningLog::JobOwnerToken(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("SELECT owner_token FROM jobs WHERE id = ?"));
  st.Bind(1, job_id);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return st.Text(0);
}

absl::StatusOr<std::vector<v1::Job>> TuningLog::ListJobs(v1::JobState state, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      st.Prepare("SELECT id FROM jobs WHERE (?1 = 0 OR state = ?1) ORDER BY id DESC LIMIT ?2"));
  st.Bind(1, int64_t{state}).Bind(2, int64_t{std::max(limit, 1)});
  std::vector<int64_t> ids;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    ids.push_back(st.Int(0));
  }
  std::vector<v1::Job> jobs;
  for (int64_t id : ids) {
    TF_ASSIGN_OR_RETURN(v1::Job job, LoadJobLocked(id));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::Status TuningLog::SetJobState(int64_t job_id, v1::JobState state,
                                    const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(
      "UPDATE jobs SET state = ?, status_message = ?, updated_unix_ms = ? WHERE id = ?"));
  st.Bind(1, int64_t{state}).Bind(2, message).Bind(3, NowMs()).Bind(4, job_id);
  TF_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_->raw()) == 0) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return absl::OkStatus();
}

absl::StatusOr<bool> TuningLog::UpdateActiveJob(int64_t job_id, v1::JobState state,
                                                const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      st.Prepare("UPDATE jobs SET state = ?, status_message = ?, updated_unix_ms = ? "
                 "WHERE id = ? AND state NOT IN (?, ?, ?)"));
  st.Bind(1, int64_t{state}).Bind(2, message).Bind(3, NowMs()).Bind(4, job_id);
  st.Bind(5, int64_t{v1::JOB_STATE_SUCCEEDED}).Bind(6, int64_t{v1::JOB_STATE_FAILED});
  st.Bind(7, int64_t{v1::JOB_STATE_CANCELLED});
  TF_RETURN_IF_ERROR(st.Run());
  return sqlite3_changes(db_->raw()) > 0;
}

absl::StatusOr<v1::Job> TuningLog::CancelJob(int64_t job_id, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  // One statement decides and writes, so a job that ends meanwhile stays ended.
  TF_RETURN_IF_ERROR(
      st.Prepare("UPDATE jobs SET state = ?, status_message = ?, updated_unix_ms = ? "
                 "WHERE id = ? AND state NOT IN (?, ?, ?)"));
  st.Bind(1, int64_t{v1::JOB_STATE_CANCELLED}).Bind(2, message).Bind(3, NowMs()).Bind(4, job_id);
  st.Bind(5, int64_t{v1::JOB_STATE_SUCCEEDED}).Bind(6, int64_t{v1::JOB_STATE_FAILED});
  st.Bind(7, int64_t{v1::JOB_STATE_CANCELLED});
  TF_RETURN_IF_ERROR(st.Run());
  bool changed = sqlite3_changes(db_->raw()) == 1;
  TF_ASSIGN_OR_RETURN(v1::Job job, LoadJobLocked(job_id));
  if (!changed) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has already ended (", v1::JobState_Name(job.state()), ")"));
  }
  return job;
}

absl::StatusOr<std::map<int, int64_t>> TuningLog::CountJobsByState() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("SELECT state, count(*) FROM jobs GROUP BY state"));
  std::map<int, int64_t> out;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out[int(st.Int(0))] = st.Int(1);
  }
  return out;
}

absl::Status TuningLog::SaveJobSnapshot(int64_t job_id, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      st.Prepare("INSERT INTO job_snapshots (job_id, updated_unix_ms, snapshot) VALUES (?, ?, ?) "
                 "ON CONFLICT(job_id) DO UPDATE SET updated_unix_ms = excluded.updated_unix_ms, "
                 "snapshot = excluded.snapshot"));
  st.Bind(1, job_id).Bind(2, NowMs());
  st.BindBlob(3, bytes);
  absl::Status s = st.Run();
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("storing the search state of job ", job_id, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TuningLog::LoadJobSnapshot(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("SELECT snapshot FROM job_snapshots WHERE job_id = ?"));
  st.Bind(1, job_id);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " has no search state yet"));
  return st.Blob(0);
}

absl::StatusOr<int64_t> TuningLog::SaveCostModel(const StoredCostModel& model) {
  if (model.bytes.empty()) return absl::InvalidArgumentError("cost model: no bytes to store");
  if (model.objective.empty()) return absl::InvalidArgumentError("cost model: objective missing");
  std::lock_guard<std::mutex> lock(mu_);
  TF_RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  int64_t id = 0;
  absl::Status s = [&]() -> absl::Status {
    std::string spec;
    TF_ASSIGN_OR_RETURN(int64_t tid, InternTarget(model.target_spec, &spec));
    Stmt ins(db_->raw(), path_);
    TF_RETURN_IF_ERROR(
        ins.Prepare("INSERT INTO cost_models (target_id, objective, trained_on, created_unix_ms, "
                    "model) VALUES (?, ?, ?, ?, ?)"));
    ins.Bind(1, tid).Bind(2, model.objective).Bind(3, model.trained_on).Bind(4, NowMs());
    ins.BindBlob(5, model.bytes);
    TF_RETURN_IF_ERROR(ins.Run());
    id = sqlite3_last_insert_rowid(db_->raw());
    // Older snapshots of the target are superseded; keep the last few.
    Stmt prune(db_->raw(), path_);
    TF_RETURN_IF_ERROR(prune.Prepare(
        "DELETE FROM cost_models WHERE target_id = ?1 AND id NOT IN "
        "(SELECT id FROM cost_models WHERE target_id = ?1 ORDER BY id DESC LIMIT ?2)"));
    prune.Bind(1, tid).Bind(2, int64_t{kCostModelsKept});
    TF_RETURN_IF_ERROR(prune.Run());
    return db_->Exec("COMMIT");
  }();
  if (!s.ok()) {
    db_->Exec("ROLLBACK").IgnoreError();
    return absl::Status(s.code(), absl::StrCat("storing cost model (not stored): ", s.message()));
  }
  return id;
}

absl::StatusOr<TuningLog::StoredCostModel> TuningLog::LatestCostModel(
    const std::string& target_spec) {
  TF_ASSIGN_OR_RETURN(Canon::Target t, canon_.target(target_spec));
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      st.Prepare("SELECT m.id, t.spec, m.objective, m.trained_on, m.created_unix_ms, m.model "
                 "FROM cost_models m JOIN targets t ON t.id = m.target_id WHERE t.spec = ? "
                 "ORDER BY m.id DESC LIMIT 1"));
  st.Bind(1, t.spec);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no cost model stored for target ", t.spec));
  }
  StoredCostModel m;
  m.id = st.Int(0);
  m.target_spec = st.Text(1);
  m.objective = st.Text(2);
  m.trained_on = st.Int(3);
  m.created_unix_ms = st.Int(4);
  m.bytes = st.Blob(5);
  return m;
}

}  // namespace tunefarm::store
