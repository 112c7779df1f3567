// Dependencies between tasks (TaskSpec::depends_on): held out of the queue until each parent has
// started, ended, succeeded or failed as asked; failed (or held) once that can no longer be.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;
using C = DependencyCondition;
using S = DependencyState;

class DependenciesTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(core_); }
  void Init(SchedulerCore& core) {
    ASSERT_TRUE(core.SetOnlinePercent(1.0, now_).ok());
    ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4, "A100"), {}, {}, now_).ok());
  }
  static TaskSpec After(std::vector<std::pair<TaskNumber, C>> parents, int gpus = 1) {
    TaskSpec s = Spec(Priority::kHigh, gpus);
    for (auto [task, c] : parents) s.depends_on.push_back({task, c});
    return s;
  }
  TaskNumber Submit(const TaskSpec& s) {
    auto r = core_.Submit(s, now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  TaskNumber Submit(int gpus = 1) { return Submit(Spec(Priority::kHigh, gpus)); }
  // The tasks a pass starts.
  std::vector<TaskNumber> Pass() {
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    std::vector<TaskNumber> started;
    for (const Decision& d : core_.TakeDecisions()) {
      if (d.kind == Decision::Kind::kStart) started.push_back(d.task);
    }
    return started;
  }
  void Finish(TaskNumber t, bool success) {
    ASSERT_TRUE(core_.TaskFinished("n1", {t, success, success ? 0 : 1, "", now_}, now_).ok());
  }
  const Task& T(TaskNumber t) { return *core_.FindTask(t); }
  S StateOf(TaskNumber t, size_t i = 0) { return T(t).spec.depends_on[i].state; }

  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_F(DependenciesTest, AfterOkWaitsForTheParentsSuccess) {
  const TaskNumber parent = Submit();
  const TaskNumber child = Submit(After({{parent, C::kAfterOk}}));
  EXPECT_EQ(core_.ReasonOf(T(child)), PendingReason::kDependency);
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{parent}) << "the child waits, though GPUs are free";
  EXPECT_EQ(core_.PendingCount(Priority::kHigh), 1u) << "a held task counts as pending";
  now_ += kSec;
  EXPECT_TRUE(Pass().empty());
  Finish(parent, true);
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{child});
  EXPECT_EQ(StateOf(child), S::kSatisfied);
}

TEST_F(DependenciesTest, AfterOkOnAFailedParentFailsTheTaskAndItsOwnChildren) {
  const TaskNumber parent = Submit();
  const TaskNumber child = Submit(After({{parent, C::kAfterOk}}));
  const TaskNumber grandchild = Submit(After({{child, C::kAfterOk}}));
  const TaskNumber cleanup = Submit(After({{child, C::kAfterNotOk}}));
  ASSERT_EQ(Pass(), std::vector<TaskNumber>{parent});
  Finish(parent, false);
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{cleanup}) << "a failed child satisfies afternotok";
  EXPECT_EQ(T(child).status, TaskStatus::kFailed);
  EXPECT_EQ(T(child).error, "dependency_never_satisfied");
  EXPECT_EQ(T(child).started_at, 0);
  EXPECT_EQ(StateOf(child), S::kNeverSatisfied);
  EXPECT_EQ(T(grandchild).status, TaskStatus::kFailed) << "the failure goes down the chain";
  EXPECT_EQ(T(grandchild).error, "dependency_never_satisfied");
  EXPECT_EQ(core_.PendingCount(Priority::kHigh), 0u);
}

TEST_F(DependenciesTest, WithoutKillingANeverSatisfiedTaskStaysPendingUntilCancelled) {
  SchedulerCore core(CoreConfig{.kill_invalid_dependencies = false});
  Init(core);
  const TaskNumber parent = *core.Submit(Spec(Priority::kHigh, 1), now_);
  const TaskNumber child = *core.Submit(After({{parent, C::kAfterNotOk}}), now_);
  core.Schedule(now_);
  ASSERT_TRUE(core.TaskFinished("n1", {parent, true, 0, "", now_}, now_).ok());
  core.Schedule(now_);
  ASSERT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
  EXPECT_EQ(core.FindTask(child)->status, TaskStatus::kPending);
  EXPECT_EQ(core.ReasonOf(*core.FindTask(child)), PendingReason::kDependencyNeverSatisfied);
  EXPECT_EQ(core.PendingCount(Priority::kHigh), 1u);
  ASSERT_TRUE(core.Cancel(child, now_).ok());
  EXPECT_EQ(core.PendingCount(Priority::kHigh), 0u);
  ASSERT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

TEST_F(DependenciesTest, EachConditionOnEachEnd) {
  struct Case {
    C condition;
    bool success;  // How the parent ends.
    bool runs;     // Whether the child then runs (else it fails).
  };
  for (const Case& c : {Case{C::kAfterOk, true, true}, Case{C::kAfterOk, false, false},
                        Case{C::kAfterNotOk, false, true}, Case{C::kAfterNotOk, true, false},
                        Case{C::kAfterAny, true, true}, Case{C::kAfterAny, false, true},
                        Case{C::kAfter, true, true}, Case{C::kAfter, false, true}}) {
    SCOPED_TRACE(std::string(ToString(c.condition)) + (c.success ? " success" : " failure"));
    const TaskNumber parent = Submit(4);
    const TaskNumber child = Submit(After({{parent, c.condition}}));
    ASSERT_EQ(Pass(), std::vector<TaskNumber>{parent});
    Finish(parent, c.success);
    if (c.runs) {
      EXPECT_EQ(Pass(), std::vector<TaskNumber>{child});
      Finish(child, true);
    } else {
      EXPECT_TRUE(Pass().empty());
      EXPECT_EQ(T(child).error, "dependency_never_satisfied");
    }
  }
}

TEST_F(DependenciesTest, AfterIsSatisfiedByTheStartOrByACancellationBeforeIt) {
  const TaskNumber parent = Submit();
  const TaskNumber child = Submit(After({{parent, C::kAfter}}));
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{parent});
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{child}) << "started with its parent running";
  const TaskNumber never_run = Submit(4);
  const TaskNumber second = Submit(After({{never_run, C::kAfter}, {never_run, C::kAfterAny}}));
  ASSERT_TRUE(core_.Cancel(never_run, now_).ok());
  Finish(parent, true);
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{second});
  EXPECT_EQ(StateOf(second, 0), S::kSatisfied);
  EXPECT_EQ(StateOf(second, 1), S::kSatisfied);
}

TEST_F(DependenciesTest, ACancelledRunningParentCountsOnceItsStopIsConfirmed) {
  const TaskNumber parent = Submit();
  const TaskNumber child = Submit(After({{parent, C::kAfterAny}}));
  ASSERT_EQ(Pass(), std::vector<TaskNumber>{parent});
  ASSERT_TRUE(core_.Cancel(parent, now_).ok());
  EXPECT_TRUE(Pass().empty()) << "the parent still holds its GPUs";
  EXPECT_EQ(core_.ReasonOf(T(child)), PendingReason::kDependency);
  Finish(parent, false);
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{child});
}

TEST_F(DependenciesTest, AParentThatIsAnArrayMeansEveryMember) {
  const TaskNumber first = *core_.SubmitArray(Spec(Priority::kHigh, 1), 3, now_);
  // Named by its second member: the whole array all the same.
  const TaskNumber ok = Submit(After({{first + 1, C::kAfterOk}}));
  const TaskNumber any = Submit(After({{first, C::kAfterAny}}));
  const TaskNumber not_ok = Submit(After({{first + 2, C::kAfterNotOk}}));
  ASSERT_EQ(Pass().size(), 3u);
  Finish(first, true);
  Finish(first + 1, true);
  EXPECT_TRUE(Pass().empty()) << "one member still runs";
  EXPECT_EQ(StateOf(ok), S::kWaiting);
  Finish(first + 2, false);
  EXPECT_EQ(Pass(), (std::vector<TaskNumber>{any, not_ok}));
  EXPECT_EQ(T(ok).error, "dependency_never_satisfied");
}

TEST_F(DependenciesTest, AnArrayWaitsAsOneAndEveryMemberStarts) {
  const TaskNumber parent = Submit();
  const TaskNumber first = *core_.SubmitArray(After({{parent, C::kAfterOk}}), 3, now_);
  EXPECT_EQ(core_.ReasonOf(T(first + 2)), PendingReason::kDependency);
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{parent});
  Finish(parent, true);
  EXPECT_EQ(Pass(), (std::vector<TaskNumber>{first, first + 1, first + 2}));
}

TEST_F(DependenciesTest, AnUnknownParentIsRefusedAndNothingIsQueued) {
  const TaskNumber next = core_.next_task_number();
  auto r = core_.Submit(After({{next, C::kAfterOk}}), now_);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "depends_on[0]: task-" + std::to_string(next) + " does not exist");
  r = core_.Submit(After({{next + 5, C::kAfterOk}}), now_);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.next_task_number(), next) << "no number was used";
  EXPECT_EQ(core_.PendingCount(Priority::kHigh), 0u);
  TaskSpec many = Spec(Priority::kHigh, 1);
  const TaskNumber parent = Submit();
  many.depends_on.assign(kMaxDependencies + 1, {parent, C::kAfterOk});
  r = core_.Submit(many, now_);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "depends_on has 65 entries; the limit is 64");
}

TEST_F(DependenciesTest, AParentNoLongerInMemoryIsReadFromTheStore) {
  const TaskNumber parent = Submit();
  ASSERT_EQ(Pass(), std::vector<TaskNumber>{parent});
  Finish(parent, true);
  core_.Forget(parent);
  ASSERT_EQ(core_.FindTask(parent), nullptr);
  auto refused = core_.Submit(After({{parent, C::kAfterOk}}), now_);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << "no store to ask";
  std::vector<std::pair<TaskNumber, TaskNumber>> asked;
  core_.SetStoredTaskLookup(
      [&](TaskNumber a, TaskNumber b) -> StatusOr<std::vector<StoredTaskState>> {
        asked.emplace_back(a, b);
        std::vector<StoredTaskState> out;
        if (a <= parent && parent <= b) out.push_back({parent, TaskStatus::kSuccess, true, -1, 0});
        return out;
      });
  const TaskNumber ok = Submit(After({{parent, C::kAfterOk}}));
  const TaskNumber not_ok = Submit(After({{parent, C::kAfterNotOk}}));
  EXPECT_EQ(Pass(), std::vector<TaskNumber>{ok}) << "queued at once: its parent succeeded";
  EXPECT_EQ(T(not_ok).error, "dependency_never_satisfied");
  EXPECT_EQ(asked.front(), std::make_pair(parent, parent));
  core_.SetStoredTaskLookup([](TaskNumber, TaskNumber) -> StatusOr<std::vector<StoredTaskState>> {
    return Unavailable("database is locked");
  });
  auto failed = core_.Submit(After({{parent, C::kAfterOk}}), now_);
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
}

TEST_F(DependenciesTest, ARestartHoldsTheTaskAgainAndCountsItsParentsAnew) {
  const TaskNumber done = Submit();
  const TaskNumber running = Submit();
  const TaskNumber child = Submit(After({{done, C::kAfterOk}, {running, C::kAfterAny}}));
  ASSERT_EQ(Pass().size(), 2u);
  Finish(done, true);
  ASSERT_TRUE(Pass().empty());
  EXPECT_EQ(StateOf(child, 0), S::kSatisfied);
  EXPECT_EQ(StateOf(child, 1), S::kWaiting);
  // A restart: the child is restored before its running parent, whose node registers again.
  SchedulerCore restarted;
  ASSERT_TRUE(restarted.SetOnlinePercent(1.0, now_).ok());
  restarted.SetStoredTaskLookup(
      [&](TaskNumber a, TaskNumber b) -> StatusOr<std::vector<StoredTaskState>> {
        std::vector<StoredTaskState> out;
        if (a <= running && running <= b)
          out.push_back({running, TaskStatus::kRunning, true, -1, 0});
        return out;
      });
  ASSERT_TRUE(restarted.Restore(T(child), now_).ok());
  ASSERT_TRUE(restarted.Restore(T(running), now_).ok());
  (void)restarted.TakeChanges();
  EXPECT_EQ(restarted.ReasonOf(*restarted.FindTask(child)), PendingReason::kDependency);
  const std::vector<RunningReport> runs = {{running, T(running).allocation[0].gpu_indices, 0}};
  ASSERT_TRUE(restarted.RegisterNode("n1", "", MakeGpus(4, "A100"), runs, {}, now_).ok());
  restarted.Schedule(now_);
  ASSERT_TRUE(restarted.CheckInvariants().ok()) << restarted.CheckInvariants().ToString();
  EXPECT_TRUE(restarted.TakeDecisions().empty());
  ASSERT_TRUE(restarted.TaskFinished("n1", {running, false, 1, "", now_}, now_).ok());
  restarted.Schedule(now_);
  std::vector<Decision> d = restarted.TakeDecisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].task, child);
  ASSERT_TRUE(restarted.CheckInvariants().ok()) << restarted.CheckInvariants().ToString();
}

TEST_F(DependenciesTest, ARestoredTaskWhoseParentEndedMeanwhileIsSettledAndRecordedByThePass) {
  const TaskNumber parent = Submit();
  const TaskNumber child = Submit(After({{parent, C::kAfterOk}}));
  Task saved = T(child);
  SchedulerCore restarted;
  ASSERT_TRUE(restarted.SetOnlinePercent(1.0, now_).ok());
  restarted.SetStoredTaskLookup(
      [&](TaskNumber, TaskNumber) -> StatusOr<std::vector<StoredTaskState>> {
        return std::vector<StoredTaskState>{{parent, TaskStatus::kFailed, true, -1, 0}};
      });
  ASSERT_TRUE(restarted.Restore(saved, now_).ok());
  (void)restarted.TakeChanges();
  restarted.Schedule(now_);
  ASSERT_TRUE(restarted.CheckInvariants().ok()) << restarted.CheckInvariants().ToString();
  std::vector<Change> changes = restarted.TakeChanges();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].task.id, child);
  EXPECT_EQ(changes[0].task.status, TaskStatus::kFailed);
  EXPECT_EQ(changes[0].task.spec.depends_on[0].state, S::kNeverSatisfied);
  // A parent the store no longer has (retention): how it ended is not known.
  SchedulerCore pruned;
  pruned.SetStoredTaskLookup([](TaskNumber, TaskNumber) -> StatusOr<std::vector<StoredTaskState>> {
    return std::vector<StoredTaskState>{};
  });
  ASSERT_TRUE(pruned.Restore(saved, now_).ok());
  pruned.Schedule(now_);
  EXPECT_EQ(pruned.FindTask(child)->error, "dependency_never_satisfied");
}

TEST_F(DependenciesTest, TheStatesAreRecordedAsTheyChange) {
  const TaskNumber a = Submit();
  const TaskNumber b = Submit();
  const TaskNumber child = Submit(After({{a, C::kAfterOk}, {b, C::kAfterOk}}));
  ASSERT_EQ(Pass().size(), 2u);
  (void)core_.TakeChanges();
  Finish(a, true);
  core_.Schedule(now_);
  std::vector<Change> changes = core_.TakeChanges();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[1].task.id, child);
  EXPECT_EQ(changes[1].task.spec.depends_on,
            (Dependencies{{a, C::kAfterOk, S::kSatisfied}, {b, C::kAfterOk, S::kWaiting}}));
}

}  // namespace
}  // namespace dgpu::core
