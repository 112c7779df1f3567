#include "agent/finish_outbox.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "test_util.h"

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

TaskExit Exit(std::string id, bool success, int code, int sig, std::string error, int64_t at) {
  return {std::move(id), success, code, sig, std::move(error), at};
}

std::string JournalOf(const TempDir& dir) { return dir.path() + "/.finish-outbox/journal"; }

// The journal's text after `exit` was added to a fresh outbox in `dir` (closed again).
std::string JournalWith(const TempDir& dir, const TaskExit& exit) {
  auto outbox = FinishOutbox::Open(dir.path());
  EXPECT_TRUE(outbox.ok()) << outbox.status().ToString();
  EXPECT_TRUE(outbox.ok() && outbox->Add(exit).ok());
  return testing::ReadFile(JournalOf(dir));
}

TEST(FinishOutboxTest, SurvivesReopenUntilAcknowledged) {
  TempDir dir;
  const TaskExit a = Exit("task-a", true, 0, 0, "", 2000);
  const TaskExit b = Exit("task-b", false, 137, 9, "timeout", 1000);
  TaskExit c = Exit("task-c", false, -1, 0, "start_failed: no \"sh\"\n", 3000);
  c.usage = core::ResourceUsage{1'250'000, 734'003'200};  // Measured in its cgroup: kept too.
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

TEST(FinishOutboxTest, OneJournalTruncatedOnceEverythingIsAcknowledged) {
  TempDir dir;
  const TaskExit a = Exit("task-1", true, 0, 0, "", 10);
  const TaskExit b = Exit("task-2", false, 3, 0, "", 11);
  const TaskExit c = Exit("task-3", false, 143, 15, "cancelled", 12);
  const std::string journal = JournalOf(dir);
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    EXPECT_EQ(outbox->journal_path(), journal);
    ASSERT_TRUE(outbox->AddAll({a, b, c}).ok());
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{a, b, c}));
    ASSERT_TRUE(outbox->Ack("task-1").ok());
    // Three exits and one acknowledgement, one line each; no other file.
    const std::string text = testing::ReadFile(journal);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path() + "/.finish-outbox"),
                            std::filesystem::directory_iterator()),
              1);
  }
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    EXPECT_TRUE(outbox->load_errors().empty());
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{b, c}));
    for (const char* id : {"task-2", "task-3"}) ASSERT_TRUE(outbox->Ack(id).ok());
    EXPECT_TRUE(outbox->Pending().empty());
    EXPECT_EQ(std::filesystem::file_size(journal), 0u);  // Emptied once nothing is pending.
    ASSERT_TRUE(outbox->Add(b).ok());  // Appending after the truncation starts at offset 0.
  }
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_TRUE(outbox->load_errors().empty());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{b}));
}

TEST(FinishOutboxTest, LongJournalIsRewrittenWithThePendingExitsOnly) {
  TempDir dir;
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  const TaskExit kept = Exit("task-kept", true, 0, 0, "", 1);
  ASSERT_TRUE(outbox->Add(kept).ok());
  for (int i = 0; i < 3000; ++i) {
    const std::string id = "task-" + std::to_string(i);
    ASSERT_TRUE(outbox->Add(Exit(id, true, 0, 0, "", 2 + i)).ok());
    ASSERT_TRUE(outbox->Ack(id).ok());
  }
  // 6,001 lines would have been written; the journal was rewritten on the way.
  const std::string text = testing::ReadFile(outbox->journal_path());
  EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 4096);
  auto reopened = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE(reopened->load_errors().empty());
  EXPECT_EQ(reopened->Pending(), (std::vector<TaskExit>{kept}));
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

// A late copy of an earlier run's finish may be acknowledged after the next run of the same task
// has ended here: that acknowledgement must not take the later run's exit with it.
TEST(FinishOutboxTest, AnAcknowledgementCoversItsOwnRunOnly) {
  TempDir dir;
  TaskExit first = Exit("task-7", false, 1, 0, "", 5);
  first.run = 1;
  TaskExit second = Exit("task-7", true, 0, 0, "", 9);
  second.run = 2;
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    ASSERT_TRUE(outbox->Add(first).ok());
    ASSERT_TRUE(outbox->Add(second).ok());
    const Status late = outbox->Ack("task-7", 1);
    EXPECT_EQ(late.code(), StatusCode::kNotFound);
    EXPECT_THAT(late.message(), HasSubstr("is of run 2, not 1"));
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{second}));
    // Another task keeps the journal from being truncated when task-7's exit goes.
    ASSERT_TRUE(outbox->Add(Exit("task-8", true, 0, 0, "", 10)).ok());
  }
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    EXPECT_EQ(outbox->size(), 2u);
    ASSERT_TRUE(outbox->Ack("task-7", 2).ok());
    EXPECT_EQ(outbox->size(), 1u);
  }
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_TRUE(outbox->load_errors().empty());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{Exit("task-8", true, 0, 0, "", 10)}));
  EXPECT_THAT(testing::ReadFile(JournalOf(dir)), HasSubstr("{\"ack\":\"task-7\",\"run\":2}"));
}

// Journals written before runs were numbered: exits without "run" (run 0) and acks without it,
// which cover whatever run is pending. A replayed ack of another run leaves the exit pending.
TEST(FinishOutboxTest, ReplayMatchesAcknowledgementsToRuns) {
  TempDir dir;
  const std::string journal = JournalOf(dir);
  TaskExit second = Exit("task-7", true, 0, 0, "", 9);
  second.run = 2;
  const std::string lines = JournalWith(dir, Exit("task-1", true, 0, 0, "", 1)) +
                            "{\"ack\":\"task-1\"}\n" + TaskExitToJson(second) + "\n" +
                            "{\"ack\":\"task-7\",\"run\":1}\n";
  WriteFile(journal, lines);
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_TRUE(outbox->load_errors().empty());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{second}));
  EXPECT_TRUE(outbox->Ack("task-7").ok()) << "run 0: whatever run is pending";

  WriteFile(journal, TaskExitToJson(second) + "\n{\"ack\":\"task-7\",\"run\":\"2\"}\n" +
                         "{\"task_id\":\"t\",\"success\":true,\"exit_code\":0,\"signal\":0,"
                         "\"error\":\"\",\"finished_at_unix_micros\":1,\"run\":1.5}\n");
  auto corrupt = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(corrupt.ok());
  EXPECT_EQ(corrupt->Pending(), (std::vector<TaskExit>{second}));
  ASSERT_EQ(corrupt->load_errors().size(), 2u);
  EXPECT_THAT(corrupt->load_errors()[0],
              HasSubstr("line 2 is corrupt: ack's run is not an integer"));
  EXPECT_THAT(corrupt->load_errors()[1], HasSubstr("line 3 is corrupt: run is not an integer"));
}

TEST(FinishOutboxTest, CorruptLinesAreReportedAndSetAside) {
  TempDir dir;
  const TaskExit good = Exit("good", true, 0, 0, "", 1);
  const std::string journal = JournalOf(dir);
  const std::string original = JournalWith(dir, good);
  WriteFile(journal, original + "{\"task_id\": \"broken\", \"succ\n" +
                         "{\"task_id\":\"typed\",\"success\":\"yes\",\"exit_code\":0,"
                         "\"signal\":0,\"error\":\"\",\"finished_at_unix_micros\":1}\n" +
                         "{\"ack\":7}\n");
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{good}));
  ASSERT_EQ(outbox->load_errors().size(), 3u);
  EXPECT_THAT(outbox->load_errors()[0], HasSubstr("line 2 is corrupt: not valid JSON"));
  EXPECT_THAT(outbox->load_errors()[1], HasSubstr("line 3 is corrupt: missing or mistyped field"));
  EXPECT_THAT(outbox->load_errors()[2], HasSubstr("line 4 is corrupt: ack is not a string"));
  // The damaged journal is kept aside; the new one holds what could be read.
  EXPECT_THAT(testing::ReadFile(journal + ".corrupt"), HasSubstr("broken"));
  EXPECT_EQ(testing::ReadFile(journal), original);

  auto again = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->load_errors().empty());
  EXPECT_EQ(again->Pending(), (std::vector<TaskExit>{good}));
}

TEST(FinishOutboxTest, WriteCutShortByACrashIsDropped) {
  TempDir dir;
  const TaskExit a = Exit("task-a", true, 0, 0, "", 1);
  const std::string journal = JournalOf(dir);
  const std::string whole = JournalWith(dir, a);
  WriteFile(journal, whole + "{\"task_id\":\"task-b\",\"succ");  // No newline: torn.
  const TaskExit c = Exit("task-c", false, 1, 0, "", 3);
  {
    auto outbox = FinishOutbox::Open(dir.path());
    ASSERT_TRUE(outbox.ok());
    EXPECT_TRUE(outbox->load_errors().empty());
    EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{a}));
    EXPECT_EQ(testing::ReadFile(journal), whole);  // The torn tail is cut off...
    ASSERT_TRUE(outbox->Add(c).ok());              // ...so that later lines stay whole.
  }
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_TRUE(outbox->load_errors().empty());
  EXPECT_EQ(outbox->Pending(), (std::vector<TaskExit>{a, c}));
}

TEST(FinishOutboxTest, RejectsUnsafeTaskIds) {
  TempDir dir;
  auto outbox = FinishOutbox::Open(dir.path());
  ASSERT_TRUE(outbox.ok());
  EXPECT_EQ(outbox->Add(Exit("../evil", true, 0, 0, "", 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(outbox->Pending().empty());
}

TEST(FinishOutboxTest, JsonRoundTrip) {
  TaskExit exit = Exit("task-x", false, 130, 2, "signal:2", 1712345678901234);
  auto parsed = TaskExitFromJson(TaskExitToJson(exit));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, exit);
  EXPECT_THAT(TaskExitToJson(exit), ::testing::Not(HasSubstr("run"))) << "run 0 is not written";
  exit.run = 3;
  parsed = TaskExitFromJson(TaskExitToJson(exit));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->run, 3);
  EXPECT_EQ(TaskExitFromJson("[]").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgpu::agent
