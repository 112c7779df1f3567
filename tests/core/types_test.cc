#include "core/types.h"

#include <gtest/gtest.h>

namespace dgpu::core {
namespace {

TEST(TaskIdTest, FormatsAndParses) {
  EXPECT_EQ(FormatTaskId(42), "task-42");
  EXPECT_EQ(ParseTaskId("task-42"), 42u);
  EXPECT_EQ(ParseTaskId("task-18446744073709551615"), 18446744073709551615ull);
}

TEST(TaskIdTest, RejectsMalformed) {
  for (const char* bad : {"", "task-", "task-0", "task-01", "task-x", "job-1", "task-1a", "task--1",
                          "task-18446744073709551616", " task-1"}) {
    EXPECT_EQ(ParseTaskId(bad), std::nullopt) << bad;
  }
}

TEST(EnumTest, RoundTrips) {
  EXPECT_EQ(ParsePriority("high"), Priority::kHigh);
  EXPECT_EQ(ParsePriority("low"), Priority::kLow);
  EXPECT_EQ(ParsePriority("HIGH"), std::nullopt);
  for (auto s : {TaskStatus::kPending, TaskStatus::kRunning, TaskStatus::kSuccess,
                 TaskStatus::kFailed, TaskStatus::kCancelled}) {
    EXPECT_EQ(ParseTaskStatus(ToString(s)), s);
  }
  EXPECT_EQ(ParseTaskStatus("done"), std::nullopt);
  EXPECT_EQ(ToString(PendingReason::kExceedsCluster), "exceeds_cluster");
  EXPECT_EQ(ParsePendingReason("no_node_fits"), PendingReason::kNoNodeFits);
  for (auto r : {StopReason::kNone, StopReason::kCancel, StopReason::kPreempt, StopReason::kDrain,
                 StopReason::kMemberFailure, StopReason::kTimeout, StopReason::kGpuFailure,
                 StopReason::kReconcile}) {
    EXPECT_EQ(ParseStopReason(ToString(r)), r);
  }
  EXPECT_EQ(ToString(StopReason::kMemberFailure), "member_failure");
  EXPECT_EQ(ToString(StopReason::kNone), "");
  EXPECT_EQ(ParseStopReason("cancelled"), std::nullopt);
  for (auto m :
       {NodeMode::kSchedulable, NodeMode::kCordoned, NodeMode::kDraining, NodeMode::kReleasing}) {
    EXPECT_EQ(ParseNodeMode(ToString(m)), m);
  }
  EXPECT_EQ(ToString(NodeMode::kReleasing), "releasing");
  // The autoscaler's cordon shows as cordoned.
  EXPECT_EQ(NodeStateName(true, NodeMode::kReleasing), "cordoned");
  EXPECT_EQ(NodeStateName(false, NodeMode::kReleasing), "offline");
  EXPECT_EQ(ParseNodeMode("Cordoned"), std::nullopt);
}

}  // namespace
}  // namespace dgpu::core
