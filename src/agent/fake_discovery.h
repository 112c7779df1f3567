// FakeDiscovery: deterministic GPUs for development and tests, no hardware needed.
//
// GPU i: uuid "GPU-fake-<uuid_tag>-<i>", the configured model and memory, memory used 0,
// utilization 0, temperature unknown, bus id "00000000:<i+1 in hex, 2 digits>:00.0".
// Topology: every pair joined by PCIe at host-bridge level, and the pairs of one of the
// configured NVLink groups by two NVLinks. Health: the GPUs listed in the fault file, read at
// every check. Not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace dgpu::agent {

class FakeDiscovery final : public GpuDiscovery {
 public:
  explicit FakeDiscovery(FakeDiscoveryOptions options);

  // InvalidArgument for a negative count, count > 256, an empty model, memory_mb <= 0 or NVLink
  // groups that are not groups of these GPUs (core::CheckLinkGroups).
  Status Init() override;
  StatusOr<std::vector<GpuDevice>> Discover() override;
  StatusOr<std::vector<GpuLink>> DiscoverTopology() override;
  StatusOr<std::vector<GpuFault>> CheckHealth() override;
  std::string name() const override { return "fake"; }

 private:
  FakeDiscoveryOptions options_;
  bool initialized_ = false;
};

}  // namespace dgpu::agent
