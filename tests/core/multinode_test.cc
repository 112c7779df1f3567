// Tasks that hold GPUs on several nodes (one member per node): how they end, stop and are lost.
// Such a task comes from a saved state here (Restore); gang_test.cc has the pass placing them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using Kind = Decision::Kind;

class MultiNodeTest : public ::testing::Test {
 protected:
  static constexpr TaskNumber kGang = 7;

  void SetUp() override {
    core_.SetNextTaskNumber(kGang + 1);
    Task t;
    t.id = kGang;
    t.spec.command = "train";
    t.spec.priority = Priority::kHigh;
    t.spec.gpu_count = 4;
    t.spec.nodes = 2;
    t.status = TaskStatus::kRunning;
    t.attempts = 1;
    t.queue_seq = 5;
    t.created_at = now_ - 10 * kSec;
    t.started_at = now_ - 5 * kSec;
    t.allocation = {{"n1", {0, 1}}, {"n2", {2, 3}}};
    ASSERT_TRUE(core_.Restore(t, now_).ok());
    ASSERT_TRUE(core_.SetOnlinePercent(1.0, now_).ok());
    Register("n1", {{kGang, {0, 1}}});
    Register("n2", {{kGang, {2, 3}}});
    Check();
    (void)core_.TakeChanges();
    (void)core_.TakeDecisions();
  }
  void Register(const std::string& node, std::vector<RunningReport> running) {
    ASSERT_TRUE(core_.RegisterNode(node, "", MakeGpus(4), running, {}, now_).ok());
  }
  void Check() { ASSERT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString(); }
  Status Finish(const std::string& node, bool success, int exit_code) {
    Status s = core_.TaskFinished(node, {kGang, success, exit_code, "", now_}, now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return s;
  }
  const Task& Gang() { return *core_.FindTask(kGang); }
  int Free(const std::string& node) { return core_.FindNode(node)->free_gpus; }
  static Decision Stop(const std::string& node, StopReason r, int32_t grace = -1) {
    return {Kind::kStop, kGang, node, {}, r, grace};
  }

  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_F(MultiNodeTest, ItHoldsGpusOnEveryNodeAndCountsThemAllInItsQuota) {
  EXPECT_EQ(Free("n1"), 2);
  EXPECT_EQ(Free("n2"), 2);
  EXPECT_EQ(core_.Quota().used[0], 4);
  const auto gpus = core_.Gpus();
  EXPECT_EQ(gpus[0].current_task, kGang);
  EXPECT_EQ(gpus[2].current_task, 0u);
  EXPECT_EQ(gpus[4 + 3].current_task, kGang);
}

TEST_F(MultiNodeTest, ItSucceedsWhenEveryMemberHas) {
  ASSERT_TRUE(Finish("n1", true, 0).ok());
  EXPECT_EQ(Gang().status, TaskStatus::kRunning);
  EXPECT_TRUE(Gang().allocation[0].ended);
  EXPECT_FALSE(Gang().allocation[1].ended);
  EXPECT_EQ(Free("n1"), 4) << "an ended member's GPUs are free at once";
  ASSERT_EQ(core_.TakeChanges().size(), 1u) << "the ended member is durable";
  EXPECT_EQ(core_.TaskFinished("n1", {kGang, true, 0, "", now_}, now_).code(),
            StatusCode::kFailedPrecondition)
      << "a member ends once";
  ASSERT_TRUE(Finish("n2", true, 0).ok());
  EXPECT_EQ(Gang().status, TaskStatus::kSuccess);
  EXPECT_EQ(Free("n2"), 4);
  EXPECT_EQ(core_.Quota().used[0], 0);
  EXPECT_TRUE(core_.TakeDecisions().empty());
}

TEST_F(MultiNodeTest, TheFirstFailureStopsTheOthersAndFailsTheTask) {
  ASSERT_TRUE(Finish("n2", false, 3).ok());
  EXPECT_EQ(core_.TakeDecisions(), (std::vector<Decision>{Stop("n1", StopReason::kMemberFailure)}));
  EXPECT_EQ(Gang().status, TaskStatus::kRunning);
  EXPECT_TRUE(Gang().stopping);
  EXPECT_EQ(Free("n1"), 2) << "held until its agent confirms";
  ASSERT_TRUE(Finish("n1", false, 143).ok());
  EXPECT_EQ(Gang().status, TaskStatus::kFailed);
  EXPECT_EQ(Gang().error, "member_failed:n2");
  EXPECT_EQ(Gang().exit_code, 3) << "the failing member's exit code";
  EXPECT_EQ(Free("n1"), 4);
  EXPECT_FALSE(Gang().stopping);
}

TEST_F(MultiNodeTest, AMemberLostWithItsNodeStopsTheOthersAndRequeuesTheTask) {
  ASSERT_TRUE(core_.NodeLost("n2", now_).ok());
  EXPECT_EQ(core_.TakeDecisions(), (std::vector<Decision>{Stop("n1", StopReason::kMemberLost)}));
  EXPECT_EQ(Gang().stop_reason, StopReason::kMemberLost);
  Check();
  ASSERT_TRUE(Finish("n1", false, 143).ok());
  EXPECT_EQ(Gang().status, TaskStatus::kPending);
  EXPECT_EQ(Gang().error, "agent_lost");
  EXPECT_TRUE(Gang().allocation.empty());
  EXPECT_EQ(core_.QueueOrder(Priority::kHigh), std::vector<TaskNumber>{kGang});
  EXPECT_EQ(core_.Quota().used[0], 0);
}

TEST_F(MultiNodeTest, ANodeThatReturnsWithoutItsMemberLosesIt) {
  Register("n1", {});
  EXPECT_EQ(core_.TakeDecisions(), (std::vector<Decision>{Stop("n2", StopReason::kMemberLost)}));
  Check();
  ASSERT_TRUE(core_.NodeLost("n2", now_).ok());
  EXPECT_EQ(Gang().status, TaskStatus::kPending) << "both members gone: requeued at once";
  Check();
}

TEST_F(MultiNodeTest, AFinishReportedAtRegistrationEndsThatMember) {
  ASSERT_TRUE(
      core_.RegisterNode("n1", "", MakeGpus(4), {}, {{kGang, true, 0, "", now_}}, now_).ok());
  Check();
  EXPECT_TRUE(Gang().allocation[0].ended);
  EXPECT_EQ(Gang().status, TaskStatus::kRunning);
  EXPECT_TRUE(core_.TakeDecisions().empty()) << "a member that succeeded stops nobody";
}

TEST_F(MultiNodeTest, CancelStopsEveryMember) {
  ASSERT_TRUE(core_.Cancel(kGang, now_, 9).ok());
  EXPECT_EQ(core_.TakeDecisions(), (std::vector<Decision>{Stop("n1", StopReason::kCancel, 9),
                                                          Stop("n2", StopReason::kCancel, 9)}));
  ASSERT_TRUE(Finish("n1", false, 143).ok());
  EXPECT_TRUE(Gang().stopping);
  EXPECT_EQ(Free("n1"), 4);
  ASSERT_TRUE(Finish("n2", false, 143).ok());
  EXPECT_FALSE(Gang().stopping);
  EXPECT_EQ(Gang().status, TaskStatus::kCancelled);
  EXPECT_EQ(Free("n2"), 4);
}

TEST_F(MultiNodeTest, APreemptedTaskGoesBackToItsPlaceOnceEveryMemberHasEnded) {
  ASSERT_TRUE(core_.StopTask(kGang, StopReason::kPreempt, 4, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(), (std::vector<Decision>{Stop("n1", StopReason::kPreempt, 4),
                                                          Stop("n2", StopReason::kPreempt, 4)}));
  ASSERT_TRUE(Finish("n2", false, 143).ok());
  EXPECT_EQ(Gang().status, TaskStatus::kRunning);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  Check();
  EXPECT_EQ(Gang().status, TaskStatus::kPending);
  EXPECT_EQ(Gang().error, "preempted");
  EXPECT_EQ(Gang().queue_seq, 5) << "its old place";
}

TEST_F(MultiNodeTest, EachMemberConfirmsItsStart) {
  ASSERT_TRUE(core_.TaskStarted(kGang, "n1", now_ + 1).ok());
  ASSERT_TRUE(core_.TaskStarted(kGang, "n2", now_ + 2).ok());
  EXPECT_EQ(Gang().started_at, now_ + 2) << "it started when its last member did";
  EXPECT_EQ(core_.TaskStarted(kGang, "n3", now_).code(), StatusCode::kFailedPrecondition);
}

TEST(MultiNodeRestoreTest, ABadAllocationIsRefusedAndChangesNothing) {
  SchedulerCore core;
  Task t;
  t.id = 3;
  t.spec.command = "x";
  t.spec.gpu_count = 2;
  t.spec.nodes = 2;
  t.status = TaskStatus::kRunning;
  t.allocation = {{"n1", {0}, true}, {"n2", {0}, true}};
  EXPECT_EQ(core.Restore(t, 0).code(), StatusCode::kInvalidArgument);
  t.allocation = {{"n1", {0, 1}, true}};
  EXPECT_EQ(core.Restore(t, 0).code(), StatusCode::kInvalidArgument);
  t.allocation.clear();
  EXPECT_EQ(core.Restore(t, 0).code(), StatusCode::kInvalidArgument);
  t.allocation = {{"n1", {0, 1}}, {"n2", {}}};
  EXPECT_EQ(core.Restore(t, 0).code(), StatusCode::kInvalidArgument) << "one GPU per member";
  t.allocation = {{"n1", {0}}, {"n2", {0}}};
  t.spec.nodes = 3;
  EXPECT_EQ(core.Restore(t, 0).code(), StatusCode::kInvalidArgument) << "3 does not divide 2";
  t.spec.nodes = 2;
  EXPECT_EQ(core.FindTask(3), nullptr);
  EXPECT_TRUE(core.Nodes().empty());
  ASSERT_TRUE(core.RegisterNode("n2", "", MakeGpus(1), {}, {}, 0).ok());
  t.allocation = {{"n1", {0}}, {"n2", {0}}};
  EXPECT_EQ(core.Restore(t, 0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core.FindTask(3), nullptr);
  EXPECT_EQ(core.FindNode("n1"), std::nullopt) << "no placeholder left behind";
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

}  // namespace
}  // namespace dgpu::core
