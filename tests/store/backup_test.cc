// Database::Snapshot: a consistent copy of the database through SQLite's online backup API.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/database.h"
#include "store_test_util.h"

namespace dgpu::store {
namespace {

using core::TaskStatus;
using testing::Ids;
using testing::OpenOrDie;
using testing::SimpleTask;
using testing::TempDir;
using testing::Upsert;

// The first column of the first row of `sql` on the file at `path`, opened read-only.
std::string Query(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(DatabaseSnapshotTest, CopyHoldsEveryTaskAndTheMetaAndNeedsNoWal) {
  TempDir dir;
  auto db = OpenOrDie(dir.Sub("state"));
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending)),
                         Upsert(SimpleTask(2, TaskStatus::kRunning)),
                         Upsert(SimpleTask(3, TaskStatus::kSuccess))},
                        7)
                  .ok());
  ASSERT_TRUE(db->SetEpoch(4).ok());

  StatusOr<SnapshotFile> file = db->Snapshot();
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->path, dir.Sub("state") + "/dgpu.db.1.snapshot.tmp");
  EXPECT_EQ(file->tasks, 3);
  EXPECT_EQ(file->meta.last_applied_seq, 7u);
  EXPECT_EQ(file->meta.epoch, 4u);
  EXPECT_EQ(file->meta.next_task_number, 4u);
  EXPECT_EQ(file->bytes, static_cast<int64_t>(std::filesystem::file_size(file->path)));
  EXPECT_EQ(Query(file->path, "PRAGMA journal_mode"), "delete");
  EXPECT_EQ(Query(file->path, "PRAGMA quick_check"), "ok");
  // Each snapshot is a file of its own.
  StatusOr<SnapshotFile> second = db->Snapshot();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->path, dir.Sub("state") + "/dgpu.db.2.snapshot.tmp");

  // As the dgpu.db of an empty state directory, the copy restores the state.
  std::filesystem::create_directories(dir.Sub("restored"));
  std::filesystem::copy_file(file->path, dir.Sub("restored") + "/dgpu.db");
  auto restored = OpenOrDie(dir.Sub("restored"));
  ASSERT_NE(restored, nullptr);
  StatusOr<LoadedState> loaded = restored->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_THAT(Ids(loaded->tasks), ::testing::ElementsAre(1u, 2u));
  EXPECT_EQ(loaded->last_applied_seq, 7u);
  EXPECT_EQ(loaded->epoch, 4u);
  StatusOr<TaskPage> all = restored->ListTasks({.limit = 10});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->total, 3);
}

TEST(DatabaseSnapshotTest, CopyIsOneConsistentStateWhileWritesContinue) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  // Each write adds task n as journal seq n, so a consistent copy ending at seq S holds exactly
  // tasks 1..S.
  std::vector<core::Change> first;
  for (core::TaskNumber n = 1; n <= 20000; ++n) {
    first.push_back(Upsert(SimpleTask(n, TaskStatus::kPending)));
  }
  ASSERT_TRUE(db->Apply(first, 20000).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{20000};
  std::thread writer([&] {
    for (core::TaskNumber n = 20001; !stop.load(); ++n) {
      if (!db->Apply({Upsert(SimpleTask(n, TaskStatus::kPending))}, n).ok()) return;
      written.store(n);
    }
  });
  std::vector<SnapshotFile> files;
  for (int i = 0; i < 3; ++i) {
    StatusOr<SnapshotFile> file = db->Snapshot();
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    files.push_back(*file);
  }
  stop = true;
  writer.join();
  ASSERT_GT(written.load(), 20000u) << "no write went on during the snapshots";
  for (const SnapshotFile& f : files) {
    SCOPED_TRACE(f.path);
    EXPECT_GE(f.meta.last_applied_seq, 20000u);
    EXPECT_EQ(f.tasks, static_cast<int64_t>(f.meta.last_applied_seq));
    EXPECT_EQ(Query(f.path, "SELECT count(*) FROM tasks"), std::to_string(f.meta.last_applied_seq));
    EXPECT_EQ(Query(f.path, "SELECT max(id) FROM tasks"), std::to_string(f.meta.last_applied_seq));
  }
}

TEST(DatabaseSnapshotTest, OpenRemovesSnapshotFilesLeftBehindAndNothingElse) {
  TempDir dir;
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_NE(db, nullptr);
    ASSERT_TRUE(db->Snapshot().ok());
  }
  std::ofstream(dir.Sub("dgpu.db.9.snapshot.tmp-journal")) << "x";
  std::ofstream(dir.Sub("notes.snapshot.tmp")) << "kept: not the database's";
  std::ofstream(dir.Sub("dgpu.db.v1.bak")) << "kept";
  EXPECT_THAT(Names(dir.path()), ::testing::Contains("dgpu.db.1.snapshot.tmp"));
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  for (const std::string& name : Names(dir.path())) {
    EXPECT_FALSE(name.starts_with("dgpu.db.") && name.find(".snapshot.tmp") != std::string::npos)
        << name;
  }
  EXPECT_TRUE(std::filesystem::exists(dir.Sub("notes.snapshot.tmp")));
  EXPECT_TRUE(std::filesystem::exists(dir.Sub("dgpu.db.v1.bak")));
}

TEST(DatabaseSnapshotTest, AFailedCopyLeavesNoFileAndSaysWhy) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_NE(db, nullptr);
  // The file's name is taken by a directory: the copy cannot be created.
  std::filesystem::create_directories(dir.Sub("dgpu.db.1.snapshot.tmp/x"));
  StatusOr<SnapshotFile> file = db->Snapshot();
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(),
              ::testing::StartsWith("cannot take a snapshot of " + dir.Sub("dgpu.db") + ": "));
  // The next one works.
  StatusOr<SnapshotFile> next = db->Snapshot();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->path, dir.Sub("dgpu.db.2.snapshot.tmp"));
}

}  // namespace
}  // namespace dgpu::store
