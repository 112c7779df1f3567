// Database: the durable home of the scheduler's state, one SQLite file `<dir>/dgpu.db`.
//
// What it holds: every task (one row each, all fields of core::Task), plus key-values in `meta`:
// schema_version, online_percent (absent until first set), epoch, next_task_number and
// last_applied_seq (the journal / replication sequence number of the last applied batch).
//
// Durability: WAL mode with synchronous=FULL, so every committed transaction has been fsynced
// before the call returns. A new database is built under a temporary name and renamed into
// place, so `dgpu.db` is either absent or a complete database.
//
// Safety: Open never modifies a file it does not recognise. A file without the SQLite header,
// or failing `PRAGMA quick_check`, is refused with DataLoss; a SQLite database of another
// application (different application_id) is refused with FailedPrecondition. The message names
// the path and the problem. A `<dir>/LOCK` file (flock) keeps a second process (or a second
// Database in this process) off the same directory.
//
// Schema versions (schema.h): `meta.schema_version` and `PRAGMA user_version` must agree
// (DataLoss otherwise). A database newer than kSchemaVersion is refused, unmodified, with
// FailedPrecondition("<path> has schema version N; this dgpu-scheduler reads versions up to M:
// use a newer binary"). An older one is upgraded in place: first a copy of it is written next to
// it with SQLite's online backup API (`dgpu.db.v<N>.bak`, or `dgpu.db.v<N>.bak.2`, `.3`, ... if
// that name is taken: an existing backup is never overwritten), fsynced and renamed into place;
// then each migration runs in its own transaction, which also sets both version fields. A step
// that fails is rolled back (the file keeps the version before it) and Open fails with the
// step's name and the reason.
//
// Errors from SQLite map as follows: SQLITE_FULL -> ResourceExhausted("disk full: ..."),
// SQLITE_READONLY / CANTOPEN / IOERR / BUSY / PERM -> Unavailable, SQLITE_CORRUPT / NOTADB ->
// DataLoss, anything else -> Internal. A write that fails is rolled back whole: nothing of it
// is visible afterwards.
//
// Thread safety: all methods may be called from any thread. Writes (Apply, SetEpoch,
// PruneFinished, ReplaceAll) are serialised on one connection; point reads and pages share a
// second connection, so queries do not wait for a commit's fsync. Reads see committed data
// only, each call a consistent snapshot. Long scans (ReadSnapshot, ForEachTask) open a
// connection of their own, so point reads never wait behind them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/types.h"
#include "store/schema.h"

namespace dgpu::store {

class SqliteConnection;  // Internal: one SQLite connection with its prepared statements.

// `PRAGMA application_id` of every dgpu database ("DGPU" in ASCII).
inline constexpr int32_t kApplicationId = 0x44475055;
inline constexpr char kDatabaseFileName[] = "dgpu.db";

// What Open did to bring an older database up to kSchemaVersion.
struct SchemaUpgrade {
  int from_version = 0;
  int to_version = 0;
  std::string backup_path;  // The copy of the database as it was before the upgrade.
};

// The key-values kept beside the tasks.
struct StoreMeta {
  std::optional<double> online_percent;  // Absent until a quota change was stored.
  uint64_t epoch = 0;
  core::TaskNumber next_task_number = 1;  // Never decreases; survives pruning.
  uint64_t last_applied_seq = 0;
  // Teams whose limits were set or deleted through the API, or whose fair-share usage was
  // written out (table `teams`), by name.
  std::vector<core::TeamRecord> teams;
  // Nodes an operator cordoned or is draining (table `nodes`), by id.
  std::vector<core::NodeRecord> nodes;
};

// What a restart needs: the unfinished tasks and the meta values, from one snapshot.
struct LoadedState : StoreMeta {
  // Pending and running tasks, plus cancelled tasks still stopping (stopping == true), ordered
  // by queue_seq then id. Finished tasks stay in the database only.
  std::vector<core::Task> tasks;
};

// Which tasks a page holds: the filters, then (highest id first) either `offset` rows skipped
// or, by keyset, only the tasks numbered below `before`; at most `limit` of them.
struct TaskQuery {
  std::optional<core::TaskStatus> status;
  std::optional<core::Priority> priority;
  int limit = 50;
  int offset = 0;
  std::optional<core::TaskNumber> before;
  // A team's tasks only. Its total is counted over the team's rows (index tasks_by_team), so it
  // grows with the team's history, unlike the kept counts of the other filters.
  std::optional<std::string> team;
};

// GPU time used in [from, to), by team or by user: every run counts from its "scheduled" entry
// to the entry that ended it (requeued, node_lost, finished, cancelled), a run still going until
// `now`, each second times the task's GPUs. Tasks pruned (and runs of tasks stored before their
// history was kept) are not counted.
struct UsageQuery {
  core::TimeMicros from = 0;
  core::TimeMicros to = 0;
  core::TimeMicros now = 0;
  bool by_user = false;  // Else by team.
};
struct UsageRow {
  std::string group;  // The team or the user ("" for tasks without one).
  double gpu_seconds = 0;
  int64_t tasks = 0;  // Tasks with GPU time in the range.

  bool operator==(const UsageRow&) const = default;
};

struct TaskPage {
  std::vector<core::Task> tasks;  // Highest id first.
  // Rows matching the filters, ignoring limit, offset and before; kept in table task_counts by
  // every write (and a trigger for deletes), so reading it costs the same at any table size.
  int64_t total = 0;
  // When more rows match past this page: the number of its last task, the `before` of the
  // next page. 0 on the last page.
  core::TaskNumber next = 0;
};

// A copy of the whole database made by Database::Snapshot.
struct SnapshotFile {
  std::string path;   // The new file; its owner removes it.
  int64_t bytes = 0;  // Its size.
  int64_t tasks = 0;  // The tasks it holds, finished ones included.
  StoreMeta meta;     // Its meta values (last_applied_seq says which write it ends with).
};

// The name of a snapshot's temporary file beside dgpu.db ends with this; Open removes any that
// a process left behind.
inline constexpr char kSnapshotFileSuffix[] = ".snapshot.tmp";

// Checks what Apply would refuse without touching storage: a task numbered 0 or above
// INT64_MAX, an online_percent outside [0, 1]. InvalidArgument naming the problem.
Status ValidateChanges(const std::vector<core::Change>& changes);

class ReadSnapshot;

class Database {
 public:
  // Opens `<dir>/dgpu.db`, creating `dir` and the database if missing. Errors: see above;
  // a directory or file that cannot be written is Unavailable naming it.
  // `fsync` false: commits are not fsynced (synchronous=NORMAL in WAL mode): much faster, but a
  // power loss may drop the last commits (a process crash does not).
  static StatusOr<std::unique_ptr<Database>> Open(const std::string& dir, bool fsync = true);

  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  const std::string& path() const { return path_; }
  // Set when Open upgraded the file from an older schema version.
  const std::optional<SchemaUpgrade>& upgrade() const { return upgrade_; }

  // Applies `changes` in order in ONE transaction and records `last_seq` as last_applied_seq:
  //   kTaskUpsert     -> insert or replace the task row; next_task_number rises to id + 1;
  //   kQuotaPercent   -> online_percent;
  //   kNextTaskNumber -> next_task_number rises to next_number (it never decreases);
  //   kTeamUpsert     -> insert or replace the team's row;
  //   kNodeUpsert     -> insert or replace the node's row (delete it when schedulable);
  //   kTaskArray      -> insert or replace every member's row (core::ArrayMember), in one
  //                      statement; next_task_number rises above the last member.
  // All or nothing: on error nothing of the batch is stored. InvalidArgument (see
  // ValidateChanges) refuses the whole batch.
  Status Apply(const std::vector<core::Change>& changes, uint64_t last_seq);

  // State for a restart (see LoadedState).
  StatusOr<LoadedState> Load();
  // The same, streamed: `meta` gets the meta values, then `fn` each unfinished task in queue
  // order as it is read, all from one read transaction, without a vector of the tasks; the
  // first error (of `fn` too) ends it and is returned. `fn` runs on the calling thread.
  Status LoadEach(const std::function<Status(core::Task&&)>& fn, StoreMeta* meta);
  StatusOr<StoreMeta> ReadMeta();

  // The page of `query` (see TaskQuery), one read transaction. Served from indexes: a keyset
  // page costs the same wherever it is in the table, an offset page grows with its offset.
  // InvalidArgument for a negative limit or offset, or both offset and before.
  StatusOr<TaskPage> ListTasks(const TaskQuery& query);
  StatusOr<std::optional<core::Task>> GetTask(core::TaskNumber id);
  // What the core asks of tasks it no longer holds (core::StoredTaskLookup): the status of the
  // tasks numbered first..last that exist, whether each has run, and its array fields.
  StatusOr<std::vector<core::StoredTaskState>> TaskStates(core::TaskNumber first,
                                                          core::TaskNumber last);
  // The stored history of a task, oldest first (empty for a task without one, or unknown).
  StatusOr<std::vector<core::TaskEventRecord>> TaskEvents(core::TaskNumber id);
  // See UsageQuery; groups by name. Reads every history row (a scan, on a reader).
  StatusOr<std::vector<UsageRow>> Usage(const UsageQuery& query);

  // Deletes finished tasks (success, failed, cancelled and not stopping) whose finished_at is
  // below `older_than_micros`, with their events, in transactions of at most `batch_limit` rows
  // each so that journal commits are not held up for long; returns how many were deleted in total.
  // InvalidArgument when batch_limit < 1.
  StatusOr<int> PruneFinished(core::TimeMicros older_than_micros, int batch_limit);

  // The scheduler's epoch (leader generation); SetEpoch commits durably.
  Status SetEpoch(uint64_t epoch);
  StatusOr<uint64_t> GetEpoch();

  // Calls `fn` for every task (finished ones included), in id order, from one consistent
  // snapshot; when `meta` is not null it receives the meta values of that same snapshot. `fn`
  // runs on the calling thread.
  Status ForEachTask(const std::function<void(const core::Task&)>& fn, StoreMeta* meta = nullptr);
  // A read transaction on a connection of its own (see ReadSnapshot).
  StatusOr<std::unique_ptr<ReadSnapshot>> OpenReadSnapshot();
  // A consistent copy of the whole database, as of one read transaction, through SQLite's
  // online backup API, into a new file beside it (`dgpu.db.<n>.snapshot.tmp`); writers go on
  // meanwhile. The copy is a rollback-journal database that needs no WAL beside it: `sqlite3`
  // opens it, and as the dgpu.db of an empty state directory it restores this state. Runs on
  // the calling thread, on a connection of its own; the caller removes the file.
  StatusOr<SnapshotFile> Snapshot();
  // ForEachTask into a vector.
  StatusOr<std::vector<core::Task>> AllTasks();

  // Replaces the whole content (a standby installing a full snapshot of its primary) in one
  // transaction: all tasks are deleted, `tasks` inserted, the meta values set to `meta`
  // (next_task_number is raised above the highest task id if needed). A snapshot holds no task
  // history: the events of tasks in `tasks` are kept, the others' deleted.
  Status ReplaceAll(const StoreMeta& meta, const std::vector<core::Task>& tasks);

 private:
  Database(std::string dir, std::string path, int lock_fd, std::unique_ptr<SqliteConnection> writer,
           std::vector<std::unique_ptr<SqliteConnection>> readers,
           std::optional<SchemaUpgrade> upgrade);

  // Read connections, each used by one call at a time: a slow read (a deep offset page) takes
  // one and leaves the others to the rest.
  static constexpr int kReaderConnections = 4;
  // Borrows a read connection for the scope, waiting while all are borrowed.
  class ReaderLease {
   public:
    explicit ReaderLease(Database* db);
    ~ReaderLease();
    ReaderLease(const ReaderLease&) = delete;
    ReaderLease& operator=(const ReaderLease&) = delete;
    SqliteConnection& operator*() const { return *conn_; }

   private:
    Database* const db_;
    std::unique_ptr<SqliteConnection> conn_;
  };

  const std::string dir_;
  const std::string path_;
  const int lock_fd_;
  const std::optional<SchemaUpgrade> upgrade_;
  std::atomic<uint64_t> snapshots_{0};  // Numbers the snapshot files of this process.
  std::mutex writer_mu_;
  std::unique_ptr<SqliteConnection> writer_;  // GUARDED_BY(writer_mu_)
  std::mutex reader_mu_;
  std::condition_variable reader_cv_;
  std::vector<std::unique_ptr<SqliteConnection>> readers_;  // GUARDED_BY(reader_mu_): the free ones
};

// One consistent view of the database, on its own connection: every call reads the state as of
// the moment the snapshot was opened, whatever is committed meanwhile (WAL snapshot isolation;
// the WAL cannot be checkpointed past it while it is open, so keep it short-lived). Rows are
// handed over one at a time: nothing of the table is held in memory. Not thread-safe; use it
// from one thread at a time. Callbacks must not use this snapshot.
class ReadSnapshot {
 public:
  ~ReadSnapshot();
  ReadSnapshot(const ReadSnapshot&) = delete;
  ReadSnapshot& operator=(const ReadSnapshot&) = delete;

  // The meta values of this snapshot.
  const StoreMeta& meta() const { return meta_; }
  // Pending tasks of priority `p` in queue order (queue_seq, then id).
  Status ForEachQueued(core::Priority p, const std::function<void(core::TaskNumber)>& fn);
  // Pending and running tasks, plus cancelled tasks still stopping, in id order.
  Status ForEachUnfinished(const std::function<void(const core::Task&)>& fn);
  // Every task (finished ones included), in id order.
  Status ForEachTask(const std::function<void(const core::Task&)>& fn);

  // From now on a read that is under way stops, with kCancelled, as soon as `stop` says true:
  // SQLite asks it every thousand or so of its instructions, so it also cuts a long sort
  // before the first row. An empty function removes the check.
  void InterruptWhen(std::function<bool()> stop);

 private:
  friend class Database;
  explicit ReadSnapshot(std::unique_ptr<SqliteConnection> conn);
  Status Begin();

  std::unique_ptr<SqliteConnection> conn_;
  StoreMeta meta_;
  std::function<bool()> stop_;
};

}  // namespace dgpu::store
