// Task records are recycled: a record that held a task through every field of its life reads,
// once reused, exactly like a new one.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;

TaskSpec Everything() {
  TaskSpec s = Spec(Priority::kHigh, 2, "A100");
  s.name = "a name long enough to live on the heap, not in the string itself";
  s.command = "python train.py --a-command-line-long-enough-to-need-its-own-buffer";
  s.env = {{"A", "1"}, {"LONG", std::string(100, 'x')}};
  s.image = "registry.example/image:tag";
  s.timeout_seconds = 3600;
  return s;
}

TEST(TaskPoolTest, ARecycledRecordReadsLikeANewOne) {
  const TimeMicros t0 = 100 * kSec;
  SchedulerCore used;
  ASSERT_TRUE(used.SetOnlinePercent(1.0, t0).ok());
  ASSERT_TRUE(used.RegisterNode("n1", "", MakeGpus(2), {}, {}, t0).ok());
  // Three tasks, each leaving every field it can set changed: one stopped and requeued, then
  // run to a failure; one cancelled while running; one failed after a lost node.
  std::vector<const Task*> records;
  for (int i = 0; i < 3; ++i) records.push_back(used.FindTask(*used.Submit(Everything(), t0)));
  used.Schedule(t0);
  const TaskNumber first = records[0]->id;
  ASSERT_TRUE(used.StopTask(first, StopReason::kPreempt, 3, t0).ok());
  ASSERT_TRUE(used.TaskStarted(first, "n1", t0 + 1).ok());
  ASSERT_TRUE(used.TaskFinished("n1", {first, false, 143, "signal:15", t0 + 2}, t0 + 2).ok());
  used.Schedule(t0 + 3);
  ASSERT_TRUE(used.TaskFinished("n1", {first, false, 7, "exit", t0 + 4}, t0 + 4).ok());
  used.Schedule(t0 + 5);
  ASSERT_TRUE(used.Cancel(records[1]->id, t0 + 6, 5).ok());
  ASSERT_TRUE(used.TaskFinished("n1", {records[1]->id, false, 143, "", t0 + 7}, t0 + 7).ok());
  used.Schedule(t0 + 8);
  ASSERT_TRUE(used.NodeLost("n1", t0 + 9).ok());
  for (const Task* t : records) {
    ASSERT_TRUE(IsFinished(t->status) || t->status == TaskStatus::kPending) << t->id;
  }
  std::vector<TaskNumber> ids;
  for (const Task* t : records) ids.push_back(t->id);
  for (TaskNumber id : ids) {
    if (IsFinished(used.FindTask(id)->status)) used.Forget(id);
  }

  // The same submission into a recycled record and into a new core's new record.
  const TaskNumber next = used.next_task_number();
  SchedulerCore fresh;
  fresh.SetNextTaskNumber(next);
  ASSERT_TRUE(fresh.SetOnlinePercent(1.0, t0).ok());
  TaskSpec plain = Spec(Priority::kHigh, 1);
  const TaskNumber a = *used.Submit(plain, t0 + 10);
  const TaskNumber b = *fresh.Submit(plain, t0 + 10);
  ASSERT_EQ(a, b);
  const Task* recycled = used.FindTask(a);
  EXPECT_NE(std::find(records.begin(), records.end(), recycled), records.end())
      << "the new task reuses a freed record";
  // The queue position comes from each core's own counter; everything else must be equal.
  auto same = [](Task got, const Task& want) {
    EXPECT_EQ(got.queue_seq, want.queue_seq + 3) << "three submissions before it";
    got.queue_seq = want.queue_seq;
    EXPECT_EQ(got.spec, want.spec);
    EXPECT_EQ(got.error, want.error);
    EXPECT_EQ(got.allocation, want.allocation);
    EXPECT_EQ(got.attempts, want.attempts);
    EXPECT_EQ(got.status, want.status);
    EXPECT_EQ(got.stopping, want.stopping);
    EXPECT_EQ(got.stop_reason, want.stop_reason);
    EXPECT_EQ(got.started_at, want.started_at);
    EXPECT_EQ(got.finished_at, want.finished_at);
    EXPECT_EQ(got.exit_code, want.exit_code);
    EXPECT_EQ(got, want);
  };
  same(*recycled, *fresh.FindTask(b));
  EXPECT_EQ(used.ReasonOf(*recycled), fresh.ReasonOf(*fresh.FindTask(b)));
  EXPECT_TRUE(used.CheckInvariants().ok()) << used.CheckInvariants().ToString();

  // And it lives the same life.
  for (SchedulerCore* core : {&used, &fresh}) {
    ASSERT_TRUE(core->RegisterNode("n2", "", MakeGpus(1), {}, {}, t0 + 11).ok());
    core->Schedule(t0 + 11);
  }
  same(*used.FindTask(a), *fresh.FindTask(b));
  EXPECT_EQ(used.FindTask(a)->allocation, (Allocation{{"n2", {0}}}));
}

}  // namespace
}  // namespace dgpu::core
