#include "scheduler/task_history.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dgpu::scheduler {
namespace {

constexpr core::TimeMicros kSec = core::kMicrosPerSecond;

std::vector<core::GpuInfo> Gpus(int n) {
  std::vector<core::GpuInfo> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back({i, "A100", 40960, "", true, ""});
  return gpus;
}

core::TaskSpec Spec(int gpus) {
  core::TaskSpec s;
  s.command = "true";
  s.priority = core::Priority::kHigh;
  s.gpu_count = gpus;
  return s;
}

// "type|node|message" of the history entries a core's events since the last call make.
std::vector<std::string> History(core::SchedulerCore& core) {
  std::vector<core::Change> changes;
  AppendTaskHistory(core, core.TakeEvents(), &changes);
  std::vector<std::string> out;
  for (const core::Change& c : changes) {
    EXPECT_EQ(c.kind, core::Change::Kind::kTaskEvent);
    out.push_back(core::FormatTaskId(c.event.task) + " " + c.event.type + "|" + c.event.node_id +
                  "|" + c.event.message);
  }
  return out;
}

TEST(TaskHistoryTest, EveryStepOfATasksLifeIsOneEntry) {
  core::SchedulerCore core;
  core::TimeMicros now = 100 * kSec;
  ASSERT_TRUE(core.SetOnlinePercent(1.0, now).ok());
  ASSERT_TRUE(core.RegisterNode("n1", "", Gpus(4), {}, {}, now).ok());
  core::TaskSpec retried = Spec(2);
  retried.max_retries = 1;
  retried.retry_backoff_seconds = 1;
  const core::TaskNumber a = *core.Submit(retried, now);
  const core::TaskNumber b = *core.Submit(Spec(1), now);
  core.Schedule(now);
  core.TakeDecisions();
  ASSERT_TRUE(core.TaskStarted(a, "n1", now + 1, 1).ok());
  EXPECT_EQ(History(core), (std::vector<std::string>{
                               "task-1 scheduled|n1|run 1 ordered to start on n1, GPUs 0,1",
                               "task-2 scheduled|n1|run 1 ordered to start on n1, GPU 2",
                               "task-1 started|n1|run 1 started on n1",
                           }));
  ASSERT_TRUE(core.TaskFinished("n1", {a, false, 3, "", now, 1}, now).ok());
  ASSERT_TRUE(core.Cancel(b, now).ok());
  EXPECT_EQ(History(core), (std::vector<std::string>{
                               "task-1 requeued|n1|queued again: retry 1 of 1 after exit code 3",
                               "task-2 cancelled|n1|cancelled; stopping it on n1",
                           }));
  // The cancelled task's stop being confirmed adds nothing.
  ASSERT_TRUE(core.TaskFinished("n1", {b, false, 143, "cancelled", now, 1}, now).ok());
  now += 2 * kSec;
  core.Schedule(now);
  core.TakeDecisions();
  ASSERT_TRUE(core.NodeLost("n1", now).ok());
  // Started and lost in one batch: its GPUs are no longer known when the batch ends.
  EXPECT_EQ(History(core), (std::vector<std::string>{
                               "task-1 scheduled|n1|run 2 ordered to start on n1, 2 GPUs",
                               "task-1 node_lost|n1|node n1 was lost; queued again",
                           }));
  // Back with the run still going: adopted; then it fails for good.
  ASSERT_TRUE(core.RegisterNode("n1", "", Gpus(4), {{a, {0, 1}, 2}}, {}, now).ok());
  ASSERT_TRUE(core.TaskFinished("n1", {a, false, 9, "timeout", now, 2}, now).ok());
  EXPECT_EQ(History(core),
            (std::vector<std::string>{
                "task-1 scheduled|n1|run 2 found running on n1 when it registered; adopted",
                "task-1 finished|n1|failed with exit code 9 (timeout)",
            }));
  const core::TaskNumber c = *core.Submit(Spec(1), now);
  const core::TaskNumber d = *core.Submit(Spec(1), now);
  ASSERT_TRUE(core.Cancel(d, now).ok());
  core.Schedule(now);
  core.TakeDecisions();
  ASSERT_TRUE(core.TaskFinished("n1", {c, true, 0, "", now, 1}, now).ok());
  EXPECT_EQ(History(core), (std::vector<std::string>{
                               "task-4 cancelled||cancelled",
                               "task-3 scheduled|n1|run 1 ordered to start on n1, GPU 0",
                               "task-3 finished|n1|succeeded",
                           }));
}

TEST(TaskHistoryTest, SubmittedIsMadeFromTheTask) {
  core::Task t;
  t.id = 7;
  t.created_at = 5;
  t.spec = Spec(2);
  t.spec.gpu_model = "H100";
  t.spec.team = "vision";
  t.spec.user = "ann";
  EXPECT_EQ(SubmittedEntry(t), (core::TaskEventRecord{7, 5, "submitted", "",
                                                      "high priority, 2 GPUs of model H100, "
                                                      "team vision, by ann"}));
}

}  // namespace
}  // namespace dgpu::scheduler
