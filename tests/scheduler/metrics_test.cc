// The /metrics page: metric names, types and labels of the contract, and the exact samples of
// the counters, gauges and histograms.
#include "scheduler/metrics.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace dgpu::scheduler {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines of one family's samples (every line that starts with `name` then '{' or ' ').
std::vector<std::string> Samples(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& line : Lines(text)) {
    if (line.rfind(name, 0) == 0 && line.size() > name.size() &&
        (line[name.size()] == '{' || line[name.size()] == ' ')) {
      out.push_back(line);
    }
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(MetricsTest, FamiliesKeepTheirNamesTypesAndOrder) {
  Metrics metrics;
  Strings types;
  for (const std::string& line : Lines(metrics.Render(GaugeSnapshot{}))) {
    if (line.rfind("# TYPE ", 0) == 0) types.push_back(line.substr(7));
  }
  EXPECT_EQ(types, (Strings{
                       "dgpu_tasks_submitted_total counter",
                       "dgpu_tasks_scheduled_total counter",
                       "dgpu_tasks_finished_total counter",
                       "dgpu_tasks_pending gauge",
                       "dgpu_tasks_running gauge",
                       "dgpu_gpus gauge",
                       "dgpu_quota_gpus gauge",
                       "dgpu_quota_used_gpus gauge",
                       "dgpu_borrowed_gpus gauge",
                       "dgpu_team_guaranteed_gpus gauge",
                       "dgpu_team_used_gpus gauge",
                       "dgpu_team_borrowed_gpus gauge",
                       "dgpu_agents gauge",
                       "dgpu_is_leader gauge",
                       "dgpu_epoch gauge",
                       "dgpu_journal_batches_total counter",
                       "dgpu_journal_mean_batch_size gauge",
                       "dgpu_schedule_pass_duration_seconds histogram",
                       "dgpu_task_start_latency_seconds histogram",
                       "dgpu_task_dispatch_latency_seconds histogram",
                       "dgpu_task_max_memory_bytes histogram",
                       "dgpu_task_cpu_seconds_total counter",
                       "dgpu_tasks_preempted_total counter",
                       "dgpu_http_requests_total counter",
                       "dgpu_gpu_utilization_ratio gauge",
                   }));
}

TEST(MetricsTest, TaskCountersByPriorityAndStatus) {
  Metrics metrics;
  metrics.TaskSubmitted(core::Priority::kHigh);
  metrics.TaskSubmitted(core::Priority::kHigh);
  metrics.TaskSubmitted(core::Priority::kLow);
  metrics.TaskScheduled(core::Priority::kLow);
  metrics.TaskFinished(core::Priority::kHigh, core::TaskStatus::kSuccess);
  metrics.TaskFinished(core::Priority::kLow, core::TaskStatus::kFailed);
  metrics.TaskFinished(core::Priority::kLow, core::TaskStatus::kCancelled);
  metrics.TaskFinished(core::Priority::kLow, core::TaskStatus::kCancelled);
  const std::string text = metrics.Render(GaugeSnapshot{});
  EXPECT_EQ(Samples(text, "dgpu_tasks_submitted_total"),
            (Strings{"dgpu_tasks_submitted_total{priority=\"high\"} 2",
                     "dgpu_tasks_submitted_total{priority=\"low\"} 1"}));
  EXPECT_EQ(Samples(text, "dgpu_tasks_scheduled_total"),
            (Strings{"dgpu_tasks_scheduled_total{priority=\"high\"} 0",
                     "dgpu_tasks_scheduled_total{priority=\"low\"} 1"}));
  EXPECT_EQ(Samples(text, "dgpu_tasks_finished_total"),
            (Strings{"dgpu_tasks_finished_total{priority=\"high\",status=\"success\"} 1",
                     "dgpu_tasks_finished_total{priority=\"high\",status=\"failed\"} 0",
                     "dgpu_tasks_finished_total{priority=\"high\",status=\"cancelled\"} 0",
                     "dgpu_tasks_finished_total{priority=\"low\",status=\"success\"} 0",
                     "dgpu_tasks_finished_total{priority=\"low\",status=\"failed\"} 1",
                     "dgpu_tasks_finished_total{priority=\"low\",status=\"cancelled\"} 2"}));
}

TEST(MetricsTest, GaugesComeFromTheSnapshotWithLabelValuesEscaped) {
  GaugeSnapshot g;
  g.pending[0] = 3;
  g.running[1] = 5;
  g.quota.quota[0] = 6;
  g.quota.quota[1] = 2;
  g.quota.used[0] = 4;
  g.gpus[{"busy", "A100"}] = 5;
  g.gpus[{"idle", "odd \"model\"\\\n"}] = 1;
  g.agents = {{"online", 2}, {"offline", 1}, {"cordoned", 3}};
  g.is_leader = true;
  g.epoch = 7;
  g.journal_batches = 12;
  g.journal_mean_batch = 2.5;
  const std::string text = Metrics().Render(g);
  EXPECT_EQ(Samples(text, "dgpu_tasks_pending"),
            (Strings{"dgpu_tasks_pending{priority=\"high\"} 3",
                     "dgpu_tasks_pending{priority=\"low\"} 0"}));
  EXPECT_EQ(Samples(text, "dgpu_tasks_running"),
            (Strings{"dgpu_tasks_running{priority=\"high\"} 0",
                     "dgpu_tasks_running{priority=\"low\"} 5"}));
  EXPECT_EQ(Samples(text, "dgpu_gpus"),
            (Strings{"dgpu_gpus{status=\"busy\",model=\"A100\"} 5",
                     "dgpu_gpus{status=\"idle\",model=\"odd \\\"model\\\"\\\\\\n\"} 1"}));
  EXPECT_EQ(Samples(text, "dgpu_quota_gpus"),
            (Strings{"dgpu_quota_gpus{class=\"online\"} 6", "dgpu_quota_gpus{class=\"batch\"} 2"}));
  EXPECT_EQ(Samples(text, "dgpu_quota_used_gpus"),
            (Strings{"dgpu_quota_used_gpus{class=\"online\"} 4",
                     "dgpu_quota_used_gpus{class=\"batch\"} 0"}));
  EXPECT_EQ(Samples(text, "dgpu_agents"),
            (Strings{"dgpu_agents{status=\"online\"} 2", "dgpu_agents{status=\"cordoned\"} 3",
                     "dgpu_agents{status=\"draining\"} 0", "dgpu_agents{status=\"offline\"} 1"}));
  EXPECT_EQ(Samples(text, "dgpu_is_leader"), (Strings{"dgpu_is_leader 1"}));
  EXPECT_EQ(Samples(text, "dgpu_epoch"), (Strings{"dgpu_epoch 7"}));
  EXPECT_EQ(Samples(text, "dgpu_journal_batches_total"),
            (Strings{"dgpu_journal_batches_total 12"}));
  EXPECT_EQ(Samples(text, "dgpu_journal_mean_batch_size"),
            (Strings{"dgpu_journal_mean_batch_size 2.5"}));
}

TEST(MetricsTest, TeamGaugesAndPreemptionsByTeam) {
  GaugeSnapshot g;
  g.quota.borrowed[1] = 3;
  core::TeamView a;
  a.name = "vision";
  a.classes[0] = {.guaranteed = 4, .used = 2, .borrowed = 0};
  a.classes[1] = {.guaranteed = 1, .used = 4, .borrowed = 3};
  g.teams.push_back(a);
  Metrics metrics;
  metrics.TaskPreempted(core::Priority::kLow, "vision");
  metrics.TaskPreempted(core::Priority::kLow, "vision");
  metrics.TaskPreempted(core::Priority::kHigh, "nlp \"x\"");
  const std::string text = metrics.Render(g);
  EXPECT_EQ(
      Samples(text, "dgpu_borrowed_gpus"),
      (Strings{"dgpu_borrowed_gpus{class=\"online\"} 0", "dgpu_borrowed_gpus{class=\"batch\"} 3"}));
  EXPECT_EQ(Samples(text, "dgpu_team_guaranteed_gpus"),
            (Strings{"dgpu_team_guaranteed_gpus{team=\"vision\",class=\"online\"} 4",
                     "dgpu_team_guaranteed_gpus{team=\"vision\",class=\"batch\"} 1"}));
  EXPECT_EQ(Samples(text, "dgpu_team_used_gpus"),
            (Strings{"dgpu_team_used_gpus{team=\"vision\",class=\"online\"} 2",
                     "dgpu_team_used_gpus{team=\"vision\",class=\"batch\"} 4"}));
  EXPECT_EQ(Samples(text, "dgpu_team_borrowed_gpus"),
            (Strings{"dgpu_team_borrowed_gpus{team=\"vision\",class=\"online\"} 0",
                     "dgpu_team_borrowed_gpus{team=\"vision\",class=\"batch\"} 3"}));
  EXPECT_EQ(Samples(text, "dgpu_tasks_preempted_total"),
            (Strings{"dgpu_tasks_preempted_total{priority=\"high\",team=\"nlp \\\"x\\\"\"} 1",
                     "dgpu_tasks_preempted_total{priority=\"low\",team=\"vision\"} 2"}));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.5, 1, 2.5});
  for (double v : {0.25, 0.5, 2.0, 10.0}) h.Observe(v);
  std::string text;
  h.Render("x_seconds", &text);
  EXPECT_EQ(text,
            "x_seconds_bucket{le=\"0.5\"} 2\n"
            "x_seconds_bucket{le=\"1\"} 2\n"
            "x_seconds_bucket{le=\"2.5\"} 3\n"
            "x_seconds_bucket{le=\"+Inf\"} 4\n"
            "x_seconds_sum 12.75\n"
            "x_seconds_count 4\n");
}

TEST(MetricsTest, TheDaemonsHistogramsKeepTheirBuckets) {
  Metrics metrics;
  metrics.pass_duration().Observe(0.0002);
  metrics.start_latency().Observe(7200);
  const std::string text = metrics.Render(GaugeSnapshot{});
  const Strings pass = Samples(text, "dgpu_schedule_pass_duration_seconds_bucket");
  ASSERT_EQ(pass.size(), 11u);
  EXPECT_EQ(pass[2], "dgpu_schedule_pass_duration_seconds_bucket{le=\"0.0001\"} 0");
  EXPECT_EQ(pass[3], "dgpu_schedule_pass_duration_seconds_bucket{le=\"0.00050000000000000001\"} 1");
  EXPECT_EQ(pass[10], "dgpu_schedule_pass_duration_seconds_bucket{le=\"+Inf\"} 1");
  const Strings start = Samples(text, "dgpu_task_start_latency_seconds_bucket");
  ASSERT_EQ(start.size(), 14u);
  EXPECT_EQ(start[12], "dgpu_task_start_latency_seconds_bucket{le=\"3600\"} 0");
  EXPECT_EQ(start[13], "dgpu_task_start_latency_seconds_bucket{le=\"+Inf\"} 1");
  EXPECT_EQ(Samples(text, "dgpu_task_start_latency_seconds_count"),
            (Strings{"dgpu_task_start_latency_seconds_count 1"}));
}

TEST(MetricsTest, HttpRequestsAndGpuUtilizationByLabel) {
  Metrics metrics;
  metrics.HttpRequest("POST /tasks", 201);
  metrics.HttpRequest("POST /tasks", 201);
  metrics.HttpRequest("POST /tasks", 400);
  metrics.HttpRequest("GET /tasks/{id}", 404);
  metrics.GpuUtilization("n1-gpu-0", "A100", 0.25);
  metrics.GpuUtilization("n1-gpu-0", "A100", 0.75);  // The last report counts.
  metrics.GpuUtilization("n1-gpu-1", "A100", 0);
  const std::string text = metrics.Render(GaugeSnapshot{});
  EXPECT_EQ(Samples(text, "dgpu_http_requests_total"),
            (Strings{"dgpu_http_requests_total{route=\"GET /tasks/{id}\",code=\"404\"} 1",
                     "dgpu_http_requests_total{route=\"POST /tasks\",code=\"201\"} 2",
                     "dgpu_http_requests_total{route=\"POST /tasks\",code=\"400\"} 1"}));
  EXPECT_EQ(Samples(text, "dgpu_gpu_utilization_ratio"),
            (Strings{"dgpu_gpu_utilization_ratio{gpu_id=\"n1-gpu-0\",model=\"A100\"} 0.75",
                     "dgpu_gpu_utilization_ratio{gpu_id=\"n1-gpu-1\",model=\"A100\"} 0"}));
}

TEST(MetricsTest, TheGaugeSnapshotReadsTheCore) {
  core::CoreConfig cfg;
  cfg.online_percent = 0.5;
  core::SchedulerCore core(cfg);
  const core::TimeMicros now = 1'000'000'000;
  std::vector<core::GpuInfo> gpus = {{0, "A100", 40960, "", true, ""},
                                     {1, "A100", 40960, "", true, ""}};
  ASSERT_TRUE(core.RegisterNode("n1", "n1:1", gpus, {}, {}, now).ok());
  ASSERT_TRUE(
      core.RegisterNode("n2", "n2:1", {{0, "H100", 81920, "", true, ""}}, {}, {}, now).ok());
  ASSERT_TRUE(core.NodeLost("n2", now).ok());
  core::TaskSpec spec;
  spec.command = "true";
  spec.priority = core::Priority::kHigh;
  ASSERT_TRUE(core.Submit(spec, now).ok());
  spec.gpu_count = 2;
  ASSERT_TRUE(core.Submit(spec, now).ok());
  core.Schedule(now);
  ASSERT_TRUE(core.SetNodeMode("n1", core::NodeMode::kCordoned, now).ok());

  GaugeSnapshot g = TakeGaugeSnapshot(core);
  EXPECT_EQ(g.pending[0], 1u);
  EXPECT_EQ(g.running[0], 1u);
  EXPECT_EQ(g.pending[1], 0u);
  EXPECT_EQ(g.quota.total_gpus, 2);
  EXPECT_EQ(g.quota.quota[0], 1);
  EXPECT_EQ(g.quota.used[0], 1);
  using Gpus = std::map<std::pair<std::string, std::string>, int>;
  EXPECT_EQ(g.gpus, (Gpus{{{"busy", "A100"}, 1}, {{"idle", "A100"}, 1}, {{"offline", "H100"}, 1}}));
  EXPECT_EQ(g.agents, (std::map<std::string_view, int>{{"cordoned", 1}, {"offline", 1}}));
}

}  // namespace
}  // namespace dgpu::scheduler
