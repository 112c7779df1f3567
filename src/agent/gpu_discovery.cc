#include "agent/gpu_discovery.h"

#include "agent/fake_discovery.h"
#include "agent/nvml_discovery.h"
#include "agent/smi_discovery.h"
#include "core/types.h"

namespace dgpu::agent {

std::map<int, int> LinkGroups(const std::vector<GpuLink>& links) {
  // Union-find over the GPU indices that have an NVLink peer.
  std::map<int, int> parent;
  const auto find = [&](int a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  };
  for (const GpuLink& l : links) {
    if (l.nvlink_count.value_or(0) <= 0) continue;
    parent.try_emplace(l.gpu_a, l.gpu_a);
    parent.try_emplace(l.gpu_b, l.gpu_b);
    const int a = find(l.gpu_a);
    const int b = find(l.gpu_b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
  // Roots are the lowest index of their group; groups numbered in that order.
  std::map<int, int> number_of_root;
  std::map<int, int> groups;
  for (const auto& [gpu, unused] : parent) {
    const int root = find(gpu);
    auto [it, added] = number_of_root.try_emplace(root, static_cast<int>(number_of_root.size()));
    if (it->second < core::kMaxLinkGroups) groups[gpu] = it->second;
  }
  return groups;
}

StatusOr<std::unique_ptr<GpuDiscovery>> MakeDiscovery(std::string_view method,
                                                      const DiscoveryOptions& options) {
  if (method == "nvml") {
    return std::unique_ptr<GpuDiscovery>(new NvmlDiscovery(options.nvml_library_path));
  }
  if (method == "nvidia-smi") {
    return std::unique_ptr<GpuDiscovery>(
        new SmiDiscovery(options.nvidia_smi_path, options.nvidia_smi_timeout_ms));
  }
  if (method == "fake") return std::unique_ptr<GpuDiscovery>(new FakeDiscovery(options.fake));
  return InvalidArgument("unknown gpu.detection_method '" + std::string(method) +
                         "' (expected nvml, nvidia-smi or fake)");
}

StatusOr<InitializedDiscovery> InitDiscoveryWithFallback(std::string_view method,
                                                         const DiscoveryOptions& options) {
  std::vector<std::string_view> chain = {method};
  if (method == "nvml") chain.push_back("nvidia-smi");
  if (method == "nvidia-smi") chain.push_back("nvml");

  InitializedDiscovery result;
  for (std::string_view candidate : chain) {
    StatusOr<std::unique_ptr<GpuDiscovery>> discovery = MakeDiscovery(candidate, options);
    if (!discovery.ok()) return discovery.status();
    Status init = (*discovery)->Init();
    if (init.ok()) {
      result.discovery = std::move(*discovery);
      return result;
    }
    result.skipped.push_back(Status(init.code(), std::string(candidate) + ": " + init.message()));
    if (init.code() != StatusCode::kUnavailable) break;
  }
  std::string message;
  for (const auto& skipped : result.skipped) {
    message += (message.empty() ? "" : "; ") + skipped.message();
  }
  return Status(result.skipped.front().code(), "no GPU discovery method works: " + message);
}

}  // namespace dgpu::agent
