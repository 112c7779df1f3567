// Schema: the table layout of a dgpu database, version by version.
//
// A database is created from the version 1 tables (kVersion1Schema, frozen as first released)
// followed by every migration, so a new database and an upgraded one have the same layout by
// construction. Each migration takes a database from `from_version` to `from_version + 1`; the
// version is kept twice, in `meta.schema_version` and in `PRAGMA user_version`, and both are
// set in the transaction that runs the step. How Database::Open applies them (backup first,
// one transaction per step, refusal of newer files) is described in database.h.
//
// Adding a version: append a migration, never edit or reorder the ones before it (a released
// database may be at any of their versions); see docs/protocol.md for the checklist.
#pragma once

#include <cstddef>
#include <iterator>
#include <string_view>

namespace dgpu::store {

// The tables, indexes and meta rows of schema version 1.
inline constexpr std::string_view kVersion1Schema = R"sql(
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

struct Migration {
  int from_version;       // Applies to a database of this version only.
  std::string_view name;  // What it does, for errors and logs.
  std::string_view sql;   // Statements run in the step's transaction.
};

inline constexpr Migration kMigrations[] = {
    // Why a stopping task is stopped (core::Task::stop_reason). In version 1 the only stop was
    // a cancellation.
    {1, "add tasks.stop_reason", R"sql(
ALTER TABLE tasks ADD COLUMN stop_reason TEXT NOT NULL DEFAULT '';
UPDATE tasks SET stop_reason = 'cancel' WHERE stopping = 1;
)sql"},
    // The number of tasks per status and priority, kept by triggers in the transaction that
    // changes the rows, so that a page's `total` is read from at most twelve rows instead of
    // counted over the table (which grows with the history).
    {2, "keep task counts by status and priority", R"sql(
CREATE TABLE task_counts (
  status   TEXT NOT NULL,
  priority TEXT NOT NULL,
  n        INTEGER NOT NULL,
  PRIMARY KEY (status, priority)
) WITHOUT ROWID;
INSERT INTO task_counts (status, priority, n)
  SELECT status, priority, count(*) FROM tasks GROUP BY status, priority;
CREATE TRIGGER task_counts_on_insert AFTER INSERT ON tasks BEGIN
  INSERT INTO task_counts (status, priority, n) VALUES (NEW.status, NEW.priority, 1)
    ON CONFLICT (status, priority) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_on_delete AFTER DELETE ON tasks BEGIN
  UPDATE task_counts SET n = n - 1 WHERE status = OLD.status AND priority = OLD.priority;
END;
CREATE TRIGGER task_counts_on_update AFTER UPDATE OF status, priority ON tasks
  WHEN OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority BEGIN
  UPDATE task_counts SET n = n - 1 WHERE status = OLD.status AND priority = OLD.priority;
  INSERT INTO task_counts (status, priority, n) VALUES (NEW.status, NEW.priority, 1)
    ON CONFLICT (status, priority) DO UPDATE SET n = n + 1;
END;
)sql"},
    // Teams (core::TaskSpec::team, user, preemptible, preemption_grace_seconds; core::Task's
    // borrowed, preemptions, preempted_by) and the teams' limits and fair-share usage. Tasks
    // stored before belong to team "default" and may be preempted.
    {3, "add teams and preemption", R"sql(
ALTER TABLE tasks ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
ALTER TABLE tasks ADD COLUMN user TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN preemption_grace_seconds INTEGER NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN borrowed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN preempted_by INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_by_team ON tasks (team, id DESC);
CREATE TABLE teams (
  name     TEXT PRIMARY KEY NOT NULL,
  api_set  INTEGER NOT NULL,
  online   INTEGER NOT NULL,
  batch    INTEGER NOT NULL,
  max_gpus INTEGER NOT NULL,
  weight   REAL NOT NULL,
  deleted  INTEGER NOT NULL,
  usage    REAL NOT NULL,
  usage_at INTEGER NOT NULL
) WITHOUT ROWID;
)sql"},
    // Node modes set by operators (core::NodeRecord): cordoned and draining nodes, by id.
    // Schedulable nodes have no row.
    {4, "add node modes", R"sql(
CREATE TABLE nodes (
  id   TEXT PRIMARY KEY NOT NULL,
  mode TEXT NOT NULL
) WITHOUT ROWID;
)sql"},
    // Job arrays (core::TaskSpec::array_index, array_size) and retries (TaskSpec::max_retries,
    // retry_backoff_seconds; Task::retries, retry_at). Tasks stored before are not members of
    // an array and are not retried.
    {5, "add job arrays and retries", R"sql(
ALTER TABLE tasks ADD COLUMN array_index INTEGER NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN array_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN max_retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN retry_backoff_seconds INTEGER NOT NULL DEFAULT 10;
ALTER TABLE tasks ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN retry_at INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Inserts and updates of task rows are counted in task_counts by the writer (one update per
    // status and priority a transaction changes) instead of per row by triggers, which made
    // SQLite keep a statement journal for every task row written. Deletes keep their trigger.
    {6, "count task inserts and updates in the writer", R"sql(
DROP TRIGGER task_counts_on_insert;
DROP TRIGGER task_counts_on_update;
)sql"},
    // Each task's history (core::TaskEventRecord), clustered by task, in the order it happened:
    // seq is the change log's batch sequence number times 2^20 plus the change's place in its
    // batch. Rows leave with their task when it is pruned. Tasks stored before have no history
    // but "submitted".
    {7, "add task events", R"sql(
CREATE TABLE task_events (
  task_id INTEGER NOT NULL,
  seq     INTEGER NOT NULL,
  time    INTEGER NOT NULL,
  type    TEXT NOT NULL,
  node_id TEXT NOT NULL,
  message TEXT NOT NULL,
  PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
)sql"},
    // Gangs (core::TaskSpec::nodes): tasks stored before run on one node.
    {8, "add gang tasks", R"sql(
ALTER TABLE tasks ADD COLUMN nodes INTEGER NOT NULL DEFAULT 1;
)sql"},
    // A gang's rendezvous port (core::Task::master_port): tasks stored before have none.
    {9, "add gang ports", R"sql(
ALTER TABLE tasks ADD COLUMN master_port INTEGER NOT NULL DEFAULT 0;
)sql"},
    // CPUs and memory asked for (core::TaskSpec::cpus_milli, memory_mb): tasks stored before ask
    // for their GPUs' share (0). What each member was given is in its allocation's entry.
    {10, "add cpu and memory requests", R"sql(
ALTER TABLE tasks ADD COLUMN cpus_milli INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN memory_mb INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Node selectors (core::TaskSpec::node_selector, a JSON list of pairs as env is): tasks stored
    // before take any node.
    {11, "add node selectors", R"sql(
ALTER TABLE tasks ADD COLUMN node_selector TEXT NOT NULL DEFAULT '[]';
)sql"},
    // Teams' default time limits (core::TeamLimits::default_time_limit, seconds): teams stored
    // before have none (0: the scheduler's).
    {12, "add team default time limits", R"sql(
ALTER TABLE teams ADD COLUMN default_time_limit INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Dependencies (core::TaskSpec::depends_on, a JSON list of {task, condition, state}): tasks
    // stored before have none.
    {13, "add task dependencies", R"sql(
ALTER TABLE tasks ADD COLUMN depends_on TEXT NOT NULL DEFAULT '[]';
)sql"},
};

// The version this build writes, and the newest it reads.
inline constexpr int kSchemaVersion = 1 + static_cast<int>(std::size(kMigrations));

constexpr bool MigrationsAreConsecutive() {
  for (size_t i = 0; i < std::size(kMigrations); ++i) {
    if (kMigrations[i].from_version != static_cast<int>(i) + 1) return false;
  }
  return true;
}
static_assert(MigrationsAreConsecutive(), "kMigrations[i] must take version i + 1 to i + 2");

}  // namespace dgpu::store
