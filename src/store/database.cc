#include "store/database.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/atomic_file.h"
#include "store/task_codec.h"

namespace dgpu::store {
namespace {

constexpr int kBusyTimeoutMs = 5000;
constexpr int64_t kJournalSizeLimitBytes = 64 << 20;
constexpr char kCreatingSuffix[] = ".creating";
constexpr char kLockFileName[] = "LOCK";

// The columns of a task row, in the order BindTask binds and ReadTask reads them.
constexpr char kTaskColumns[] =
    "id, name, priority, gpu_count, gpu_model, command, env, timeout_seconds, image, status, "
    "queue_seq, allocation, attempts, exit_code, error, created_at, started_at, finished_at, "
    "stopping";

constexpr char kSchema[] = R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value NOT NULL
) WITHOUT ROWID;
CREATE TABLE tasks (
  id              INTEGER PRIMARY KEY NOT NULL,
  name            TEXT NOT NULL,
  priority        TEXT NOT NULL,
  gpu_count       INTEGER NOT NULL,
  gpu_model       TEXT NOT NULL,
  command         TEXT NOT NULL,
  env             TEXT NOT NULL,
  timeout_seconds INTEGER NOT NULL,
  image           TEXT NOT NULL,
  status          TEXT NOT NULL,
  queue_seq       INTEGER NOT NULL,
  allocation      TEXT NOT NULL,
  attempts        INTEGER NOT NULL,
  exit_code       INTEGER NOT NULL,
  error           TEXT NOT NULL,
  created_at      INTEGER NOT NULL,
  started_at      INTEGER NOT NULL,
  finished_at     INTEGER NOT NULL,
  stopping        INTEGER NOT NULL
);
CREATE INDEX tasks_by_status_priority ON tasks (status, priority, id DESC);
CREATE INDEX tasks_by_status ON tasks (status, id DESC);
CREATE INDEX tasks_by_priority ON tasks (priority, id DESC);
CREATE INDEX tasks_unfinished ON tasks (queue_seq, id)
  WHERE status IN ('pending', 'running') OR stopping = 1;
CREATE INDEX tasks_prunable ON tasks (finished_at)
  WHERE status IN ('success', 'failed', 'cancelled') AND stopping = 0;
INSERT INTO meta (key, value) VALUES
  ('schema_version', 1), ('epoch', 0), ('next_task_number', 1), ('last_applied_seq', 0);
)sql";

constexpr char kUpsertTaskSql[] =
    "INSERT INTO tasks (id, name, priority, gpu_count, gpu_model, command, env, "
    "timeout_seconds, image, status, queue_seq, allocation, attempts, exit_code, error, "
    "created_at, started_at, finished_at, stopping) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) "
    "ON CONFLICT (id) DO UPDATE SET name = excluded.name, priority = excluded.priority, "
    "gpu_count = excluded.gpu_count, gpu_model = excluded.gpu_model, "
    "command = excluded.command, env = excluded.env, "
    "timeout_seconds = excluded.timeout_seconds, image = excluded.image, "
    "status = excluded.status, queue_seq = excluded.queue_seq, "
    "allocation = excluded.allocation, attempts = excluded.attempts, "
    "exit_code = excluded.exit_code, error = excluded.error, "
    "created_at = excluded.created_at, started_at = excluded.started_at, "
    "finished_at = excluded.finished_at, stopping = excluded.stopping";
constexpr char kSetMetaSql[] =
    "INSERT INTO meta (key, value) VALUES (?1, ?2) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";
constexpr char kRaiseNextTaskNumberSql[] =
    "INSERT INTO meta (key, value) VALUES ('next_task_number', ?1) "
    "ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)";
constexpr char kDeleteMetaSql[] = "DELETE FROM meta WHERE key = ?1";
constexpr char kReadMetaSql[] = "SELECT key, value FROM meta";
constexpr char kPruneSql[] =
    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_prunable "
    "WHERE status IN ('success', 'failed', 'cancelled') AND stopping = 0 "
    "AND finished_at < ?1 LIMIT ?2)";

std::string ErrnoText(int err) { return std::strerror(err); }

// Maps a SQLite result code onto a Status; `context` says what was being done, with the path.
Status SqliteStatus(int rc, const std::string& context, const char* detail) {
  std::string message = context + ": " + (detail != nullptr ? detail : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return ResourceExhausted("disk full: " + message);
    case SQLITE_NOMEM:
      return ResourceExhausted("out of memory: " + message);
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PERM:
    case SQLITE_PROTOCOL:
      return Unavailable(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLoss(message);
    default:
      return Internal(message);
  }
}

int64_t ToInt64(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t ToUint64(int64_t v) { return static_cast<uint64_t>(v); }

std::string ColumnText(sqlite3_stmt* stmt, int col) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, col));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt, col)));
}

// Outcome of checking a file's first bytes without opening it with SQLite.
Status CheckHeader(const std::string& path, off_t size) {
  static constexpr char kMagic[] = "SQLite format 3";  // Followed by a NUL: 16 bytes.
  if (size == 0) {
    return DataLoss(path + " is an empty file, not a dgpu database; refusing to use or overwrite it");
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unavailable("cannot read " + path + ": " + ErrnoText(errno));
  std::array<unsigned char, 100> header{};
  ssize_t n = 0;
  size_t got = 0;
  while (got < header.size() && (n = ::read(fd, header.data() + got, header.size() - got)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Unavailable("cannot read " + path + ": " + ErrnoText(err));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got < header.size() || std::memcmp(header.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataLoss(path + " is not a SQLite database (bad file header): corrupt or foreign "
                           "file; refusing to use or overwrite it");
  }
  uint32_t app_id = (uint32_t{header[68]} << 24) | (uint32_t{header[69]} << 16) |
                    (uint32_t{header[70]} << 8) | uint32_t{header[71]};
  if (app_id != static_cast<uint32_t>(kApplicationId)) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  " is a SQLite database of another application (application_id 0x%08x, "
                  "expected 0x%08x); refusing to use or modify it",
                  app_id, static_cast<uint32_t>(kApplicationId));
    return FailedPrecondition(path + buf);
  }
  return OkStatus();
}

}  // namespace

// One SQLite connection with its cache of prepared statements. Not thread-safe: the Database
// guards each connection with its own mutex.
class SqliteConnection {
 public:
  static StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path, int flags) {
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      Status s = SqliteStatus(rc, "cannot open " + path,
                              db != nullptr ? sqlite3_errmsg(db) : nullptr);
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

namespace {

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

Status StepDone(SqliteConnection& conn, sqlite3_stmt* stmt, std::string_view what) {
  int rc = sqlite3_step(stmt);
  return rc == SQLITE_DONE ? OkStatus() : conn.Error(rc, what);
}

// Binds every field of `t` to the upsert statement. The JSON texts live in the caller's
// strings, which must outlive the statement's next step.
Status BindTask(SqliteConnection& conn, sqlite3_stmt* stmt, const core::Task& t,
                std::string* env_json, std::string* allocation_json) {
  if (t.id == 0) return InvalidArgument("task number 0 cannot be stored");
  if (t.id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("task number " + std::to_string(t.id) + " is out of range");
  }
  *env_json = DumpJson(EnvToJson(t.spec.env));
  *allocation_json = DumpJson(AllocationToJson(t.allocation));
  auto text = [stmt](int index, std::string_view value) {
    return sqlite3_bind_text(stmt, index, value.data(), static_cast<int>(value.size()),
                             SQLITE_STATIC);
  };
  const int results[] = {
      sqlite3_bind_int64(stmt, 1, ToInt64(t.id)),
      text(2, t.spec.name),
      text(3, core::ToString(t.spec.priority)),
      sqlite3_bind_int64(stmt, 4, t.spec.gpu_count),
      text(5, t.spec.gpu_model),
      text(6, t.spec.command),
      text(7, *env_json),
      sqlite3_bind_int64(stmt, 8, t.spec.timeout_seconds),
      text(9, t.spec.image),
      text(10, core::ToString(t.status)),
      sqlite3_bind_int64(stmt, 11, t.queue_seq),
      text(12, *allocation_json),
      sqlite3_bind_int64(stmt, 13, t.attempts),
      sqlite3_bind_int64(stmt, 14, t.exit_code),
      text(15, t.error),
      sqlite3_bind_int64(stmt, 16, t.created_at),
      sqlite3_bind_int64(stmt, 17, t.started_at),
      sqlite3_bind_int64(stmt, 18, t.finished_at),
      sqlite3_bind_int(stmt, 19, t.stopping ? 1 : 0),
  };
  for (int rc : results) {
    if (rc != SQLITE_OK) return conn.Error(rc, "binding task " + core::FormatTaskId(t.id) + " for");
  }
  return OkStatus();
}

// Decodes a row selected with kTaskColumns.
StatusOr<core::Task> ReadTask(sqlite3_stmt* stmt, const std::string& path) {
  core::Task t;
  t.id = ToUint64(sqlite3_column_int64(stmt, 0));
  auto bad = [&](std::string_view problem) {
    return DataLoss(core::FormatTaskId(t.id) + " in " + path + ": " + std::string(problem));
  };
  t.spec.name = ColumnText(stmt, 1);
  std::optional<core::Priority> priority = core::ParsePriority(ColumnText(stmt, 2));
  if (!priority) return bad("unknown priority '" + ColumnText(stmt, 2) + "'");
  t.spec.priority = *priority;
  t.spec.gpu_count = sqlite3_column_int(stmt, 3);
  t.spec.gpu_model = ColumnText(stmt, 4);
  t.spec.command = ColumnText(stmt, 5);
  StatusOr<nlohmann::json> env_json = ParseJson(ColumnText(stmt, 6), "env");
  if (!env_json.ok()) return bad(env_json.status().message());
  StatusOr<EnvList> env = EnvFromJson(*env_json);
  if (!env.ok()) return bad(env.status().message());
  t.spec.env = std::move(*env);
  t.spec.timeout_seconds = sqlite3_column_int64(stmt, 7);
  t.spec.image = ColumnText(stmt, 8);
  std::optional<core::TaskStatus> status = core::ParseTaskStatus(ColumnText(stmt, 9));
  if (!status) return bad("unknown status '" + ColumnText(stmt, 9) + "'");
  t.status = *status;
  t.queue_seq = sqlite3_column_int64(stmt, 10);
  StatusOr<nlohmann::json> allocation_json = ParseJson(ColumnText(stmt, 11), "allocation");
  if (!allocation_json.ok()) return bad(allocation_json.status().message());
  StatusOr<core::Allocation> allocation = AllocationFromJson(*allocation_json);
  if (!allocation.ok()) return bad(allocation.status().message());
  t.allocation = std::move(*allocation);
  t.attempts = sqlite3_column_int(stmt, 12);
  t.exit_code = sqlite3_column_int(stmt, 13);
  t.error = ColumnText(stmt, 14);
  t.created_at = sqlite3_column_int64(stmt, 15);
  t.started_at = sqlite3_column_int64(stmt, 16);
  t.finished_at = sqlite3_column_int64(stmt, 17);
  t.stopping = sqlite3_column_int(stmt, 18) != 0;
  return t;
}

// Steps a task query to the end, handing each decoded row to `fn`.
Status ForEachRow(SqliteConnection& conn, sqlite3_stmt* stmt,
                  const std::function<void(core::Task&&)>& fn) {
  while (true) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading tasks from");
    StatusOr<core::Task> task = ReadTask(stmt, conn.path());
    if (!task.ok()) return task.status();
    fn(std::move(*task));
  }
}

Status ReadMetaRows(SqliteConnection& conn, StoreMeta* meta) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  *meta = StoreMeta{};
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading meta values from");
    std::string key = ColumnText(*stmt, 0);
    if (key == "online_percent") {
      meta->online_percent = sqlite3_column_double(*stmt, 1);
    } else if (key == "epoch") {
      meta->epoch = ToUint64(sqlite3_column_int64(*stmt, 1));
    } else if (key == "next_task_number") {
      meta->next_task_number = ToUint64(sqlite3_column_int64(*stmt, 1));
    } else if (key == "last_applied_seq") {
      meta->last_applied_seq = ToUint64(sqlite3_column_int64(*stmt, 1));
    }
  }
}

Status SetMetaInt(SqliteConnection& conn, const char* key, uint64_t value) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kSetMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(*stmt, 2, ToInt64(value));
  return StepDone(conn, *stmt, std::string("storing ") + key + " in");
}

Status SetOnlinePercent(SqliteConnection& conn, std::optional<double> value) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(value ? kSetMetaSql : kDeleteMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, "online_percent", -1, SQLITE_STATIC);
  if (value) sqlite3_bind_double(*stmt, 2, *value);
  return StepDone(conn, *stmt, "storing online_percent in");
}

Status UpsertTask(SqliteConnection& conn, const core::Task& task) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kUpsertTaskSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  std::string env_json, allocation_json;
  if (Status s = BindTask(conn, *stmt, task, &env_json, &allocation_json); !s.ok()) return s;
  return StepDone(conn, *stmt, "storing " + core::FormatTaskId(task.id) + " in");
}

// Builds a new, empty database at `path` under a temporary name and renames it into place, so
// that a crash never leaves a half-initialised dgpu.db behind.
Status CreateDatabase(const std::string& path) {
  const std::string tmp = path + kCreatingSuffix;
  ::unlink(tmp.c_str());
  ::unlink((tmp + "-journal").c_str());
  {
    StatusOr<std::unique_ptr<SqliteConnection>> conn =
        SqliteConnection::Open(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!conn.ok()) return conn.status();
    Status s = (*conn)->Exec("PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL;",
                             "configuring");
    if (s.ok()) {
      s = (*conn)->Exec("BEGIN; PRAGMA application_id = " + std::to_string(kApplicationId) +
                            "; PRAGMA user_version = " + std::to_string(kSchemaVersion) + ";" +
                            kSchema + "COMMIT;",
                        "creating the schema of");
    }
    if (!s.ok()) {
      conn->reset();
      ::unlink(tmp.c_str());
      return s;
    }
  }
  return common::ReplaceFileAtomically(tmp, path);
}

// Checks an existing dgpu database through a read-only connection, which neither writes the
// file nor checkpoints a WAL into it.
Status ValidateDatabase(const std::string& path) {
  StatusOr<std::unique_ptr<SqliteConnection>> opened =
      SqliteConnection::Open(path, SQLITE_OPEN_READONLY);
  if (!opened.ok()) return opened.status();
  SqliteConnection& conn = **opened;
  StatusOr<std::string> check = conn.QueryText("PRAGMA quick_check", "checking the integrity of");
  if (!check.ok()) {
    if (check.status().code() == StatusCode::kDataLoss) {
      return DataLoss(check.status().message() + "; refusing to use or modify it");
    }
    return check.status();
  }
  if (*check != "ok") {
    std::replace(check->begin(), check->end(), '\n', ' ');
    return DataLoss(path + " failed its integrity check (" + *check +
                    "); refusing to use or modify it");
  }
  StatusOr<std::string> version =
      conn.QueryText("SELECT value FROM meta WHERE key = 'schema_version'", "reading the meta of");
  if (!version.ok()) {
    return DataLoss(path + " carries the dgpu application id but has no readable meta table (" +
                    version.status().message() + "); refusing to use or modify it");
  }
  if (*version != std::to_string(kSchemaVersion)) {
    return FailedPrecondition(path + " has schema version '" + *version +
                              "', this build reads version " + std::to_string(kSchemaVersion) +
                              "; refusing to use or modify it");
  }
  return OkStatus();
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string TaskSelect(std::string_view where_and_order) {
  return std::string("SELECT ") + kTaskColumns + " FROM tasks " + std::string(where_and_order);
}

}  // namespace

StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& dir, bool fsync) {
  if (dir.empty()) return InvalidArgument("database directory must not be empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create directory " + dir + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) {
    return FailedPrecondition(dir + " is not a directory");
  }
  const std::string path = (std::filesystem::path(dir) / kDatabaseFileName).string();

  // Look at an existing file before SQLite touches it: SQLite could otherwise write to it.
  bool exists = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return FailedPrecondition(path + " is not a regular file; refusing to use it");
    }
    exists = true;
    if (Status s = CheckHeader(path, st.st_size); !s.ok()) return s;
  } else if (errno != ENOENT) {
    return Unavailable("cannot inspect " + path + ": " + ErrnoText(errno));
  }

  if (::access(dir.c_str(), W_OK) != 0) {
    return Unavailable("directory " + dir + " is not writable: " + ErrnoText(errno));
  }
  if (exists && ::access(path.c_str(), W_OK) != 0) {
    return Unavailable(path + " is not writable: " + ErrnoText(errno));
  }

  const std::string lock_path = (std::filesystem::path(dir) / kLockFileName).string();
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return Unavailable("cannot create lock file " + lock_path + ": " + ErrnoText(errno));
  }
  FdCloser lock(lock_fd);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return FailedPrecondition(dir + " is in use by another dgpu database (" + lock_path +
                                " is locked)");
    }
    return Unavailable("cannot lock " + lock_path + ": " + ErrnoText(errno));
  }

  if (!exists) {
    if (Status s = CreateDatabase(path); !s.ok()) return s;
  }
  if (Status s = ValidateDatabase(path); !s.ok()) return s;

  StatusOr<std::unique_ptr<SqliteConnection>> writer =
      SqliteConnection::Open(path, SQLITE_OPEN_READWRITE);
  if (!writer.ok()) return writer.status();
  if (sqlite3_db_readonly((*writer)->db(), "main") == 1) {
    return Unavailable(path + " can only be opened read-only");
  }
  StatusOr<std::string> mode =
      (*writer)->QueryText("PRAGMA journal_mode = WAL", "switching to WAL mode");
  if (!mode.ok()) return mode.status();
  if (*mode != "wal") {
    return Unavailable("cannot switch " + path + " to WAL mode (journal mode is '" + *mode + "')");
  }
  if (Status s = (*writer)->Exec(std::string(fsync ? "PRAGMA synchronous = FULL;" : "PRAGMA synchronous = NORMAL;") + " PRAGMA journal_size_limit = " +
                                     std::to_string(kJournalSizeLimitBytes) + ";",
                                 "configuring");
      !s.ok()) {
    return s;
  }
  StatusOr<std::unique_ptr<SqliteConnection>> reader =
      SqliteConnection::Open(path, SQLITE_OPEN_READONLY);
  if (!reader.ok()) return reader.status();

  return std::unique_ptr<Database>(new Database(dir, path, lock.Release(), std::move(*writer),
                                                std::move(*reader)));
}

Database::Database(std::string dir, std::string path, int lock_fd,
                   std::unique_ptr<SqliteConnection> writer,
                   std::unique_ptr<SqliteConnection> reader)
    : dir_(std::move(dir)),
      path_(std::move(path)),
      lock_fd_(lock_fd),
      writer_(std::move(writer)),
      reader_(std::move(reader)) {}

Database::~Database() {
  // The writer closes last: as the last connection it checkpoints the WAL into the file.
  reader_.reset();
  writer_.reset();
  ::close(lock_fd_);
}

Status ValidateChanges(const std::vector<core::Change>& changes) {
  for (const core::Change& change : changes) {
    switch (change.kind) {
      case core::Change::Kind::kTaskUpsert:
        if (change.task.id == 0) return InvalidArgument("task number 0 cannot be stored");
        if (change.task.id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return InvalidArgument("task number " + std::to_string(change.task.id) +
                                 " is out of range");
        }
        break;
      case core::Change::Kind::kQuotaPercent:
        if (!(change.online_percent >= 0.0 && change.online_percent <= 1.0)) {
          return InvalidArgument("online_percent " + std::to_string(change.online_percent) +
                                 " is not between 0 and 1");
        }
        break;
      case core::Change::Kind::kNextTaskNumber:
        if (change.next_number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return InvalidArgument("next task number " + std::to_string(change.next_number) +
                                 " is out of range");
        }
        break;
    }
  }
  return OkStatus();
}

Status Database::Apply(const std::vector<core::Change>& changes, uint64_t last_seq) {
  if (Status s = ValidateChanges(changes); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(writer_mu_);
  SqliteConnection& conn = *writer_;
  Transaction txn(conn);
  if (Status s = txn.BeginWrite(); !s.ok()) return s;
  core::TaskNumber raise_next_to = 0;
  for (const core::Change& change : changes) {
    switch (change.kind) {
      case core::Change::Kind::kTaskUpsert:
        if (Status s = UpsertTask(conn, change.task); !s.ok()) return s;
        raise_next_to = std::max(raise_next_to, change.task.id + 1);
        break;
      case core::Change::Kind::kQuotaPercent:
        if (Status s = SetOnlinePercent(conn, change.online_percent); !s.ok()) return s;
        break;
      case core::Change::Kind::kNextTaskNumber:
        raise_next_to = std::max(raise_next_to, change.next_number);
        break;
    }
  }
  if (raise_next_to > 0) {
    StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kRaiseNextTaskNumberSql);
    if (!stmt.ok()) return stmt.status();
    StatementScope scope(*stmt);
    sqlite3_bind_int64(*stmt, 1, ToInt64(raise_next_to));
    if (Status s = StepDone(conn, *stmt, "storing next_task_number in"); !s.ok()) return s;
  }
  if (Status s = SetMetaInt(conn, "last_applied_seq", last_seq); !s.ok()) return s;
  return txn.Commit();
}

StatusOr<StoreMeta> Database::ReadMeta() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  StoreMeta meta;
  if (Status s = ReadMetaRows(*reader_, &meta); !s.ok()) return s;
  return meta;
}

StatusOr<LoadedState> Database::Load() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  SqliteConnection& conn = *reader_;
  Transaction txn(conn);
  if (Status s = txn.BeginRead(); !s.ok()) return s;
  LoadedState state;
  if (Status s = ReadMetaRows(conn, &state); !s.ok()) return s;
  static const std::string kLoadSql = TaskSelect(
      "WHERE status IN ('pending', 'running') OR stopping = 1 ORDER BY queue_seq, id");
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kLoadSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  Status s = ForEachRow(conn, *stmt, [&](core::Task&& t) { state.tasks.push_back(std::move(t)); });
  if (!s.ok()) return s;
  return state;
}

StatusOr<TaskPage> Database::ListTasks(std::optional<core::TaskStatus> status,
                                       std::optional<core::Priority> priority, int limit,
                                       int offset) {
  if (limit < 0) return InvalidArgument("limit must not be negative");
  if (offset < 0) return InvalidArgument("offset must not be negative");
  // One statement pair per filter combination, so that each uses its own index.
  static const std::string kWhere[4] = {"", "WHERE status = ?1 ", "WHERE priority = ?2 ",
                                        "WHERE status = ?1 AND priority = ?2 "};
  const int variant = (status ? 1 : 0) + (priority ? 2 : 0);
  const std::string count_sql = "SELECT count(*) FROM tasks " + kWhere[variant];
  const std::string page_sql = TaskSelect(kWhere[variant] + "ORDER BY id DESC LIMIT ?3 OFFSET ?4");

  std::lock_guard<std::mutex> lock(reader_mu_);
  SqliteConnection& conn = *reader_;
  Transaction txn(conn);
  if (Status s = txn.BeginRead(); !s.ok()) return s;
  auto bind_filters = [&](sqlite3_stmt* stmt) {
    if (status) sqlite3_bind_text(stmt, 1, core::ToString(*status).data(),
                                  static_cast<int>(core::ToString(*status).size()), SQLITE_STATIC);
    if (priority) sqlite3_bind_text(stmt, 2, core::ToString(*priority).data(),
                                    static_cast<int>(core::ToString(*priority).size()),
                                    SQLITE_STATIC);
  };
  TaskPage page;
  {
    StatusOr<sqlite3_stmt*> stmt = conn.Prepare(count_sql);
    if (!stmt.ok()) return stmt.status();
    StatementScope scope(*stmt);
    bind_filters(*stmt);
    int rc = sqlite3_step(*stmt);
    if (rc != SQLITE_ROW) return conn.Error(rc, "counting tasks in");
    page.total = sqlite3_column_int64(*stmt, 0);
  }
  if (limit == 0) return page;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(page_sql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  bind_filters(*stmt);
  sqlite3_bind_int(*stmt, 3, limit);
  sqlite3_bind_int(*stmt, 4, offset);
  Status s = ForEachRow(conn, *stmt, [&](core::Task&& t) { page.tasks.push_back(std::move(t)); });
  if (!s.ok()) return s;
  return page;
}

StatusOr<std::optional<core::Task>> Database::GetTask(core::TaskNumber id) {
  if (id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::optional<core::Task>();
  }
  static const std::string kGetSql = TaskSelect("WHERE id = ?1");
  std::lock_guard<std::mutex> lock(reader_mu_);
  SqliteConnection& conn = *reader_;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kGetSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(id));
  std::optional<core::Task> found;
  Status s = ForEachRow(conn, *stmt, [&](core::Task&& t) { found = std::move(t); });
  if (!s.ok()) return s;
  return found;
}

StatusOr<int> Database::PruneFinished(core::TimeMicros older_than_micros, int batch_limit) {
  if (batch_limit < 1) return InvalidArgument("batch_limit must be at least 1");
  int total = 0;
  while (true) {
    // The lock is taken per batch so that journal commits interleave with a long prune.
    std::lock_guard<std::mutex> lock(writer_mu_);
    SqliteConnection& conn = *writer_;
    Transaction txn(conn);
    if (Status s = txn.BeginWrite(); !s.ok()) return s;
    StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kPruneSql);
    if (!stmt.ok()) return stmt.status();
    int deleted = 0;
    {
      StatementScope scope(*stmt);
      sqlite3_bind_int64(*stmt, 1, older_than_micros);
      sqlite3_bind_int(*stmt, 2, batch_limit);
      if (Status s = StepDone(conn, *stmt, "pruning finished tasks in"); !s.ok()) return s;
      deleted = sqlite3_changes(conn.db());
    }
    if (Status s = txn.Commit(); !s.ok()) return s;
    total += deleted;
    if (deleted < batch_limit) return total;
  }
}

Status Database::SetEpoch(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(writer_mu_);
  SqliteConnection& conn = *writer_;
  Transaction txn(conn);
  if (Status s = txn.BeginWrite(); !s.ok()) return s;
  if (Status s = SetMetaInt(conn, "epoch", epoch); !s.ok()) return s;
  return txn.Commit();
}

StatusOr<uint64_t> Database::GetEpoch() {
  StatusOr<StoreMeta> meta = ReadMeta();
  if (!meta.ok()) return meta.status();
  return meta->epoch;
}

Status Database::ForEachTask(const std::function<void(const core::Task&)>& fn, StoreMeta* meta) {
  static const std::string kAllSql = TaskSelect("ORDER BY id");
  std::lock_guard<std::mutex> lock(reader_mu_);
  SqliteConnection& conn = *reader_;
  Transaction txn(conn);
  if (Status s = txn.BeginRead(); !s.ok()) return s;
  if (meta != nullptr) {
    if (Status s = ReadMetaRows(conn, meta); !s.ok()) return s;
  }
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kAllSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  return ForEachRow(conn, *stmt, [&](core::Task&& t) { fn(t); });
}

StatusOr<std::vector<core::Task>> Database::AllTasks() {
  std::vector<core::Task> tasks;
  Status s = ForEachTask([&](const core::Task& t) { tasks.push_back(t); });
  if (!s.ok()) return s;
  return tasks;
}

Status Database::ReplaceAll(const StoreMeta& meta, const std::vector<core::Task>& tasks) {
  std::lock_guard<std::mutex> lock(writer_mu_);
  SqliteConnection& conn = *writer_;
  Transaction txn(conn);
  if (Status s = txn.BeginWrite(); !s.ok()) return s;
  if (Status s = conn.Exec("DELETE FROM tasks", "clearing the tasks of"); !s.ok()) return s;
  core::TaskNumber next = meta.next_task_number;
  for (const core::Task& task : tasks) {
    if (Status s = UpsertTask(conn, task); !s.ok()) return s;
    next = std::max(next, task.id + 1);
  }
  if (Status s = SetOnlinePercent(conn, meta.online_percent); !s.ok()) return s;
  if (Status s = SetMetaInt(conn, "epoch", meta.epoch); !s.ok()) return s;
  if (Status s = SetMetaInt(conn, "next_task_number", next); !s.ok()) return s;
  if (Status s = SetMetaInt(conn, "last_applied_seq", meta.last_applied_seq); !s.ok()) return s;
  return txn.Commit();
}

}  // namespace dgpu::store
