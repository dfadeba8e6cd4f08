// TuningLog's writes of measurement records: validating and committing a
// batch (CommitRecords) and recording a confirmation (SetConfirmation).
#include "store/tuning_log.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "store/sqlite_db.h"
#include "store/tuning_log_internal.h"

namespace tunefarm::store {
namespace {

using internal::DeterministicBytes;
using internal::NowMs;
using internal::Stmt;

std::string FormatCosts(const google::protobuf::RepeatedField<double>& costs) {
  std::vector<std::string> parts;
  for (double c : costs) parts.push_back(absl::StrFormat("%.17g", c));
  return absl::StrJoin(parts, ",");
}

// A record checked and reduced to what is stored.
struct PreparedRecord {
  v1::Record record;  // workload and target canonical
  Canon::Workload workload;
  std::string target_spec;
  std::string target_kind;
  std::string target_arch;
  std::string schedule_hash;
  std::string content_hash;
  double mean_cost = 0;
};

absl::StatusOr<PreparedRecord> PrepareRecord(const v1::Record& in, const Canon& canon) {
  PreparedRecord p;
  p.record = in;
  v1::Record& r = p.record;
  if (!r.has_workload()) return absl::InvalidArgumentError("no workload");
  absl::StatusOr<Canon::Workload> cw = canon.workload(r.workload());
  if (!cw.ok())
    return absl::InvalidArgumentError(absl::StrCat("workload: ", cw.status().message()));
  p.workload = *std::move(cw);
  if (!r.workload_key().empty() && r.workload_key() != p.workload.key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workload_key ", r.workload_key(), " does not match the workload (", p.workload.key, ")"));
  }
  absl::StatusOr<Canon::Target> target = canon.target(r.target().spec());
  if (!target.ok()) return target.status();
  p.target_spec = target->spec;
  p.target_kind = target->kind;
  p.target_arch = target->arch;
  if (!v1::MeasureStatus_IsValid(r.status()) || r.status() == v1::MEASURE_STATUS_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("status is unset or unknown (", r.status(), ")"));
  }
  if (r.status() == v1::MEASURE_STATUS_OK) {
    if (r.costs_sec().empty()) return absl::InvalidArgumentError("status OK but no costs_sec");
    double sum = 0;
    for (double c : r.costs_sec()) {
      if (!std::isfinite(c) || c <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("costs_sec has ", c, " (must be > 0)"));
      }
      sum += c;
    }
    p.mean_cost = sum / r.costs_sec_size();
  }
  for (double v : {r.build_sec(), r.run_sec()}) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("build_sec/run_sec is ", v));
    }
  }
  if (r.job_id() < 0) return absl::InvalidArgumentError("job_id is negative");
  *r.mutable_workload() = p.workload.workload;
  r.mutable_target()->set_spec(p.target_spec);
  p.schedule_hash = canon.schedule_hash(r.schedule());

  // Identity: everything a measurement says, but not where it is filed.
  v1::Record identity = r;
  identity.clear_record_id();
  identity.clear_job_id();
  identity.clear_workload_key();
  identity.clear_schedule_hash();
  identity.clear_confirmation();
  identity.clear_confirmed_by();
  identity.clear_confirm_cost_sec();
  p.content_hash = Sha256Hex(DeterministicBytes(identity));
  // Filled in after hashing, so a record sent twice without a time is one record.
  if (r.timestamp_unix_ms() <= 0) r.set_timestamp_unix_ms(NowMs());
  return p;
}

}  // namespace

absl::StatusOr<TuningLog::CommitResult> TuningLog::CommitRecords(
    const std::vector<v1::Record>& records) {
  std::vector<PreparedRecord> prepared;
  prepared.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    absl::StatusOr<PreparedRecord> p = PrepareRecord(records[i], canon_);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("record ", i, ": ", p.status().message()));
    }
    prepared.push_back(*std::move(p));
  }

  std::lock_guard<std::mutex> lock(mu_);
  CommitResult result;
  TF_RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  absl::Status s = [&]() -> absl::Status {
    Stmt ins(db_->raw(), path_);
    TF_RETURN_IF_ERROR(ins.Prepare(
        "INSERT OR IGNORE INTO records (workload_id, target_id, schedule, schedule_hash, status, "
        "costs, mean_cost, error, build_sec, run_sec, device_key, device_id, job_id, "
        "timestamp_unix_ms, fingerprint, content_hash, confirmation) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    Stmt dup(db_->raw(), path_);
    TF_RETURN_IF_ERROR(dup.Prepare("SELECT id FROM records WHERE content_hash = ?"));
    Stmt job(db_->raw(), path_);
    TF_RETURN_IF_ERROR(job.Prepare("SELECT 1 FROM jobs WHERE id = ?"));
    for (size_t i = 0; i < prepared.size(); ++i) {
      const PreparedRecord& p = prepared[i];
      const v1::Record& r = p.record;
      std::string key, spec;
      TF_ASSIGN_OR_RETURN(int64_t wid, InternWorkload(r.workload(), &key));
      TF_ASSIGN_OR_RETURN(int64_t tid, InternTarget(r.target().spec(), &spec));
      if (r.job_id() != 0) {
        job.Bind(1, r.job_id());
        TF_ASSIGN_OR_RETURN(bool exists, job.Step());
        TF_RETURN_IF_ERROR(job.Reset());
        if (!exists) {
          return absl::InvalidArgumentError(
              absl::StrCat("record ", i, ": job_id ", r.job_id(), " does not exist"));
        }
      }
      ins.Bind(1, wid).Bind(2, tid).BindBlob(3, DeterministicBytes(r.schedule()));
      ins.Bind(4, p.schedule_hash).Bind(5, int64_t{r.status()}).Bind(6, FormatCosts(r.costs_sec()));
      if (r.status() == v1::MEASURE_STATUS_OK) {
        ins.Bind(7, p.mean_cost);
      } else {
        ins.BindNull(7);
      }
      ins.Bind(8, r.error()).Bind(9, r.build_sec()).Bind(10, r.run_sec());
      ins.Bind(11, r.device_key()).Bind(12, r.device_id());
      if (r.job_id() != 0) {
        ins.Bind(13, r.job_id());
      } else {
        ins.BindNull(13);
      }
      ins.Bind(14, r.timestamp_unix_ms()).BindBlob(15, DeterministicBytes(r.fingerprint()));
      ins.Bind(16, p.content_hash).Bind(17, int64_t{r.confirmation()});
      TF_RETURN_IF_ERROR(ins.Run());
      if (sqlite3_changes(db_->raw()) == 1) {
        result.record_ids.push_back(sqlite3_last_insert_rowid(db_->raw()));
        ++result.inserted;
      } else {
        dup.Bind(1, p.content_hash);
        TF_ASSIGN_OR_RETURN(bool row, dup.Step());
        if (!row) return absl::InternalError("record neither inserted nor present");
        result.record_ids.push_back(dup.Int(0));
        TF_RETURN_IF_ERROR(dup.Reset());
        ++result.duplicates;
      }
    }
    return db_->Exec("COMMIT");
  }();
  if (!s.ok()) {
    // Nothing of this batch is kept. ROLLBACK can fail if SQLite already
    // rolled back on its own (e.g. SQLITE_FULL); either way the batch is gone.
    db_->Exec("ROLLBACK").IgnoreError();
    return absl::Status(s.code(), absl::StrCat("committing ", records.size(),
                                               " records (none stored): ", s.message()));
  }
  return result;
}

absl::Status TuningLog::SetConfirmation(const Confirmation& c) {
  if (c.state != v1::CONFIRMATION_CONFIRMED && c.state != v1::CONFIRMATION_DISPUTED) {
    return absl::InvalidArgumentError("SetConfirmation: CONFIRMED or DISPUTED only");
  }
  absl::StatusOr<Canon::Workload> workload = canon_.workload(c.workload);
  if (!workload.ok()) return workload.status();
  const std::string schedule_hash = canon_.schedule_hash(c.schedule);
  std::lock_guard<std::mutex> lock(mu_);
  TF_RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  absl::Status s = [&]() -> absl::Status {
    Stmt rec(db_->raw(), path_);
    TF_RETURN_IF_ERROR(rec.Prepare(
        "UPDATE records SET confirmation = ?1, confirmed_by = ?2, confirm_cost = ?3 "
        "WHERE job_id = ?4 AND schedule_hash = ?5 AND device_id = ?6 AND status = 1 "
        "AND confirmation = 3 AND workload_id = (SELECT id FROM workloads WHERE key = ?7)"));
    rec.Bind(1, int64_t{c.state}).Bind(2, c.confirmed_by).Bind(3, c.confirm_cost_sec);
    rec.Bind(4, c.job_id).Bind(5, schedule_hash).Bind(6, c.device_id).Bind(7, workload->key);
    TF_RETURN_IF_ERROR(rec.Run());
    if (sqlite3_changes(db_->raw()) == 0) {
      return absl::NotFoundError(absl::StrCat("no pending record of job ", c.job_id, " by ",
                                              c.device_id, " for schedule ", schedule_hash));
    }
    auto count = [&](const char* sql, const std::string& device) -> absl::Status {
      Stmt dev(db_->raw(), path_);
      TF_RETURN_IF_ERROR(dev.Prepare(sql));
      dev.Bind(1, device);
      return dev.Run();
    };
    if (c.state == v1::CONFIRMATION_CONFIRMED) {
      TF_RETURN_IF_ERROR(count(
          "UPDATE devices SET timings_confirmed = timings_confirmed + 1 WHERE device_id = ?1",
          c.device_id));
    }
    if (!c.suspect.empty()) {
      TF_RETURN_IF_ERROR(count(
          "UPDATE devices SET timings_disputed = timings_disputed + 1 WHERE device_id = ?1",
          c.suspect));
    }
    return absl::OkStatus();
  }();
  if (!s.ok()) {
    db_->Exec("ROLLBACK").IgnoreError();
    return s;
  }
  return db_->Exec("COMMIT");
}

}  // namespace tunefarm::store
