// executor.cpu_binding: cpuset: each task gets ceil(cpus) whole CPUs of its own while enough are
// free, those local to its GPUs' NUMA node first (as Slurm's task/affinity and the Kubernetes
// CPU manager's static policy do). The CPUs come from a pool of the CPUs the agent may run on,
// less the reserved ones; the task's cgroup (cgroup.h) confines it to them.
//
// Not thread-safe; one owner (the agent's executor).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/cpu_list.h"

namespace dgpu::agent {

using common::FormatCpuList;
using common::ParseCpuList;

// Where the CPUs are: the NUMA node of each CPU (sysfs /sys/devices/system/node/node<N>/cpulist;
// all on node 0 where there is no such directory).
std::map<int, int> ReadCpuNodes(const std::string& sysfs_node_dir = "/sys/devices/system/node");
// The CPUs local to the PCI device `pci_bus_id` ("00000000:3B:00.0", as NVML and nvidia-smi give
// it): <sysfs_pci_dir>/<0000:3b:00.0>/local_cpulist; empty when unknown.
std::vector<int> LocalCpusOfPciDevice(const std::string& pci_bus_id,
                                      const std::string& sysfs_pci_dir = "/sys/bus/pci/devices");
// The CPUs this process may run on (sched_getaffinity), sorted.
std::vector<int> AllowedCpus();

class CpuPool {
 public:
  // `cpus`: those tasks may be bound to; `nodes`: each CPU's NUMA node (absent: node 0).
  CpuPool(std::vector<int> cpus, std::map<int, int> nodes);

  // `count` free CPUs for a task, nullopt when fewer are free. Those of `preferred` first (the
  // CPUs local to its GPUs), then the rest from the NUMA node with the most free CPUs, so that a
  // task spans as few nodes as it can; lowest ids first within each.
  std::optional<std::vector<int>> Take(int count, const std::vector<int>& preferred);
  // Marks CPUs taken (a task adopted after an agent restart). CPUs outside the pool are ignored;
  // false when one of them was taken already.
  bool Hold(const std::vector<int>& cpus);
  void Give(const std::vector<int>& cpus);

  const std::vector<int>& cpus() const { return cpus_; }
  size_t free_count() const { return free_.size(); }
  // The CPUs of the pool bound to tasks (not free), sorted.
  std::vector<int> Taken() const;

 private:
  std::vector<int> cpus_;
  std::map<int, int> nodes_;
  std::set<int> free_;
};

}  // namespace dgpu::agent
