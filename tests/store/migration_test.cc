// Schema versions: a version 1 database is upgraded in place after a backup copy, a newer one is
// refused untouched, a failing step leaves the file as it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "store/database.h"
#include "store_test_util.h"

namespace dgpu::store {
namespace {

using core::StopReason;
using core::TaskStatus;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::OpenOrDie;
using testing::ReadBytes;
using testing::RunSql;
using testing::StatusIs;
using testing::TempDir;

// The tables of schema version 1 exactly as that release created them. A copy, not a reference
// to the store's own text, so that the fixture stays what version 1 files really hold.
constexpr char kV1Schema[] = R"sql(
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

// A pending, a running, a cancelled-and-stopping and a finished task, and non-default meta.
constexpr char kV1Rows[] = R"sql(
UPDATE meta SET value = 3 WHERE key = 'epoch';
UPDATE meta SET value = 5 WHERE key = 'next_task_number';
UPDATE meta SET value = 9 WHERE key = 'last_applied_seq';
INSERT INTO meta (key, value) VALUES ('online_percent', 0.25);
INSERT INTO tasks VALUES
  (1, 'waiting', 'high', 2, 'H100', 'sleep 1', '[["A","1"],["B","x=y"]]', 0, '', 'pending', 1,
   '[]', 0, 0, '', 1000, 0, 0, 0),
  (2, 'training', 'low', 2, '', 'python train.py', '[]', 3600, 'cuda:12', 'running', 2,
   '[{"node_id":"node-a","gpu_indices":[0,3]}]', 1, 0, '', 2000, 2500, 0, 0),
  (3, 'stopped', 'low', 1, '', 'sleep 100', '[]', 0, '', 'cancelled', 3,
   '[{"node_id":"node-b","gpu_indices":[1]}]', 1, 0, 'cancelled', 3000, 3500, 3900, 1),
  (4, 'done', 'high', 1, '', 'true', '[]', 0, '', 'success', 4,
   '[{"node_id":"node-a","gpu_indices":[1]}]', 1, 0, '', 4000, 4100, 4200, 0);
)sql";

// The rows of a query as "a|b|c" lines, as the sqlite3 shell prints them.
std::vector<std::string> Rows(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::vector<std::string> rows;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto add_row = [](void* out, int n, char** values, char**) {
    std::string row;
    for (int i = 0; i < n; ++i) row += (i > 0 ? "|" : "") + std::string(values[i] ? values[i] : "");
    static_cast<std::vector<std::string>*>(out)->push_back(row);
    return 0;
  };
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), add_row, &rows, &error), SQLITE_OK)
      << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
  return rows;
}

// Everything a version 1 file holds, for comparing two of them.
std::vector<std::string> V1Content(const std::string& path) {
  std::vector<std::string> all = Rows(path, "SELECT * FROM tasks ORDER BY id");
  for (const std::string& row : Rows(path, "SELECT key, value FROM meta ORDER BY key")) {
    all.push_back(row);
  }
  all.push_back(Rows(path, "PRAGMA user_version").at(0));
  all.push_back(Rows(path, "PRAGMA application_id").at(0));
  return all;
}

// Writes a version 1 dgpu database with the fixture rows to `<dir>/dgpu.db`, in `journal_mode`
// (version 1 of dgpu left its files in WAL mode; the sqlite3 shell makes DELETE-mode files).
std::string MakeV1Database(const TempDir& dir, const std::string& journal_mode = "wal") {
  const std::string path = dir.Sub(kDatabaseFileName);
  RunSql(path, "PRAGMA journal_mode = " + journal_mode +
                   "; BEGIN; PRAGMA application_id = " + std::to_string(kApplicationId) +
                   "; PRAGMA user_version = 1;" + kV1Schema + kV1Rows + "COMMIT;");
  return path;
}

std::vector<std::string> BackupFiles(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.find(".bak") != std::string::npos) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(MigrationTest, V1DatabaseIsUpgradedInPlaceKeepingEveryTask) {
  TempDir dir;
  const std::string path = MakeV1Database(dir);
  const std::vector<std::string> v1_content = V1Content(path);
  ASSERT_EQ(v1_content.size(), 4u + 5u + 2u);

  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->upgrade().has_value());
  EXPECT_EQ(db->upgrade()->from_version, 1);
  EXPECT_EQ(db->upgrade()->to_version, 14);
  EXPECT_EQ(db->upgrade()->backup_path, path + ".v1.bak");

  StatusOr<std::vector<core::Task>> tasks = db->AllTasks();
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 4u);
  const core::Task& pending = (*tasks)[0];
  EXPECT_EQ(pending.spec.name, "waiting");
  EXPECT_EQ(pending.spec.priority, core::Priority::kHigh);
  EXPECT_EQ(pending.spec.gpu_count, 2);
  EXPECT_EQ(pending.spec.gpu_model, "H100");
  EXPECT_EQ(pending.spec.env,
            (std::vector<std::pair<std::string, std::string>>{{"A", "1"}, {"B", "x=y"}}));
  EXPECT_EQ(pending.status, TaskStatus::kPending);
  EXPECT_EQ(pending.stop_reason, StopReason::kNone);
  // Tasks stored before teams existed belong to team "default" and may be preempted.
  EXPECT_EQ(pending.spec.team, "default");
  EXPECT_EQ(pending.spec.user, "");
  EXPECT_TRUE(pending.spec.preemptible);
  EXPECT_EQ(pending.spec.preemption_grace_seconds, -1);
  EXPECT_EQ(pending.preemptions, 0);
  EXPECT_EQ(pending.preempted_by, 0u);
  EXPECT_TRUE(pending.spec.depends_on.empty()) << "tasks stored before depend on nothing";
  const core::Task& running = (*tasks)[1];
  EXPECT_EQ(running.status, TaskStatus::kRunning);
  EXPECT_EQ(running.allocation, (core::Allocation{{"node-a", {0, 3}}}));
  EXPECT_EQ(running.spec.timeout_seconds, 3600);
  EXPECT_EQ(running.spec.image, "cuda:12");
  EXPECT_EQ(running.attempts, 1);
  EXPECT_EQ(running.started_at, 2500);
  EXPECT_FALSE(running.stopping);
  EXPECT_EQ(running.stop_reason, StopReason::kNone);
  const core::Task& stopping = (*tasks)[2];
  EXPECT_EQ(stopping.status, TaskStatus::kCancelled);
  EXPECT_TRUE(stopping.stopping);
  EXPECT_EQ(stopping.stop_reason, StopReason::kCancel);
  EXPECT_EQ(stopping.allocation, (core::Allocation{{"node-b", {1}}}));
  EXPECT_EQ(stopping.error, "cancelled");
  EXPECT_EQ(stopping.finished_at, 3900);
  const core::Task& finished = (*tasks)[3];
  EXPECT_EQ(finished.status, TaskStatus::kSuccess);
  EXPECT_EQ(finished.finished_at, 4200);
  EXPECT_EQ(finished.stop_reason, StopReason::kNone);

  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_THAT(testing::Ids(loaded->tasks), ElementsAre(1u, 2u, 3u));
  EXPECT_EQ(loaded->epoch, 3u);
  EXPECT_EQ(loaded->next_task_number, 5u);
  EXPECT_EQ(loaded->last_applied_seq, 9u);
  EXPECT_EQ(loaded->online_percent, 0.25);
  db.reset();

  EXPECT_THAT(Rows(path, "SELECT value FROM meta WHERE key = 'schema_version'"), ElementsAre("14"));
  EXPECT_THAT(Rows(path, "PRAGMA user_version"), ElementsAre("14"));
  EXPECT_THAT(Rows(path, "SELECT count(*) FROM teams"), ElementsAre("0"));
  // Tasks stored before have no history (but "submitted", which is the task's created_at).
  EXPECT_THAT(Rows(path, "SELECT count(*) FROM task_events"), ElementsAre("0"));
  EXPECT_THAT(Rows(path, "SELECT count(*) FROM nodes"), ElementsAre("0"));
  // The backup is a version 1 database holding what the file held before.
  EXPECT_THAT(BackupFiles(dir), ElementsAre("dgpu.db.v1.bak"));
  EXPECT_EQ(V1Content(path + ".v1.bak"), v1_content);
  EXPECT_THAT(Rows(path + ".v1.bak", "PRAGMA quick_check"), ElementsAre("ok"));
  EXPECT_THAT(Rows(path + ".v1.bak", "PRAGMA journal_mode"), ElementsAre("delete"));
}

TEST(MigrationTest, UpgradedDatabaseHasTheLayoutOfANewOne) {
  TempDir fresh, old;
  OpenOrDie(fresh.path());
  MakeV1Database(old);
  OpenOrDie(old.path());
  const std::string kLayout = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name";
  const std::vector<std::string> layout = Rows(fresh.Sub(kDatabaseFileName), kLayout);
  EXPECT_EQ(Rows(old.Sub(kDatabaseFileName), kLayout), layout);
  EXPECT_THAT(layout, ::testing::Contains(HasSubstr("stop_reason TEXT NOT NULL DEFAULT ''")));
}

TEST(MigrationTest, UpgradeCountsTheExistingTasksAndKeepsCountingThem) {
  TempDir dir;
  const std::string path = MakeV1Database(dir);
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(Rows(path, "SELECT status, priority, n FROM task_counts ORDER BY status, priority"),
              ElementsAre("cancelled|low|1", "pending|high|1", "running|low|1", "success|high|1"));
  StatusOr<TaskPage> low = db->ListTasks({.priority = core::Priority::kLow, .limit = 0});
  ASSERT_TRUE(low.ok());
  EXPECT_EQ(low->total, 2);
  // The pending task starts, a new one arrives: the writer moves the counts.
  core::Task started = **db->GetTask(1);
  started.status = TaskStatus::kRunning;
  core::Task added = started;
  added.id = 5;
  added.status = TaskStatus::kPending;
  std::vector<core::Change> changes(2);
  changes[0].kind = changes[1].kind = core::Change::Kind::kTaskUpsert;
  changes[0].task = started;
  changes[1].task = added;
  ASSERT_TRUE(db->Apply(changes, 10).ok());
  EXPECT_THAT(Rows(path, "SELECT status, priority, n FROM task_counts ORDER BY status, priority"),
              ElementsAre("cancelled|low|1", "pending|high|1", "running|high|1", "running|low|1",
                          "success|high|1"));
}

TEST(MigrationTest, ReopeningAnUpgradedDatabaseDoesNothingMore) {
  TempDir dir;
  const std::string path = MakeV1Database(dir);
  OpenOrDie(dir.path());
  const std::string backup = ReadBytes(path + ".v1.bak");
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  EXPECT_FALSE(db->upgrade().has_value());
  StatusOr<std::vector<core::Task>> tasks = db->AllTasks();
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ(tasks->size(), 4u);
  EXPECT_THAT(BackupFiles(dir), ElementsAre("dgpu.db.v1.bak"));
  EXPECT_EQ(ReadBytes(path + ".v1.bak"), backup);
}

TEST(MigrationTest, NewDatabaseIsAtTheLatestVersionWithoutBackup) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  EXPECT_FALSE(db->upgrade().has_value());
  db.reset();
  EXPECT_EQ(kSchemaVersion, 14);
  EXPECT_THAT(Rows(dir.Sub(kDatabaseFileName), "PRAGMA user_version"), ElementsAre("14"));
  EXPECT_THAT(
      Rows(dir.Sub(kDatabaseFileName), "SELECT value FROM meta WHERE key = 'schema_version'"),
      ElementsAre("14"));
  EXPECT_TRUE(BackupFiles(dir).empty());
}

TEST(MigrationTest, V4DatabaseGainsAnEmptyNodesTableAndKeepsItsRows) {
  TempDir dir;
  {
    auto db = OpenOrDie(dir.path());
    core::Change c;
    c.kind = core::Change::Kind::kTaskUpsert;
    c.task.id = 7;
    c.task.spec.name = "kept";
    ASSERT_TRUE(db->Apply({c}, 1).ok());
  }
  // Version 4 had no table `nodes`, none of the array, retry, gang and dependency columns nor
  // teams' time limits, counted inserts and updates with triggers, and kept no task events.
  const std::string path = dir.Sub(kDatabaseFileName);
  std::string sql =
      "DROP TABLE nodes; DROP TABLE task_events; "
      "CREATE TRIGGER task_counts_on_insert AFTER INSERT ON tasks BEGIN "
      "INSERT INTO task_counts (status, priority, n) VALUES (NEW.status, NEW.priority, 1) "
      "ON CONFLICT (status, priority) DO UPDATE SET n = n + 1; END; "
      "CREATE TRIGGER task_counts_on_update AFTER UPDATE OF status, priority ON tasks "
      "WHEN OLD.status IS NOT NEW.status OR OLD.priority IS NOT NEW.priority BEGIN "
      "UPDATE task_counts SET n = n - 1 WHERE status = OLD.status AND priority = OLD.priority; "
      "INSERT INTO task_counts (status, priority, n) VALUES (NEW.status, NEW.priority, 1) "
      "ON CONFLICT (status, priority) DO UPDATE SET n = n + 1; END;";
  for (const char* column :
       {"array_index", "array_size", "max_retries", "retry_backoff_seconds", "retries", "retry_at",
        "nodes", "master_port", "cpus_milli", "memory_mb", "node_selector", "depends_on"}) {
    sql += std::string(" ALTER TABLE tasks DROP COLUMN ") + column + ";";
  }
  sql += " ALTER TABLE teams DROP COLUMN default_time_limit;";
  RunSql(path, sql +
                   " UPDATE meta SET value = 4 WHERE key = 'schema_version'; "
                   "PRAGMA user_version = 4;");
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->upgrade().has_value());
  EXPECT_EQ(db->upgrade()->from_version, 4);
  EXPECT_EQ(db->upgrade()->backup_path, path + ".v4.bak");
  StatusOr<std::optional<core::Task>> kept = db->GetTask(7);
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ((*kept)->spec.name, "kept");
  EXPECT_EQ(std::make_tuple((*kept)->spec.array_index, (*kept)->spec.array_size),
            std::make_tuple(-1, 0))
      << "no array member";
  EXPECT_EQ(std::make_tuple((*kept)->spec.max_retries, (*kept)->spec.retry_backoff_seconds,
                            (*kept)->retries, (*kept)->retry_at),
            std::make_tuple(0, 10, 0, int64_t{0}))
      << "not retried";
  EXPECT_EQ((*kept)->spec.nodes, 1) << "one node";
  EXPECT_EQ((*kept)->master_port, 0);
  EXPECT_TRUE((*kept)->spec.depends_on.empty());
  StatusOr<StoreMeta> meta = db->ReadMeta();
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_TRUE(meta->nodes.empty());
}

// A version 1 file whose tasks refuse updates: the step's ALTER TABLE succeeds, its UPDATE fails.
class FailingStepTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FailingStepTest, LeavesTheV1FileUnchangedAndNamesTheStep) {
  TempDir dir;
  const std::string path = MakeV1Database(dir, GetParam());
  RunSql(path,
         "CREATE TRIGGER refuse_updates BEFORE UPDATE ON tasks "
         "BEGIN SELECT RAISE(ABORT, 'updates refused'); END;");
  const std::string before = ReadBytes(path);

  StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.path());
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().message(),
            "upgrading " + path +
                " from schema version 1 to 2 (add tasks.stop_reason): updates refused; the step "
                "was rolled back, the file is at schema version 1 (copy before the upgrade: " +
                path + ".v1.bak)");
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_THAT(Rows(path, "PRAGMA table_info(tasks)"),
              ::testing::Not(::testing::Contains(HasSubstr("stop_reason"))));

  // Once the cause is gone the upgrade succeeds; the first backup is kept, a second is written.
  RunSql(path, "DROP TRIGGER refuse_updates;");
  auto upgraded = OpenOrDie(dir.path());
  ASSERT_NE(upgraded, nullptr);
  EXPECT_EQ(upgraded->upgrade()->backup_path, path + ".v1.bak.2");
  StatusOr<std::optional<core::Task>> stopping = upgraded->GetTask(3);
  ASSERT_TRUE(stopping.ok() && stopping->has_value());
  EXPECT_EQ((*stopping)->stop_reason, StopReason::kCancel);
  EXPECT_THAT(BackupFiles(dir), ElementsAre("dgpu.db.v1.bak", "dgpu.db.v1.bak.2"));
}

INSTANTIATE_TEST_SUITE_P(JournalModes, FailingStepTest, ::testing::Values("wal", "delete"));

struct NewerCase {
  const char* name;
  const char* sql;
};

class NewerDatabaseTest : public ::testing::TestWithParam<NewerCase> {};

TEST_P(NewerDatabaseTest, IsRefusedUnmodifiedNamingBothVersions) {
  TempDir dir;
  OpenOrDie(dir.path());
  const std::string path = dir.Sub(kDatabaseFileName);
  RunSql(path, GetParam().sql);
  const std::string before = ReadBytes(path);

  StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.path());
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(db.status().message(), path +
                                       " has schema version 15; this dgpu-scheduler reads "
                                       "versions up to 14: use a newer binary");
  EXPECT_EQ(ReadBytes(path), before);
  // The read-only check of a WAL-mode file may leave an empty WAL beside it, never content.
  EXPECT_EQ(ReadBytes(path + "-wal"), "");
  EXPECT_TRUE(BackupFiles(dir).empty());
}

INSTANTIATE_TEST_SUITE_P(
    Versions, NewerDatabaseTest,
    ::testing::Values(NewerCase{"Both",
                                "UPDATE meta SET value = 15 WHERE key = 'schema_version'; "
                                "PRAGMA user_version = 15;"},
                      NewerCase{"UserVersionOnly", "PRAGMA user_version = 15;"},
                      NewerCase{"MetaOnly",
                                "UPDATE meta SET value = 15 WHERE key = 'schema_version';"}),
    [](const ::testing::TestParamInfo<NewerCase>& info) { return info.param.name; });

TEST(MigrationTest, DisagreeingVersionsAreRefusedUnmodified) {
  TempDir dir;
  const std::string path = MakeV1Database(dir);
  RunSql(path, "PRAGMA user_version = 2;");
  const std::string before = ReadBytes(path);
  EXPECT_THAT(Database::Open(dir.path()),
              StatusIs(StatusCode::kDataLoss,
                       path + " has inconsistent schema versions (meta schema_version 1, "
                              "user_version 2); refusing to use or modify it"));
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_TRUE(BackupFiles(dir).empty());
}

TEST(MigrationTest, UnknownStopReasonInARowIsDataLossNamingTheTask) {
  TempDir dir;
  OpenOrDie(dir.path());
  const std::string path = dir.Sub(kDatabaseFileName);
  RunSql(path, std::string(
                   "INSERT INTO tasks VALUES (7, 'x', 'low', 1, '', 'true', '[]', 0, '', "
                   "'running', 7, '[]', 0, 0, '', 1, 0, 0, 1, 'sleepy', "
                   "'default', '', 1, -1, 0, 0, 0, -1, 0, 0, 10, 0, 0, 1, 0, 0, 0, '[]', '[]');"));
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->GetTask(7), StatusIs(StatusCode::kDataLoss,
                                       "task-7 in " + path + ": unknown stop_reason 'sleepy'"));
}

TEST(MigrationTest, TwoNodeAllocationAndStopReasonRoundTripThroughTheDatabase) {
  TempDir dir;
  core::Task task = testing::FullTask(5);
  task.allocation = {{"node-a", {0, 1, 2, 3, 4, 5, 6, 7}}, {"node-b", {2, 3}, true}};
  task.stop_reason = StopReason::kGpuFailure;
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({testing::Upsert(task)}, 1).ok());
  }
  EXPECT_THAT(Rows(dir.Sub(kDatabaseFileName), "SELECT allocation, stop_reason FROM tasks"),
              ElementsAre(R"([{"gpu_indices":[0,1,2,3,4,5,6,7],"node_id":"node-a"},)"
                          R"({"ended":true,"gpu_indices":[2,3],"node_id":"node-b"}]|gpu_failure)"));
  auto db = OpenOrDie(dir.path());
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->tasks.size(), 1u);
  testing::ExpectSameTask(task, loaded->tasks[0]);
}

}  // namespace
}  // namespace dgpu::store
