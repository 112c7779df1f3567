#include "agent/finish_outbox.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

TaskExit Exit(std::string id, bool success, int code, int sig, std::string error, int64_t at) {
  return {std::move(id), success, code, sig, std::move(error), at};
}

TEST(FinishOutboxTest, SurvivesReopenUntilAcknowledged) {
  TempDir dir;
  const TaskExit a = Exit("task-a", true, 0, 0, "", 2000);
  const TaskExit b = Exit("task-b", false, 137, 9, "timeout", 1000);
  const TaskExit c = Exit("task-c", false, -1, 0, "start_failed: no \"sh\"\n", 3000);
  {
    auto outbox = FinishOutbox::Open(dir.path() + "/work");
    ASSERT_TRUE(outbox.ok()) << outbox.status().ToString();
    EXPECT_TRUE(outbox->Pending().empty());
    ASSERT_TRUE(outbox->Add(a).ok());
    ASSERT_TRUE(outbox->Add(b).ok());
    ASSERT_TRUE(outbox->Add(c).ok());
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{b, a, c}));
  }
  {
    auto outbox = FinishOutbox::Open(dir.path() + "/work");
    ASSERT_TRUE(outbox.ok());
    EXPECT_TRUE(outbox->load_errors().empty());
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{b, a, c}));
    ASSERT_TRUE(outbox->Ack("task-a").ok());
    EXPECT_EQ(outbox->Ack("task-a").code(), StatusCode::kNotFound);
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{b, c}));
  }
  auto outbox = FinishOutbox::Open(dir.path() + "/work");
  ASSERT_TRUE(outbox.ok());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{b, c}));
  EXPECT_EQ(outbox->directory(), dir.path() + "/work/.finish-outbox");
}

TEST(FinishOutboxTest, BatchIsOneFileUntilEveryExitIsAcknowledged) {
  TempDir dir;
  const TaskExit a = Exit("task-1", true, 0, 0, "", 10);
  const TaskExit b = Exit("task-2", false, 3, 0, "", 11);
  const TaskExit c = Exit("task-3", false, 143, 15, "cancelled", 12);
  const std::string batch = dir.path() + "/.finish-outbox/batch-task-1.batch.json";
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    ASSERT_TRUE(outbox->AddAll({a, b, c}).ok());
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{a, b, c}));
    EXPECT_EQ(access(batch.c_str(), F_OK), 0);
    ASSERT_TRUE(outbox->Ack("task-1").ok());
  }
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    EXPECT_TRUE(outbox->load_errors().empty());
    // The acknowledgement was not in the file: a1 comes back (reported again, harmlessly).
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{a, b, c}));
    for (const char* id : {"task-1", "task-2", "task-3"}) ASSERT_TRUE(outbox->Ack(id).ok());
    EXPECT_TRUE(outbox->Pending().empty());
    EXPECT_NE(access(batch.c_str(), F_OK), 0);  // Removed once nothing in it is pending.
  }
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_TRUE(outbox->Pending().empty());
}

TEST(FinishOutboxTest, AddReplacesSameTask) {
  TempDir dir;
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  ASSERT_TRUE(outbox->Add(Exit("t", false, 1, 0, "", 5)).ok());
  ASSERT_TRUE(outbox->Add(Exit("t", false, 2, 0, "", 6)).ok());
  auto reopened = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->Pending(), (std::vector<TaskExit>{Exit("t", false, 2, 0, "", 6)}));
}

TEST(FinishOutboxTest, CorruptEntriesAreReportedAndSetAside) {
  TempDir dir;
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    ASSERT_TRUE(outbox->Add(Exit("good", true, 0, 0, "", 1)).ok());
  }
  const std::string box = dir.path() + "/.finish-outbox";
  WriteFile(box + "/broken.json", "{\"task_id\": \"broken\", \"succ");
  WriteFile(box + "/typed.json",
            "{\"task_id\":\"typed\",\"success\":\"yes\",\"exit_code\":0,\"signal\":0,"
            "\"error\":\"\",\"finished_at_unix_micros\":1}");
  WriteFile(box + "/renamed.json", testing::ReadFile(box + "/good.json"));
  WriteFile(box + "/interrupted.json.tmp", "{");

  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{Exit("good", true, 0, 0, "", 1)}));
  ASSERT_EQ(outbox->load_errors().size(), 3u);
  EXPECT_THAT(outbox->load_errors()[0], HasSubstr("broken.json' is corrupt: not valid JSON"));
  EXPECT_THAT(outbox->load_errors()[1],
              HasSubstr("renamed.json' is corrupt: task_id 'good' does not match the file name"));
  EXPECT_THAT(outbox->load_errors()[2],
              HasSubstr("typed.json' is corrupt: missing or mistyped field"));
  EXPECT_TRUE(std::filesystem::exists(box + "/broken.json.corrupt"));
  EXPECT_FALSE(std::filesystem::exists(box + "/broken.json"));
  EXPECT_FALSE(std::filesystem::exists(box + "/interrupted.json.tmp"));

  auto again = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->load_errors().empty());
  EXPECT_EQ(again->Pending().size(), 1u);
}

TEST(FinishOutboxTest, RejectsUnsafeTaskIds) {
  TempDir dir;
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_EQ(outbox->Add(Exit("../evil", true, 0, 0, "", 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(outbox->Pending().empty());
}

TEST(FinishOutboxTest, JsonRoundTrip) {
  const TaskExit exit = Exit("task-x", false, 130, 2, "signal:2", 1712345678901234);
  auto parsed = TaskExitFromJson(TaskExitToJson(exit));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, exit);
  EXPECT_EQ(TaskExitFromJson("[]").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgpu::agent
