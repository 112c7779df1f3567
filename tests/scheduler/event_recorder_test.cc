// The scheduler counts and logs a task's life from the core's events, once each.
#include "scheduler/event_recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/logging.h"

namespace dgpu::scheduler {
namespace {

std::vector<core::GpuInfo> Gpus(int n) {
  std::vector<core::GpuInfo> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back({i, "A100", 40960, "", true, ""});
  return gpus;
}

core::TaskSpec Spec(core::Priority p) {
  core::TaskSpec s;
  s.command = "true";
  s.priority = p;
  return s;
}

class EventRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/event_recorder_" + std::to_string(::getpid()) + ".log";
    std::remove(path_.c_str());
    ASSERT_TRUE(
        common::SetupLogging({common::LogLevel::kInfo, common::LogFormat::kText, path_}, "test")
            .ok());
    core::CoreConfig cfg;
    cfg.online_percent = 0.5;
    core_ = std::make_unique<core::SchedulerCore>(cfg);
  }
  void TearDown() override {
    ASSERT_TRUE(
        common::SetupLogging({common::LogLevel::kError, common::LogFormat::kText, "stderr"}, "t")
            .ok());
    std::remove(path_.c_str());
  }
  // What the loop does after a batch: a pass, then the observer.
  void Batch() {
    core_->Schedule(now_);
    std::vector<core::Decision> decisions = core_->TakeDecisions();
    std::vector<core::Change> changes = core_->TakeChanges();
    std::vector<core::Event> events = core_->TakeEvents();
    recorder_.OnPass(*core_, decisions, changes, events, 0.001, now_);
  }
  std::string Log() {
    common::FlushLogs();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static size_t Count(const std::string& hay, const std::string& needle) {
    size_t n = 0;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
    return n;
  }
  std::string RenderMetrics() { return metrics_.Render(TakeGaugeSnapshot(*core_)); }

  std::string path_;
  Metrics metrics_;
  EventRecorder recorder_{&metrics_};
  std::unique_ptr<core::SchedulerCore> core_;
  core::TimeMicros now_ = 1'000'000'000;
};

TEST_F(EventRecorderTest, ALifeIsCountedAndLoggedOnce) {
  ASSERT_TRUE(core_->RegisterNode("n1", "n1:1", Gpus(2), {}, {}, now_).ok());
  auto a = core_->Submit(Spec(core::Priority::kHigh), now_);
  auto b = core_->Submit(Spec(core::Priority::kLow), now_);
  ASSERT_TRUE(a.ok() && b.ok());
  Batch();
  now_ += 2'000'000;
  ASSERT_TRUE(core_->TaskFinished("n1", {*a, true, 0, "", now_}, now_).ok());
  ASSERT_TRUE(core_->Cancel(*b, now_).ok());
  Batch();
  // The agent confirms the cancelled task's stop: a stop, not a second finish.
  ASSERT_TRUE(core_->TaskFinished("n1", {*b, false, 143, "cancelled", now_}, now_).ok());
  Batch();

  const std::string m = RenderMetrics();
  EXPECT_NE(m.find("dgpu_tasks_submitted_total{priority=\"high\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("dgpu_tasks_submitted_total{priority=\"low\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("dgpu_tasks_scheduled_total{priority=\"high\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("dgpu_tasks_finished_total{priority=\"high\",status=\"success\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("dgpu_tasks_finished_total{priority=\"low\",status=\"cancelled\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("dgpu_schedule_pass_duration_seconds_count 3\n"), std::string::npos) << m;

  const std::string log = Log();
  EXPECT_EQ(Count(log, "event=agent_registered node=n1 address=n1:1 gpus=2"), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_submitted task_id=task-1 priority=high gpu_count=1"), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_scheduled task_id=task-1 node=n1 gpus=0 priority=high"), 1u)
      << log;
  EXPECT_EQ(Count(log, "event=task_finished task_id=task-1 node=n1 status=success"), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_stopping task_id=task-2 node=n1 reason=cancel"), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_finished task_id=task-2"), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_stopped task_id=task-2 node=n1 reason=cancel exit_code=143"), 1u)
      << log;
}

TEST_F(EventRecorderTest, ASilentNodeIsLoggedOfflineAndItsTasksRequeued) {
  ASSERT_TRUE(core_->RegisterNode("n1", "n1:1", Gpus(1), {}, {}, now_).ok());
  ASSERT_TRUE(core_->Submit(Spec(core::Priority::kHigh), now_).ok());
  Batch();
  now_ += 60'000'000;
  core_->Tick(now_);
  Batch();
  const std::string log = Log();
  EXPECT_EQ(Count(log, "event=agent_offline node=n1 reason=heartbeat_timeout"), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_requeued task_id=task-1 node=n1 reason=agent_lost attempts=1"),
            1u)
      << log;
  EXPECT_NE(RenderMetrics().find("dgpu_tasks_scheduled_total{priority=\"high\"} 1\n"),
            std::string::npos);
}

TEST_F(EventRecorderTest, AQuotaChangeIsLoggedWithTheNewQuotas) {
  ASSERT_TRUE(core_->RegisterNode("n1", "n1:1", Gpus(4), {}, {}, now_).ok());
  ASSERT_TRUE(core_->SetOnlinePercent(0.75, now_).ok());
  Batch();
  EXPECT_EQ(Count(Log(), "event=quota_changed online_percent=0.75 online_gpus=3 batch_gpus=1"), 1u)
      << Log();
}

TEST_F(EventRecorderTest, PerTaskLinesPastTheLimitAreSummedUpOnceTheSecondIsOver) {
  EventRecorder limited(&metrics_, 3);
  const auto batch = [&] {
    core_->Schedule(now_);
    std::vector<core::Decision> decisions = core_->TakeDecisions();
    std::vector<core::Change> changes = core_->TakeChanges();
    std::vector<core::Event> events = core_->TakeEvents();
    limited.OnPass(*core_, decisions, changes, events, 0.001, now_);
  };
  ASSERT_TRUE(core_->RegisterNode("n1", "n1:1", Gpus(2), {}, {}, now_).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(core_->Submit(Spec(core::Priority::kHigh), now_).ok());
  batch();  // 10 submitted and 1 scheduled (the quota gives high 1 GPU): 3 lines written.
  std::string log = Log();
  EXPECT_EQ(Count(log, "event=agent_registered"), 1u) << log;  // never limited
  EXPECT_EQ(Count(log, "event=task_submitted"), 3u) << log;
  EXPECT_EQ(Count(log, "event=task_submitted task_id=task-3 "), 1u) << log;
  EXPECT_EQ(Count(log, "event=task_scheduled"), 0u) << log;
  EXPECT_EQ(Count(log, "task_lines_suppressed"), 0u) << log;

  now_ += 500'000;  // Same second: still over the limit, nothing more, no summary yet.
  ASSERT_TRUE(core_->Submit(Spec(core::Priority::kLow), now_).ok());
  batch();
  EXPECT_EQ(Count(Log(), "event=task_submitted"), 3u) << Log();

  now_ += 600'000;  // The second is over: an empty batch (the loop's timer) sums it up.
  batch();
  log = Log();
  EXPECT_EQ(Count(log,
                  "event=task_lines_suppressed suppressed=10 task_submitted=8 "
                  "task_scheduled=2 limit_per_second=3"),
            1u)
      << log;
  // The metrics count every task whatever was logged.
  EXPECT_NE(RenderMetrics().find("dgpu_tasks_submitted_total{priority=\"high\"} 10\n"),
            std::string::npos);

  ASSERT_TRUE(core_->Submit(Spec(core::Priority::kLow), now_).ok());
  batch();  // A new second: lines again.
  EXPECT_EQ(Count(Log(), "event=task_submitted task_id=task-12 "), 1u) << Log();
  now_ += 2'000'000;
  batch();
  EXPECT_EQ(Count(Log(), "task_lines_suppressed"), 1u) << Log();  // nothing suppressed since
}

}  // namespace
}  // namespace dgpu::scheduler
