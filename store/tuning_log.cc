// TuningLog: opening a log database, its schema and migrations, and the
// interning of workloads and targets that every writer uses. The rest of
// TuningLog is split by concern: tuning_log_records.cc (committing records,
// confirmations), tuning_log_query.cc (reading records and workloads),
// tuning_log_jobs.cc (jobs, search snapshots, cost models) and
// tuning_log_devices.cc. All SQL of the log database lives in these files.
#include "store/tuning_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "store/sqlite_db.h"
#include "store/tuning_log_internal.h"

namespace tunefarm::store {
namespace internal {

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

}  // namespace internal

namespace {

using internal::Db;
using internal::NowMs;
using internal::DeterministicBytes;
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

}  // namespace tunefarm::store
