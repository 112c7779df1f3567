#include "agent/gpu_monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "common/child_process.h"

namespace dgpu::agent {
namespace {

// Empty when the program passed, else why the node is unhealthy.
std::string RunProgram(const std::string& program, std::chrono::milliseconds timeout) {
  Status s = common::RunToSuccess({program}, timeout.count());
  return s.ok() ? "" : "health check " + s.message();
}

}  // namespace

GpuMonitor::GpuMonitor(std::unique_ptr<GpuDiscovery> discovery, GpuMonitorOptions options)
    : discovery_(std::move(discovery)), options_(std::move(options)), method_(discovery_->name()) {}

GpuMonitor::~GpuMonitor() { Stop(); }

Status GpuMonitor::Start() {
  StatusOr<std::vector<GpuDevice>> devices = discovery_->Discover();
  if (!devices.ok()) return devices.status();
  // The links do not change while the node runs: read once.
  if (StatusOr<std::vector<GpuLink>> links = discovery_->DiscoverTopology(); links.ok()) {
    link_group_of_ = LinkGroups(*links);
  } else {
    spdlog::warn("GPU topology ({}) unknown: {}; tasks get GPUs without regard to NVLink", method_,
                 links.status().message());
  }
  if (!link_group_of_.empty()) {
    std::map<int, std::string> groups;
    for (const auto& [gpu, group] : link_group_of_) {
      groups[group] += (groups[group].empty() ? "" : ",") + std::to_string(gpu);
    }
    std::string text;
    for (const auto& [group, gpus] : groups) text += (text.empty() ? "[" : " [") + gpus + "]";
    spdlog::info("NVLink groups of GPUs: {}", text);
  }
  SetLinkGroups(*devices);
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices_ = std::move(*devices);
  }
  CheckHealth();
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

void GpuMonitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

GpuSnapshot GpuMonitor::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {devices_, generation_};
}

uint64_t GpuMonitor::health_generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

void GpuMonitor::RefreshMetrics() {
  StatusOr<std::vector<GpuDevice>> devices = discovery_->Discover();
  if (!devices.ok()) {
    spdlog::warn("GPU discovery ({}) failed: {}; keeping the last metrics", method_,
                 devices.status().message());
    return;
  }
  SetLinkGroups(*devices);
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices_ = std::move(*devices);
    changed = Apply();
  }
  if (changed && options_.on_health_change) options_.on_health_change();
}

void GpuMonitor::CheckHealth() {
  StatusOr<std::vector<GpuFault>> faults = discovery_->CheckHealth();
  std::string program_fault;
  if (!options_.health_check_program.empty()) {
    program_fault = RunProgram(options_.health_check_program, options_.program_timeout);
  }
  if (!faults.ok()) {
    // Logged when the error changes, not at every check.
    if (faults.status().message() != last_method_error_) {
      spdlog::warn("GPU health check ({}) failed: {}; keeping what the last check found", method_,
                   faults.status().message());
    }
    last_method_error_ = faults.status().message();
  } else {
    last_method_error_.clear();
  }
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (faults.ok()) {
      method_faults_.clear();
      for (const GpuFault& f : *faults) method_faults_[f.index] = f.reason;
    }
    program_fault_ = std::move(program_fault);
    changed = Apply();
  }
  if (changed && options_.on_health_change) options_.on_health_change();
}

void GpuMonitor::SetLinkGroups(std::vector<GpuDevice>& devices) const {
  for (GpuDevice& d : devices) {
    auto it = link_group_of_.find(d.index);
    d.link_group = it != link_group_of_.end() ? it->second : -1;
  }
}

bool GpuMonitor::Apply() {
  bool changed = false;
  for (GpuDevice& d : devices_) {
    auto it = method_faults_.find(d.index);
    std::string reason = it != method_faults_.end() ? it->second : std::string();
    if (!program_fault_.empty()) reason += (reason.empty() ? "" : "; ") + program_fault_;
    const bool healthy = reason.empty();
    if (d.healthy == healthy && d.health_reason == reason) continue;
    changed = true;
    if (healthy) {
      spdlog::info("GPU {} is healthy again", d.index);
    } else {
      spdlog::warn("GPU {} is unhealthy: {}", d.index, reason);
    }
    d.healthy = healthy;
    d.health_reason = std::move(reason);
  }
  if (changed) generation_++;
  return changed;
}

void GpuMonitor::Loop() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_metrics = Clock::now() + options_.metrics_interval;
  Clock::time_point next_health = Clock::now() + options_.health_interval;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_until(lock, std::min(next_metrics, next_health), [this] { return stop_; });
    if (stop_) break;
    const Clock::time_point now = Clock::now();
    lock.unlock();
    // Metrics before health, so that a GPU that appears is checked in the same round.
    if (now >= next_metrics) {
      RefreshMetrics();
      next_metrics = now + options_.metrics_interval;
    }
    if (now >= next_health) {
      CheckHealth();
      next_health = Clock::now() + options_.health_interval;
    }
    lock.lock();
  }
}

}  // namespace dgpu::agent
