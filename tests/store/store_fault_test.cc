// Storage faults: files that are not ours, read-only storage, a full disk.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "store/database.h"
#include "store/journal.h"
#include "store_test_util.h"

namespace dgpu::store {
namespace {

using core::TaskStatus;
using testing::Ids;
using testing::IsRoot;
using testing::ReadBytes;
using testing::RunSql;
using testing::SimpleTask;
using testing::StatusIs;
using testing::TempDir;
using testing::TmpfsMount;
using testing::Upsert;

// Creates a dgpu database in `dir` holding `count` tasks, and closes it.
void MakeDatabase(const std::string& dir, int count) {
  StatusOr<std::unique_ptr<Database>> db = Database::Open(dir);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  std::vector<core::Change> changes;
  for (int i = 1; i <= count; ++i) changes.push_back(Upsert(SimpleTask(i, TaskStatus::kPending)));
  ASSERT_TRUE((*db)->Apply(changes, 1).ok());
}

TEST(StoreFaultTest, GarbageFileIsRefusedAndLeftUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("dgpu.db");
  std::string garbage;
  for (int i = 0; i < 8192; ++i) garbage.push_back(static_cast<char>((i * 131 + 7) % 251));
  testing::WriteBytes(path, garbage);

  EXPECT_THAT(Database::Open(dir.path()),
              StatusIs(StatusCode::kDataLoss, path + " is not a SQLite database"));
  EXPECT_EQ(ReadBytes(path), garbage);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
}

TEST(StoreFaultTest, EmptyFileIsRefusedAndLeftUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("dgpu.db");
  testing::WriteBytes(path, "");
  EXPECT_THAT(Database::Open(dir.path()), StatusIs(StatusCode::kDataLoss, "empty file"));
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
}

TEST(StoreFaultTest, CorruptPageIsRefusedAndLeftUnchanged) {
  TempDir dir;
  MakeDatabase(dir.path(), 300);
  const std::string path = dir.Sub("dgpu.db");
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));  // Checkpointed on close.
  std::string bytes = ReadBytes(path);
  ASSERT_GT(bytes.size(), 4u * 4096);
  for (size_t i = 4096; i < 3 * 4096; ++i) bytes[i] = static_cast<char>(0x5a);
  testing::WriteBytes(path, bytes);

  StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.path());
  EXPECT_THAT(db, StatusIs(StatusCode::kDataLoss, path));
  EXPECT_THAT(db, StatusIs(StatusCode::kDataLoss, "refusing to use or modify it"));
  EXPECT_EQ(ReadBytes(path), bytes);
}

TEST(StoreFaultTest, ForeignSqliteDatabaseIsRefusedAndLeftUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("dgpu.db");
  RunSql(path, "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('alice');");
  const std::string before = ReadBytes(path);

  EXPECT_THAT(Database::Open(dir.path()),
              StatusIs(StatusCode::kFailedPrecondition, "another application"));
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST(StoreFaultTest, DatabaseWithOurIdButNoMetaIsRefused) {
  TempDir dir;
  const std::string path = dir.Sub("dgpu.db");
  RunSql(path,
         "PRAGMA application_id = " + std::to_string(kApplicationId) + "; CREATE TABLE other (x);");
  const std::string before = ReadBytes(path);
  EXPECT_THAT(Database::Open(dir.path()), StatusIs(StatusCode::kDataLoss, "no readable meta"));
  EXPECT_EQ(ReadBytes(path), before);
}

TEST(StoreFaultTest, ReadOnlyDirectoryIsRefusedAtOpen) {
  TempDir dir;
  const std::string ro = dir.Sub("ro");
  if (!IsRoot()) {
    std::filesystem::create_directories(ro);
    ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
    EXPECT_THAT(Database::Open(ro), StatusIs(StatusCode::kUnavailable, "not writable"));
    return;
  }
  // Root ignores permission bits; a read-only mount stops it.
  std::string why;
  std::optional<TmpfsMount> mount = TmpfsMount::Make(ro, "size=1m", /*read_only=*/true, &why);
  if (!mount) GTEST_SKIP() << why;
  EXPECT_THAT(Database::Open(ro),
              StatusIs(StatusCode::kUnavailable, "directory " + ro + " is not writable"));
  EXPECT_THAT(Database::Open(ro + "/sub"), StatusIs(StatusCode::kUnavailable, "cannot create"));
}

TEST(StoreFaultTest, ExistingDatabaseOnReadOnlyStorageIsRefusedAndLeftUnchanged) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to remount a tmpfs read-only";
  TempDir dir;
  std::string why;
  std::optional<TmpfsMount> mount = TmpfsMount::Make(dir.Sub("fs"), "size=1m", false, &why);
  if (!mount) GTEST_SKIP() << why;
  MakeDatabase(dir.Sub("fs"), 3);
  const std::string before = ReadBytes(dir.Sub("fs/dgpu.db"));
  ASSERT_TRUE(mount->RemountReadOnly());
  EXPECT_THAT(Database::Open(dir.Sub("fs")), StatusIs(StatusCode::kUnavailable, "not writable"));
  EXPECT_EQ(ReadBytes(dir.Sub("fs/dgpu.db")), before);
}

// Appends one task and waits for its outcome.
Status AppendAndWait(Journal& journal, const core::Task& task) {
  std::promise<Status> done;
  journal.Append({Upsert(task)}, [&done](Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

TEST(StoreFaultTest, DiskFullIsReportedNothingHalfAppliedAndRecoveredFrom) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to mount a small tmpfs";
  TempDir dir;
  const std::string fs = dir.Sub("fs");
  std::string why;
  std::optional<TmpfsMount> mount = TmpfsMount::Make(fs, "size=256k", false, &why);
  if (!mount) GTEST_SKIP() << why;

  StatusOr<std::unique_ptr<Database>> db = Database::Open(fs + "/state");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  Journal journal(db->get(), 0);

  // Leave about 100 KiB free: room for a few commits only.
  const std::string filler = fs + "/filler";
  const uint64_t free_bytes = testing::FreeBytes(fs);
  ASSERT_GT(free_bytes, 100u * 1024);
  testing::WriteBytes(filler, std::string(free_bytes - 100 * 1024, 'f'));

  const std::string big(3000, 'x');
  auto make_task = [&big](core::TaskNumber id) {
    core::Task t = SimpleTask(id, TaskStatus::kPending);
    t.spec.command = big;
    return t;
  };
  std::vector<core::TaskNumber> acknowledged;
  core::TaskNumber failed_id = 0;
  Status failure;
  for (core::TaskNumber id = 1; id <= 500; ++id) {
    Status s = AppendAndWait(journal, make_task(id));
    if (!s.ok()) {
      failed_id = id;
      failure = s;
      break;
    }
    acknowledged.push_back(id);
  }
  ASSERT_NE(failed_id, 0u) << "the disk never filled up";
  EXPECT_THAT(failure, StatusIs(StatusCode::kResourceExhausted, "disk full"));
  EXPECT_THAT(journal.health(), StatusIs(StatusCode::kUnavailable, "storage failed: disk full"));
  EXPECT_EQ(journal.stats().last_durable_seq, acknowledged.size());

  // Nothing half-applied: the database holds exactly the acknowledged tasks.
  StatusOr<std::vector<core::Task>> all = (*db)->AllTasks();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(Ids(*all), acknowledged);
  StatusOr<StoreMeta> meta = (*db)->ReadMeta();
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->last_applied_seq, acknowledged.size());

  // Still full: the next append retries and is refused with the failed state.
  EXPECT_THAT(AppendAndWait(journal, make_task(failed_id + 1)),
              StatusIs(StatusCode::kUnavailable, "storage failed: disk full"));
  all = (*db)->AllTasks();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Ids(*all), acknowledged);

  // Space freed: the next append commits, with the kept changes ahead of it, in order.
  ASSERT_TRUE(std::filesystem::remove(filler));
  EXPECT_TRUE(AppendAndWait(journal, make_task(failed_id + 2)).ok());
  EXPECT_TRUE(journal.health().ok());
  std::vector<core::TaskNumber> want = acknowledged;
  want.insert(want.end(), {failed_id, failed_id + 1, failed_id + 2});
  all = (*db)->AllTasks();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Ids(*all), want);
  meta = (*db)->ReadMeta();
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->last_applied_seq, failed_id + 2);
  EXPECT_EQ(journal.stats().last_durable_seq, failed_id + 2);
  EXPECT_EQ(journal.stats().batches_failed, 2u);

  journal.Shutdown();
  db->reset();  // Close before the tmpfs goes away.
}

}  // namespace
}  // namespace dgpu::store
