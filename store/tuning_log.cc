// All SQL of the log database lives in this file.
#include "store/tuning_log.h"

#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "store/sqlite_db.h"

namespace tunefarm::store {
namespace {

using internal::Db;
using internal::Stmt;

// "TFM1": marks a file as a tunefarm database (PRAGMA application_id).
constexpr int64_t kApplicationId = 0x54464D31;

// kMigrations[i] takes the schema from version i to version i + 1.
const char* const kMigrations[] = {
    // 0 -> 1
    R"sql(
CREATE TABLE schema_version (
  version INTEGER NOT NULL PRIMARY KEY,
  applied_unix_ms INTEGER NOT NULL
);
CREATE TABLE workloads (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  op TEXT NOT NULL,
  canonical_json TEXT NOT NULL,
  workload BLOB NOT NULL,
  flops REAL NOT NULL
);
CREATE TABLE targets (
  id INTEGER PRIMARY KEY,
  spec TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL,
  arch TEXT NOT NULL
);
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  device_id TEXT NOT NULL UNIQUE,
  role INTEGER NOT NULL,
  device_key TEXT NOT NULL,
  capabilities BLOB NOT NULL,
  registered_unix_ms INTEGER NOT NULL,
  last_seen_unix_ms INTEGER NOT NULL,
  peer TEXT NOT NULL
);
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  spec BLOB NOT NULL,
  target_id INTEGER NOT NULL REFERENCES targets(id),
  device_key TEXT NOT NULL,
  seed INTEGER NOT NULL,
  state INTEGER NOT NULL,
  status_message TEXT NOT NULL,
  created_unix_ms INTEGER NOT NULL,
  updated_unix_ms INTEGER NOT NULL
);
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE tasks (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  weight REAL NOT NULL,
  UNIQUE (job_id, workload_id)
);
CREATE TABLE records (
  id INTEGER PRIMARY KEY,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  target_id INTEGER NOT NULL REFERENCES targets(id),
  schedule BLOB NOT NULL,
  schedule_hash TEXT NOT NULL,
  status INTEGER NOT NULL,
  costs TEXT NOT NULL,
  mean_cost REAL,
  error TEXT NOT NULL,
  build_sec REAL NOT NULL,
  run_sec REAL NOT NULL,
  device_key TEXT NOT NULL,
  device_id TEXT NOT NULL,
  job_id INTEGER REFERENCES jobs(id),
  timestamp_unix_ms INTEGER NOT NULL,
  fingerprint BLOB NOT NULL,
  content_hash TEXT NOT NULL UNIQUE
);
CREATE INDEX records_best ON records(workload_id, target_id, mean_cost) WHERE status = 1;
CREATE INDEX records_schedule ON records(workload_id, target_id, schedule_hash);
CREATE INDEX records_job ON records(job_id, workload_id);
)sql",
    // 1 -> 2: cost-model snapshots per target (warm start without retraining).
    R"sql(
CREATE TABLE cost_models (
  id INTEGER PRIMARY KEY,
  target_id INTEGER NOT NULL REFERENCES targets(id),
  objective TEXT NOT NULL,
  trained_on INTEGER NOT NULL,
  created_unix_ms INTEGER NOT NULL,
  model BLOB NOT NULL
);
CREATE INDEX cost_models_target ON cost_models(target_id, id);
)sql",
    // 2 -> 3: each job's search state, for an exact resume.
    R"sql(
CREATE TABLE job_snapshots (
  job_id INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  updated_unix_ms INTEGER NOT NULL,
  snapshot BLOB NOT NULL
);
)sql",
    // 3 -> 4: drained devices get no new work, across restarts.
    R"sql(
ALTER TABLE devices ADD COLUMN drained INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4 -> 5: the token that owns each device id, across restarts.
    R"sql(
ALTER TABLE devices ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql",
    // 5 -> 6: the SHA-256 of the token that submitted each job ('': none
    // recorded), so only it (or an admin) cancels or resumes the job.
    R"sql(
ALTER TABLE jobs ADD COLUMN owner_token TEXT NOT NULL DEFAULT '';
)sql",
    // 6 -> 7: new bests measured again on a second device; pending and
    // disputed ones (confirmation >= 3) leave the ranking index.
    R"sql(
ALTER TABLE records ADD COLUMN confirmation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN confirmed_by TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN confirm_cost REAL;
DROP INDEX records_best;
CREATE INDEX records_best ON records(workload_id, target_id, mean_cost)
  WHERE status = 1 AND confirmation < 3;
ALTER TABLE devices ADD COLUMN timings_confirmed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN timings_disputed INTEGER NOT NULL DEFAULT 0;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == TuningLog::kSchemaVersion);

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

std::string DeterministicBytes(const google::protobuf::Message& m) {
  std::string bytes;
  google::protobuf::io::StringOutputStream out(&bytes);
  google::protobuf::io::CodedOutputStream coded(&out);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

std::string FormatCosts(const google::protobuf::RepeatedField<double>& costs) {
  std::vector<std::string> parts;
  for (double c : costs) parts.push_back(absl::StrFormat("%.17g", c));
  return absl::StrJoin(parts, ",");
}

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

TuningLog::TuningLog(std::unique_ptr<internal::Db> db, std::string path, Canon canon)
    : db_(std::move(db)), path_(std::move(path)), canon_(std::move(canon)) {}

TuningLog::~TuningLog() = default;

absl::StatusOr<std::unique_ptr<TuningLog>> TuningLog::Open(const Options& options) {
  if (!options.canon.complete()) {
    return absl::InvalidArgumentError("TuningLog::Options::canon is not set");
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Db> db, Db::Open(options.path));
  const std::string& path = options.path;
  TF_RETURN_IF_ERROR(db->Exec(absl::StrCat("PRAGMA busy_timeout = ", options.busy_timeout_ms)));
  // Reading the schema is the first access to the file's header.
  absl::StatusOr<int64_t> n_tables = db->QueryInt("SELECT count(*) FROM sqlite_master");
  if (absl::IsFailedPrecondition(n_tables.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a tunefarm database (", n_tables.status().message(), ")"));
  }
  if (absl::IsDataLoss(n_tables.status())) return n_tables.status();
  if (!n_tables.ok()) return n_tables.status();
  TF_ASSIGN_OR_RETURN(int64_t app_id, db->QueryInt("PRAGMA application_id"));
  if (*n_tables > 0 && app_id != kApplicationId) {
    Stmt st(db->raw(), path);
    TF_RETURN_IF_ERROR(
        st.Prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 5"));
    std::vector<std::string> names;
    while (true) {
      TF_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      names.push_back(st.Text(0));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is an SQLite database of another program, not tunefarm's "
                        "(application_id 0x%x, tables: %s)",
                        path, app_id, absl::StrJoin(names, ", ")));
  }
  TF_ASSIGN_OR_RETURN(std::string mode, db->QueryText("PRAGMA journal_mode = WAL"));
  if (mode != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot switch to WAL journal mode (got '", mode, "')"));
  }
  TF_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;"));
  if (options.max_page_count > 0) {
    TF_RETURN_IF_ERROR(db->Exec(absl::StrCat("PRAGMA max_page_count = ", options.max_page_count)));
  }
  std::unique_ptr<TuningLog> log(new TuningLog(std::move(db), path, options.canon));
  TF_RETURN_IF_ERROR(log->Migrate());
  return log;
}

absl::Status TuningLog::Migrate() {
  std::lock_guard<std::mutex> lock(mu_);
  while (true) {
    TF_RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
    auto version_or = [&]() -> absl::StatusOr<int64_t> {
      TF_ASSIGN_OR_RETURN(int64_t has, db_->QueryInt("SELECT count(*) FROM sqlite_master WHERE "
                                                     "type = 'table' AND name = 'schema_version'"));
      if (!has) return 0;
      return db_->QueryInt("SELECT coalesce(max(version), 0) FROM schema_version");
    }();
    if (!version_or.ok()) {
      db_->Exec("ROLLBACK").IgnoreError();
      return version_or.status();
    }
    int64_t version = *version_or;
    if (version > kSchemaVersion) {
      db_->Exec("ROLLBACK").IgnoreError();
      return absl::FailedPreconditionError(absl::StrCat(
          path_, " has schema version ", version, ", newer than this tunefarm (", TUNEFARM_VERSION,
          ") understands (", kSchemaVersion, "); use a newer tunefarm"));
    }
    if (version == kSchemaVersion) return db_->Exec("COMMIT");
    absl::Status s = db_->Exec(kMigrations[version]);
    if (s.ok() && version == 0) {
      s = db_->Exec(absl::StrCat("PRAGMA application_id = ", kApplicationId));
    }
    if (s.ok()) {
      s = db_->Exec(absl::StrCat("INSERT INTO schema_version (version, applied_unix_ms) VALUES (",
                                 version + 1, ", ", NowMs(), ")"));
    }
    if (s.ok()) s = db_->Exec("COMMIT");
    if (!s.ok()) {
      db_->Exec("ROLLBACK").IgnoreError();
      return absl::Status(s.code(), absl::StrCat("migrating ", path_, " to schema version ",
                                                 version + 1, ": ", s.message()));
    }
  }
}

absl::StatusOr<int> TuningLog::SchemaVersion() {
  std::lock_guard<std::mutex> lock(mu_);
  TF_ASSIGN_OR_RETURN(int64_t v, db_->QueryInt("SELECT max(version) FROM schema_version"));
  return static_cast<int>(v);
}

absl::StatusOr<int64_t> TuningLog::InternWorkload(const v1::Workload& workload, std::string* key) {
  TF_ASSIGN_OR_RETURN(Canon::Workload cw, canon_.workload(workload));
  *key = cw.key;
  Stmt ins(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      ins.Prepare("INSERT OR IGNORE INTO workloads (key, op, canonical_json, workload, flops) "
                  "VALUES (?, ?, ?, ?, ?)"));
  ins.Bind(1, cw.key).Bind(2, cw.op).Bind(3, cw.canonical_json);
  ins.BindBlob(4, DeterministicBytes(cw.workload)).Bind(5, cw.flops);
  TF_RETURN_IF_ERROR(ins.Run());
  Stmt sel(db_->raw(), path_);
  TF_RETURN_IF_ERROR(sel.Prepare("SELECT id FROM workloads WHERE key = ?"));
  sel.Bind(1, cw.key);
  TF_ASSIGN_OR_RETURN(bool row, sel.Step());
  if (!row) return absl::InternalError("workload vanished after insert");
  return sel.Int(0);
}

absl::StatusOr<int64_t> TuningLog::InternTarget(const std::string& spec, std::string* canonical) {
  TF_ASSIGN_OR_RETURN(Canon::Target t, canon_.target(spec));
  *canonical = t.spec;
  Stmt ins(db_->raw(), path_);
  TF_RETURN_IF_ERROR(
      ins.Prepare("INSERT OR IGNORE INTO targets (spec, kind, arch) VALUES (?, ?, ?)"));
  ins.Bind(1, *canonical).Bind(2, t.kind).Bind(3, t.arch);
  TF_RETURN_IF_ERROR(ins.Run());
  Stmt sel(db_->raw(), path_);
  TF_RETURN_IF_ERROR(sel.Prepare("SELECT id FROM targets WHERE spec = ?"));
  sel.Bind(1, *canonical);
  TF_ASSIGN_OR_RETURN(bool row, sel.Step());
  if (!row) return absl::InternalError("target vanished after insert");
  return sel.Int(0);
}

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

namespace {

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

absl::Status TuningLog::UpsertDevice(const v1::Device& d) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(
      "INSERT INTO devices (device_id, role, device_key, capabilities, registered_unix_ms, "
      "last_seen_unix_ms, peer, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
      "ON CONFLICT (device_id) DO UPDATE SET role = ?2, device_key = ?3, capabilities = ?4, "
      "registered_unix_ms = ?5, last_seen_unix_ms = ?6, peer = ?7, owner = ?8"));
  st.Bind(1, d.device_id()).Bind(2, int64_t{d.role()}).Bind(3, d.device_key());
  st.BindBlob(4, DeterministicBytes(d.capabilities())).Bind(5, d.registered_unix_ms());
  st.Bind(6, d.last_seen_unix_ms()).Bind(7, d.peer()).Bind(8, d.owner());
  return st.Run();
}

absl::Status TuningLog::SetDeviceDrained(const std::string& device_id, bool drained) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("UPDATE devices SET drained = ?2 WHERE device_id = ?1"));
  st.Bind(1, device_id).Bind(2, int64_t{drained});
  TF_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_->raw()) == 0) {
    return absl::NotFoundError(absl::StrCat("no device '", device_id, "' has registered"));
  }
  return absl::OkStatus();
}

absl::Status TuningLog::RemoveDevice(const std::string& device_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("DELETE FROM devices WHERE device_id = ?1"));
  st.Bind(1, device_id);
  TF_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_->raw()) == 0) {
    return absl::NotFoundError(absl::StrCat("no device '", device_id, "' has registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Device>> TuningLog::ListDevices() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare(
      "SELECT device_id, role, device_key, capabilities, registered_unix_ms, last_seen_unix_ms, "
      "peer, drained, owner, timings_confirmed, timings_disputed FROM devices "
      "ORDER BY device_id"));
  std::vector<v1::Device> out;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    v1::Device d;
    d.set_device_id(st.Text(0));
    d.set_role(static_cast<v1::Role>(st.Int(1)));
    d.set_device_key(st.Text(2));
    d.mutable_capabilities()->ParseFromString(st.Blob(3));
    d.set_registered_unix_ms(st.Int(4));
    d.set_last_seen_unix_ms(st.Int(5));
    d.set_peer(st.Text(6));
    d.set_drained(st.Int(7) != 0);
    d.set_owner(st.Text(8));
    d.set_timings_confirmed(int32_t(st.Int(9)));
    d.set_timings_disputed(int32_t(st.Int(10)));
    d.set_state(v1::DEVICE_STATE_OFFLINE);
    out.push_back(std::move(d));
  }
  return out;
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

absl::StatusOr<std::string> TuningLog::DeviceOwner(const std::string& device_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_->raw(), path_);
  TF_RETURN_IF_ERROR(st.Prepare("SELECT owner FROM devices WHERE device_id = ?1"));
  st.Bind(1, device_id);
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no device '", device_id, "' has registered"));
  return st.Text(0);
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

}  // namespace tunefarm::store
