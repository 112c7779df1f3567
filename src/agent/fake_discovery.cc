#include "agent/fake_discovery.h"

#include <cstdio>
#include <utility>

namespace dgpu::agent {

FakeDiscovery::FakeDiscovery(FakeDiscoveryOptions options) : options_(std::move(options)) {}

Status FakeDiscovery::Init() {
  if (options_.count < 0 || options_.count > 256) {
    return InvalidArgument("gpu.fake.count must be within [0, 256], got " +
                           std::to_string(options_.count));
  }
  if (options_.model.empty()) return InvalidArgument("gpu.fake.model is empty");
  if (options_.memory_mb <= 0) {
    return InvalidArgument("gpu.fake.memory_mb must be positive, got " +
                           std::to_string(options_.memory_mb));
  }
  initialized_ = true;
  return OkStatus();
}

StatusOr<std::vector<GpuDevice>> FakeDiscovery::Discover() {
  if (!initialized_) return FailedPrecondition("FakeDiscovery::Init() has not succeeded");
  std::vector<GpuDevice> devices;
  for (int i = 0; i < options_.count; ++i) {
    GpuDevice gpu;
    gpu.index = i;
    gpu.uuid = "GPU-fake-" + options_.uuid_tag + "-" + std::to_string(i);
    gpu.name = options_.model;
    gpu.memory_total_mb = options_.memory_mb;
    gpu.memory_used_mb = 0;
    gpu.utilization_pct = 0;
    char bus_id[32];
    std::snprintf(bus_id, sizeof(bus_id), "00000000:%02X:00.0", (i + 1) & 0xff);
    gpu.pci_bus_id = bus_id;
    devices.push_back(std::move(gpu));
  }
  return devices;
}

StatusOr<std::vector<GpuLink>> FakeDiscovery::DiscoverTopology() {
  if (!initialized_) return FailedPrecondition("FakeDiscovery::Init() has not succeeded");
  std::vector<GpuLink> links;
  for (int a = 0; a < options_.count; ++a) {
    for (int b = a + 1; b < options_.count; ++b) {
      links.push_back({a, b, 0, PcieAncestor::kHostBridge});
    }
  }
  return links;
}

}  // namespace dgpu::agent
