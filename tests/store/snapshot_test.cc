#include "store/snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "store/database.h"
#include "store/task_codec.h"
#include "store_test_util.h"

namespace dgpu::store {
namespace {

using core::TaskStatus;
using testing::FullTask;
using testing::ReadBytes;
using testing::SimpleTask;
using testing::StatusIs;
using testing::TempDir;
using testing::Upsert;

TEST(SnapshotTest, WriteStateFileReplacesTheFileWhole) {
  TempDir dir;
  const std::string state_dir = dir.Sub("snap");
  ASSERT_TRUE(WriteStateFile(state_dir, {{"version", 1}}).ok());
  ASSERT_TRUE(WriteStateFile(state_dir, {{"version", 2}, {"name", "\xc3\xa9"}}).ok());
  const std::string text = ReadBytes(state_dir + "/state.json");
  nlohmann::json parsed = nlohmann::json::parse(text);
  EXPECT_EQ(parsed, (nlohmann::json{{"version", 2}, {"name", "\xc3\xa9"}}));
  EXPECT_EQ(text.back(), '\n');
  EXPECT_FALSE(std::filesystem::exists(state_dir + "/state.json.tmp"));
}

TEST(SnapshotTest, AtomicFileWriterReplacesTheFileOnlyOnCommit) {
  TempDir dir;
  const std::string path = dir.Sub("state.json");
  ASSERT_TRUE(common::WriteFileAtomically(path, "old\n").ok());
  {
    StatusOr<std::unique_ptr<common::AtomicFileWriter>> writer =
        common::AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    (*writer)->Write("abandoned");
  }
  EXPECT_EQ(ReadBytes(path), "old\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  StatusOr<std::unique_ptr<common::AtomicFileWriter>> writer = common::AtomicFileWriter::Open(path);
  ASSERT_TRUE(writer.ok());
  const std::string big(3 << 20, 'x');  // Several buffer flushes.
  (*writer)->Write("[");
  (*writer)->Write(big);
  (*writer)->Write("]");
  EXPECT_EQ(ReadBytes(path), "old\n");
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(ReadBytes(path), "[" + big + "]");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SnapshotTest, DumpStoreHoldsMetaAndEveryTask) {
  TempDir dir;
  StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.path());
  ASSERT_TRUE(db.ok());
  core::Change quota;
  quota.kind = core::Change::Kind::kQuotaPercent;
  quota.online_percent = 0.7;
  ASSERT_TRUE(
      (*db)
          ->Apply({Upsert(FullTask(4)), Upsert(SimpleTask(2, TaskStatus::kSuccess)), quota}, 8)
          .ok());
  ASSERT_TRUE((*db)->SetEpoch(3).ok());

  StatusOr<nlohmann::json> dump = DumpStore(**db);
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  EXPECT_EQ((*dump)["format"], "dgpu-store");
  EXPECT_EQ((*dump)["schema_version"], kSchemaVersion);
  EXPECT_EQ((*dump)["meta"], (nlohmann::json{{"epoch", 3},
                                             {"next_task_number", 5},
                                             {"last_applied_seq", 8},
                                             {"online_percent", 0.7}}));
  ASSERT_EQ((*dump)["tasks"].size(), 2u);
  EXPECT_EQ((*dump)["tasks"][0]["id"], 2);
  StatusOr<core::Task> decoded = TaskFromJson((*dump)["tasks"][1]);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  testing::ExpectSameTask(FullTask(4), *decoded);
}

TEST(TaskCodecTest, MalformedTaskJsonIsDataLossNamingTheField) {
  const nlohmann::json good = TaskToJson(FullTask(1));
  struct Case {
    const char* field;
    nlohmann::json value;  // null: remove the field.
    const char* message;
  };
  const Case cases[] = {
      {"id", 0, "'id'"},
      {"name", 5, "'name'"},
      {"status", "sleeping", "'status'"},
      {"priority", "urgent", "'priority'"},
      {"gpu_count", "3", "'gpu_count'"},
      {"env", {{"A", "1"}}, "'env'"},
      {"allocation", {{{"node_id", "n"}, {"gpu_indices", {-1}}}}, "'gpu_indices'"},
      {"allocation",
       {{{"node_id", "n"}, {"gpu_indices", {1}}, {"ended", "yes"}}},
       "'ended' is not a boolean"},
      {"stopping", nullptr, "'stopping'"},
      {"stop_reason", "sleepy", "'stop_reason' is not a stop reason"},
      {"stop_reason", 3, "'stop_reason' is not a stop reason"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    nlohmann::json bad = good;
    if (c.value.is_null()) {
      bad.erase(c.field);
    } else {
      bad[c.field] = c.value;
    }
    EXPECT_THAT(TaskFromJson(bad), StatusIs(StatusCode::kDataLoss, c.message));
  }
  StatusOr<core::Task> round_trip = TaskFromJson(good);
  ASSERT_TRUE(round_trip.ok());
  testing::ExpectSameTask(FullTask(1), *round_trip);
}

TEST(TaskCodecTest, KeepsATwoNodeAllocationAndTheStopReason) {
  core::Task task = FullTask(9);
  task.allocation = {{"node-a", {0, 1, 2, 3}}, {"node-b", {4, 5}, true}};
  task.stop_reason = core::StopReason::kMemberFailure;
  const nlohmann::json encoded = TaskToJson(task);
  EXPECT_EQ(encoded["allocation"], nlohmann::json::parse(R"([
      {"node_id": "node-a", "gpu_indices": [0, 1, 2, 3]},
      {"node_id": "node-b", "gpu_indices": [4, 5], "ended": true}])"));
  EXPECT_EQ(encoded["stop_reason"], "member_failure");
  StatusOr<core::Task> decoded = TaskFromJson(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  testing::ExpectSameTask(task, *decoded);
}

TEST(TaskCodecTest, TaskWrittenBeforeStopReasonsReadsAsNoReason) {
  nlohmann::json old = TaskToJson(FullTask(2));
  old.erase("stop_reason");
  StatusOr<core::Task> decoded = TaskFromJson(old);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->stop_reason, core::StopReason::kNone);
  EXPECT_TRUE(decoded->stopping);
}

}  // namespace
}  // namespace dgpu::store
