// TuningLog's reads: records (TopK, ListRecords, CountRecords) and stored
// workloads.
#include "store/tuning_log.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "store/sqlite_db.h"

namespace tunefarm::store {
namespace {

using internal::Stmt;

// Columns every record query selects, in the order RowToRecord reads them.
constexpr const char* kRecordColumns =
    "r.id, w.key, w.workload, t.spec, r.schedule, r.status, r.costs, r.error, r.build_sec, "
    "r.run_sec, r.device_key, r.device_id, r.job_id, r.timestamp_unix_ms, r.fingerprint, "
    "r.schedule_hash, r.confirmation, r.confirmed_by, r.confirm_cost "
    "FROM records r JOIN workloads w ON w.id = r.workload_id "
    "JOIN targets t ON t.id = r.target_id";

// Best OK records of one (workload, target): served by the partial index
// records_best, so it is an index lookup whatever the table size.
std::string TopKSql() {
  return absl::StrCat("SELECT ", kRecordColumns,
                      " WHERE r.workload_id = (SELECT id FROM workloads WHERE key = ?) "
                      "AND r.target_id = (SELECT id FROM targets WHERE spec = ?) "
                      "AND r.status = 1 AND r.confirmation < 3 ORDER BY r.mean_cost, r.id LIMIT ?");
}

absl::StatusOr<v1::Record> RowToRecord(const Stmt& st, const std::string& path) {
  v1::Record r;
  r.set_record_id(st.Int(0));
  r.set_workload_key(st.Text(1));
  bool ok = r.mutable_workload()->ParseFromString(st.Blob(2));
  r.mutable_target()->set_spec(st.Text(3));
  ok = ok && r.mutable_schedule()->ParseFromString(st.Blob(4));
  r.set_status(static_cast<v1::MeasureStatus>(st.Int(5)));
  for (absl::string_view c : absl::StrSplit(st.Text(6), ',', absl::SkipEmpty())) {
    double v = 0;
    ok = ok && absl::SimpleAtod(c, &v);
    r.add_costs_sec(v);
  }
  r.set_error(st.Text(7));
  r.set_build_sec(st.Double(8));
  r.set_run_sec(st.Double(9));
  r.set_device_key(st.Text(10));
  r.set_device_id(st.Text(11));
  r.set_job_id(st.IsNull(12) ? 0 : st.Int(12));
  r.set_timestamp_unix_ms(st.Int(13));
  ok = ok && r.mutable_fingerprint()->ParseFromString(st.Blob(14));
  r.set_schedule_hash(st.Text(15));
  r.set_confirmation(static_cast<v1::Confirmation>(st.Int(16)));
  r.set_confirmed_by(st.Text(17));
  r.set_confirm_cost_sec(st.IsNull(18) ? 0 : st.Double(18));
  if (!ok) {
    return absl::DataLossError(
        absl::StrCat("record ", r.record_id(), " in ", path, " does not decode"));
  }
  return r;
}

// Every row of a prepared query over kRecordColumns, as records.
absl::StatusOr<std::vector<v1::Record>> ReadRecords(Stmt& st, const std::string& path) {
  std::vector<v1::Record> out;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    TF_ASSIGN_OR_RETURN(v1::Record r, RowToRecord(st, path));
    out.push_back(std::move(r));
  }
  return out;
}

// The WHERE clause of a record query over kRecordColumns' joins, with its
// parameters ?1..?6 (bound by BindRecordQuery).
std::string RecordWhere(const TuningLog::RecordQuery& q, const std::string& target_spec) {
  std::string sql = " WHERE r.id > ?1";
  if (q.before_record_id > 0) absl::StrAppend(&sql, " AND r.id < ?6");
  if (!q.workload_key.empty()) absl::StrAppend(&sql, " AND w.key = ?2");
  if (!target_spec.empty()) absl::StrAppend(&sql, " AND t.spec = ?3");
  if (q.job_id != 0) absl::StrAppend(&sql, " AND r.job_id = ?4");
  if (q.status != v1::MEASURE_STATUS_UNSPECIFIED) absl::StrAppend(&sql, " AND r.status = ?5");
  return sql;
}

void BindRecordQuery(Stmt& st, const TuningLog::RecordQuery& q, const std::string& target_spec) {
  st.Bind(1, q.after_record_id).Bind(2, q.workload_key).Bind(3, target_spec);
  st.Bind(4, q.job_id).Bind(5, int64_t{q.status}).Bind(6, q.before_record_id);
}

}  // namespace

absl::StatusOr<std::vector<v1::Record>> TuningLog::TopK(const std::string& workload_key,
                                                        const std::string& target_spec, int k) {
  TF_ASSIGN_OR_RETURN(Canon::Target t, canon_.target(target_spec));
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(TopKSql()));
  st.Bind(1, workload_key).Bind(2, t.spec).Bind(3, int64_t{std::max(k, 1)});
  return ReadRecords(st, path_);
}

absl::StatusOr<std::string> TuningLog::ExplainTopK() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(absl::StrCat("EXPLAIN QUERY PLAN ", TopKSql())));
  std::string plan;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    absl::StrAppend(&plan, st.Text(3), "\n");
  }
  return plan;
}

absl::StatusOr<std::vector<v1::Record>> TuningLog::ListRecords(const RecordQuery& q) {
  std::string target_spec;
  if (!q.target_spec.empty()) {
    TF_ASSIGN_OR_RETURN(Canon::Target t, canon_.target(q.target_spec));
    target_spec = t.spec;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string sql =
      absl::StrCat("SELECT ", kRecordColumns, RecordWhere(q, target_spec), " ORDER BY r.id",
                   q.newest_first ? " DESC" : "", " LIMIT ?7");
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(sql));
  BindRecordQuery(st, q, target_spec);
  st.Bind(7, int64_t{std::max(q.limit, 1)});
  return ReadRecords(st, path_);
}

absl::StatusOr<int64_t> TuningLog::CountRecords(const RecordQuery& q) {
  std::string target_spec;
  if (!q.target_spec.empty()) {
    TF_ASSIGN_OR_RETURN(Canon::Target t, canon_.target(q.target_spec));
    target_spec = t.spec;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string sql = absl::StrCat(
      "SELECT count(*) FROM records r JOIN workloads w ON w.id = r.workload_id "
      "JOIN targets t ON t.id = r.target_id",
      RecordWhere(q, target_spec));
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(sql));
  BindRecordQuery(st, q, target_spec);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError("count(*) returned no row");
  return st.Int(0);
}

absl::StatusOr<int64_t> TuningLog::CountRecords() {
  std::lock_guard<std::mutex> lock(mu_);
  return db_->QueryInt("SELECT count(*) FROM records");
}

absl::StatusOr<v1::Workload> TuningLog::GetWorkload(const std::string& workload_key) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("SELECT workload FROM workloads WHERE key = ?"));
  st.Bind(1, workload_key);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no workload with key ", workload_key));
  v1::Workload w;
  if (!w.ParseFromString(st.Blob(0))) {
    return absl::DataLossError(absl::StrCat("workload ", workload_key, " does not decode"));
  }
  return w;
}

}  // namespace tunefarm::store
