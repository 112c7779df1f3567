// What a node offers its tasks besides GPUs: the agent's `resources` keys, with `auto` read from
// the machine (the CPUs this process may run on, the memory the kernel reports), less the
// reserves kept for the system.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"

namespace dgpu::agent {

struct NodeResourceFigures {
  int64_t cpus_milli = 0;  // Offered to tasks: detected (or configured) less the reserve, >= 0.
  int64_t memory_mb = 0;
  int64_t detected_cpus_milli = 0;  // What `auto` read (0: not read).
  int64_t detected_memory_mb = 0;
};

// The CPUs in this process's affinity mask, in thousandths; 0 if it cannot be read.
int64_t DetectCpusMilli();
// MemTotal of /proc/meminfo in MiB; 0 if it cannot be read.
int64_t DetectMemoryMb(const std::string& meminfo_path = "/proc/meminfo");

NodeResourceFigures ResolveNodeResources(const common::NodeResourcesConfig& config);

}  // namespace dgpu::agent
