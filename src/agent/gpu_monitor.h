// GpuMonitor: GPU metrics and health, gathered on a thread of their own.
//
// The agent's session thread never calls discovery itself: a slow nvidia-smi (seconds, or its
// timeout) would hold up heartbeats and task starts. The monitor refreshes the devices every
// `metrics_interval` and runs the health checks every `health_interval`:
//   - the discovery method's CheckHealth (NVML XID events, ECC, retired pages, lost GPUs;
//     nvidia-smi's ECC and retired-page fields; the fake's fault file);
//   - `health_check_program`, when set: a non-zero exit (or no exit within the timeout) makes
//     every GPU of the node unhealthy, with the program's first output line as the reason.
// The GPUs' NVLink groups are read once, at Start (LinkGroups of the discovery's topology).
// A check that cannot run (an error) keeps what the last one found. Latest() is a copy of the
// last result, taken under a mutex: cheap, never blocking on a check.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu_discovery.h"
#include "base/status.h"

namespace dgpu::agent {

struct GpuMonitorOptions {
  std::chrono::milliseconds metrics_interval{5000};
  std::chrono::milliseconds health_interval{30000};
  std::string health_check_program;  // Empty: none.
  std::chrono::milliseconds program_timeout{60000};
  // Called on the monitor's thread when a GPU's health changes (health_generation is bumped),
  // outside the monitor's lock.
  std::function<void()> on_health_change;
};

struct GpuSnapshot {
  std::vector<GpuDevice> devices;  // With healthy / health_reason and link_group set.
  // Bumped whenever a GPU's health (or its reason) changes, so that the session can report it
  // at once instead of at its next heartbeat.
  uint64_t health_generation = 0;
};

class GpuMonitor {
 public:
  GpuMonitor(std::unique_ptr<GpuDiscovery> discovery, GpuMonitorOptions options);
  ~GpuMonitor();  // Stops the thread.
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Discovers the GPUs and runs the first health check on the calling thread (an agent that
  // cannot see its GPUs does not start: the discovery's error), then starts the thread.
  Status Start();
  void Stop();

  GpuSnapshot Latest() const;
  uint64_t health_generation() const;
  std::string method() const { return method_; }

  // One metrics refresh and one health check, on the calling thread (Start, the thread, tests).
  void RefreshMetrics();
  void CheckHealth();

 private:
  void Loop();
  // Faults of the program (all GPUs) merged with the method's; applied to devices_. True when a
  // GPU's health changed.
  bool Apply();
  // Sets each device's NVLink group (link_group_of_).
  void SetLinkGroups(std::vector<GpuDevice>& devices) const;

  std::unique_ptr<GpuDiscovery> discovery_;  // The monitor's thread only, after Start.
  const GpuMonitorOptions options_;
  const std::string method_;
  std::map<int, int> link_group_of_;  // LinkGroups of the topology read at Start; then constant.

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<GpuDevice> devices_;            // Guarded by mu_.
  std::map<int, std::string> method_faults_;  // Guarded by mu_.
  std::string program_fault_;                 // Guarded by mu_; empty: the program passed.
  uint64_t generation_ = 0;                   // Guarded by mu_.
  std::string last_method_error_;             // The thread only: logged once per change.
  std::thread thread_;
};

}  // namespace dgpu::agent
