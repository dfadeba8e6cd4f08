#include "store/sqlite_db.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tunefarm::store::internal {

absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what, absl::string_view path) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
  std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string text = absl::StrCat(what, " on ", path, ": ", msg);
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrCat(text,
                       " (the disk is full, or the database reached its size limit: free "
                       "space, then resume)"));
    case SQLITE_CORRUPT:
      return absl::DataLossError(absl::StrCat(
          text, " (", path, " is damaged: truncated or overwritten; restore it from a backup)"));
    case SQLITE_NOTADB:
      return absl::FailedPreconditionError(absl::StrCat(text, " (", path, " is not SQLite)"));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      // Another process held the database past the busy timeout: retry later.
      return absl::AbortedError(text);
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(
          absl::StrCat(text, " (", path,
                       " is read-only here: this user cannot write the file or its "
                       "directory, where the -wal and -shm files go)"));
    case SQLITE_CANTOPEN:
      return absl::PermissionDeniedError(
          absl::StrCat(text, " (cannot open or create ", path,
                       ", or its -wal and -shm files beside it: a "
                       "missing directory, or one this user cannot write)"));
    case SQLITE_PERM:
      return absl::PermissionDeniedError(text);
    case SQLITE_CONSTRAINT:
      return absl::InvalidArgumentError(text);
    case SQLITE_IOERR:
      return absl::InternalError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::Status Stmt::Prepare(absl::string_view sql) {
  sql_ = std::string(sql);
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  return SqliteStatus(db_, rc, "prepare", path_);
}

Stmt& Stmt::Bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, double v) {
  sqlite3_bind_double(stmt_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, absl::string_view text) {
  sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::BindBlob(int i, absl::string_view bytes) {
  sqlite3_bind_blob(stmt_, i, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

absl::StatusOr<bool> Stmt::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(db_, rc, "query", path_);
}

absl::Status Stmt::Run() {
  TF_ASSIGN_OR_RETURN(bool row, Step());
  (void)row;
  return Reset();
}

absl::Status Stmt::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  return absl::OkStatus();
}

std::string Stmt::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col))
           : std::string();
}

std::string Stmt::Blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col))
           : std::string();
}

absl::StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteStatus(raw, rc, "open", path);
    sqlite3_close(raw);
    return s;
  }
  sqlite3_extended_result_codes(raw, 1);
  return std::unique_ptr<Db>(new Db(raw, path));
}

Db::~Db() { sqlite3_close_v2(db_); }

absl::Status Db::Exec(absl::string_view sql) {
  std::string s(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  return SqliteStatus(db_, rc, "exec", path_);
}

absl::StatusOr<std::string> Db::QueryText(absl::string_view sql) {
  Stmt st(db_, path_);
  TF_RETURN_IF_ERROR(st.Prepare(sql));
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Text(0) : std::string();
}

absl::StatusOr<int64_t> Db::QueryInt(absl::string_view sql) {
  Stmt st(db_, path_);
  TF_RETURN_IF_ERROR(st.Prepare(sql));
  TF_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.Int(0) : 0;
}

}  // namespace tunefarm::store::internal
