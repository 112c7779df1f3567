// ProcessExecutor: runs each task as `/bin/sh -c <command>` on the host.
//
// The task runs in a new session (its own process group) with working directory
// work_dir/<task_id>/ (created), stdout and stderr appended to work_dir/<task_id>.log, and the
// environment: the agent's environment (or options.base_env), then the task's env, then
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES = the GPU indices comma-joined in order,
// CUDA_DEVICE_ORDER=PCI_BUS_ID, DGPU_TASK_ID and DGPU_GPU_IDS (these override the task's env).
// Exit 0 is success; stopping and process following are described in task_supervisor.h.
//
// Construction makes the agent process a child subreaper (unless disabled). Not thread-safe;
// Start() reads the agent's environment, so no thread may call setenv() meanwhile.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "agent/task_supervisor.h"

namespace dgpu::agent {

struct ProcessExecutorOptions {
  std::string work_dir;
  std::string run_dir;  // executor.run_dir (task_supervisor.h); empty: <work_dir>/.run.
  // Shims kept for the next task (SupervisorOptions::max_idle_shims); 0: one per task.
  size_t max_idle_shims = 16;
  std::chrono::milliseconds kill_grace{10000};
  // executor.max_log_bytes: > 0: the task's shim cuts its log at this size (log_writer.h).
  int64_t max_log_bytes = 0;
  // The task shim (task_shim.h), run as `PROGRAM --task-shim 1 ...`: dgpu-task-shim, or the
  // agent binary itself.
  std::string shim = "/proc/self/exe";
  bool child_subreaper = true;
  std::string shell = "/bin/sh";
  // Base environment ("KEY=VALUE"); nullopt = the agent's environment at Start().
  std::optional<std::vector<std::string>> base_env;
  std::function<int64_t()> clock;  // Unix micros; default: system clock.
  // executor.run_as: submitter: tasks run as their `user` through setpriv (run_as.h).
  bool run_as_submitter = false;
  bool allow_root = false;
  std::string setpriv = "setpriv";
  // executor.isolation: the task cgroups (cgroup.h); nullptr: none (the tasks share the node).
  std::shared_ptr<TaskCgroups> cgroups;
  // With cgroups: executor.cpu_binding quota (a CPU bandwidth of the task's CPUs; also cpuset's
  // fallback when too few CPUs are free) or none, and executor.max_pids_per_task (0: no limit).
  bool cpu_quota = true;
  // executor.cpu_binding: cpuset, where the cgroups can bind CPUs: the CPUs to bind tasks to
  // (task_supervisor.h), and those local to each GPU.
  std::optional<CpuPool> cpu_pool;
  std::map<int, std::vector<int>> gpu_local_cpus;
  int64_t max_pids_per_task = 32768;
  // The device number of each GPU's device file, by index: a task's cgroup denies those of the
  // GPUs it was not given. GPUs without one are not kept from anyone.
  std::map<int, dev_t> gpu_devices;
};

class ProcessExecutor final : public SupervisedExecutor {
 public:
  explicit ProcessExecutor(ProcessExecutorOptions options);

  Status Start(const TaskLaunch& launch) override;
  std::string name() const override { return "process"; }
  // The task's cgroup limits (with cgroups): memory_mb, executor.max_pids_per_task, cpus as a
  // quota (cpu_binding quota, or cpuset's fallback), and every GPU device but the task's own
  // denied. Start binds the CPUs (cpuset) where it can.
  TaskCgroupLimits CgroupLimits(const TaskLaunch& launch) const;
  // Stops every task, then removes the agent's cgroup parent when it is empty.
  std::vector<TaskExit> StopAll(std::chrono::milliseconds grace) override;

  // The complete environment a task gets ("KEY=VALUE", one entry per key).
  std::vector<std::string> BuildEnvironment(const TaskLaunch& launch) const;

 private:
  ProcessExecutorOptions options_;
};

// Merges "KEY=VALUE" entries: later keys replace earlier ones, first-seen order is kept.
std::vector<std::string> MergeEnvironment(
    const std::vector<std::string>& base,
    const std::vector<std::pair<std::string, std::string>>& overrides);

// The agent's environment as "KEY=VALUE" entries.
std::vector<std::string> CurrentEnvironment();

}  // namespace dgpu::agent
