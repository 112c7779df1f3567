#include "store/database.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/atomic_file.h"
#include "store/sqlite_util.h"
#include "store/task_codec.h"
#include "store/task_rows.h"

namespace dgpu::store {
namespace {

constexpr int kBusyTimeoutMs = 5000;
constexpr int64_t kJournalSizeLimitBytes = 64 << 20;
constexpr char kCreatingSuffix[] = ".creating";
constexpr char kLockFileName[] = "LOCK";

constexpr char kUpsertTeamSql[] =
    "INSERT INTO teams (name, api_set, online, batch, max_gpus, weight, deleted, usage, usage_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
    "ON CONFLICT (name) DO UPDATE SET api_set = excluded.api_set, online = excluded.online, "
    "batch = excluded.batch, max_gpus = excluded.max_gpus, weight = excluded.weight, "
    "deleted = excluded.deleted, usage = excluded.usage, usage_at = excluded.usage_at";
constexpr char kReadTeamsSql[] =
    "SELECT name, api_set, online, batch, max_gpus, weight, deleted, usage, usage_at FROM teams "
    "ORDER BY name";
constexpr char kUpsertNodeSql[] =
    "INSERT INTO nodes (id, mode) VALUES (?1, ?2) ON CONFLICT (id) DO UPDATE SET mode = "
    "excluded.mode";
constexpr char kDeleteNodeSql[] = "DELETE FROM nodes WHERE id = ?1";
constexpr char kReadNodesSql[] = "SELECT id, mode FROM nodes ORDER BY id";
constexpr char kSetMetaSql[] =
    "INSERT INTO meta (key, value) VALUES (?1, ?2) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";
constexpr char kRaiseNextTaskNumberSql[] =
    "INSERT INTO meta (key, value) VALUES ('next_task_number', ?1) "
    "ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)";

// The kept task counts (table task_counts). Inserts and updates of task rows are counted by the
// writer (CountDeltas) rather than by per-row triggers: a trigger makes SQLite keep a statement
// journal for every row written, which cost more than half of a large batch's time. Deletes
// (pruning) keep their trigger.
constexpr char kOldStatusSql[] = "SELECT status, priority FROM tasks WHERE id = ?1";
constexpr char kOldStatusesInRangeSql[] =
    "SELECT status, priority, count(*) FROM tasks WHERE id BETWEEN ?1 AND ?2 "
    "GROUP BY status, priority";
constexpr char kAddCountSql[] =
    "INSERT INTO task_counts (status, priority, n) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (status, priority) DO UPDATE SET n = n + excluded.n";
constexpr char kDeleteMetaSql[] = "DELETE FROM meta WHERE key = ?1";
constexpr char kReadMetaSql[] = "SELECT key, value FROM meta";
// One prune batch: the tasks this subquery selects, their events first. Both statements use it
// in one write transaction with nothing written in between, so they select the same rows.
constexpr char kPrunableIdsSql[] =
    "SELECT id FROM tasks INDEXED BY tasks_prunable "
    "WHERE status IN ('success', 'failed', 'cancelled') AND stopping = 0 "
    "AND finished_at < ?1 LIMIT ?2";

// A batch applied again (the same sequence number) writes the same rows again.
constexpr char kInsertTaskEventSql[] =
    "INSERT OR REPLACE INTO task_events (task_id, seq, time, type, node_id, message) "
    "VALUES (?1, ?6, ?2, ?3, ?4, ?5)";
// Each run: a "scheduled" entry and the next entry that ends a run (or none: still running).
constexpr char kUsageSql[] =
    "WITH ev AS (SELECT task_id, time, type, "
    "LEAD(time) OVER (PARTITION BY task_id ORDER BY seq) AS ended FROM task_events "
    "WHERE type IN ('scheduled', 'requeued', 'node_lost', 'finished', 'cancelled')), "
    "runs AS (SELECT ev.task_id, t.gpu_count, ev.time AS began, "
    "COALESCE(ev.ended, CASE WHEN t.status = 'running' THEN ?3 END) AS ended, "
    "CASE WHEN ?4 THEN t.user ELSE t.team END AS grp "
    "FROM ev JOIN tasks t ON t.id = ev.task_id WHERE ev.type = 'scheduled') "
    "SELECT grp, SUM(gpu_count * (MIN(ended, ?2) - MAX(began, ?1))), COUNT(DISTINCT task_id) "
    "FROM runs WHERE began < ?2 AND ended > ?1 AND ended > began GROUP BY grp ORDER BY grp";
constexpr char kTaskEventsSql[] =
    "SELECT time, type, node_id, message FROM task_events WHERE task_id = ?1 ORDER BY seq";

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
    case SQLITE_INTERRUPT:
      return Status(StatusCode::kCancelled, "interrupted: " + message);
    default:
      return Internal(message);
  }
}

int64_t ToInt64(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t ToUint64(int64_t v) { return static_cast<uint64_t>(v); }

// Outcome of checking a file's first bytes without opening it with SQLite.
Status CheckHeader(const std::string& path, off_t size) {
  static constexpr char kMagic[] = "SQLite format 3";  // Followed by a NUL: 16 bytes.
  if (size == 0) {
    return DataLoss(path +
                    " is an empty file, not a dgpu database; refusing to use or overwrite it");
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
    return DataLoss(path +
                    " is not a SQLite database (bad file header): corrupt or foreign "
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

// How a write transaction changes the kept task counts: the rows it replaces are taken away and
// the rows it writes added, by (status, priority); Flush adds the sums to task_counts.
class CountDeltas {
 public:
  void Add(std::string_view status, std::string_view priority, int64_t n) {
    for (Delta& d : deltas_) {
      if (d.status == status && d.priority == priority) {
        d.n += n;
        return;
      }
    }
    deltas_.push_back({std::string(status), std::string(priority), n});
  }

  // Takes away the rows numbered first..last that exist (about to be replaced).
  Status RemoveExisting(SqliteConnection& conn, core::TaskNumber first, core::TaskNumber last) {
    const bool one = first == last;
    StatusOr<sqlite3_stmt*> stmt = conn.Prepare(one ? kOldStatusSql : kOldStatusesInRangeSql);
    if (!stmt.ok()) return stmt.status();
    StatementScope scope(*stmt);
    sqlite3_bind_int64(*stmt, 1, static_cast<int64_t>(first));
    if (!one) sqlite3_bind_int64(*stmt, 2, static_cast<int64_t>(last));
    while (true) {
      const int rc = sqlite3_step(*stmt);
      if (rc == SQLITE_DONE) return OkStatus();
      if (rc != SQLITE_ROW) return conn.Error(rc, "counting the tasks replaced in");
      Add(ColumnText(*stmt, 0), ColumnText(*stmt, 1), one ? -1 : -sqlite3_column_int64(*stmt, 2));
    }
  }

  Status Flush(SqliteConnection& conn) {
    for (const Delta& d : deltas_) {
      if (d.n == 0) continue;
      StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kAddCountSql);
      if (!stmt.ok()) return stmt.status();
      StatementScope scope(*stmt);
      sqlite3_bind_text(*stmt, 1, d.status.data(), static_cast<int>(d.status.size()),
                        SQLITE_STATIC);
      sqlite3_bind_text(*stmt, 2, d.priority.data(), static_cast<int>(d.priority.size()),
                        SQLITE_STATIC);
      sqlite3_bind_int64(*stmt, 3, d.n);
      if (Status s = StepDone(conn, *stmt, "storing task counts in"); !s.ok()) return s;
    }
    deltas_.clear();
    return OkStatus();
  }

 private:
  struct Delta {
    std::string status, priority;
    int64_t n = 0;
  };
  std::vector<Delta> deltas_;  // A few (status, priority) pairs: a list beats a map.
};

// Binds every field of `t` to the upsert statement (see BindTaskRow).
Status BindTask(SqliteConnection& conn, sqlite3_stmt* stmt, const core::Task& t,
                TaskRowTexts* texts) {
  if (t.id == 0) return InvalidArgument("task number 0 cannot be stored");
  if (t.id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("task number " + std::to_string(t.id) + " is out of range");
  }
  if (int rc = BindTaskRow(stmt, t, texts); rc != SQLITE_OK) {
    return conn.Error(rc, "binding task " + core::FormatTaskId(t.id) + " for");
  }
  return OkStatus();
}

// Steps a task query to the end, handing each decoded row to `fn`; the first error, of reading
// or of `fn`, ends it.
Status StepRows(SqliteConnection& conn, sqlite3_stmt* stmt,
                const std::function<Status(core::Task&&)>& fn) {
  while (true) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading tasks from");
    StatusOr<core::Task> task = ReadTaskRow(stmt, conn.path());
    if (!task.ok()) return task.status();
    if (Status s = fn(std::move(*task)); !s.ok()) return s;
  }
}

Status ForEachRow(SqliteConnection& conn, sqlite3_stmt* stmt,
                  const std::function<void(core::Task&&)>& fn) {
  return StepRows(conn, stmt, [&](core::Task&& t) {
    fn(std::move(t));
    return OkStatus();
  });
}

// The unfinished tasks (see LoadedState) in queue order, each handed to `fn` as it is read;
// the first error, of reading or of `fn`, ends the walk.
Status ForEachUnfinished(SqliteConnection& conn, const std::function<Status(core::Task&&)>& fn) {
  static const std::string kLoadSql =
      "SELECT " + TaskColumns() +
      " FROM tasks WHERE status IN ('pending', 'running') OR stopping = 1 ORDER BY queue_seq, id";
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kLoadSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  return StepRows(conn, *stmt, fn);
}

Status ReadTeamRows(SqliteConnection& conn, std::vector<core::TeamRecord>* teams) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadTeamsSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  teams->clear();
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading teams from");
    core::TeamRecord& r = teams->emplace_back();
    r.name = ColumnText(*stmt, 0);
    r.set = sqlite3_column_int(*stmt, 1) != 0;
    r.limits.online = sqlite3_column_int(*stmt, 2);
    r.limits.batch = sqlite3_column_int(*stmt, 3);
    r.limits.max_gpus = sqlite3_column_int(*stmt, 4);
    r.limits.weight = sqlite3_column_double(*stmt, 5);
    r.deleted = sqlite3_column_int(*stmt, 6) != 0;
    r.usage = sqlite3_column_double(*stmt, 7);
    r.usage_at = sqlite3_column_int64(*stmt, 8);
    if (!core::IsValidTeamName(r.name) || r.limits.online < 0 || r.limits.batch < 0 ||
        r.limits.max_gpus < -1 || !(r.limits.weight > 0) || !(r.usage >= 0)) {
      return DataLoss("team '" + r.name + "' in " + conn.path() + " has invalid limits");
    }
  }
}

Status UpsertTeam(SqliteConnection& conn, const core::TeamRecord& r) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kUpsertTeamSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, r.name.data(), static_cast<int>(r.name.size()), SQLITE_STATIC);
  sqlite3_bind_int(*stmt, 2, r.set ? 1 : 0);
  sqlite3_bind_int(*stmt, 3, r.limits.online);
  sqlite3_bind_int(*stmt, 4, r.limits.batch);
  sqlite3_bind_int(*stmt, 5, r.limits.max_gpus);
  sqlite3_bind_double(*stmt, 6, r.limits.weight);
  sqlite3_bind_int(*stmt, 7, r.deleted ? 1 : 0);
  sqlite3_bind_double(*stmt, 8, r.usage);
  sqlite3_bind_int64(*stmt, 9, r.usage_at);
  return StepDone(conn, *stmt, "storing team " + r.name + " in");
}

Status ReadNodeRows(SqliteConnection& conn, std::vector<core::NodeRecord>* nodes) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadNodesSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  nodes->clear();
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading node modes from");
    core::NodeRecord& r = nodes->emplace_back();
    r.id = ColumnText(*stmt, 0);
    const std::string mode = ColumnText(*stmt, 1);
    std::optional<core::NodeMode> m = core::ParseNodeMode(mode);
    if (r.id.empty() || !m) {
      return DataLoss("node '" + r.id + "' in " + conn.path() + " has an invalid mode '" + mode +
                      "'");
    }
    r.mode = *m;
  }
}

Status UpsertNode(SqliteConnection& conn, const core::NodeRecord& r) {
  const bool remove = r.mode == core::NodeMode::kSchedulable;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(remove ? kDeleteNodeSql : kUpsertNodeSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, r.id.data(), static_cast<int>(r.id.size()), SQLITE_STATIC);
  const std::string_view mode = core::ToString(r.mode);
  if (!remove)
    sqlite3_bind_text(*stmt, 2, mode.data(), static_cast<int>(mode.size()), SQLITE_STATIC);
  return StepDone(conn, *stmt, "storing the mode of node " + r.id + " in");
}

// `seq` orders the event among all others (see the schema).
Status InsertTaskEvent(SqliteConnection& conn, const core::TaskEventRecord& e, int64_t seq) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kInsertTaskEventSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(e.task));
  sqlite3_bind_int64(*stmt, 6, seq);
  sqlite3_bind_int64(*stmt, 2, e.time);
  sqlite3_bind_text(*stmt, 3, e.type.data(), static_cast<int>(e.type.size()), SQLITE_STATIC);
  sqlite3_bind_text(*stmt, 4, e.node_id.data(), static_cast<int>(e.node_id.size()), SQLITE_STATIC);
  sqlite3_bind_text(*stmt, 5, e.message.data(), static_cast<int>(e.message.size()), SQLITE_STATIC);
  return StepDone(conn, *stmt, "storing an event of " + core::FormatTaskId(e.task) + " in");
}

Status ReadMetaRows(SqliteConnection& conn, StoreMeta* meta) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  *meta = StoreMeta{};
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) {
      if (Status st = ReadTeamRows(conn, &meta->teams); !st.ok()) return st;
      return ReadNodeRows(conn, &meta->nodes);
    }
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

Status UpsertTask(SqliteConnection& conn, const core::Task& task, CountDeltas* counts) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(UpsertTaskSql());
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  TaskRowTexts texts;
  if (Status s = BindTask(conn, *stmt, task, &texts); !s.ok()) return s;
  if (Status s = counts->RemoveExisting(conn, task.id, task.id); !s.ok()) return s;
  counts->Add(core::ToString(task.status), core::ToString(task.spec.priority), 1);
  return StepDone(conn, *stmt, "storing " + core::FormatTaskId(task.id) + " in");
}

// Stores every member of the array whose first member is `first` (see InsertArraySql).
Status InsertArray(SqliteConnection& conn, const core::Task& first, CountDeltas* counts) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(InsertArraySql());
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  TaskRowTexts texts;
  if (Status s = BindTask(conn, *stmt, first, &texts); !s.ok()) return s;
  if (int rc = sqlite3_bind_int(*stmt, ArrayMembersParameter(), first.spec.array_size);
      rc != SQLITE_OK) {
    return conn.Error(rc, "binding the array of " + core::FormatTaskId(first.id) + " for");
  }
  const auto members = static_cast<core::TaskNumber>(first.spec.array_size);
  if (Status s = counts->RemoveExisting(conn, first.id, first.id + members - 1); !s.ok()) return s;
  counts->Add(core::ToString(first.status), core::ToString(first.spec.priority),
              first.spec.array_size);
  return StepDone(conn, *stmt,
                  "storing the " + std::to_string(first.spec.array_size) +
                      " members of the array from " + core::FormatTaskId(first.id) + " in");
}

// The statements that record `version` as the schema version, in both places.
std::string SetVersionSql(int version) {
  const std::string v = std::to_string(version);
  return "UPDATE meta SET value = " + v +
         " WHERE key = 'schema_version'; PRAGMA user_version = " + v + ";";
}

// Version 1 and every migration: the layout of a new database.
std::string LatestSchemaSql() {
  std::string sql(kVersion1Schema);
  for (const Migration& m : kMigrations) sql += m.sql;
  return sql + SetVersionSql(kSchemaVersion);
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
    Status s =
        (*conn)->Exec("PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL;", "configuring");
    if (s.ok()) {
      s = (*conn)->Exec("BEGIN; PRAGMA application_id = " + std::to_string(kApplicationId) + ";" +
                            LatestSchemaSql() + "COMMIT;",
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

std::optional<int> ParseVersion(std::string_view text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// The schema version of a dgpu database: meta.schema_version and PRAGMA user_version, which
// must agree, and must not be newer than this build.
StatusOr<int> ReadSchemaVersion(SqliteConnection& conn) {
  const std::string& path = conn.path();
  StatusOr<std::string> meta =
      conn.QueryText("SELECT value FROM meta WHERE key = 'schema_version'", "reading the meta of");
  if (!meta.ok()) {
    return DataLoss(path + " carries the dgpu application id but has no readable meta table (" +
                    meta.status().message() + "); refusing to use or modify it");
  }
  StatusOr<std::string> user = conn.QueryText("PRAGMA user_version", "reading the version of");
  if (!user.ok()) return user.status();
  const std::optional<int> meta_version = ParseVersion(*meta);
  const std::optional<int> user_version = ParseVersion(*user);
  if (!meta_version || !user_version || *meta_version < 1) {
    return DataLoss(path + " has an unreadable schema version (meta schema_version '" + *meta +
                    "', user_version '" + *user + "'); refusing to use or modify it");
  }
  const int newest = std::max(*meta_version, *user_version);
  if (newest > kSchemaVersion) {
    return FailedPrecondition(path + " has schema version " + std::to_string(newest) +
                              "; this dgpu-scheduler reads versions up to " +
                              std::to_string(kSchemaVersion) + ": use a newer binary");
  }
  if (*meta_version != *user_version) {
    return DataLoss(path + " has inconsistent schema versions (meta schema_version " + *meta +
                    ", user_version " + *user + "); refusing to use or modify it");
  }
  return *meta_version;
}

// Checks an existing dgpu database through a read-only connection, which neither writes the
// file nor checkpoints a WAL into it, and returns its schema version.
StatusOr<int> ValidateDatabase(const std::string& path) {
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
  return ReadSchemaVersion(conn);
}

// The first of `<path>.v<version>.bak`, `<path>.v<version>.bak.2`, `.3`, ... that is free.
std::string FreeBackupPath(const std::string& path, int version) {
  const std::string base = path + ".v" + std::to_string(version) + ".bak";
  std::string candidate = base;
  struct stat st {};
  for (int n = 2; ::lstat(candidate.c_str(), &st) == 0; ++n) {
    candidate = base + "." + std::to_string(n);
  }
  return candidate;
}

// Copies the database at `from`, with what its WAL holds, into the new file `to` with SQLite's
// online backup API; the copy is a rollback-journal database that needs no WAL beside it.
Status CopyDatabase(const std::string& from, const std::string& to) {
  StatusOr<std::unique_ptr<SqliteConnection>> source =
      SqliteConnection::Open(from, SQLITE_OPEN_READONLY);
  if (!source.ok()) return source.status();
  StatusOr<std::unique_ptr<SqliteConnection>> copy =
      SqliteConnection::Open(to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (!copy.ok()) return copy.status();
  sqlite3_backup* backup = sqlite3_backup_init((*copy)->db(), "main", (*source)->db(), "main");
  if (backup == nullptr) return (*copy)->Error(sqlite3_errcode((*copy)->db()), "copying into");
  const int step = sqlite3_backup_step(backup, -1);
  const int finish = sqlite3_backup_finish(backup);
  if (step != SQLITE_DONE) return (*copy)->Error(step, "copying into");
  if (finish != SQLITE_OK) return (*copy)->Error(finish, "copying into");
  StatusOr<std::string> mode =
      (*copy)->QueryText("PRAGMA journal_mode = DELETE", "configuring the journal of");
  return mode.ok() ? OkStatus() : mode.status();
}

// Removes the snapshot files (see Database::Snapshot) that a process ended before removing; the
// caller holds the directory's lock, so none of them is being written or sent.
void RemoveLeftoverSnapshots(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(std::string(kDatabaseFileName) + ".")) continue;
    if (name.ends_with(kSnapshotFileSuffix) ||
        name.ends_with(std::string(kSnapshotFileSuffix) + "-journal")) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

// Writes the copy of `path` that an upgrade keeps (see FreeBackupPath) under a temporary name,
// fsyncs it and renames it into place; returns its path.
StatusOr<std::string> WriteBackup(const std::string& dir, const std::string& path, int version) {
  const std::string backup = FreeBackupPath(path, version);
  const std::string tmp = backup + kCreatingSuffix;
  ::unlink(tmp.c_str());
  ::unlink((tmp + "-journal").c_str());
  Status s = CopyDatabase(path, tmp);
  if (s.ok()) s = common::ReplaceFileAtomically(tmp, backup);  // fsync, rename, fsync dir.
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    ::unlink((tmp + "-journal").c_str());
    return Status(s.code(), "cannot back up " + path + " before upgrading its schema: " +
                                s.message() + "; the database is unchanged");
  }
  return backup;
}

// Runs the migrations of a database at `version`, each in one transaction that also sets the
// version it reaches. A failed step is rolled back; the steps before it stay applied.
Status Migrate(SqliteConnection& conn, int version, const std::string& backup_path) {
  for (const Migration& m : kMigrations) {
    if (m.from_version < version) continue;
    const std::string sql =
        "BEGIN IMMEDIATE;" + std::string(m.sql) + SetVersionSql(m.from_version + 1) + "COMMIT;";
    const int rc = sqlite3_exec(conn.db(), sql.c_str(), nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) continue;
    const std::string from = std::to_string(m.from_version);
    const std::string step = "upgrading " + conn.path() + " from schema version " + from + " to " +
                             std::to_string(m.from_version + 1) + " (" + std::string(m.name) + ")";
    Status failed = SqliteStatus(rc, step, sqlite3_errmsg(conn.db()));
    conn.RollbackIfActive();
    return Status(failed.code(), failed.message() + "; the step was rolled back, the file is at " +
                                     "schema version " + from +
                                     " (copy before the upgrade: " + backup_path + ")");
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
  return "SELECT " + TaskColumns() + " FROM tasks " + std::string(where_and_order);
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

  RemoveLeftoverSnapshots(dir);
  if (!exists) {
    if (Status s = CreateDatabase(path); !s.ok()) return s;
  }
  StatusOr<int> version = ValidateDatabase(path);
  if (!version.ok()) return version.status();
  std::optional<SchemaUpgrade> upgrade;
  if (*version < kSchemaVersion) {
    StatusOr<std::string> backup = WriteBackup(dir, path, *version);
    if (!backup.ok()) return backup.status();
    upgrade = SchemaUpgrade{*version, kSchemaVersion, std::move(*backup)};
  }

  StatusOr<std::unique_ptr<SqliteConnection>> writer =
      SqliteConnection::Open(path, SQLITE_OPEN_READWRITE);
  if (!writer.ok()) return writer.status();
  if (sqlite3_db_readonly((*writer)->db(), "main") == 1) {
    return Unavailable(path + " can only be opened read-only");
  }
  // In the file's own journal mode, so that a failed step leaves the file as it was.
  if (upgrade) {
    if (Status s = Migrate(**writer, *version, upgrade->backup_path); !s.ok()) return s;
  }
  StatusOr<std::string> mode =
      (*writer)->QueryText("PRAGMA journal_mode = WAL", "switching to WAL mode");
  if (!mode.ok()) return mode.status();
  if (*mode != "wal") {
    return Unavailable("cannot switch " + path + " to WAL mode (journal mode is '" + *mode + "')");
  }
  // temp_store MEMORY: statement journals (the pages a statement changes, kept to undo it
  // alone, e.g. a prune's DELETE with its count trigger) stay in memory, not in a temporary file.
  if (Status s = (*writer)->Exec(
          std::string(fsync ? "PRAGMA synchronous = FULL;" : "PRAGMA synchronous = NORMAL;") +
              " PRAGMA journal_size_limit = " + std::to_string(kJournalSizeLimitBytes) +
              "; PRAGMA temp_store = MEMORY;",
          "configuring");
      !s.ok()) {
    return s;
  }
  std::vector<std::unique_ptr<SqliteConnection>> readers;
  for (int i = 0; i < kReaderConnections; ++i) {
    StatusOr<std::unique_ptr<SqliteConnection>> reader =
        SqliteConnection::Open(path, SQLITE_OPEN_READONLY);
    if (!reader.ok()) return reader.status();
    readers.push_back(std::move(*reader));
  }

  return std::unique_ptr<Database>(new Database(dir, path, lock.Release(), std::move(*writer),
                                                std::move(readers), std::move(upgrade)));
}

Database::Database(std::string dir, std::string path, int lock_fd,
                   std::unique_ptr<SqliteConnection> writer,
                   std::vector<std::unique_ptr<SqliteConnection>> readers,
                   std::optional<SchemaUpgrade> upgrade)
    : dir_(std::move(dir)),
      path_(std::move(path)),
      lock_fd_(lock_fd),
      upgrade_(std::move(upgrade)),
      writer_(std::move(writer)),
      readers_(std::move(readers)) {}

Database::ReaderLease::ReaderLease(Database* db) : db_(db) {
  std::unique_lock<std::mutex> lock(db_->reader_mu_);
  db_->reader_cv_.wait(lock, [&] { return !db_->readers_.empty(); });
  conn_ = std::move(db_->readers_.back());
  db_->readers_.pop_back();
}

Database::ReaderLease::~ReaderLease() {
  {
    std::lock_guard<std::mutex> lock(db_->reader_mu_);
    db_->readers_.push_back(std::move(conn_));
  }
  db_->reader_cv_.notify_one();
}

Database::~Database() {
  // The writer closes last: as the last connection it checkpoints the WAL into the file.
  readers_.clear();
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
      case core::Change::Kind::kTeamUpsert: {
        const core::TeamRecord& r = change.team;
        if (!core::IsValidTeamName(r.name)) {
          return InvalidArgument("team name '" + r.name + "' is not valid");
        }
        if (r.limits.online < 0 || r.limits.batch < 0 || r.limits.max_gpus < -1 ||
            !(r.limits.weight > 0) || !(r.usage >= 0)) {
          return InvalidArgument("team " + r.name + " has invalid limits or usage");
        }
        break;
      }
      case core::Change::Kind::kNodeUpsert:
        if (change.node.id.empty()) return InvalidArgument("a node mode needs a node id");
        break;
      case core::Change::Kind::kTaskEvent:
        if (change.event.task == 0 ||
            change.event.task > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return InvalidArgument("an event of task number " + std::to_string(change.event.task) +
                                 " cannot be stored");
        }
        if (change.event.type.empty()) return InvalidArgument("a task event needs a type");
        break;
      case core::Change::Kind::kTaskArray: {
        const core::Task& first = change.task;
        if (first.id == 0) return InvalidArgument("task number 0 cannot be stored");
        if (first.spec.array_index != 0 || first.spec.array_size < 1 ||
            first.spec.array_size > core::kMaxArraySize) {
          return InvalidArgument("the array from " + core::FormatTaskId(first.id) +
                                 " does not start with member 0 of 1 to " +
                                 std::to_string(core::kMaxArraySize) + " members");
        }
        if (first.id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) -
                           static_cast<uint64_t>(first.spec.array_size)) {
          return InvalidArgument("the array from task number " + std::to_string(first.id) +
                                 " is out of range");
        }
        break;
      }
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
  CountDeltas counts;
  // Events are ordered by batch, then by place in the batch.
  int64_t event_seq = ToInt64(last_seq) << 20;
  for (const core::Change& change : changes) {
    switch (change.kind) {
      case core::Change::Kind::kTaskUpsert:
        if (Status s = UpsertTask(conn, change.task, &counts); !s.ok()) return s;
        raise_next_to = std::max(raise_next_to, change.task.id + 1);
        break;
      case core::Change::Kind::kQuotaPercent:
        if (Status s = SetOnlinePercent(conn, change.online_percent); !s.ok()) return s;
        break;
      case core::Change::Kind::kNextTaskNumber:
        raise_next_to = std::max(raise_next_to, change.next_number);
        break;
      case core::Change::Kind::kTeamUpsert:
        if (Status s = UpsertTeam(conn, change.team); !s.ok()) return s;
        break;
      case core::Change::Kind::kNodeUpsert:
        if (Status s = UpsertNode(conn, change.node); !s.ok()) return s;
        break;
      case core::Change::Kind::kTaskArray:
        if (Status s = InsertArray(conn, change.task, &counts); !s.ok()) return s;
        raise_next_to = std::max(
            raise_next_to, change.task.id + static_cast<uint64_t>(change.task.spec.array_size));
        break;
      case core::Change::Kind::kTaskEvent:
        if (Status s = InsertTaskEvent(conn, change.event, event_seq++); !s.ok()) return s;
        break;
    }
  }
  if (Status s = counts.Flush(conn); !s.ok()) return s;
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
  ReaderLease reader(this);
  StoreMeta meta;
  if (Status s = ReadMetaRows(*reader, &meta); !s.ok()) return s;
  return meta;
}

StatusOr<LoadedState> Database::Load() {
  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  Transaction txn(conn);
  if (Status s = txn.BeginRead(); !s.ok()) return s;
  LoadedState state;
  if (Status s = ReadMetaRows(conn, &state); !s.ok()) return s;
  Status s = ForEachUnfinished(conn, [&](core::Task&& t) {
    state.tasks.push_back(std::move(t));
    return OkStatus();
  });
  if (!s.ok()) return s;
  return state;
}

Status Database::LoadEach(const std::function<Status(core::Task&&)>& fn, StoreMeta* meta) {
  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  Transaction txn(conn);
  if (Status s = txn.BeginRead(); !s.ok()) return s;
  if (Status s = ReadMetaRows(conn, meta); !s.ok()) return s;
  return ForEachUnfinished(conn, fn);
}

StatusOr<TaskPage> Database::ListTasks(const TaskQuery& query) {
  if (query.limit < 0) return InvalidArgument("limit must not be negative");
  if (query.offset < 0) return InvalidArgument("offset must not be negative");
  if (query.offset > 0 && query.before) {
    return InvalidArgument("offset and before cannot be combined");
  }
  // One statement per filter combination, so that each uses its own index; the total is summed
  // over the kept counts of the matching (status, priority) pairs.
  static const std::string kWhere[4] = {"", "WHERE status = ?1 ", "WHERE priority = ?2 ",
                                        "WHERE status = ?1 AND priority = ?2 "};
  static const std::string kAnd[4] = {"WHERE ", "WHERE status = ?1 AND ",
                                      "WHERE priority = ?2 AND ",
                                      "WHERE status = ?1 AND priority = ?2 AND "};
  const int variant = (query.status ? 1 : 0) + (query.priority ? 2 : 0);
  std::string count_sql = "SELECT coalesce(sum(n), 0) FROM task_counts " + kWhere[variant];
  std::string page_sql = query.before
                             ? TaskSelect(kAnd[variant] + "id < ?5 ORDER BY id DESC LIMIT ?3")
                             : TaskSelect(kWhere[variant] + "ORDER BY id DESC LIMIT ?3 OFFSET ?4");
  if (query.team) {
    // A team's rows through their own index; the other filters are checked row by row.
    const std::string where = kAnd[variant] + "team = ?6 ";
    count_sql = "SELECT count(*) FROM tasks INDEXED BY tasks_by_team " + where;
    page_sql = query.before ? TaskSelect("INDEXED BY tasks_by_team " + where +
                                         "AND id < ?5 ORDER BY id DESC LIMIT ?3")
                            : TaskSelect("INDEXED BY tasks_by_team " + where +
                                         "ORDER BY id DESC LIMIT ?3 OFFSET ?4");
  }

  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  Transaction txn(conn);
  if (Status s = txn.BeginRead(); !s.ok()) return s;
  auto bind_filters = [&](sqlite3_stmt* stmt) {
    if (query.status) {
      const std::string_view text = core::ToString(*query.status);
      sqlite3_bind_text(stmt, 1, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
    }
    if (query.priority) {
      const std::string_view text = core::ToString(*query.priority);
      sqlite3_bind_text(stmt, 2, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
    }
    if (query.team) {
      sqlite3_bind_text(stmt, 6, query.team->data(), static_cast<int>(query.team->size()),
                        SQLITE_STATIC);
    }
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
  if (query.limit == 0) return page;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(page_sql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  bind_filters(*stmt);
  // One row more than the page says whether another page follows.
  sqlite3_bind_int64(*stmt, 3, static_cast<int64_t>(query.limit) + 1);
  if (query.before) {
    const uint64_t max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    sqlite3_bind_int64(*stmt, 5, ToInt64(std::min(*query.before, max)));
  } else {
    sqlite3_bind_int(*stmt, 4, query.offset);
  }
  Status s = ForEachRow(conn, *stmt, [&](core::Task&& t) { page.tasks.push_back(std::move(t)); });
  if (!s.ok()) return s;
  if (page.tasks.size() > static_cast<size_t>(query.limit)) {
    page.tasks.pop_back();
    page.next = page.tasks.back().id;
  }
  return page;
}

StatusOr<std::optional<core::Task>> Database::GetTask(core::TaskNumber id) {
  if (id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::optional<core::Task>();
  }
  static const std::string kGetSql = TaskSelect("WHERE id = ?1");
  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kGetSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(id));
  std::optional<core::Task> found;
  Status s = ForEachRow(conn, *stmt, [&](core::Task&& t) { found = std::move(t); });
  if (!s.ok()) return s;
  return found;
}

StatusOr<std::vector<core::TaskEventRecord>> Database::TaskEvents(core::TaskNumber id) {
  std::vector<core::TaskEventRecord> events;
  if (id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return events;
  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kTaskEventsSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(id));
  while (true) {
    const int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return events;
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading the events of a task from");
    core::TaskEventRecord& e = events.emplace_back();
    e.task = id;
    e.time = sqlite3_column_int64(*stmt, 0);
    e.type = ColumnText(*stmt, 1);
    e.node_id = ColumnText(*stmt, 2);
    e.message = ColumnText(*stmt, 3);
  }
}

StatusOr<std::vector<UsageRow>> Database::Usage(const UsageQuery& query) {
  if (query.from >= query.to) return InvalidArgument("from must be before to");
  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kUsageSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, query.from);
  sqlite3_bind_int64(*stmt, 2, query.to);
  sqlite3_bind_int64(*stmt, 3, query.now);
  sqlite3_bind_int(*stmt, 4, query.by_user ? 1 : 0);
  std::vector<UsageRow> rows;
  while (true) {
    const int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return rows;
    if (rc != SQLITE_ROW) return conn.Error(rc, "summing the GPU time of tasks in");
    UsageRow& row = rows.emplace_back();
    row.group = ColumnText(*stmt, 0);
    row.gpu_seconds = static_cast<double>(sqlite3_column_int64(*stmt, 1)) / 1e6;
    row.tasks = sqlite3_column_int64(*stmt, 2);
  }
}

StatusOr<int> Database::PruneFinished(core::TimeMicros older_than_micros, int batch_limit) {
  if (batch_limit < 1) return InvalidArgument("batch_limit must be at least 1");
  static const std::string kPruneEvents =
      std::string("DELETE FROM task_events WHERE task_id IN (") + kPrunableIdsSql + ")";
  static const std::string kPruneTasks =
      std::string("DELETE FROM tasks WHERE id IN (") + kPrunableIdsSql + ")";
  int total = 0;
  while (true) {
    // The lock is taken per batch so that journal commits interleave with a long prune.
    std::lock_guard<std::mutex> lock(writer_mu_);
    SqliteConnection& conn = *writer_;
    Transaction txn(conn);
    if (Status s = txn.BeginWrite(); !s.ok()) return s;
    int deleted = 0;
    for (const std::string* sql : {&kPruneEvents, &kPruneTasks}) {
      StatusOr<sqlite3_stmt*> stmt = conn.Prepare(*sql);
      if (!stmt.ok()) return stmt.status();
      StatementScope scope(*stmt);
      sqlite3_bind_int64(*stmt, 1, older_than_micros);
      sqlite3_bind_int(*stmt, 2, batch_limit);
      if (Status s = StepDone(conn, *stmt, "pruning finished tasks in"); !s.ok()) return s;
      deleted = sqlite3_changes(conn.db());  // The tasks', once the second has run.
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
  StatusOr<std::unique_ptr<ReadSnapshot>> snapshot = OpenReadSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  if (meta != nullptr) *meta = (*snapshot)->meta();
  return (*snapshot)->ForEachTask(fn);
}

StatusOr<std::unique_ptr<ReadSnapshot>> Database::OpenReadSnapshot() {
  StatusOr<std::unique_ptr<SqliteConnection>> conn =
      SqliteConnection::Open(path_, SQLITE_OPEN_READONLY);
  if (!conn.ok()) return conn.status();
  std::unique_ptr<ReadSnapshot> snapshot(new ReadSnapshot(std::move(*conn)));
  if (Status s = snapshot->Begin(); !s.ok()) return s;
  return snapshot;
}

StatusOr<SnapshotFile> Database::Snapshot() {
  SnapshotFile file;
  file.path = path_ + "." + std::to_string(snapshots_.fetch_add(1) + 1) + kSnapshotFileSuffix;
  auto remove = [&] {
    ::unlink(file.path.c_str());
    ::unlink((file.path + "-journal").c_str());
  };
  remove();
  Status s = CopyDatabase(path_, file.path);
  if (s.ok()) {
    // What the copy holds, read from the copy itself.
    StatusOr<std::unique_ptr<SqliteConnection>> copy =
        SqliteConnection::Open(file.path, SQLITE_OPEN_READONLY);
    s = copy.status();
    if (s.ok()) s = ReadMetaRows(**copy, &file.meta);
    if (s.ok()) {
      StatusOr<std::string> tasks = (*copy)->QueryText(
          "SELECT coalesce(sum(n), 0) FROM task_counts", "counting the tasks of");
      s = tasks.status();
      if (s.ok()) file.tasks = std::stoll(*tasks);
    }
  }
  struct stat st {};
  if (s.ok() && ::stat(file.path.c_str(), &st) != 0) {
    s = Unavailable("cannot inspect " + file.path + ": " + ErrnoText(errno));
  }
  if (!s.ok()) {
    remove();
    return Status(s.code(), "cannot take a snapshot of " + path_ + ": " + s.message());
  }
  file.bytes = st.st_size;
  return file;
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
  if (Status s = conn.Exec("DELETE FROM tasks; DELETE FROM task_counts;", "clearing the tasks of");
      !s.ok()) {
    return s;
  }
  core::TaskNumber next = meta.next_task_number;
  CountDeltas counts;
  for (const core::Task& task : tasks) {
    if (Status s = UpsertTask(conn, task, &counts); !s.ok()) return s;
    next = std::max(next, task.id + 1);
  }
  if (Status s = counts.Flush(conn); !s.ok()) return s;
  // The history of the tasks kept stays (what happened meanwhile on the other side is not sent).
  if (Status s = conn.Exec("DELETE FROM task_events WHERE task_id NOT IN (SELECT id FROM tasks)",
                           "clearing the events of tasks gone from");
      !s.ok()) {
    return s;
  }
  if (Status s = SetOnlinePercent(conn, meta.online_percent); !s.ok()) return s;
  if (Status s = conn.Exec("DELETE FROM teams", "clearing the teams of"); !s.ok()) return s;
  for (const core::TeamRecord& team : meta.teams) {
    if (Status s = UpsertTeam(conn, team); !s.ok()) return s;
  }
  if (Status s = conn.Exec("DELETE FROM nodes", "clearing the node modes of"); !s.ok()) return s;
  for (const core::NodeRecord& node : meta.nodes) {
    if (Status s = UpsertNode(conn, node); !s.ok()) return s;
  }
  if (Status s = SetMetaInt(conn, "epoch", meta.epoch); !s.ok()) return s;
  if (Status s = SetMetaInt(conn, "next_task_number", next); !s.ok()) return s;
  if (Status s = SetMetaInt(conn, "last_applied_seq", meta.last_applied_seq); !s.ok()) return s;
  return txn.Commit();
}

// --- ReadSnapshot ----------------------------------------------------------------------------

ReadSnapshot::ReadSnapshot(std::unique_ptr<SqliteConnection> conn) : conn_(std::move(conn)) {}

ReadSnapshot::~ReadSnapshot() {
  if (!conn_) return;
  sqlite3_progress_handler(conn_->db(), 0, nullptr, nullptr);
  conn_->RollbackIfActive();
}

void ReadSnapshot::InterruptWhen(std::function<bool()> stop) {
  stop_ = std::move(stop);
  if (!stop_) {
    sqlite3_progress_handler(conn_->db(), 0, nullptr, nullptr);
    return;
  }
  constexpr int kInstructions = 1000;
  sqlite3_progress_handler(
      conn_->db(), kInstructions,
      [](void* self) { return static_cast<ReadSnapshot*>(self)->stop_() ? 1 : 0; }, this);
}

// The snapshot is taken by the first read after BEGIN: the meta values.
Status ReadSnapshot::Begin() {
  if (Status s = conn_->Exec("BEGIN", "starting a read on"); !s.ok()) return s;
  return ReadMetaRows(*conn_, &meta_);
}

Status ReadSnapshot::ForEachQueued(core::Priority p,
                                   const std::function<void(core::TaskNumber)>& fn) {
  static const std::string kQueuedSql =
      "SELECT id FROM tasks INDEXED BY tasks_unfinished "
      "WHERE (status IN ('pending', 'running') OR stopping = 1) AND status = 'pending' "
      "AND priority = ?1 ORDER BY queue_seq, id";
  StatusOr<sqlite3_stmt*> stmt = conn_->Prepare(kQueuedSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  const std::string_view priority = core::ToString(p);
  sqlite3_bind_text(*stmt, 1, priority.data(), static_cast<int>(priority.size()), SQLITE_STATIC);
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn_->Error(rc, "reading the queues from");
    fn(ToUint64(sqlite3_column_int64(*stmt, 0)));
  }
}

Status ReadSnapshot::ForEachUnfinished(const std::function<void(const core::Task&)>& fn) {
  // The ids come from the partial index, sorted; rows are then fetched by id in that order.
  static const std::string kUnfinishedSql = TaskSelect(
      "WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_unfinished "
      "WHERE status IN ('pending', 'running') OR stopping = 1) ORDER BY id");
  StatusOr<sqlite3_stmt*> stmt = conn_->Prepare(kUnfinishedSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  return ForEachRow(*conn_, *stmt, [&](core::Task&& t) { fn(t); });
}

Status ReadSnapshot::ForEachTask(const std::function<void(const core::Task&)>& fn) {
  static const std::string kAllSql = TaskSelect("ORDER BY id");
  StatusOr<sqlite3_stmt*> stmt = conn_->Prepare(kAllSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  return ForEachRow(*conn_, *stmt, [&](core::Task&& t) { fn(t); });
}

}  // namespace dgpu::store
