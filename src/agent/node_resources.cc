#include "agent/node_resources.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace dgpu::agent {

int64_t DetectCpusMilli() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return int64_t{CPU_COUNT(&set)} * 1000;
}

int64_t DetectMemoryMb(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemTotal:") return kib / 1024;
  }
  return 0;
}

NodeResourceFigures ResolveNodeResources(const common::NodeResourcesConfig& config) {
  using Config = common::NodeResourcesConfig;
  NodeResourceFigures f;
  int64_t cpus = config.cpus_milli;
  if (cpus == Config::kAuto) cpus = f.detected_cpus_milli = DetectCpusMilli();
  int64_t memory = config.memory_mb;
  if (memory == Config::kAuto) memory = f.detected_memory_mb = DetectMemoryMb();
  f.cpus_milli = std::max<int64_t>(0, cpus - config.reserved_cpus_milli);
  f.memory_mb = std::max<int64_t>(0, memory - config.reserved_memory_mb);
  return f;
}

}  // namespace dgpu::agent
