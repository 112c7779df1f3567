#include "store/database.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "store_test_util.h"

namespace dgpu::store {
namespace {

using core::Priority;
using core::TaskStatus;
using ::testing::ElementsAre;
using testing::FullTask;
using testing::Ids;
using testing::NextNumber;
using testing::OpenOrDie;
using testing::Quota;
using testing::SimpleTask;
using testing::StatusIs;
using testing::Team;
using testing::TempDir;
using testing::Upsert;

TEST(DatabaseTest, NewDatabaseHasDefaultMeta) {
  TempDir dir;
  auto db = OpenOrDie(dir.Sub("state"));  // Missing directories are created.
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->path(), dir.Sub("state") + "/dgpu.db");
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->tasks.empty());
  EXPECT_EQ(loaded->online_percent, std::nullopt);
  EXPECT_EQ(loaded->epoch, 0u);
  EXPECT_EQ(loaded->next_task_number, 1u);
  EXPECT_EQ(loaded->last_applied_seq, 0u);
}

// The round trips compare FullTask and FullPendingTask: between them they hold every field of
// the task table away from its default, so a new field is checked once it is given a value there.
TEST(DatabaseTest, TheSampleTasksSetEveryFieldAwayFromItsDefault) {
  const core::Task full = FullTask(1);
  const core::Task pending = testing::FullPendingTask(1);
  core::ForEachTaskField([&](int, const auto& field) {
    const auto& unset = core::TaskFieldDefault(field);
    EXPECT_TRUE(field.get(full) != unset || field.get(pending) != unset)
        << field.info.name << " keeps its default in FullTask and FullPendingTask";
  });
}

// A row written before a field existed holds its column's default (the migration's DEFAULT),
// which must read as the field's default in a new Task.
TEST(DatabaseTest, ARowWithOnlyTheFirstReleasesColumnsReadsEveryLaterFieldAsItsDefault) {
  TempDir dir;
  OpenOrDie(dir.path());
  std::string columns;
  core::ForEachTaskField([&](int, const auto& field) {
    if (field.info.first_release)
      columns += (columns.empty() ? "" : ", ") + std::string(field.info.name);
  });
  testing::RunSql(dir.Sub(kDatabaseFileName),
                  "INSERT INTO tasks (" + columns +
                      ") VALUES (9, 'old', 'low', 1, '', 'true', '[]', 0, '', 'pending', 9, '[]', "
                      "0, 0, '', 1, 0, 0, 0);");
  auto db = OpenOrDie(dir.path());
  StatusOr<std::optional<core::Task>> got = db->GetTask(9);
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  core::ForEachTaskField([&](int, const auto& field) {
    if (!field.info.first_release) {
      EXPECT_EQ(field.get(**got), core::TaskFieldDefault(field)) << field.info.name;
    }
  });
}

TEST(DatabaseTest, ARowWithAValueNoTaskHoldsIsDataLossNamingTheField) {
  TempDir dir;
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({Upsert(FullTask(8))}, 1).ok());
  }
  const std::string path = dir.Sub(kDatabaseFileName);
  testing::RunSql(path, "UPDATE tasks SET attempts = 4294967296 WHERE id = 8;");
  {
    auto db = OpenOrDie(dir.path());
    EXPECT_THAT(db->GetTask(8),
                StatusIs(StatusCode::kDataLoss,
                         "task-8 in " + path + ": attempts 4294967296 is out of range"));
  }
  testing::RunSql(path, "UPDATE tasks SET attempts = 1, max_retries = -1 WHERE id = 8;");
  auto db = OpenOrDie(dir.path());
  EXPECT_THAT(db->GetTask(8), StatusIs(StatusCode::kDataLoss,
                                       "task-8 in " + path + ": max_retries -1 is out of range"));
}

TEST(DatabaseTest, RoundTripsEveryTaskFieldAcrossReopen) {
  TempDir dir;
  const core::Task task = FullTask(17);
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({Upsert(task)}, 5).ok());
    StatusOr<std::optional<core::Task>> got = db->GetTask(17);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value());
    testing::ExpectSameTask(task, **got);
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<std::optional<core::Task>> got = db->GetTask(17);
  ASSERT_TRUE(got.ok() && got->has_value());
  testing::ExpectSameTask(task, **got);
  StatusOr<std::optional<core::Task>> missing = db->GetTask(18);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  StatusOr<StoreMeta> meta = db->ReadMeta();
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->last_applied_seq, 5u);
  EXPECT_EQ(meta->next_task_number, 18u);
}

TEST(DatabaseTest, TaskStatesAnswerForTheTasksOfARangeThatExist) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  core::Task ran = SimpleTask(3, TaskStatus::kFailed, Priority::kLow, 0, 50);
  ran.attempts = 1;
  core::Task member = SimpleTask(5, TaskStatus::kSuccess, Priority::kLow, 0, 60);
  member.started_at = 40;
  member.spec.array_index = 1;
  member.spec.array_size = 2;
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(2, TaskStatus::kCancelled, Priority::kLow, 0, 30)),
                         Upsert(ran), Upsert(member)},
                        1)
                  .ok());
  StatusOr<std::vector<core::StoredTaskState>> states = db->TaskStates(2, 6);
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  std::vector<std::tuple<core::TaskNumber, TaskStatus, bool, int32_t, int32_t>> got;
  for (const core::StoredTaskState& s : *states) {
    got.emplace_back(s.id, s.status, s.started, s.array_index, s.array_size);
  }
  std::sort(got.begin(), got.end());
  EXPECT_THAT(got, ElementsAre(std::make_tuple(2u, TaskStatus::kCancelled, false, -1, 0),
                               std::make_tuple(3u, TaskStatus::kFailed, true, -1, 0),
                               std::make_tuple(5u, TaskStatus::kSuccess, true, 1, 2)));
  states = db->TaskStates(6, 100);
  ASSERT_TRUE(states.ok());
  EXPECT_TRUE(states->empty());
  states = db->TaskStates(4, 4);
  ASSERT_TRUE(states.ok());
  EXPECT_TRUE(states->empty());
}

// A pending task waiting for its retry keeps its time; a running one has none (see FullTask).
TEST(DatabaseTest, RoundTripsAPendingTasksRetryTimeAcrossReopen) {
  TempDir dir;
  const core::Task task = testing::FullPendingTask(21);
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({Upsert(task)}, 1).ok());
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<std::optional<core::Task>> got = db->GetTask(21);
  ASSERT_TRUE(got.ok() && got->has_value());
  testing::ExpectSameTask(task, **got);
}

TEST(DatabaseTest, UpsertReplacesTheRow) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  core::Task t = SimpleTask(3, TaskStatus::kPending);
  core::Task running = t;
  running.status = TaskStatus::kRunning;
  running.allocation = {{"n1", {1}}};
  running.attempts = 1;
  ASSERT_TRUE(db->Apply({Upsert(t), Upsert(running)}, 1).ok());
  StatusOr<TaskPage> page = db->ListTasks({.limit = 10});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 1);
  ASSERT_EQ(page->tasks.size(), 1u);
  testing::ExpectSameTask(running, page->tasks[0]);
}

TEST(DatabaseTest, AnArrayChangeStoresEveryMemberInOneStatement) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  core::Task first = FullTask(10);
  first.status = TaskStatus::kPending;
  first.allocation.clear();
  first.stopping = false;
  first.stop_reason = core::StopReason::kNone;
  first.spec.array_index = 0;
  first.spec.array_size = 4;
  first.queue_seq = 100;
  core::Change array;
  array.kind = core::Change::Kind::kTaskArray;
  array.task = first;
  // A member that started in the same batch: its upsert follows the array's insert and wins.
  core::Task started = core::ArrayMember(first, 2);
  started.status = TaskStatus::kRunning;
  started.allocation = {{"n1", {0}}};
  started.attempts = 1;
  ASSERT_TRUE(db->Apply({array, Upsert(started)}, 3).ok());
  for (int i = 0; i < 4; ++i) {
    StatusOr<std::optional<core::Task>> got = db->GetTask(10 + i);
    ASSERT_TRUE(got.ok() && got->has_value()) << i;
    testing::ExpectSameTask(i == 2 ? started : core::ArrayMember(first, i), **got);
    EXPECT_EQ(std::make_tuple((*got)->id, (*got)->queue_seq, (*got)->spec.array_index),
              std::make_tuple(static_cast<core::TaskNumber>(10 + i), int64_t{100 + i}, i));
  }
  StatusOr<std::optional<core::Task>> past = db->GetTask(14);
  ASSERT_TRUE(past.ok());
  EXPECT_FALSE(past->has_value());
  StatusOr<StoreMeta> meta = db->ReadMeta();
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->next_task_number, 14u);
  StatusOr<TaskPage> pending = db->ListTasks({.status = TaskStatus::kPending, .limit = 10});
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->total, 3);
  EXPECT_THAT(Ids(pending->tasks), ElementsAre(13u, 11u, 10u));
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->tasks.size(), 4u);

  // Not the first member, or more members than an array may have: the whole batch is refused.
  core::Change bad = array;
  bad.task.id = 20;
  bad.task.spec.array_index = 1;
  EXPECT_THAT(db->Apply({Upsert(SimpleTask(30, TaskStatus::kPending)), bad}, 4),
              StatusIs(StatusCode::kInvalidArgument, "does not start with member 0"));
  bad.task.spec.array_index = 0;
  bad.task.spec.array_size = core::kMaxArraySize + 1;
  EXPECT_THAT(db->Apply({bad}, 4), StatusIs(StatusCode::kInvalidArgument, "members"));
  StatusOr<std::optional<core::Task>> not_stored = db->GetTask(30);
  ASSERT_TRUE(not_stored.ok());
  EXPECT_FALSE(not_stored->has_value());
}

TEST(DatabaseTest, LoadReturnsExactlyTheUnfinishedTasksInQueueOrder) {
  TempDir dir;
  {
    auto db = OpenOrDie(dir.path());
    std::vector<core::Change> changes = {
        Upsert(SimpleTask(1, TaskStatus::kPending, Priority::kLow, 5)),
        Upsert(SimpleTask(2, TaskStatus::kRunning, Priority::kHigh, 2)),
        Upsert(SimpleTask(3, TaskStatus::kSuccess, Priority::kLow, 1, 900)),
        Upsert(SimpleTask(4, TaskStatus::kCancelled, Priority::kLow, 7, 950, /*stopping=*/true)),
        Upsert(SimpleTask(5, TaskStatus::kCancelled, Priority::kHigh, 3, 960)),
        Upsert(SimpleTask(6, TaskStatus::kFailed, Priority::kHigh, 4, 970)),
        Upsert(SimpleTask(7, TaskStatus::kPending, Priority::kHigh, -1)),  // Put back at head.
        Quota(0.25),
    };
    ASSERT_TRUE(db->Apply(changes, 42).ok());
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_THAT(Ids(loaded->tasks), ElementsAre(7, 2, 1, 4));
  EXPECT_EQ(loaded->online_percent, 0.25);
  EXPECT_EQ(loaded->next_task_number, 8u);
  EXPECT_EQ(loaded->last_applied_seq, 42u);
  testing::ExpectSameTask(SimpleTask(4, TaskStatus::kCancelled, Priority::kLow, 7, 950, true),
                          loaded->tasks[3]);
}

TEST(DatabaseTest, LoadEachStreamsTheSameTasksAndStopsAtTheFirstError) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(
      db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending, Priority::kLow, 5)),
                 Upsert(SimpleTask(2, TaskStatus::kRunning, Priority::kHigh, 2)),
                 Upsert(SimpleTask(3, TaskStatus::kSuccess, Priority::kLow, 1, 900)),
                 Upsert(SimpleTask(7, TaskStatus::kPending, Priority::kHigh, -1)), Quota(0.25)},
                42)
          .ok());
  StoreMeta meta;
  std::vector<core::TaskNumber> seen;
  Status s = db->LoadEach(
      [&](core::Task&& t) {
        seen.push_back(t.id);
        return OkStatus();
      },
      &meta);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_THAT(seen, ElementsAre(7, 2, 1));
  EXPECT_EQ(meta.online_percent, 0.25);
  EXPECT_EQ(meta.next_task_number, 8u);
  EXPECT_EQ(meta.last_applied_seq, 42u);

  seen.clear();
  s = db->LoadEach(
      [&](core::Task&& t) {
        seen.push_back(t.id);
        return t.id == 2 ? InvalidArgument("task-2 refused") : OkStatus();
      },
      &meta);
  EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument, "task-2 refused"));
  EXPECT_EQ(s.message(), "task-2 refused");
  EXPECT_THAT(seen, ElementsAre(7, 2));
}

TEST(DatabaseTest, NextTaskNumberNeverDecreasesAndSurvivesPruning) {
  TempDir dir;
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kSuccess, Priority::kLow, 1, 100)),
                           Upsert(SimpleTask(2, TaskStatus::kFailed, Priority::kLow, 2, 100))},
                          1)
                    .ok());
    ASSERT_TRUE(db->Apply({NextNumber(10)}, 2).ok());
    ASSERT_TRUE(db->Apply({NextNumber(5),
                           Upsert(SimpleTask(4, TaskStatus::kSuccess, Priority::kLow, 4, 100))},
                          3)
                    .ok());
    StatusOr<int> pruned = db->PruneFinished(1000, 100);
    ASSERT_TRUE(pruned.ok());
    EXPECT_EQ(*pruned, 3);
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->next_task_number, 10u);
  EXPECT_EQ(loaded->last_applied_seq, 3u);
  StatusOr<std::vector<core::Task>> all = db->AllTasks();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

// Thirty tasks: id i has status (i % 5) and priority (i % 2 ? low : high).
class ListTasksTest : public ::testing::Test {
 protected:
  static constexpr TaskStatus kStatuses[] = {TaskStatus::kPending, TaskStatus::kRunning,
                                             TaskStatus::kSuccess, TaskStatus::kFailed,
                                             TaskStatus::kCancelled};
  void SetUp() override {
    db_ = OpenOrDie(dir_.path());
    std::vector<core::Change> changes;
    for (core::TaskNumber id = 1; id <= 30; ++id) {
      changes.push_back(
          Upsert(SimpleTask(id, kStatuses[id % 5], id % 2 ? Priority::kLow : Priority::kHigh)));
    }
    ASSERT_TRUE(db_->Apply(changes, 1).ok());
  }

  TempDir dir_;
  std::unique_ptr<Database> db_;
};

TEST_F(ListTasksTest, FiltersPagesAndCountsExactly) {
  struct Case {
    std::optional<TaskStatus> status;
    std::optional<Priority> priority;
    int limit;
    int offset;
  };
  const Case cases[] = {
      {std::nullopt, std::nullopt, 50, 0},
      {std::nullopt, std::nullopt, 7, 0},
      {std::nullopt, std::nullopt, 7, 25},
      {std::nullopt, std::nullopt, 5, 30},
      {std::nullopt, std::nullopt, 0, 0},
      {TaskStatus::kPending, std::nullopt, 3, 1},
      {TaskStatus::kSuccess, std::nullopt, 50, 0},
      {std::nullopt, Priority::kHigh, 4, 2},
      {std::nullopt, Priority::kLow, 100, 10},
      {TaskStatus::kRunning, Priority::kLow, 50, 0},
      {TaskStatus::kRunning, Priority::kHigh, 50, 0},
      {TaskStatus::kCancelled, Priority::kHigh, 1, 1},
  };
  for (const Case& c : cases) {
    // The expected answer, from the definition.
    std::vector<core::TaskNumber> matching;
    for (core::TaskNumber id = 30; id >= 1; --id) {
      Priority p = id % 2 ? Priority::kLow : Priority::kHigh;
      if (c.status && *c.status != kStatuses[id % 5]) continue;
      if (c.priority && *c.priority != p) continue;
      matching.push_back(id);
    }
    std::vector<core::TaskNumber> want;
    for (size_t i = c.offset; i < matching.size() && want.size() < static_cast<size_t>(c.limit);
         ++i) {
      want.push_back(matching[i]);
    }
    SCOPED_TRACE(::testing::Message()
                 << "status=" << (c.status ? core::ToString(*c.status) : "any")
                 << " priority=" << (c.priority ? core::ToString(*c.priority) : "any")
                 << " limit=" << c.limit << " offset=" << c.offset);
    StatusOr<TaskPage> page =
        db_->ListTasks({c.status, c.priority, c.limit, c.offset, std::nullopt});
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_EQ(page->total, static_cast<int64_t>(matching.size()));
    EXPECT_EQ(Ids(page->tasks), want);
    const bool more = c.limit > 0 && c.offset + want.size() < matching.size();
    EXPECT_EQ(page->next, more ? want.back() : 0);
  }
}

TEST_F(ListTasksTest, KeysetPagesReturnEveryMatchingTaskOnceInOrder) {
  for (std::optional<TaskStatus> status :
       {std::optional<TaskStatus>(), std::optional(TaskStatus::kPending),
        std::optional(TaskStatus::kFailed)}) {
    for (std::optional<Priority> priority :
         {std::optional<Priority>(), std::optional(Priority::kLow)}) {
      for (int limit : {1, 4, 6, 30}) {
        std::vector<core::TaskNumber> matching;
        for (core::TaskNumber id = 30; id >= 1; --id) {
          if (status && *status != kStatuses[id % 5]) continue;
          if (priority && *priority != (id % 2 ? Priority::kLow : Priority::kHigh)) continue;
          matching.push_back(id);
        }
        SCOPED_TRACE(::testing::Message()
                     << "status=" << (status ? core::ToString(*status) : "any") << " priority="
                     << (priority ? core::ToString(*priority) : "any") << " limit=" << limit);
        std::vector<core::TaskNumber> walked;
        std::optional<core::TaskNumber> before;
        int pages = 0;
        while (true) {
          StatusOr<TaskPage> page = db_->ListTasks({status, priority, limit, 0, before});
          ASSERT_TRUE(page.ok()) << page.status().ToString();
          EXPECT_EQ(page->total, static_cast<int64_t>(matching.size()));
          ASSERT_LE(page->tasks.size(), static_cast<size_t>(limit));
          for (const core::Task& t : page->tasks) walked.push_back(t.id);
          ++pages;
          if (page->next == 0) break;
          EXPECT_EQ(page->next, page->tasks.back().id);
          before = page->next;
        }
        EXPECT_EQ(walked, matching);
        // Exactly as many pages as needed: a full last page does not leave an empty one after it.
        const int want_pages =
            matching.empty() ? 1 : static_cast<int>((matching.size() + limit - 1) / limit);
        EXPECT_EQ(pages, want_pages);
      }
    }
  }
}

TEST_F(ListTasksTest, KeysetPastTheEndOrBeyondEveryIdIsExact) {
  StatusOr<TaskPage> page = db_->ListTasks({.limit = 5, .before = 1});
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->tasks.empty());
  EXPECT_EQ(page->next, 0u);
  EXPECT_EQ(page->total, 30);
  page = db_->ListTasks({.limit = 2, .before = ~core::TaskNumber{0}});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(Ids(page->tasks), (std::vector<core::TaskNumber>{30, 29}));
  EXPECT_EQ(page->next, 29u);
}

TEST_F(ListTasksTest, KeptCountsFollowEveryKindOfChange) {
  // Checks every filter's kept total against a count of the rows themselves.
  auto expect_counts_exact = [&](const std::string& when) {
    SCOPED_TRACE(when);
    std::vector<core::Task> all = *db_->AllTasks();
    for (std::optional<TaskStatus> status :
         {std::optional<TaskStatus>(), std::optional(TaskStatus::kPending),
          std::optional(TaskStatus::kRunning), std::optional(TaskStatus::kSuccess),
          std::optional(TaskStatus::kFailed), std::optional(TaskStatus::kCancelled)}) {
      for (std::optional<Priority> priority :
           {std::optional<Priority>(), std::optional(Priority::kLow),
            std::optional(Priority::kHigh)}) {
        int64_t want = 0;
        for (const core::Task& t : all) {
          want += (!status || t.status == *status) && (!priority || t.spec.priority == *priority);
        }
        StatusOr<TaskPage> page = db_->ListTasks({status, priority, 0, 0, std::nullopt});
        ASSERT_TRUE(page.ok());
        EXPECT_EQ(page->total, want) << (status ? core::ToString(*status) : "any") << "/"
                                     << (priority ? core::ToString(*priority) : "any");
      }
    }
  };
  expect_counts_exact("as filled");
  // Status changes, a priority change, a repeated upsert that changes nothing, new rows.
  core::Task moved = SimpleTask(5, TaskStatus::kRunning, Priority::kHigh);
  core::Task flipped = SimpleTask(6, kStatuses[6 % 5], Priority::kLow);
  ASSERT_TRUE(
      db_->Apply({Upsert(SimpleTask(1, TaskStatus::kSuccess, Priority::kLow, 1, 10)), Upsert(moved),
                  Upsert(moved), Upsert(flipped), Upsert(SimpleTask(31, TaskStatus::kPending)),
                  Upsert(SimpleTask(32, TaskStatus::kPending, Priority::kHigh))},
                 2)
          .ok());
  expect_counts_exact("after upserts");
  // A batch that fails leaves the counts as they were.
  ASSERT_FALSE(db_->Apply({Upsert(SimpleTask(33, TaskStatus::kPending)),
                           Upsert(SimpleTask(0, TaskStatus::kPending))},
                          3)
                   .ok());
  expect_counts_exact("after a refused batch");
  ASSERT_TRUE(db_->PruneFinished(std::numeric_limits<core::TimeMicros>::max(), 3).ok());
  expect_counts_exact("after pruning");
  StoreMeta meta = *db_->ReadMeta();
  ASSERT_TRUE(db_->ReplaceAll(meta, {SimpleTask(40, TaskStatus::kPending),
                                     SimpleTask(41, TaskStatus::kFailed, Priority::kHigh)})
                  .ok());
  expect_counts_exact("after a replacement");
  StatusOr<TaskPage> page = db_->ListTasks({.limit = 0});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 2);
}

TEST_F(ListTasksTest, RejectsNegativeLimitOrOffset) {
  EXPECT_THAT(db_->ListTasks({.limit = -1}), StatusIs(StatusCode::kInvalidArgument, "limit"));
  EXPECT_THAT(db_->ListTasks({.limit = 10, .offset = -1}),
              StatusIs(StatusCode::kInvalidArgument, "offset"));
  EXPECT_THAT(db_->ListTasks({.limit = 10, .offset = 2, .before = 9}),
              StatusIs(StatusCode::kInvalidArgument, "offset and before cannot be combined"));
}

TEST(DatabaseTest, PruneDeletesOnlyFinishedTasksOlderThanTheCutoffInBatches) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(
      db->Apply({Upsert(SimpleTask(1, TaskStatus::kSuccess, Priority::kLow, 1, 100)),
                 Upsert(SimpleTask(2, TaskStatus::kFailed, Priority::kLow, 2, 200)),
                 Upsert(SimpleTask(3, TaskStatus::kCancelled, Priority::kLow, 3, 240)),
                 Upsert(SimpleTask(4, TaskStatus::kCancelled, Priority::kLow, 4, 150, true)),
                 Upsert(SimpleTask(5, TaskStatus::kSuccess, Priority::kLow, 5, 300)),
                 Upsert(SimpleTask(6, TaskStatus::kPending)),
                 Upsert(SimpleTask(7, TaskStatus::kRunning))},
                1)
          .ok());
  EXPECT_THAT(db->PruneFinished(250, 0), StatusIs(StatusCode::kInvalidArgument, "batch_limit"));
  StatusOr<int> pruned = db->PruneFinished(250, 2);  // Batches of 2, 2 and 0.
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_EQ(*pruned, 3);
  StatusOr<std::vector<core::Task>> all = db->AllTasks();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(Ids(*all), ElementsAre(4, 5, 6, 7));
  StatusOr<int> again = db->PruneFinished(250, 2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
}

core::Change Event(core::TaskNumber task, core::TimeMicros time, std::string type,
                   std::string node = "", std::string message = "") {
  core::Change c;
  c.kind = core::Change::Kind::kTaskEvent;
  c.event = {task, time, std::move(type), std::move(node), std::move(message)};
  return c;
}

// A task's history is stored in the order it was applied, read per task, pruned with its task,
// and kept for the tasks a full snapshot keeps.
TEST(DatabaseTest, TaskEventsAreKeptInOrderAndLeaveWithTheirTask) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kRunning)),
                         Upsert(SimpleTask(2, TaskStatus::kRunning)),
                         Event(1, 50, "scheduled", "n1", "run 1 ordered to start on n1, GPU 0"),
                         Event(2, 40, "scheduled", "n2"), Event(1, 45, "started", "n1")},
                        1)
                  .ok());
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kSuccess, Priority::kLow, 1, 100)),
                         Event(1, 100, "finished", "n1", "succeeded")},
                        2)
                  .ok());
  StatusOr<std::vector<core::TaskEventRecord>> events = db->TaskEvents(1);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  // Applied order, not time order: the history is what the scheduler saw, as it saw it.
  EXPECT_EQ(*events, (std::vector<core::TaskEventRecord>{
                         {1, 50, "scheduled", "n1", "run 1 ordered to start on n1, GPU 0"},
                         {1, 45, "started", "n1", ""},
                         {1, 100, "finished", "n1", "succeeded"}}));
  EXPECT_EQ(db->TaskEvents(2)->size(), 1u);
  EXPECT_TRUE(db->TaskEvents(3)->empty());
  EXPECT_TRUE(db->TaskEvents(~0ULL)->empty());

  // A batch with a bad event stores nothing of it.
  EXPECT_THAT(db->Apply({Upsert(SimpleTask(3, TaskStatus::kPending)), Event(0, 1, "started")}, 3),
              StatusIs(StatusCode::kInvalidArgument, "task number 0"));
  EXPECT_THAT(db->Apply({Event(3, 1, "")}, 3), StatusIs(StatusCode::kInvalidArgument, "a type"));
  EXPECT_FALSE(db->GetTask(3)->has_value());

  // Pruned with their task; the other task's stay.
  ASSERT_EQ(*db->PruneFinished(1000, 10), 1);
  EXPECT_TRUE(db->TaskEvents(1)->empty());
  EXPECT_EQ(db->TaskEvents(2)->size(), 1u);
  // Reopened: still there.
  db.reset();
  db = OpenOrDie(dir.path());
  EXPECT_EQ(db->TaskEvents(2)->size(), 1u);

  // A snapshot keeps the history of the tasks it keeps.
  ASSERT_TRUE(
      db->Apply({Upsert(SimpleTask(4, TaskStatus::kPending)), Event(4, 7, "requeued")}, 4).ok());
  ASSERT_TRUE(db->ReplaceAll(StoreMeta{}, {SimpleTask(2, TaskStatus::kRunning)}).ok());
  EXPECT_EQ(db->TaskEvents(2)->size(), 1u);
  EXPECT_TRUE(db->TaskEvents(4)->empty());
}

// GPU time per team or user from the runs in the history: exact, clipped to the range.
TEST(DatabaseTest, UsageSumsEachRunsGpuTimeWithinTheRange) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  const core::TimeMicros s = 1000000;
  core::Task a = SimpleTask(1, TaskStatus::kSuccess, Priority::kLow, 1, 50 * s);
  a.spec.gpu_count = 2;
  a.spec.team = "vision";
  a.spec.user = "ann";
  core::Task b = SimpleTask(2, TaskStatus::kRunning);
  b.spec.gpu_count = 1;
  b.spec.team = "nlp";
  b.spec.user = "bob";
  core::Task c = SimpleTask(3, TaskStatus::kCancelled);  // Cancelled before it ran.
  c.spec.team = "vision";
  core::Task d = SimpleTask(4, TaskStatus::kPending);  // Its node was lost; queued again.
  d.spec.gpu_count = 4;
  d.spec.team = "nlp";
  ASSERT_TRUE(db->Apply({Upsert(a), Upsert(b), Upsert(c), Upsert(d),
                         // a: two runs, 10-20 s and 30-50 s.
                         Event(1, 10 * s, "scheduled"), Event(1, 11 * s, "started"),
                         Event(1, 20 * s, "requeued"), Event(1, 30 * s, "scheduled"),
                         Event(1, 50 * s, "finished"),
                         // b: running since 40 s.
                         Event(2, 40 * s, "scheduled"), Event(3, 45 * s, "cancelled"),
                         // d: 60-70 s, then lost with its node.
                         Event(4, 60 * s, "scheduled"), Event(4, 70 * s, "node_lost")},
                        1)
                  .ok());
  StatusOr<std::vector<UsageRow>> all = db->Usage({0, 1000 * s, 100 * s, false});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  // nlp: b 1 x 60 s + d 4 x 10 s; vision: a 2 x (10 + 20) s.
  EXPECT_EQ(*all, (std::vector<UsageRow>{{"nlp", 100, 2}, {"vision", 60, 1}}));
  // Clipped to 15-45 s: a 2 x (5 + 15), b 1 x 5.
  EXPECT_EQ(*db->Usage({15 * s, 45 * s, 100 * s, false}),
            (std::vector<UsageRow>{{"nlp", 5, 1}, {"vision", 40, 1}}));
  EXPECT_EQ(*db->Usage({15 * s, 45 * s, 100 * s, true}),
            (std::vector<UsageRow>{{"ann", 40, 1}, {"bob", 5, 1}}));
  EXPECT_TRUE(db->Usage({200 * s, 300 * s, 100 * s, false})->empty());
  EXPECT_THAT(db->Usage({5, 5, 100 * s, false}),
              StatusIs(StatusCode::kInvalidArgument, "from must be before to"));
}

TEST(DatabaseTest, EpochIsDurable) {
  TempDir dir;
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->SetEpoch(7).ok());
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<uint64_t> epoch = db->GetEpoch();
  ASSERT_TRUE(epoch.ok());
  EXPECT_EQ(*epoch, 7u);
}

TEST(DatabaseTest, ApplyIsAllOrNothing) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending))}, 1).ok());
  core::Task bad = SimpleTask(2, TaskStatus::kPending);
  bad.id = 0;
  EXPECT_THAT(db->Apply({Upsert(SimpleTask(3, TaskStatus::kPending)), Quota(0.5), Upsert(bad)}, 2),
              StatusIs(StatusCode::kInvalidArgument, "task number 0"));
  EXPECT_THAT(db->Apply({Upsert(SimpleTask(3, TaskStatus::kPending)), Quota(1.5)}, 2),
              StatusIs(StatusCode::kInvalidArgument, "online_percent"));
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_THAT(Ids(loaded->tasks), ElementsAre(1));
  EXPECT_EQ(loaded->online_percent, std::nullopt);
  EXPECT_EQ(loaded->last_applied_seq, 1u);
  EXPECT_EQ(loaded->next_task_number, 2u);
}

TEST(DatabaseTest, ForEachTaskStreamsAllTasksWithTheirMeta) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(9, TaskStatus::kSuccess, Priority::kLow, 1, 5)),
                         Upsert(SimpleTask(2, TaskStatus::kPending)), Quota(0.6)},
                        11)
                  .ok());
  std::vector<core::TaskNumber> seen;
  StoreMeta meta;
  ASSERT_TRUE(db->ForEachTask([&](const core::Task& t) { seen.push_back(t.id); }, &meta).ok());
  EXPECT_THAT(seen, ElementsAre(2, 9));
  EXPECT_EQ(meta.last_applied_seq, 11u);
  EXPECT_EQ(meta.next_task_number, 10u);
  EXPECT_EQ(meta.online_percent, 0.6);
}

TEST(DatabaseTest, ReadSnapshotSeesOneStateWhateverIsCommittedMeanwhile) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending)), Quota(0.4)}, 5).ok());
  StatusOr<std::unique_ptr<ReadSnapshot>> snapshot = db->OpenReadSnapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kRunning)),
                         Upsert(SimpleTask(2, TaskStatus::kPending)), Quota(0.8)},
                        6)
                  .ok());
  EXPECT_EQ((*snapshot)->meta().last_applied_seq, 5u);
  EXPECT_EQ((*snapshot)->meta().online_percent, 0.4);
  std::vector<core::Task> seen;
  ASSERT_TRUE((*snapshot)->ForEachTask([&](const core::Task& t) { seen.push_back(t); }).ok());
  ASSERT_THAT(Ids(seen), ElementsAre(1));
  EXPECT_EQ(seen[0].status, TaskStatus::kPending);
  // Point reads on the shared connection are not held up and see the newer state.
  StatusOr<std::optional<core::Task>> now = db->GetTask(1);
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ((*now)->status, TaskStatus::kRunning);
}

TEST(DatabaseTest, ReadSnapshotListsQueuesInQueueOrderAndUnfinishedTasksById) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(
      db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending, Priority::kLow, 30)),
                 Upsert(SimpleTask(2, TaskStatus::kPending, Priority::kHigh, 20)),
                 Upsert(SimpleTask(3, TaskStatus::kPending, Priority::kLow, -5)),  // Put back.
                 Upsert(SimpleTask(4, TaskStatus::kRunning, Priority::kLow, 1)),
                 Upsert(SimpleTask(5, TaskStatus::kSuccess, Priority::kLow, 2, 100)),
                 Upsert(SimpleTask(6, TaskStatus::kCancelled, Priority::kHigh, 3, 100, true)),
                 Upsert(SimpleTask(7, TaskStatus::kCancelled, Priority::kHigh, 4, 100)),
                 Upsert(SimpleTask(8, TaskStatus::kPending, Priority::kLow, 30))},
                1)
          .ok());
  StatusOr<std::unique_ptr<ReadSnapshot>> snapshot = db->OpenReadSnapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  std::vector<core::TaskNumber> low, high;
  ASSERT_TRUE((*snapshot)->ForEachQueued(Priority::kLow, [&](auto id) { low.push_back(id); }).ok());
  ASSERT_TRUE(
      (*snapshot)->ForEachQueued(Priority::kHigh, [&](auto id) { high.push_back(id); }).ok());
  EXPECT_THAT(low, ElementsAre(3, 1, 8));
  EXPECT_THAT(high, ElementsAre(2));
  std::vector<core::Task> unfinished;
  ASSERT_TRUE(
      (*snapshot)->ForEachUnfinished([&](const core::Task& t) { unfinished.push_back(t); }).ok());
  EXPECT_THAT(Ids(unfinished), ElementsAre(1, 2, 3, 4, 6, 8));
}

TEST(DatabaseTest, ReplaceAllInstallsASnapshot) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  ASSERT_TRUE(db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending)),
                         Upsert(SimpleTask(2, TaskStatus::kRunning)), Quota(0.9)},
                        3)
                  .ok());
  StoreMeta meta;
  meta.epoch = 4;
  meta.next_task_number = 20;
  meta.last_applied_seq = 99;
  ASSERT_TRUE(db->ReplaceAll(meta, {FullTask(5), SimpleTask(9, TaskStatus::kPending)}).ok());
  StatusOr<std::vector<core::Task>> all = db->AllTasks();
  ASSERT_TRUE(all.ok());
  ASSERT_THAT(Ids(*all), ElementsAre(5, 9));
  testing::ExpectSameTask(FullTask(5), (*all)[0]);
  StatusOr<StoreMeta> got = db->ReadMeta();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->epoch, 4u);
  EXPECT_EQ(got->next_task_number, 20u);
  EXPECT_EQ(got->last_applied_seq, 99u);
  EXPECT_EQ(got->online_percent, std::nullopt);

  // next_task_number is raised above the highest task id.
  ASSERT_TRUE(db->ReplaceAll(meta, {SimpleTask(30, TaskStatus::kPending)}).ok());
  got = db->ReadMeta();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->next_task_number, 31u);
}

TEST(DatabaseTest, TeamsAreDurableReplacedByNameAndValidated) {
  TempDir dir;
  const core::TeamRecord vision{
      .name = "vision",
      .set = true,
      .limits = {.online = 8, .batch = 4, .max_gpus = 16, .weight = 2, .default_time_limit = 7200},
      .usage = 1234.5,
      .usage_at = 1'700'000'000'000'000};
  core::TeamRecord nlp{.name = "nlp", .set = false, .deleted = true};
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({Team(vision), Team(nlp)}, 1).ok());
    // A second write of a name replaces the first.
    nlp.deleted = false;
    nlp.usage = 7;
    ASSERT_TRUE(db->Apply({Team(nlp)}, 2).ok());
    // Invalid names and limits are refused, with nothing of the batch applied.
    core::TeamRecord bad_name{.name = "Bad Name"};
    EXPECT_THAT(db->Apply({Upsert(SimpleTask(1, TaskStatus::kPending)), Team(bad_name)}, 3),
                StatusIs(StatusCode::kInvalidArgument, "team name 'Bad Name' is not valid"));
    core::TeamRecord bad_limits{.name = "x", .limits = {.online = -1}};
    EXPECT_THAT(db->Apply({Team(bad_limits)}, 3),
                StatusIs(StatusCode::kInvalidArgument, "team x has invalid limits"));
    core::TeamRecord bad_time_limit{.name = "x", .limits = {.default_time_limit = -1}};
    EXPECT_THAT(db->Apply({Team(bad_time_limit)}, 3),
                StatusIs(StatusCode::kInvalidArgument, "team x has invalid limits"));
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->tasks.empty());
  EXPECT_EQ(loaded->last_applied_seq, 2u);
  ASSERT_EQ(loaded->teams.size(), 2u);
  // By name.
  EXPECT_EQ(loaded->teams[0], nlp);
  EXPECT_EQ(loaded->teams[1], vision);

  // A snapshot replaces every team.
  StoreMeta meta;
  meta.teams = {core::TeamRecord{.name = "infra", .set = true, .limits = {.batch = 2}}};
  ASSERT_TRUE(db->ReplaceAll(meta, {}).ok());
  StatusOr<StoreMeta> got = db->ReadMeta();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->teams, meta.teams);
}

TEST(DatabaseTest, NodeModesAreDurableRemovedWhenSchedulableAndReplaced) {
  TempDir dir;
  auto mode = [](std::string id, core::NodeMode m) {
    core::Change c;
    c.kind = core::Change::Kind::kNodeUpsert;
    c.node = {std::move(id), m};
    return c;
  };
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(
        db->Apply({mode("n2", core::NodeMode::kCordoned), mode("n1", core::NodeMode::kDraining),
                   mode("n3", core::NodeMode::kCordoned)},
                  1)
            .ok());
    ASSERT_TRUE(
        db->Apply({mode("n3", core::NodeMode::kSchedulable), mode("n2", core::NodeMode::kDraining)},
                  2)
            .ok());
    EXPECT_THAT(
        db->Apply(
            {Upsert(SimpleTask(1, TaskStatus::kPending)), mode("", core::NodeMode::kCordoned)}, 3),
        StatusIs(StatusCode::kInvalidArgument, "a node mode needs a node id"));
  }
  auto db = OpenOrDie(dir.path());
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->tasks.empty()) << "the refused batch stored nothing";
  EXPECT_EQ(loaded->nodes, (std::vector<core::NodeRecord>{{"n1", core::NodeMode::kDraining},
                                                          {"n2", core::NodeMode::kDraining}}));

  StoreMeta meta;
  meta.nodes = {{"n9", core::NodeMode::kCordoned}};
  ASSERT_TRUE(db->ReplaceAll(meta, {}).ok());
  StatusOr<StoreMeta> got = db->ReadMeta();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->nodes, meta.nodes);
}

TEST(DatabaseTest, ListsOneTeamsTasksAndCountsThem) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  std::vector<core::Change> changes;
  for (core::TaskNumber id = 1; id <= 12; ++id) {
    core::Task t = SimpleTask(id, id % 2 ? TaskStatus::kPending : TaskStatus::kSuccess);
    t.spec.team = id % 3 == 0 ? "vision" : "default";
    changes.push_back(Upsert(t));
  }
  ASSERT_TRUE(db->Apply(changes, 1).ok());
  StatusOr<TaskPage> page = db->ListTasks({.limit = 2, .team = "vision"});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->total, 4);
  EXPECT_THAT(Ids(page->tasks), ElementsAre(12, 9));
  EXPECT_EQ(page->next, 9u);
  page = db->ListTasks({.limit = 10, .before = 9, .team = "vision"});
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Ids(page->tasks), ElementsAre(6, 3));
  EXPECT_EQ(page->next, 0u);
  page = db->ListTasks({.status = TaskStatus::kPending, .limit = 10, .team = "vision"});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 2);
  EXPECT_THAT(Ids(page->tasks), ElementsAre(9, 3));
  page = db->ListTasks({.limit = 10, .team = "nobody"});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 0);
  EXPECT_TRUE(page->tasks.empty());
}

TEST(DatabaseTest, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  EXPECT_THAT(Database::Open(dir.path()), StatusIs(StatusCode::kFailedPrecondition, "in use"));
  db.reset();
  EXPECT_TRUE(Database::Open(dir.path()).ok());
}

}  // namespace
}  // namespace dgpu::store
