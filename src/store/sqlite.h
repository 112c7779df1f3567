// The store's SQLite layer: a connection with its cache of prepared statements, scoped
// statements and transactions, and SQLite's result codes as Status. Private to the store.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "base/status.h"

namespace dgpu::store {

inline constexpr int kBusyTimeoutMs = 5000;

// Column `col` of the current row as text (empty for NULL); keeps any bytes, NULs included.
inline std::string ColumnText(sqlite3_stmt* stmt, int col) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, col));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt, col)));
}

std::string ErrnoText(int err);

// Maps a SQLite result code onto a Status; `context` says what was being done, with the path.
Status SqliteStatus(int rc, const std::string& context, const char* detail);

// Task numbers are stored as SQLite's signed integers.
inline int64_t ToInt64(uint64_t v) { return static_cast<int64_t>(v); }
inline uint64_t ToUint64(int64_t v) { return static_cast<uint64_t>(v); }

// One SQLite connection with its cache of prepared statements. Not thread-safe: the Database
// guards each connection with its own mutex.
class SqliteConnection {
 public:
  static StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path, int flags) {
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      Status s =
          SqliteStatus(rc, "cannot open " + path, db != nullptr ? sqlite3_errmsg(db) : nullptr);
      sqlite3_close(db);
      return s;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, kBusyTimeoutMs);
    return std::unique_ptr<SqliteConnection>(new SqliteConnection(db, path));
  }

  ~SqliteConnection() {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  sqlite3* db() { return db_; }
  const std::string& path() const { return path_; }

  // The Status for a failed call on this connection; `what` reads "<what> <path>: <reason>".
  Status Error(int rc, std::string_view what) {
    return SqliteStatus(rc, std::string(what) + " " + path_, sqlite3_errmsg(db_));
  }

  Status Exec(const std::string& sql, std::string_view what) {
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? OkStatus() : Error(rc, what);
  }

  // The cached statement for `sql`, prepared on first use. Use it through a StatementScope.
  StatusOr<sqlite3_stmt*> Prepare(const std::string& sql) {
    auto it = statements_.find(sql);
    if (it != statements_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "preparing a statement on");
    statements_.emplace(sql, stmt);
    return stmt;
  }

  // Runs a statement returning at most one row and gives its first column as text.
  StatusOr<std::string> QueryText(const std::string& sql, std::string_view what) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, what);
    rc = sqlite3_step(stmt);
    std::string result;
    if (rc == SQLITE_ROW) result = ColumnText(stmt, 0);
    Status status = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? OkStatus() : Error(rc, what);
    sqlite3_finalize(stmt);
    if (!status.ok()) return status;
    return result;
  }

  // Ends a transaction that did not commit; harmless if SQLite already rolled it back.
  void RollbackIfActive() {
    if (sqlite3_get_autocommit(db_) == 0) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

 private:
  SqliteConnection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  const std::string path_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

// Resets a cached statement on leaving scope, so that it never holds a read snapshot open.
class StatementScope {
 public:
  explicit StatementScope(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~StatementScope() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  StatementScope(const StatementScope&) = delete;
  StatementScope& operator=(const StatementScope&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

// A transaction that is rolled back unless Commit() succeeded. Writes BEGIN IMMEDIATE so that
// the write lock is taken up front; reads BEGIN DEFERRED for one snapshot across statements.
class Transaction {
 public:
  explicit Transaction(SqliteConnection& conn) : conn_(conn) {}
  ~Transaction() {
    if (!committed_) conn_.RollbackIfActive();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status BeginWrite() { return conn_.Exec("BEGIN IMMEDIATE", "starting a transaction on"); }
  Status BeginRead() { return conn_.Exec("BEGIN", "starting a read on"); }
  Status Commit() {
    Status s = conn_.Exec("COMMIT", "committing to");
    if (s.ok()) committed_ = true;
    return s;
  }

 private:
  SqliteConnection& conn_;
  bool committed_ = false;
};

// Steps a statement that returns no rows; `what` names the write in the error.
Status StepDone(SqliteConnection& conn, sqlite3_stmt* stmt, std::string_view what);

}  // namespace dgpu::store
