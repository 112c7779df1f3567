// Backfill (CoreConfig::backfill): a head that waits for node room gets a start planned from the
// running tasks' time limits, and younger tasks use its nodes only if they end before it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;

CoreConfig Backfill(bool on, int depth = 100) {
  CoreConfig c;
  c.online_percent = 1.0;
  c.backfill = on;
  c.backfill_depth = depth;
  return c;
}

class BackfillTest : public ::testing::Test {
 protected:
  void Init(const CoreConfig& config, int nodes, int gpus) {
    core_ = std::make_unique<SchedulerCore>(config);
    for (int i = 1; i <= nodes; ++i) {
      ASSERT_TRUE(
          core_->RegisterNode("n" + std::to_string(i), "", MakeGpus(gpus), {}, {}, now_).ok());
    }
    // GPUs that count in the quota but take no task: the tasks here wait for node room alone.
    ASSERT_TRUE(core_->RegisterNode("spare", "", MakeGpus(64), {}, {}, now_).ok());
    ASSERT_TRUE(core_->SetNodeMode("spare", NodeMode::kCordoned, now_).ok());
  }
  // A high-priority task of `gpus` GPUs (on `nodes` nodes) and a time limit (0: none).
  // A team of its own puts it in a queue of its own (tasks of one shape start in order).
  TaskNumber Submit(int gpus, int64_t limit_seconds, int nodes = 1, std::string team = "default") {
    TaskSpec s = Spec(Priority::kHigh, gpus);
    s.timeout_seconds = limit_seconds;
    s.nodes = nodes;
    s.team = std::move(team);
    auto r = core_->Submit(s, now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  // The tasks a pass starts, with the node of each member.
  std::vector<std::pair<TaskNumber, std::string>> Pass() {
    core_->Schedule(now_);
    EXPECT_TRUE(core_->CheckInvariants().ok()) << core_->CheckInvariants().ToString();
    std::vector<std::pair<TaskNumber, std::string>> started;
    for (const Decision& d : core_->TakeDecisions()) {
      if (d.kind == Decision::Kind::kStart) started.emplace_back(d.task, d.node_id);
    }
    return started;
  }
  void Finish(TaskNumber t) {
    for (const NodeAllocation& m : core_->FindTask(t)->allocation) {
      if (m.ended) continue;
      ASSERT_TRUE(core_->TaskFinished(m.node_id, {t, true, 0, "", now_}, now_).ok());
    }
  }
  PendingReason Reason(TaskNumber t) { return core_->ReasonOf(*core_->FindTask(t)); }

  std::unique_ptr<SchedulerCore> core_;
  TimeMicros now_ = 100 * kSec;
};

using Started = std::vector<std::pair<TaskNumber, std::string>>;

TEST_F(BackfillTest, AShortTaskBackfillsAndTheWaitingTaskStartsWhenItsPlanSaid) {
  Init(Backfill(true), 1, 4);
  const TaskNumber running = Submit(2, 100);  // Holds 2 of 4 GPUs until 200 s.
  ASSERT_EQ(Pass(), (Started{{running, "n1"}}));
  const TaskNumber waiting = Submit(4, 100);
  const TaskNumber shorter = Submit(1, 50);           // Gone by 150 s: before the planned start.
  const TaskNumber longer = Submit(1, 500);           // Would still run at 200 s.
  const TaskNumber unlimited = Submit(1, 0, 1, "b");  // Runs for ever as the planner sees it.
  EXPECT_EQ(Pass(), (Started{{shorter, "n1"}})) << "the last free GPU stays for the plan";
  const std::vector<SchedulerCore::PlannedStartView> plan = core_->PlannedStarts();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].task, waiting);
  EXPECT_EQ(plan[0].start_at, 200 * kSec);
  EXPECT_EQ(plan[0].nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(Reason(waiting), PendingReason::kNoNodeFits);
  EXPECT_EQ(Reason(longer), PendingReason::kReservedFor);
  EXPECT_EQ(core_->ReservedFor(*core_->FindTask(longer)), waiting);
  EXPECT_EQ(Reason(unlimited), PendingReason::kReservedFor);
  EXPECT_EQ(core_->ReservedFor(*core_->FindTask(waiting)), 0u);

  now_ = 150 * kSec;
  Finish(shorter);
  EXPECT_TRUE(Pass().empty()) << "the free GPUs stay for the planned start";
  EXPECT_EQ(Reason(longer), PendingReason::kReservedFor);
  now_ = 200 * kSec;
  Finish(running);
  EXPECT_EQ(Pass(), (Started{{waiting, "n1"}}));
  EXPECT_EQ(core_->FindTask(waiting)->started_at, 200 * kSec) << "when its plan said";
  // The next in line is planned in turn, at the end of the one that just started.
  const auto next = core_->PlannedStarts();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].task, longer);
  EXPECT_EQ(next[0].start_at, 300 * kSec);
}

TEST_F(BackfillTest, WithoutBackfillTheLongerTasksOvertakeTheWaitingOne) {
  Init(Backfill(false), 1, 4);
  const TaskNumber running = Submit(3, 100);
  ASSERT_EQ(Pass(), (Started{{running, "n1"}}));
  const TaskNumber waiting = Submit(4, 100);
  const TaskNumber longer = Submit(1, 500);
  EXPECT_EQ(Pass(), (Started{{longer, "n1"}}));
  EXPECT_TRUE(core_->PlannedStarts().empty());
  now_ = 200 * kSec;
  Finish(running);
  EXPECT_TRUE(Pass().empty()) << "the longer task holds a GPU until 600 s";
  EXPECT_EQ(Reason(waiting), PendingReason::kNoNodeFits);
}

TEST_F(BackfillTest, AGangIsPlannedOnTheNodesThatAreReadyFirst) {
  Init(Backfill(true), 3, 2);
  const TaskNumber on_n1 = Submit(2, 200);  // n1 until 300 s.
  ASSERT_EQ(Pass().size(), 1u);
  const TaskNumber on_n2 = Submit(2, 100);  // n2 until 200 s.
  ASSERT_EQ(Pass().size(), 1u);
  const TaskNumber on_n3 = Submit(1, 150);  // n3 until 250 s, one GPU free there.
  ASSERT_EQ(Pass().size(), 1u);
  const std::string n2 = core_->FindTask(on_n2)->allocation[0].node_id;
  const std::string n3 = core_->FindTask(on_n3)->allocation[0].node_id;
  ASSERT_NE(core_->FindTask(on_n1)->allocation[0].node_id, n2);
  const TaskNumber gang = Submit(4, 100, /*nodes=*/2);
  const TaskNumber fits_before = Submit(1, 100);  // Ends at 200 s.
  const TaskNumber too_long = Submit(1, 200);     // Ends at 300 s, after the gang's start.
  EXPECT_EQ(Pass(), (Started{{fits_before, n3}}));
  const auto plan = core_->PlannedStarts();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].task, gang);
  EXPECT_EQ(plan[0].start_at, 250 * kSec) << "its second node's tasks end at 250 s";
  EXPECT_EQ(plan[0].nodes, (std::vector<std::string>{n2, n3}));
  // No room now anywhere: planned in turn, on the node the gang does not need.
  EXPECT_EQ(plan[1].task, too_long);
  EXPECT_EQ(plan[1].start_at, 300 * kSec);
  EXPECT_EQ(plan[1].nodes, std::vector<std::string>{core_->FindTask(on_n1)->allocation[0].node_id});
  now_ = 200 * kSec;
  Finish(on_n2);
  Finish(fits_before);
  EXPECT_TRUE(Pass().empty());
  now_ = 250 * kSec;
  Finish(on_n3);
  const Started started = Pass();
  ASSERT_EQ(started.size(), 2u) << "two members";
  EXPECT_EQ(started[0].first, gang);
  EXPECT_EQ(core_->FindTask(gang)->started_at, 250 * kSec);
}

TEST_F(BackfillTest, ANodeHeldByATaskWithoutALimitIsNotPlanned) {
  Init(Backfill(true), 1, 2);
  const TaskNumber forever = Submit(1, 0);
  ASSERT_EQ(Pass().size(), 1u);
  const TaskNumber waiting = Submit(2, 100);
  const TaskNumber other = Submit(1, 10);
  EXPECT_EQ(Pass(), (Started{{other, "n1"}})) << "no plan: nothing is kept from it";
  EXPECT_TRUE(core_->PlannedStarts().empty());
  EXPECT_EQ(Reason(waiting), PendingReason::kNoNodeFits);
  (void)forever;
}

TEST_F(BackfillTest, AtMostBackfillDepthStartsArePlannedAPass) {
  Init(Backfill(true, /*depth=*/1), 2, 2);
  ASSERT_EQ(Submit(2, 100), 1u);
  ASSERT_EQ(Submit(2, 200), 2u);
  ASSERT_EQ(Pass().size(), 2u);
  const TaskNumber first = Submit(2, 10);
  const TaskNumber second = Submit(2, 10);
  EXPECT_TRUE(Pass().empty());
  const auto plan = core_->PlannedStarts();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].task, first);
  EXPECT_EQ(plan[0].start_at, 200 * kSec);
  (void)second;
}

}  // namespace
}  // namespace dgpu::core
