// The task life cycle's stops: why a task is stopped decides where it goes once it has ended.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;
using Kind = Decision::Kind;

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(core_.SetOnlinePercent(1.0, now_).ok());
    ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {}, {}, now_).ok());
  }
  TaskNumber Submit(int gpus = 1) {
    auto r = core_.Submit(Spec(Priority::kHigh, gpus, ""), now_);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : 0;
  }
  std::vector<Decision> Pass() {
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return core_.TakeDecisions();
  }
  // The agent reports the end it saw a moment ago.
  void Confirm(TaskNumber t) {
    ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 143, "", now_ - 1}, now_).ok());
    ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  }
  const Task& T(TaskNumber t) { return *core_.FindTask(t); }

  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_F(LifecycleTest, APreemptedTaskKeepsItsGpusUntilItEndsThenGoesBackToItsPlace) {
  TaskNumber victim = Submit(2);
  ASSERT_EQ(Pass().size(), 1u);
  TaskNumber later = Submit(2);  // Queued behind nothing but submitted after the victim.
  EXPECT_TRUE(Pass().empty());
  ASSERT_TRUE(core_.StopTask(victim, StopReason::kPreempt, 5, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, victim, "n1", {}, StopReason::kPreempt, 5}}));
  EXPECT_EQ(T(victim).status, TaskStatus::kRunning);
  EXPECT_TRUE(T(victim).stopping);
  EXPECT_TRUE(Pass().empty()) << "its GPUs are still held";
  Confirm(victim);
  EXPECT_EQ(T(victim).status, TaskStatus::kPending);
  EXPECT_EQ(T(victim).error, "preempted");
  EXPECT_FALSE(T(victim).stopping);
  EXPECT_EQ(T(victim).stop_reason, StopReason::kNone);
  EXPECT_EQ(core_.QueueOrder(Priority::kHigh), (std::vector<TaskNumber>{victim, later}));
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].task, victim);
  EXPECT_EQ(T(victim).attempts, 1) << "a preempted run is not a lost attempt";
  EXPECT_EQ(T(victim).preemptions, 1);
}

TEST_F(LifecycleTest, ATimedOutOrMemberFailedTaskFails) {
  TaskNumber a = Submit();
  TaskNumber b = Submit();
  ASSERT_EQ(Pass().size(), 2u);
  ASSERT_TRUE(core_.StopTask(a, StopReason::kTimeout, -1, now_).ok());
  ASSERT_TRUE(core_.StopTask(b, StopReason::kMemberFailure, 0, now_).ok());
  now_ += kSec;
  Confirm(a);
  Confirm(b);
  EXPECT_EQ(T(a).status, TaskStatus::kFailed);
  EXPECT_EQ(T(a).error, "timeout");
  EXPECT_EQ(T(a).exit_code, 143);
  EXPECT_EQ(T(a).finished_at, now_ - 1) << "the agent's time";
  EXPECT_EQ(T(b).status, TaskStatus::kFailed);
  EXPECT_EQ(T(b).error, "member_failed");
  EXPECT_EQ(core_.RunningCount(Priority::kHigh), 0u);
  EXPECT_EQ(core_.Quota().used[0], 0);
}

TEST_F(LifecycleTest, ALostNodeEndsAStopAsIfConfirmed) {
  TaskNumber drained = Submit();
  TaskNumber unhealthy = Submit();
  ASSERT_EQ(Pass().size(), 2u);
  ASSERT_TRUE(core_.StopTask(drained, StopReason::kDrain, 30, now_).ok());
  ASSERT_TRUE(core_.StopTask(unhealthy, StopReason::kGpuFailure, 30, now_).ok());
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(drained).status, TaskStatus::kPending);
  EXPECT_EQ(T(drained).error, "drained");
  EXPECT_EQ(T(unhealthy).status, TaskStatus::kPending);
  EXPECT_EQ(T(unhealthy).error, "gpu_unhealthy");
  EXPECT_EQ(T(drained).attempts, 0) << "an eviction is not counted, as a preemption";
  EXPECT_EQ(T(drained).preemptions, 1);
  EXPECT_EQ(T(unhealthy).attempts, 1) << "a stop is not a lost attempt";
}

TEST_F(LifecycleTest, ANodeThatComesBackWithoutTheStoppedTaskEndsItsStop) {
  TaskNumber t = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.StopTask(t, StopReason::kTimeout, 10, now_).ok());
  (void)core_.TakeDecisions();
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {}, {}, now_).ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(t).status, TaskStatus::kFailed);
  EXPECT_EQ(T(t).error, "timeout");
}

TEST_F(LifecycleTest, ANodeThatComesBackStillRunningTheStoppedTaskIsToldAgain) {
  TaskNumber t = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.StopTask(t, StopReason::kPreempt, 10, now_).ok());
  (void)core_.TakeDecisions();
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {{t, {0}}}, {}, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, t, "n1", {}, StopReason::kPreempt}}));
  EXPECT_TRUE(T(t).stopping);
}

TEST_F(LifecycleTest, CancellingAStoppingTaskMakesItCancelled) {
  TaskNumber t = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.StopTask(t, StopReason::kPreempt, 10, now_).ok());
  ASSERT_TRUE(core_.Cancel(t, now_).ok());
  EXPECT_EQ(T(t).status, TaskStatus::kCancelled);
  EXPECT_EQ(T(t).stop_reason, StopReason::kCancel);
  Confirm(t);
  EXPECT_EQ(T(t).status, TaskStatus::kCancelled);
  EXPECT_EQ(core_.RunningCount(Priority::kHigh), 0u);
}

TEST_F(LifecycleTest, ASecondStopKeepsTheFirstReasonAndResendsTheOrder) {
  TaskNumber t = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.StopTask(t, StopReason::kDrain, 60, now_).ok());
  ASSERT_TRUE(core_.StopTask(t, StopReason::kPreempt, 5, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, t, "n1", {}, StopReason::kDrain, 60},
                                   {Kind::kStop, t, "n1", {}, StopReason::kDrain, 5}}));
  EXPECT_EQ(T(t).stop_reason, StopReason::kDrain);
}

TEST_F(LifecycleTest, BadStopsChangeNothing) {
  TaskNumber pending = Submit();
  EXPECT_EQ(core_.StopTask(pending, StopReason::kPreempt, 1, now_).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.StopTask(999, StopReason::kPreempt, 1, now_).code(), StatusCode::kNotFound);
  EXPECT_EQ(core_.StopTask(pending, StopReason::kNone, 1, now_).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.StopTask(pending, StopReason::kReconcile, 1, now_).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.StopTask(pending, StopReason::kPreempt, -2, now_).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_.TakeDecisions().empty());
  EXPECT_EQ(T(pending).status, TaskStatus::kPending);
  EXPECT_TRUE(core_.CheckInvariants().ok());
}

TEST_F(LifecycleTest, RestoreRefusesAStopThatCannotBe) {
  Task t;
  t.id = 50;
  t.spec = Spec(Priority::kHigh, 1, "");
  t.status = TaskStatus::kPending;
  t.stopping = true;
  t.stop_reason = StopReason::kPreempt;
  EXPECT_EQ(core_.Restore(t, now_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.FindTask(50), nullptr);
  t.status = TaskStatus::kRunning;
  t.allocation = {{"n9", {0}}};
  t.stop_reason = StopReason::kCancel;
  EXPECT_EQ(core_.Restore(t, now_).code(), StatusCode::kInvalidArgument);
  t.stop_reason = StopReason::kPreempt;
  EXPECT_TRUE(core_.Restore(t, now_).ok());
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

// limits.max_pending_per_user reads the count of a user's pending tasks: it follows every way a
// task enters and leaves its queue (the invariants recount it the slow way after each step).
TEST_F(LifecycleTest, PendingTasksAreCountedPerUser) {
  auto submit = [&](const std::string& user, int gpus) {
    TaskSpec spec = Spec(Priority::kHigh, gpus, "");
    spec.user = user;
    auto r = core_.Submit(spec, now_);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : 0;
  };
  const TaskNumber a1 = submit("alice", 2);
  const TaskNumber a2 = submit("alice", 2);
  submit("bob", 1);
  submit("", 1);  // No user: not counted.
  EXPECT_EQ(core_.PendingOfUser("alice"), 2u);
  EXPECT_EQ(core_.PendingOfUser("bob"), 1u);
  EXPECT_EQ(core_.PendingOfUser(""), 0u);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  Pass();  // a1 starts on the node's two GPUs.
  EXPECT_EQ(T(a1).status, TaskStatus::kRunning);
  EXPECT_EQ(core_.PendingOfUser("alice"), 1u);
  ASSERT_TRUE(core_.Cancel(a2, now_).ok());
  EXPECT_EQ(core_.PendingOfUser("alice"), 0u);
  // Preempted: back in the queue, counted again.
  ASSERT_TRUE(core_.StopTask(a1, StopReason::kPreempt, 5, now_).ok());
  Confirm(a1);
  EXPECT_EQ(T(a1).status, TaskStatus::kPending);
  EXPECT_EQ(core_.PendingOfUser("alice"), 1u);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

// agent.stop_tasks_after_disconnect: the agent stopped the task itself while cut off. Its
// finish ("disconnected") is a lost attempt, never the task's failure, whether it arrives while
// the task is still held there or after the node was declared lost and the task requeued.
TEST_F(LifecycleTest, AFailedRunIsRetriedAfterADoublingBackoffUntilRetriesAreUsedUp) {
  TaskSpec spec = Spec(Priority::kHigh, 2, "");
  spec.max_retries = 2;
  spec.retry_backoff_seconds = 5;
  spec.user = "ann";
  TaskNumber t = *core_.Submit(spec, now_);
  ASSERT_EQ(Pass().size(), 1u);
  core_.TakeChanges();
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 3, "", now_}, now_).ok());
  EXPECT_EQ(T(t).status, TaskStatus::kPending);
  EXPECT_EQ(std::make_tuple(T(t).retries, T(t).attempts, T(t).exit_code), std::make_tuple(1, 1, 3));
  EXPECT_EQ(T(t).retry_at, now_ + 5 * kSec);
  EXPECT_EQ(core_.ReasonOf(T(t)), PendingReason::kRetryBackoff);
  EXPECT_EQ(core_.PendingCount(Priority::kHigh), 1u);
  EXPECT_EQ(core_.PendingOfUser("ann"), 1u);
  EXPECT_EQ(core_.TakeChanges().back().task.retry_at, now_ + 5 * kSec) << "durable";
  // Nothing starts it during the backoff, though its GPUs are free; a later task goes first.
  TaskNumber other = Submit(2);
  EXPECT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.TaskFinished("n1", {other, true, 0, "", now_}, now_).ok());
  now_ += 4 * kSec;
  core_.Tick(now_);
  EXPECT_TRUE(Pass().empty());
  now_ += 1 * kSec;
  core_.Tick(now_);
  EXPECT_EQ(T(t).retry_at, 0);
  std::vector<Decision> started = Pass();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].task, t);
  EXPECT_EQ(T(t).attempts, 2);

  // The second retry waits twice as long; after it, the task fails for good.
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 3, "signal:9", now_}, now_).ok());
  EXPECT_EQ(T(t).retry_at, now_ + 10 * kSec);
  EXPECT_EQ(T(t).error, "signal:9");
  now_ += 10 * kSec;
  ASSERT_EQ(Pass().size(), 1u) << "a pass queues a task whose backoff is over, too";
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 1, "", now_}, now_).ok());
  EXPECT_EQ(T(t).status, TaskStatus::kFailed);
  EXPECT_EQ(std::make_tuple(T(t).retries, T(t).attempts, T(t).exit_code), std::make_tuple(2, 3, 1));
  EXPECT_EQ(core_.PendingOfUser("ann"), 0u);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

TEST_F(LifecycleTest, ATaskWaitingForARetryCanBeCancelledAndRestored) {
  TaskSpec spec = Spec(Priority::kHigh, 1, "");
  spec.max_retries = 1;
  TaskNumber a = *core_.Submit(spec, now_);
  TaskNumber b = *core_.Submit(spec, now_);
  ASSERT_EQ(Pass().size(), 2u);
  ASSERT_TRUE(core_.TaskFinished("n1", {a, false, 1, "", now_}, now_).ok());
  ASSERT_TRUE(core_.TaskFinished("n1", {b, false, 1, "", now_}, now_).ok());
  ASSERT_TRUE(core_.Cancel(a, now_).ok());
  EXPECT_EQ(T(a).status, TaskStatus::kCancelled);
  EXPECT_EQ(T(a).retry_at, 0);
  EXPECT_EQ(core_.PendingCount(Priority::kHigh), 1u);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();

  // A restarted core keeps b waiting until its time, then queues it.
  SchedulerCore restarted;
  ASSERT_TRUE(restarted.SetOnlinePercent(1.0, now_).ok());
  ASSERT_TRUE(restarted.Restore(T(b), now_).ok());
  ASSERT_TRUE(restarted.RegisterNode("n1", "", MakeGpus(2, "A100"), {}, {}, now_).ok());
  EXPECT_EQ(restarted.ReasonOf(*restarted.FindTask(b)), PendingReason::kRetryBackoff);
  restarted.Schedule(now_);
  EXPECT_TRUE(restarted.TakeDecisions().empty());
  EXPECT_TRUE(restarted.CheckInvariants().ok()) << restarted.CheckInvariants().ToString();
  restarted.Schedule(now_ + 10 * kSec);
  EXPECT_EQ(restarted.TakeDecisions().size(), 1u);
  EXPECT_EQ(restarted.FindTask(b)->retries, 1);
}

TEST_F(LifecycleTest, ATaskItsAgentStoppedWhileCutOffIsALostAttempt) {
  const TaskNumber t = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 143, "disconnected", now_ - 1}, now_).ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(t).status, TaskStatus::kPending);
  EXPECT_EQ(T(t).error, "agent_lost");
  EXPECT_EQ(T(t).attempts, 1);
  // It runs again, and its next end is its own.
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(t).attempts, 2);
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 1, "", now_}, now_).ok());
  EXPECT_EQ(T(t).status, TaskStatus::kFailed);

  // Declared lost first, then the node comes back reporting the cut run: still queued.
  const TaskNumber u = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  EXPECT_EQ(T(u).status, TaskStatus::kPending);
  ASSERT_TRUE(core_
                  .RegisterNode("n1", "", MakeGpus(2, "A100"), {},
                                {{u, false, 143, "disconnected", now_ - 1}}, now_)
                  .ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(u).status, TaskStatus::kPending) << "the cut run is not the task's end";
  EXPECT_EQ(T(u).attempts, 1);
  // A run that ended by itself while its node was away is still recorded as its end.
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  ASSERT_TRUE(
      core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {}, {{u, true, 0, "", now_ - 1}}, now_)
          .ok());
  EXPECT_EQ(T(u).status, TaskStatus::kSuccess);
}

// Every start is a new run (RunNumber: retries and preemptions count). A report that names an
// earlier run than the task's latest is a late copy (a finish sent again after its answer was
// lost): it changes nothing, wherever it arrives.
TEST_F(LifecycleTest, AReportOfAnEarlierRunIsNeverTakenForTheLatestOne) {
  TaskSpec spec = Spec(Priority::kHigh, 1, "");
  spec.max_retries = 1;
  spec.retry_backoff_seconds = 1;
  const TaskNumber t = *core_.Submit(spec, now_);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(RunNumber(T(t)), 1);
  const FinishReport failed{t, false, 1, "", now_, /*run=*/1};
  ASSERT_TRUE(core_.TaskFinished("n1", failed, now_).ok());
  ASSERT_EQ(T(t).retries, 1);
  // The agent registers again (a failover) with run 1's finish still unacknowledged: the task
  // keeps waiting for its retry instead of ending with run 1's failure.
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {}, {failed}, now_).ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(std::make_tuple(T(t).status, T(t).retries), std::make_tuple(TaskStatus::kPending, 1));

  // Run 2 starts on the same node; run 1's finish arrives once more.
  now_ += 1 * kSec;
  core_.Tick(now_);
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_EQ(RunNumber(T(t)), 2);
  const TimeMicros started = T(t).started_at;
  EXPECT_EQ(core_.TaskStarted(t, "n1", now_ + 5, 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(T(t).started_at, started);
  const Status late = core_.TaskFinished("n1", failed, now_);
  EXPECT_EQ(late.code(), StatusCode::kAlreadyExists) << late.ToString();
  EXPECT_EQ(T(t).status, TaskStatus::kRunning);
  ASSERT_TRUE(core_.TaskStarted(t, "n1", now_ + 7, 2).ok());
  EXPECT_EQ(T(t).started_at, now_ + 7);
  // Registering with run 2 running and run 1's finish: run 2 is adopted, nothing ends.
  const std::vector<int> gpus = T(t).allocation[0].gpu_indices;
  ASSERT_TRUE(
      core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {{t, gpus, 2}}, {failed}, now_).ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(t).status, TaskStatus::kRunning);
  EXPECT_TRUE(Pass().empty());
  ASSERT_TRUE(core_.TaskFinished("n1", {t, true, 0, "", now_, 2}, now_).ok());
  EXPECT_EQ(std::make_tuple(T(t).status, T(t).attempts, T(t).exit_code),
            std::make_tuple(TaskStatus::kSuccess, 2, 0));
}

// A queued task takes back its latest run only when that run was lost with its node (its end
// was never recorded), not when it was preempted: that run's end is known already.
TEST_F(LifecycleTest, AQueuedTaskTakesBackItsLatestRunOnlyIfItWasLost) {
  const TaskNumber preempted = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.StopTask(preempted, StopReason::kPreempt, 0, now_).ok());
  Pass();
  ASSERT_TRUE(core_.TaskFinished("n1", {preempted, false, 143, "preempted", now_, 1}, now_).ok());
  ASSERT_EQ(T(preempted).status, TaskStatus::kPending);
  EXPECT_EQ(
      std::make_tuple(T(preempted).attempts, T(preempted).preemptions, RunNumber(T(preempted))),
      std::make_tuple(0, 1, 1));
  const TaskNumber lost = Submit();
  ASSERT_EQ(Pass().size(), 2u) << "the preempted task runs again, beside the new one";
  ASSERT_EQ(T(preempted).status, TaskStatus::kRunning);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  ASSERT_EQ(T(lost).status, TaskStatus::kPending);
  ASSERT_EQ(T(preempted).status, TaskStatus::kPending);
  // Back with: run 1 of the preempted task (ended and recorded) reported again, run 2 of it
  // lost running, and the lost task's run 1 ended meanwhile.
  ASSERT_TRUE(core_
                  .RegisterNode("n1", "", MakeGpus(2, "A100"), {{preempted, {0}, 2}},
                                {{preempted, false, 143, "preempted", now_, 1},
                                 {lost, true, 0, "", now_ - 1, 1}},
                                now_)
                  .ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(lost).status, TaskStatus::kSuccess);
  EXPECT_EQ(T(preempted).status, TaskStatus::kRunning) << "its lost run 2 is taken back";
  EXPECT_EQ(RunNumber(T(preempted)), 2);

  // The same with the preempted run reported as still running: it is stopped, not taken back.
  ASSERT_TRUE(core_.TaskFinished("n1", {preempted, true, 0, "", now_, 2}, now_).ok());
  const TaskNumber again = Submit();
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.StopTask(again, StopReason::kPreempt, 0, now_).ok());
  Pass();
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  ASSERT_EQ(T(again).status, TaskStatus::kPending);
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2, "A100"), {{again, {0}, 1}}, {}, now_).ok());
  ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(T(again).status, TaskStatus::kPending);
  const std::vector<Decision> orders = core_.TakeDecisions();
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(std::make_tuple(orders[0].kind, orders[0].task, orders[0].reason),
            std::make_tuple(Kind::kStop, again, StopReason::kReconcile));
}

}  // namespace
}  // namespace dgpu::core
