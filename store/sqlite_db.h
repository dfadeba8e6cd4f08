// A thin RAII layer over sqlite3: a connection, prepared statements, and
// SQLite result codes turned into absl::Status. Internal to store/; only
// the tuning_log*.cc files use it. Not thread safe: the owner serialises access.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tunefarm::store::internal {

// Maps an SQLite result code to a Status whose message names the operation,
// the database file and sqlite3_errmsg. SQLITE_FULL -> ResourceExhausted,
// SQLITE_CORRUPT / SQLITE_NOTADB -> DataLoss, SQLITE_BUSY -> Aborted (retry).
absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what, absl::string_view path);

class Stmt {
 public:
  Stmt(sqlite3* db, absl::string_view path) : db_(db), path_(path) {}
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  absl::Status Prepare(absl::string_view sql);
  Stmt& Bind(int i, int64_t v);
  Stmt& Bind(int i, double v);
  Stmt& Bind(int i, absl::string_view text);
  Stmt& BindBlob(int i, absl::string_view bytes);
  Stmt& BindNull(int i);
  // True when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows.
  absl::Status Run();
  absl::Status Reset();

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const;
  std::string Blob(int col) const;

 private:
  sqlite3* db_;
  std::string path_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

class Db {
 public:
  // Opens (creating if absent) the file at `path`.
  static absl::StatusOr<std::unique_ptr<Db>> Open(const std::string& path);
  ~Db();

  sqlite3* raw() const { return db_; }
  const std::string& path() const { return path_; }

  // Runs one or more statements that return no rows.
  absl::Status Exec(absl::string_view sql);
  // First column of the first row of `sql` as text ("" when no row).
  absl::StatusOr<std::string> QueryText(absl::string_view sql);
  absl::StatusOr<int64_t> QueryInt(absl::string_view sql);

 private:
  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
};

}  // namespace tunefarm::store::internal
