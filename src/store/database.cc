#include "store/database.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <string_view>
#include <utility>

#include "common/atomic_file.h"
#include "store/meta_rows.h"
#include "store/schema_upgrade.h"
#include "store/sqlite.h"
#include "store/task_codec.h"
#include "store/task_rows.h"

namespace dgpu::store {
namespace {

constexpr int64_t kJournalSizeLimitBytes = 64 << 20;
constexpr char kLockFileName[] = "LOCK";

constexpr char kRaiseNextTaskNumberSql[] =
    "INSERT INTO meta (key, value) VALUES ('next_task_number', ?1) "
    "ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)";

// One prune batch: the tasks this subquery selects, their events first. Both statements use it
// in one write transaction with nothing written in between, so they select the same rows.
constexpr char kPrunableIdsSql[] =
    "SELECT id FROM tasks INDEXED BY tasks_prunable "
    "WHERE status IN ('success', 'failed', 'cancelled') AND stopping = 0 "
    "AND finished_at < ?1 LIMIT ?2";

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
            !(r.limits.weight > 0) || !(r.usage >= 0) || r.limits.default_time_limit < 0 ||
            r.limits.default_time_limit > core::kMaxTimeLimitSeconds) {
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

StatusOr<std::vector<core::StoredTaskState>> Database::TaskStates(core::TaskNumber first,
                                                                  core::TaskNumber last) {
  std::vector<core::StoredTaskState> out;
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (first > kMax || first > last) return out;
  static constexpr char kSql[] =
      "SELECT id, status, started_at != 0 OR attempts > 0, array_index, array_size FROM tasks "
      "WHERE id BETWEEN ?1 AND ?2";
  ReaderLease reader(this);
  SqliteConnection& conn = *reader;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(first));
  sqlite3_bind_int64(*stmt, 2, ToInt64(std::min(last, kMax)));
  while (true) {
    const int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return out;
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading the states of tasks from");
    core::StoredTaskState& t = out.emplace_back();
    t.id = ToUint64(sqlite3_column_int64(*stmt, 0));
    const std::string status = ColumnText(*stmt, 1);
    std::optional<core::TaskStatus> parsed = core::ParseTaskStatus(status);
    if (!parsed)
      return DataLoss("stored " + core::FormatTaskId(t.id) + " has status '" + status + "'");
    t.status = *parsed;
    t.started = sqlite3_column_int64(*stmt, 2) != 0;
    t.array_index = static_cast<int32_t>(sqlite3_column_int64(*stmt, 3));
    t.array_size = static_cast<int32_t>(sqlite3_column_int64(*stmt, 4));
  }
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
