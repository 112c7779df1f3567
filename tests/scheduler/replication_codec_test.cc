// The replication codec: a task survives TaskToRecord, the wire and TaskFromRecord whole.
#include "scheduler/replication_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

TEST(ReplicationCodecTest, KeepsAPendingTasksRetryTime) {
  core::Task task = store::testing::FullPendingTask(13);
  task.spec.env = WireTask(13).spec.env;
  store::testing::ExpectSameTask(task, OverTheWire(task));
}

TEST(ReplicationCodecTest, TheRecordHasAFieldOfTheRightTypeForEveryTaskField) {
  EXPECT_EQ(TaskRecordMismatches(), std::vector<std::string>{});
}

// The record's spelling is the one older releases read and write (protocol.md): a flag whose
// default is true is sent as its opposite, `optional` fields only when they differ from the
// default, and what an older leader leaves out reads as the default.
TEST(ReplicationCodecTest, SpellsFieldsAsOlderReleasesReadAndWriteThem) {
  core::Task task = WireTask(14);
  dgpu::v1::TaskRecord record;
  TaskToRecord(task, &record);
  EXPECT_EQ(record.number(), 14u);
  EXPECT_TRUE(record.not_preemptible());
  EXPECT_EQ(record.preemption_grace_seconds(), 45);
  EXPECT_EQ(record.priority(), "high");

  core::Task plain;
  plain.id = 15;
  dgpu::v1::TaskRecord defaults;
  TaskToRecord(plain, &defaults);
  EXPECT_FALSE(defaults.not_preemptible());
  EXPECT_FALSE(defaults.has_preemption_grace_seconds());
  EXPECT_FALSE(defaults.has_retry_backoff_seconds());
  EXPECT_EQ(defaults.team(), "default");

  // An older leader's record: no team, no array index for member 0, nothing it did not know.
  dgpu::v1::TaskRecord old;
  old.set_number(16);
  old.set_status("pending");
  old.set_array_size(3);
  core::Task member = TaskFromRecord(old);
  EXPECT_EQ(member.spec.team, "default");
  EXPECT_EQ(member.spec.array_index, 0);
  EXPECT_EQ(member.spec.array_size, 3);
  EXPECT_TRUE(member.spec.preemptible);
  EXPECT_EQ(member.spec.preemption_grace_seconds, -1);
  EXPECT_EQ(member.spec.retry_backoff_seconds, 10);
  old.clear_array_size();
  core::Task single = TaskFromRecord(old);
  EXPECT_EQ(single.spec.array_index, -1);
  EXPECT_EQ(single.spec.array_size, 0);
  // Values no task holds are repaired, not refused: a leader is trusted.
  old.set_max_retries(-4);
  old.set_retry_at(-1);
  old.set_status("sleeping");
  core::Task repaired = TaskFromRecord(old);
  EXPECT_EQ(repaired.spec.max_retries, 0);
  EXPECT_EQ(repaired.retry_at, 0);
  EXPECT_EQ(repaired.status, core::TaskStatus::kPending);
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

TEST(ReplicationCodecTest, KeepsATeamWhole) {
  const core::TeamRecord team{.name = "vision",
                              .set = true,
                              .limits = {.online = 8,
                                         .batch = 2,
                                         .max_gpus = 12,
                                         .weight = 1.5,
                                         .default_time_limit = 86400},
                              .deleted = false,
                              .usage = 3600.25,
                              .usage_at = 1'700'000'000'000'001};
  dgpu::v1::TeamRecord record;
  TeamToRecord(team, &record);
  std::string wire;
  ASSERT_TRUE(record.SerializeToString(&wire));
  dgpu::v1::TeamRecord received;
  ASSERT_TRUE(received.ParseFromString(wire));
  EXPECT_EQ(TeamFromRecord(received), team);
}

TEST(ReplicationCodecTest, KeepsANodeModeAndKeepsAnUnknownModeOutOfPlacement) {
  for (core::NodeMode m :
       {core::NodeMode::kSchedulable, core::NodeMode::kCordoned, core::NodeMode::kDraining}) {
    dgpu::v1::NodeRecord record;
    NodeToRecord({"node-a", m}, &record);
    std::string wire;
    ASSERT_TRUE(record.SerializeToString(&wire));
    dgpu::v1::NodeRecord received;
    ASSERT_TRUE(received.ParseFromString(wire));
    EXPECT_EQ(NodeFromRecord(received), (core::NodeRecord{"node-a", m}));
  }
  dgpu::v1::NodeRecord newer;
  newer.set_id("node-b");
  newer.set_mode("retired");
  EXPECT_EQ(NodeFromRecord(newer).mode, core::NodeMode::kCordoned);
}

TEST(CoreConfigTest, TakesTheSchedulersQuotaTeamsAndPreemptionKeysInTheCoresUnits) {
  common::SchedulerConfig cfg;
  cfg.quota.online_percent = 0.6;
  cfg.quota.borrowing = true;
  cfg.quota.fairshare_half_life = std::chrono::hours(24);
  cfg.quota.teams["vision"] = {.online = 4, .batch = 2, .max_gpus = 10, .weight = 2};
  cfg.preemption.grace_period = std::chrono::seconds(45);
  cfg.preemption.min_runtime = std::chrono::minutes(2);
  cfg.agent.heartbeat_timeout = std::chrono::seconds(20);
  store::StoreMeta meta;
  core::CoreConfig c = CoreConfigOf(cfg, meta);
  EXPECT_EQ(c.online_percent, 0.6);
  EXPECT_TRUE(c.borrowing);
  EXPECT_EQ(c.fairshare_half_life, 86'400'000'000);
  EXPECT_EQ(c.preemption_grace_seconds, 45);
  EXPECT_EQ(c.min_runtime, 120'000'000);
  EXPECT_EQ(c.heartbeat_timeout, 20'000'000);
  ASSERT_EQ(c.teams.size(), 1u);
  EXPECT_EQ(c.teams["vision"],
            (core::TeamLimits{.online = 4, .batch = 2, .max_gpus = 10, .weight = 2}));
  // A quota stored through the API wins over the configuration's.
  meta.online_percent = 0.25;
  EXPECT_EQ(CoreConfigOf(cfg, meta).online_percent, 0.25);
}

}  // namespace
}  // namespace dgpu::scheduler
