#include "store/journal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "store/database.h"
#include "store_test_util.h"

namespace dgpu::store {
namespace {

using core::TaskStatus;
using testing::Ids;
using testing::OpenOrDie;
using testing::SimpleTask;
using testing::StatusIs;
using testing::TempDir;
using testing::Upsert;

// What the callbacks saw; written on the writer thread, read after Flush or Shutdown.
struct Outcome {
  uint64_t seq = 0;
  Status status;
};

TEST(JournalTest, GroupsAppendsIntoFewCommitsInOrder) {
  TempDir dir;
  constexpr int kAppends = 201;
  std::vector<uint64_t> seqs;
  {
    auto db = OpenOrDie(dir.path());
    ASSERT_TRUE(db->Apply({}, 10).ok());  // Numbering continues after the stored sequence.
    Journal journal(db.get(), 10);
    std::vector<Outcome> outcomes;
    // The first callback holds the writer until every other append is queued, so the rest
    // must form one group.
    std::promise<void> all_queued;
    std::shared_future<void> queued = all_queued.get_future().share();
    for (int i = 1; i <= kAppends; ++i) {
      const uint64_t seq = journal.Append(
          {Upsert(SimpleTask(i, TaskStatus::kPending))}, [&outcomes, queued, i](Status s) {
            if (i == 1) queued.wait();
            outcomes.push_back({static_cast<uint64_t>(10 + i), std::move(s)});
          });
      seqs.push_back(seq);
    }
    all_queued.set_value();
    ASSERT_TRUE(journal.Flush().ok());

    for (int i = 0; i < kAppends; ++i) EXPECT_EQ(seqs[i], static_cast<uint64_t>(11 + i));
    ASSERT_EQ(outcomes.size(), static_cast<size_t>(kAppends));
    for (int i = 0; i < kAppends; ++i) {
      EXPECT_EQ(outcomes[i].seq, seqs[i]);  // Callbacks in Append order.
      EXPECT_TRUE(outcomes[i].status.ok()) << outcomes[i].status.ToString();
    }
    JournalStats stats = journal.stats();
    EXPECT_GE(stats.batches_committed, 1u);
    EXPECT_LE(stats.batches_committed, 2u);
    EXPECT_EQ(stats.appends_committed, static_cast<uint64_t>(kAppends));
    EXPECT_EQ(stats.changes_committed, static_cast<uint64_t>(kAppends));
    EXPECT_GE(stats.MeanBatchSize(), kAppends / 2.0);
    EXPECT_EQ(stats.last_durable_seq, 10u + kAppends);
    EXPECT_EQ(stats.batches_failed, 0u);
    EXPECT_TRUE(journal.health().ok());
  }
  // Everything is in the database after a reopen, and numbering continues.
  auto db = OpenOrDie(dir.path());
  StatusOr<LoadedState> loaded = db->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->tasks.size(), static_cast<size_t>(kAppends));
  for (int i = 0; i < kAppends; ++i) EXPECT_EQ(loaded->tasks[i].id, static_cast<uint64_t>(i + 1));
  EXPECT_EQ(loaded->last_applied_seq, 10u + kAppends);
  EXPECT_EQ(loaded->next_task_number, kAppends + 1u);
  Journal journal(db.get(), loaded->last_applied_seq);
  EXPECT_EQ(journal.Append({}, nullptr), 11u + kAppends);
}

TEST(JournalTest, LoneAppendCommitsAtOnce) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Journal journal(db.get(), 0);
  std::promise<Status> done;
  EXPECT_EQ(journal.Append({Upsert(SimpleTask(1, TaskStatus::kPending))},
                           [&done](Status s) { done.set_value(std::move(s)); }),
            1u);
  EXPECT_TRUE(done.get_future().get().ok());  // No Flush needed: nothing waits for a group.
  StatusOr<std::optional<core::Task>> got = db->GetTask(1);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->has_value());
  EXPECT_EQ(journal.stats().batches_committed, 1u);
}

// A waiter runs once its sequence number has been committed, after the callbacks of the appends
// up to it, and sees the database holding them; a sequence number already reached runs at once.
TEST(JournalTest, WhenAttemptedRunsOnceTheDatabaseHoldsTheSequence) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Journal journal(db.get(), 0);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::string> order;  // Written on the writer thread only, read after Flush.
  journal.Append({Upsert(SimpleTask(1, TaskStatus::kPending))}, [&order, released](Status) {
    released.wait();  // Holds the writer: the next appends wait in the queue.
    order.push_back("append 1");
  });
  const uint64_t second = journal.Append({Upsert(SimpleTask(2, TaskStatus::kPending))},
                                         [&order](Status) { order.push_back("append 2"); });
  ASSERT_EQ(second, 2u);
  std::promise<bool> held;
  journal.WhenAttempted(second, [&order, &db, &held](Status s) {
    order.push_back("waiter");
    StatusOr<std::optional<core::Task>> got = db->GetTask(2);
    held.set_value(s.ok() && got.ok() && got->has_value());
  });
  journal.Append({Upsert(SimpleTask(3, TaskStatus::kPending))},
                 [&order](Status) { order.push_back("append 3"); });
  release.set_value();
  EXPECT_TRUE(held.get_future().get());
  ASSERT_TRUE(journal.Flush().ok());
  ASSERT_EQ(order.size(), 4u);
  // The waiter comes after append 2's callback; append 3 may share append 2's group.
  EXPECT_EQ(order[0], "append 1");
  EXPECT_EQ(order[1], "append 2");
  EXPECT_TRUE(order[2] == "waiter" || order[3] == "waiter") << order[2] << ", " << order[3];

  bool at_once = false;
  journal.WhenAttempted(2, [&at_once](Status s) { at_once = s.ok(); });
  EXPECT_TRUE(at_once);  // Reached already: on this thread, before the call returns.
  journal.Shutdown();
  bool after_shutdown = false;
  journal.WhenAttempted(1000, [&after_shutdown](Status) { after_shutdown = true; });
  EXPECT_TRUE(after_shutdown);  // Nothing will reach it: answered at once.
}

TEST(JournalTest, ShutdownDrainsTheQueue) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  int ok_callbacks = 0;
  {
    Journal journal(db.get(), 0);
    for (int i = 1; i <= 50; ++i) {
      journal.Append({Upsert(SimpleTask(i, TaskStatus::kPending))}, [&ok_callbacks](Status s) {
        if (s.ok()) ++ok_callbacks;
      });
    }
  }  // Destructor: drain, then stop.
  EXPECT_EQ(ok_callbacks, 50);
  StatusOr<TaskPage> page = db->ListTasks({.limit = 0});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 50);
  StatusOr<StoreMeta> meta = db->ReadMeta();
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->last_applied_seq, 50u);
}

TEST(JournalTest, AppendAfterShutdownIsRefusedAtOnce) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Journal journal(db.get(), 0);
  journal.Shutdown();
  Status seen;
  EXPECT_EQ(journal.Append({Upsert(SimpleTask(1, TaskStatus::kPending))},
                           [&seen](Status s) { seen = std::move(s); }),
            0u);
  EXPECT_THAT(seen, StatusIs(StatusCode::kFailedPrecondition, "shut down"));
  EXPECT_TRUE(journal.Flush().ok());
}

TEST(JournalTest, InvalidAppendIsRefusedAloneAndDoesNotStopTheJournal) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Journal journal(db.get(), 0);
  core::Task bad = SimpleTask(2, TaskStatus::kPending);
  bad.id = 0;
  std::vector<Status> seen(3);
  journal.Append({Upsert(SimpleTask(1, TaskStatus::kPending))}, [&](Status s) { seen[0] = s; });
  journal.Append({Upsert(bad)}, [&](Status s) { seen[1] = s; });
  journal.Append({Upsert(SimpleTask(3, TaskStatus::kPending))}, [&](Status s) { seen[2] = s; });
  ASSERT_TRUE(journal.Flush().ok());
  EXPECT_TRUE(seen[0].ok());
  EXPECT_THAT(seen[1], StatusIs(StatusCode::kInvalidArgument, "task number 0"));
  EXPECT_TRUE(seen[2].ok());
  EXPECT_TRUE(journal.health().ok());
  StatusOr<std::vector<core::Task>> all = db->AllTasks();
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(Ids(*all), ::testing::ElementsAre(1, 3));
}

}  // namespace
}  // namespace dgpu::store
