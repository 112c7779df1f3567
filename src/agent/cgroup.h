// A cgroup per task: the limits of executor.isolation (devices, memory, CPU, pids), the kill of
// every process of a task, its out-of-memory kills.
//
// The agent's task cgroups live below its own cgroup (read from /proc/self/cgroup), under one
// parent of its own, `<own>/<name>/<task id>`:
//   - cgroup v2 when the unified hierarchy holds the memory and pids controllers: one directory
//     per task. A cgroup with processes cannot hand controllers to its children, so an agent
//     whose own cgroup does not already delegate them moves itself into a leaf beside the parent
//     (`<own>/<name>-agent`) first. Devices: a BPF_PROG_TYPE_CGROUP_DEVICE program attached to the
//     task's cgroup (there are no device files in v2).
//   - cgroup v1 otherwise: slots (see slots() below), `<own>/<name>/slot-<n>` in every mounted
//     hierarchy, kept from task to task with their shim living in them; a task too large for a
//     kept shim gets one directory of its own in each hierarchy it needs (memory and cpuacct for
//     every task, pids, cpu, cpuset and devices for their limits). Devices through devices.deny.
// The task's processes join it through the task's shim (task_shim.h): v2, the shim starts the
// task's first process there; v1, a slot's shim lives there, and a shim of a task's own moves
// itself into the task's cgroups, starts the task's first process and moves back to its own (the
// agent's), so that a kill of the cgroup and its out-of-memory killer reach the task alone.
//
// The device rule is a deny list: of the node's GPU device files, those of the other tasks' GPUs
// cannot be opened (EPERM); everything else (the NVIDIA control devices, /dev/null, ...) is left
// as the agent's cgroup has it.
//
// Not thread-safe; one owner (the agent's executor).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/gpu_discovery.h"
#include "base/status.h"
#include "core/types.h"

namespace dgpu::agent {

enum class CgroupVersion { kV1, kV2 };

struct TaskCgroupLimits {
  int64_t memory_bytes = 0;           // 0: no limit. Swap counts too where the kernel accounts it.
  int64_t pids_max = 0;               // 0: no limit.
  int64_t cpu_quota_milli = 0;        // CPU bandwidth in thousandths of a CPU; 0: no limit.
  std::vector<int> cpus;              // The CPUs it may run on (cpuset); empty: any.
  std::vector<dev_t> denied_devices;  // Character devices the task may not open.
  bool operator==(const TaskCgroupLimits&) const = default;
};

// Where a process reads its own cgroups and the mounts (tests point these at files of their
// own).
struct CgroupSources {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string mountinfo = "/proc/self/mountinfo";
};

// One hierarchy's directories: where the task cgroups go, and the agent's own.
struct CgroupHierarchy {
  std::vector<std::string> controllers;  // v1: those of its mount; v2: {"unified"}.
  std::string own;                       // The agent's own cgroup directory.
  std::string parent;                    // <own>/<name>: the task cgroups' parent.
};

// From the contents of /proc/self/cgroup and /proc/self/mountinfo: the hierarchies a task cgroup
// may use (v1: memory, pids, cpu, cpuacct, devices, those mounted; v2: the unified one when
// its controllers include memory and pids), with `name` as the parent's name. Unavailable (why)
// when neither is there.
StatusOr<std::pair<CgroupVersion, std::vector<CgroupHierarchy>>> FindCgroupHierarchies(
    const std::string& proc_self_cgroup, const std::string& mountinfo, const std::string& name);

class TaskCgroups {
 public:
  // Finds this process's cgroups and makes the parent `name` below them (`name`: one path
  // component). Unavailable, saying why, where this process cannot make cgroups (not root, a
  // read-only cgroup file system, no usable hierarchy).
  static StatusOr<std::unique_ptr<TaskCgroups>> Open(const std::string& name,
                                                     const CgroupSources& sources = {});

  CgroupVersion version() const { return version_; }
  // "cgroup_v2" or "cgroup_v1", as agents report it.
  std::string isolation() const;
  const std::vector<CgroupHierarchy>& hierarchies() const { return hierarchies_; }
  // Whether tasks can be bound to CPUs (TaskCgroupLimits::cpus): v1, a cpuset hierarchy is
  // mounted; v2, the cpuset controller reaches the task cgroups.
  bool can_bind_cpus() const { return cpuset_; }

  // Makes the task's cgroup (an empty one of an earlier run is made anew) and sets its limits.
  // Nothing is left behind when it fails.
  Status Create(const std::string& task_id, const TaskCgroupLimits& limits);
  // Slots (v1): cgroups kept from one task to the next with the task's kept shim living in them
  // (task_shim.h, --resident), so that a start makes no cgroup and moves no process: a v1 move
  // waits for an RCU grace period whenever no other move happened just before (milliseconds),
  // and v1 memory cgroups are costly to make and remove. Per task, only the limits that differ
  // from the slot's last task's are written, and the usage counters are reset. v2 starts a task
  // in a cgroup of its own without a move (clone3), and keeps one per task.
  bool slots() const { return version_ == CgroupVersion::kV1; }
  // Makes the slot `name` in every hierarchy, without limits. Nothing is left behind when it
  // fails; AlreadyExists when a cgroup of that name is there.
  Status CreateSlot(const std::string& name);
  // Moves process `pid` (a slot's shim) into the slot, in every hierarchy.
  Status Enter(const std::string& name, pid_t pid);
  // Gives the slot `limits` for its next task: those that differ from `previous` (the last
  // task's; nullopt: none since CreateSlot) are written, the pids limit one above the task's
  // (the shim counts); the peak memory and CPU time are reset. On a failure the slot's limits
  // are unknown (it is not to be used again).
  Status Apply(const std::string& name, const TaskCgroupLimits& limits,
               const std::optional<TaskCgroupLimits>& previous);
  // After a slot's task: the memory it still holds charged (its files' page cache) is given
  // back, so that the next task's peak starts from the shim's few pages. Best effort.
  void Recycle(const std::string& name);
  // Rewrites the CPUs of a task's cgroup made with TaskCgroupLimits::cpus (the kernel moves its
  // processes off the CPUs it loses). NotFound when it has no cpuset cgroup.
  Status SetCpus(const std::string& task_id, const std::vector<int>& cpus);
  // The task's cgroup directory of its first hierarchy (v1: memory's when mounted), for logs.
  std::string PathOf(const std::string& task_id) const;
  // For the shim (task_shim.h): v1, per hierarchy, the task's cgroup.procs and the agent's own
  // (the shim moves in for the spawn and back); v2, the task's cgroup directory and "" (the task
  // starts there directly: a move between cgroups costs the kernel an RCU grace period,
  // milliseconds, whenever no other move happened just before).
  // `limits`: those the cgroup was made with (they say which hierarchies it is in).
  std::vector<std::pair<std::string, std::string>> JoinFiles(const std::string& task_id,
                                                             const TaskCgroupLimits& limits) const;
  bool Exists(const std::string& task_id) const;
  // The processes in the task's cgroup.
  std::vector<pid_t> Pids(const std::string& task_id) const;
  // SIGKILL to every process of the task's cgroup but `spare` (the task's shim, when it could
  // not leave): v2 cgroup.kill, or frozen first so that nothing forks meanwhile (not when
  // `spare` is inside); v1 round after round until none is left. Best effort.
  void Kill(const std::string& task_id, pid_t spare = 0);
  // The out-of-memory kills in the task's cgroup (memory.oom_control or memory.events), since
  // the cgroup was made: a slot's count goes on from task to task.
  int64_t OomKills(const std::string& task_id) const;
  // What the task's processes used: CPU time (cpuacct.usage, cpu.stat usage_usec) and peak
  // memory (memory.max_usage_in_bytes, memory.peak; 0 on a v2 kernel before 5.19). nullopt when
  // the cgroup is gone.
  std::optional<core::ResourceUsage> Usage(const std::string& task_id) const;
  // Removes the task's cgroup (every hierarchy); OK when it is not there. FailedPrecondition
  // while processes remain.
  Status Remove(const std::string& task_id);
  // The task ids with a cgroup under the parent (left by an earlier agent process, say).
  std::vector<std::string> List() const;
  // Removes the parent when it is empty (the agent's end).
  void Close();

 private:
  TaskCgroups(CgroupVersion version, std::vector<CgroupHierarchy> hierarchies)
      : version_(version), hierarchies_(std::move(hierarchies)) {}
  const CgroupHierarchy* Find(const std::string& controller) const;
  // Whether a task with `limits` has a cgroup in `h` (v1: memory and cpuacct always, for its
  // usage; the others for their limit).
  bool Needs(const CgroupHierarchy& h, const TaskCgroupLimits& limits) const;

  CgroupVersion version_;
  std::vector<CgroupHierarchy> hierarchies_;
  bool cpuset_ = false;
  std::string cpuset_mems_;  // v1: the parent's cpuset.mems, which each task's cgroup gets.
};

// The device number of each GPU's device file, by index, for those that are character devices:
// /dev/nvidia<minor> (the index where the minor is unknown), or with fake GPUs DIR/nvidia<index>
// for `fake_device_dir` DIR (gpu.fake.device_dir; empty: none).
std::map<int, dev_t> GpuDeviceNumbers(const std::vector<GpuDevice>& gpus, bool fake,
                                      const std::string& fake_device_dir);

// Attaches a cgroup v2 device program to the cgroup directory `dir_fd` that refuses every
// access to the character devices of `denied` and allows all others. The errno text when the
// kernel refuses.
Status AttachDeviceFilter(int dir_fd, const std::vector<dev_t>& denied);

}  // namespace dgpu::agent
