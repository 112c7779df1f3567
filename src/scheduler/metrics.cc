#include "scheduler/metrics.h"

#include <fmt/format.h>

#include <cstdio>

namespace dgpu::scheduler {
namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

const char* kPrio[] = {"high", "low"};
const char* kFinished[] = {"success", "failed", "cancelled"};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  double old = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

void Histogram::Render(const std::string& name, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    std::string le = i < bounds_.size() ? Num(bounds_[i]) : "+Inf";
    *out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum " + Num(sum_.load(std::memory_order_relaxed)) + "\n";
  *out += name + "_count " + std::to_string(cumulative) + "\n";
}

GaugeSnapshot TakeGaugeSnapshot(const core::SchedulerCore& core) {
  GaugeSnapshot g;
  for (int p = 0; p < core::kPriorityCount; ++p) {
    g.pending[p] = core.PendingCount(static_cast<core::Priority>(p));
    g.running[p] = core.RunningCount(static_cast<core::Priority>(p));
  }
  g.quota = core.Quota();
  g.teams = core.Teams();
  for (const auto& gpu : core.Gpus()) {
    g.gpus[{std::string(core::ToString(gpu.status)), gpu.model}]++;
  }
  for (const auto& n : core.Nodes()) g.agents[core::NodeStateName(n.online, n.mode)]++;
  return g;
}

Metrics::Metrics()
    : pass_duration_({0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5}),
      start_latency_({0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 1800, 3600}),
      dispatch_latency_({0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5}),
      // 64 MiB to 1 TiB, by powers of 4.
      max_memory_({67108864.0, 268435456.0, 1073741824.0, 4294967296.0, 17179869184.0,
                   68719476736.0, 274877906944.0, 1099511627776.0}) {}

void Metrics::TaskUsage(core::Priority p, const std::string& team,
                        const core::ResourceUsage& used) {
  max_memory_.Observe(static_cast<double>(used.max_memory_bytes));
  std::lock_guard<std::mutex> lock(mu_);
  cpu_seconds_[{Idx(p), team}] += static_cast<double>(used.cpu_micros) / 1e6;
}

void Metrics::TaskPreempted(core::Priority p, const std::string& team) {
  std::lock_guard<std::mutex> lock(mu_);
  preempted_[{Idx(p), team}]++;
}

void Metrics::TaskFinished(core::Priority p, core::TaskStatus s) {
  int i = s == core::TaskStatus::kSuccess ? 0 : s == core::TaskStatus::kFailed ? 1 : 2;
  finished_[Idx(p)][i]++;
}

void Metrics::HttpRequest(const std::string& route, int code) {
  std::lock_guard<std::mutex> lock(mu_);
  http_[{route, code}]++;
}

void Metrics::GpuUtilization(const std::string& gpu_id, const std::string& model, double ratio) {
  std::lock_guard<std::mutex> lock(mu_);
  gpu_utilization_[gpu_id] = {model, ratio};
}

std::map<std::string, double> Metrics::GpuUtilizations() const {
  std::map<std::string, double> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, v] : gpu_utilization_) out.emplace_hint(out.end(), id, v.second);
  return out;
}

std::string Metrics::Render(const GaugeSnapshot& g) const {
  std::string out;
  out.reserve(4096);
  Header(&out, "dgpu_tasks_submitted_total", "counter", "Tasks accepted, by priority.");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_tasks_submitted_total{priority=\"") + kPrio[p] + "\"} " +
           std::to_string(submitted_[p].load()) + "\n";
  }
  Header(&out, "dgpu_tasks_scheduled_total", "counter", "Tasks started on GPUs, by priority.");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_tasks_scheduled_total{priority=\"") + kPrio[p] + "\"} " +
           std::to_string(scheduled_[p].load()) + "\n";
  }
  Header(&out, "dgpu_tasks_finished_total", "counter", "Tasks finished, by priority and status.");
  for (int p = 0; p < 2; ++p) {
    for (int s = 0; s < 3; ++s) {
      out += std::string("dgpu_tasks_finished_total{priority=\"") + kPrio[p] + "\",status=\"" +
             kFinished[s] + "\"} " + std::to_string(finished_[p][s].load()) + "\n";
    }
  }
  Header(&out, "dgpu_tasks_pending", "gauge", "Tasks waiting, by priority.");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_tasks_pending{priority=\"") + kPrio[p] + "\"} " +
           std::to_string(g.pending[p]) + "\n";
  }
  Header(&out, "dgpu_tasks_running", "gauge", "Tasks running, by priority.");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_tasks_running{priority=\"") + kPrio[p] + "\"} " +
           std::to_string(g.running[p]) + "\n";
  }
  Header(&out, "dgpu_gpus", "gauge", "GPUs by status and model.");
  for (const auto& [key, n] : g.gpus) {
    out += "dgpu_gpus{status=\"" + Escape(key.first) + "\",model=\"" + Escape(key.second) + "\"} " +
           std::to_string(n) + "\n";
  }
  const char* cls[] = {"online", "batch"};
  Header(&out, "dgpu_quota_gpus", "gauge", "GPU quota of each class.");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_quota_gpus{class=\"") + cls[p] + "\"} " +
           std::to_string(g.quota.quota[p]) + "\n";
  }
  Header(&out, "dgpu_quota_used_gpus", "gauge", "GPUs used by each class.");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_quota_used_gpus{class=\"") + cls[p] + "\"} " +
           std::to_string(g.quota.used[p]) + "\n";
  }
  Header(
      &out, "dgpu_borrowed_gpus", "gauge",
      "GPUs each class uses beyond its quota (borrowed while the other class leaves them idle).");
  for (int p = 0; p < 2; ++p) {
    out += std::string("dgpu_borrowed_gpus{class=\"") + cls[p] + "\"} " +
           std::to_string(g.quota.borrowed[p]) + "\n";
  }
  Header(&out, "dgpu_team_guaranteed_gpus", "gauge",
         "GPUs guaranteed to each team in each class (as applied: scaled down while a class "
         "quota is short).");
  for (const auto& t : g.teams) {
    for (int p = 0; p < 2; ++p) {
      out += "dgpu_team_guaranteed_gpus{team=\"" + Escape(t.name) + "\",class=\"" + cls[p] +
             "\"} " + std::to_string(t.classes[p].guaranteed) + "\n";
    }
  }
  Header(&out, "dgpu_team_used_gpus", "gauge", "GPUs held by each team's tasks in each class.");
  for (const auto& t : g.teams) {
    for (int p = 0; p < 2; ++p) {
      out += "dgpu_team_used_gpus{team=\"" + Escape(t.name) + "\",class=\"" + cls[p] + "\"} " +
             std::to_string(t.classes[p].used) + "\n";
    }
  }
  Header(&out, "dgpu_team_borrowed_gpus", "gauge",
         "GPUs of each team's tasks that run beyond its guarantee (preemptible).");
  for (const auto& t : g.teams) {
    for (int p = 0; p < 2; ++p) {
      out += "dgpu_team_borrowed_gpus{team=\"" + Escape(t.name) + "\",class=\"" + cls[p] + "\"} " +
             std::to_string(t.classes[p].borrowed) + "\n";
    }
  }
  Header(&out, "dgpu_agents", "gauge", "Agents by status.");
  for (const char* status : {"online", "cordoned", "draining", "offline"}) {
    auto it = g.agents.find(status);
    out += fmt::format("dgpu_agents{{status=\"{}\"}} {}\n", status,
                       it == g.agents.end() ? 0 : it->second);
  }
  Header(&out, "dgpu_is_leader", "gauge", "1 on the leading scheduler, 0 on a standby.");
  out += std::string("dgpu_is_leader ") + (g.is_leader ? "1" : "0") + "\n";
  Header(&out, "dgpu_epoch", "gauge", "Leadership epoch this scheduler follows.");
  out += "dgpu_epoch " + std::to_string(g.epoch) + "\n";
  Header(&out, "dgpu_journal_batches_total", "counter", "Group commits to the database.");
  out += "dgpu_journal_batches_total " + std::to_string(g.journal_batches) + "\n";
  Header(&out, "dgpu_journal_mean_batch_size", "gauge", "Mean appends per group commit.");
  out += "dgpu_journal_mean_batch_size " + Num(g.journal_mean_batch) + "\n";
  Header(&out, "dgpu_schedule_pass_duration_seconds", "histogram",
         "Duration of a scheduling pass.");
  pass_duration_.Render("dgpu_schedule_pass_duration_seconds", &out);
  Header(&out, "dgpu_task_start_latency_seconds", "histogram",
         "Time from submission to start on an agent.");
  start_latency_.Render("dgpu_task_start_latency_seconds", &out);
  Header(&out, "dgpu_task_dispatch_latency_seconds", "histogram",
         "Time from submission to the start order written to the agent's connection, for tasks "
         "that start at once on an agent whose stream is open (first runs only).");
  dispatch_latency_.Render("dgpu_task_dispatch_latency_seconds", &out);
  Header(&out, "dgpu_task_max_memory_bytes", "histogram",
         "Peak memory of finished tasks' last runs (the highest member's), where their agents "
         "measured it (executor.isolation).");
  max_memory_.Render("dgpu_task_max_memory_bytes", &out);
  std::lock_guard<std::mutex> lock(mu_);
  Header(&out, "dgpu_task_cpu_seconds_total", "counter",
         "CPU time of finished tasks' last runs, all members, where their agents measured it "
         "(executor.isolation), by priority and team.");
  for (const auto& [key, seconds] : cpu_seconds_) {
    out += std::string("dgpu_task_cpu_seconds_total{priority=\"") + kPrio[key.first] +
           "\",team=\"" + Escape(key.second) + "\"} " + Num(seconds) + "\n";
  }
  Header(&out, "dgpu_tasks_preempted_total", "counter",
         "Tasks stopped to give their GPUs back to a task within its guarantee, by priority and "
         "team.");
  for (const auto& [key, n] : preempted_) {
    out += std::string("dgpu_tasks_preempted_total{priority=\"") + kPrio[key.first] + "\",team=\"" +
           Escape(key.second) + "\"} " + std::to_string(n) + "\n";
  }
  Header(&out, "dgpu_http_requests_total", "counter", "REST requests by route and status code.");
  for (const auto& [key, n] : http_) {
    out += "dgpu_http_requests_total{route=\"" + Escape(key.first) + "\",code=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  }
  Header(&out, "dgpu_gpu_utilization_ratio", "gauge", "GPU utilization reported by agents (0..1).");
  for (const auto& [id, v] : gpu_utilization_) {
    out += "dgpu_gpu_utilization_ratio{gpu_id=\"" + Escape(id) + "\",model=\"" + Escape(v.first) +
           "\"} " + Num(v.second) + "\n";
  }
  return out;
}

}  // namespace dgpu::scheduler
