// Prometheus metrics of the scheduler (text exposition format 0.0.4), prefixed dgpu_.
//
// Task counters and histograms are updated from the core's events (EventRecorder) and HTTP
// counters by the REST server, with atomics; gauges are read from the core on the owner thread when
// /metrics is scraped (GaugeSnapshot). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/scheduler_core.h"

namespace dgpu::scheduler {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Appends _bucket/_sum/_count lines for `name`.
  void Render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> counts_;  // One per bound, plus +Inf.
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Gauges read from the core on the owner thread.
struct GaugeSnapshot {
  size_t pending[core::kPriorityCount] = {0, 0};
  size_t running[core::kPriorityCount] = {0, 0};
  core::QuotaView quota;
  std::vector<core::TeamView> teams;
  std::map<std::pair<std::string, std::string>, int> gpus;  // (status, model) -> count
  // By status: online, cordoned, draining, offline (core::NodeStateName).
  std::map<std::string_view, int> agents;
  bool is_leader = false;
  uint64_t epoch = 0;
  uint64_t journal_batches = 0;
  double journal_mean_batch = 0;
};
GaugeSnapshot TakeGaugeSnapshot(const core::SchedulerCore& core);

class Metrics {
 public:
  Metrics();
  void TaskSubmitted(core::Priority p) { submitted_[Idx(p)]++; }
  void TaskScheduled(core::Priority p) { scheduled_[Idx(p)]++; }
  void TaskFinished(core::Priority p, core::TaskStatus s);
  void TaskPreempted(core::Priority p, const std::string& team);
  // What a finished task's last run used, where its agents measured it (executor.isolation).
  void TaskUsage(core::Priority p, const std::string& team, const core::ResourceUsage& used);
  void HttpRequest(const std::string& route, int code);
  void GpuUtilization(const std::string& gpu_id, const std::string& model, double ratio);
  // The last utilization each GPU's agent reported (0..1), by GPU id (`<node>-gpu-<index>`).
  std::map<std::string, double> GpuUtilizations() const;
  Histogram& pass_duration() { return pass_duration_; }
  Histogram& start_latency() { return start_latency_; }
  Histogram& dispatch_latency() { return dispatch_latency_; }

  std::string Render(const GaugeSnapshot& g) const;

 private:
  static int Idx(core::Priority p) { return static_cast<int>(p); }
  std::array<std::atomic<uint64_t>, 2> submitted_{};
  std::array<std::atomic<uint64_t>, 2> scheduled_{};
  std::array<std::array<std::atomic<uint64_t>, 3>, 2> finished_{};  // success, failed, cancelled
  Histogram pass_duration_;
  Histogram start_latency_;
  Histogram dispatch_latency_;
  Histogram max_memory_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;                   // GUARDED_BY(mu_)
  std::map<std::string, std::pair<std::string, double>> gpu_utilization_;  // GUARDED_BY(mu_)
  std::map<std::pair<int, std::string>, uint64_t> preempted_;  // GUARDED_BY(mu_): (prio, team)
  std::map<std::pair<int, std::string>, double> cpu_seconds_;  // GUARDED_BY(mu_): (prio, team)
};

}  // namespace dgpu::scheduler
