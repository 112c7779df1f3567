// The replication codec: a task survives TaskToRecord, the wire and TaskFromRecord whole.
#include <gtest/gtest.h>

#include <string>

#include "../store/store_test_util.h"
#include "scheduler/replication.h"

namespace dgpu::scheduler {
namespace {

using core::StopReason;

core::Task OverTheWire(const core::Task& task) {
  dgpu::v1::TaskRecord record;
  TaskToRecord(task, &record);
  std::string wire;
  EXPECT_TRUE(record.SerializeToString(&wire));
  dgpu::v1::TaskRecord received;
  EXPECT_TRUE(received.ParseFromString(wire));
  return TaskFromRecord(received);
}

// FullTask with an env the core would hold (sorted, unique keys), which is what the wire's map
// can carry.
core::Task WireTask(core::TaskNumber id) {
  core::Task task = store::testing::FullTask(id);
  task.spec.env = {{"A", "x=y"}, {"B", "2"}, {"EMPTY", ""}};
  return task;
}

TEST(ReplicationCodecTest, KeepsEveryFieldWithATwoNodeAllocation) {
  core::Task task = WireTask(12);
  task.allocation = {{"node-a", {0, 1, 2, 3}, true}, {"node-b", {6, 7}}};
  task.stop_reason = StopReason::kDrain;
  store::testing::ExpectSameTask(task, OverTheWire(task));
}

TEST(ReplicationCodecTest, CarriesEveryStopReason) {
  for (StopReason reason :
       {StopReason::kNone, StopReason::kCancel, StopReason::kPreempt, StopReason::kDrain,
        StopReason::kMemberFailure, StopReason::kTimeout, StopReason::kGpuFailure,
        StopReason::kReconcile, StopReason::kMemberLost}) {
    core::Task task = WireTask(3);
    task.stop_reason = reason;
    dgpu::v1::TaskRecord record;
    TaskToRecord(task, &record);
    EXPECT_EQ(record.stop_reason(), core::ToString(reason));
    EXPECT_EQ(OverTheWire(task).stop_reason, reason);
  }
}

TEST(ReplicationCodecTest, RecordFromALeaderWithoutStopReasonsHasNone) {
  core::Task task = WireTask(4);
  dgpu::v1::TaskRecord record;
  TaskToRecord(task, &record);
  record.clear_stop_reason();
  const core::Task received = TaskFromRecord(record);
  EXPECT_TRUE(received.stopping);
  EXPECT_EQ(received.stop_reason, StopReason::kNone);
}

}  // namespace
}  // namespace dgpu::scheduler
