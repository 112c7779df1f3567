#include "agent/cpu_sets.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <utility>

namespace dgpu::agent {

namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::map<int, int> ReadCpuNodes(const std::string& sysfs_node_dir) {
  std::map<int, int> nodes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sysfs_node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    int node = 0;
    const char* digits = name.c_str() + 4;
    const char* end = name.c_str() + name.size();
    if (digits == end || std::from_chars(digits, end, node).ptr != end) continue;
    const auto cpus = common::ParseCpuList(ReadFirstLine(entry.path().string() + "/cpulist"));
    if (!cpus) continue;
    for (int cpu : *cpus) nodes[cpu] = node;
  }
  return nodes;
}

std::vector<int> LocalCpusOfPciDevice(const std::string& pci_bus_id,
                                      const std::string& sysfs_pci_dir) {
  // NVML's "00000000:3B:00.0" (an 8-digit domain) is sysfs's "0000:3b:00.0".
  std::string id = pci_bus_id;
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const size_t colon = id.find(':');
  if (colon == std::string::npos || id.find('/') != std::string::npos || id.find("..") == 0) {
    return {};
  }
  if (colon > 4) id = id.substr(colon - 4);
  const auto cpus =
      common::ParseCpuList(ReadFirstLine(sysfs_pci_dir + "/" + id + "/local_cpulist"));
  return cpus.value_or(std::vector<int>{});
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

CpuPool::CpuPool(std::vector<int> cpus, std::map<int, int> nodes)
    : cpus_(std::move(cpus)), nodes_(std::move(nodes)), free_(cpus_.begin(), cpus_.end()) {
  std::sort(cpus_.begin(), cpus_.end());
}

std::optional<std::vector<int>> CpuPool::Take(int count, const std::vector<int>& preferred) {
  if (count <= 0 || static_cast<size_t>(count) > free_.size()) return std::nullopt;
  const std::set<int> near(preferred.begin(), preferred.end());
  std::map<int, int> free_per_node;
  for (int cpu : free_) {
    auto n = nodes_.find(cpu);
    free_per_node[n == nodes_.end() ? 0 : n->second]++;
  }
  // Local CPUs first; then the node with the most free CPUs; then the lowest id.
  std::vector<std::pair<std::tuple<bool, int, int>, int>> ranked;
  for (int cpu : free_) {
    auto n = nodes_.find(cpu);
    const int node = n == nodes_.end() ? 0 : n->second;
    ranked.push_back({{near.count(cpu) == 0, -free_per_node[node], node}, cpu});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> taken(static_cast<size_t>(count));
  for (size_t i = 0; i < taken.size(); ++i) taken[i] = ranked[i].second;
  std::sort(taken.begin(), taken.end());
  for (int cpu : taken) free_.erase(cpu);
  return taken;
}

bool CpuPool::Hold(const std::vector<int>& cpus) {
  bool all_free = true;
  for (int cpu : cpus) {
    if (!std::binary_search(cpus_.begin(), cpus_.end(), cpu)) continue;
    all_free = free_.erase(cpu) > 0 && all_free;
  }
  return all_free;
}

std::vector<int> CpuPool::Taken() const {
  std::vector<int> taken;
  for (int cpu : cpus_) {
    if (free_.count(cpu) == 0) taken.push_back(cpu);
  }
  return taken;
}

void CpuPool::Give(const std::vector<int>& cpus) {
  for (int cpu : cpus) {
    if (std::binary_search(cpus_.begin(), cpus_.end(), cpu)) free_.insert(cpu);
  }
}

}  // namespace dgpu::agent
