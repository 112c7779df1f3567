// NvmlDiscovery: GPU discovery through NVML, loaded with dlopen at run time.
//
// There is no build-time dependency on NVIDIA headers or libraries: the few NVML types used are
// declared in nvml_discovery.cc. Each symbol is resolved by its newest versioned name first
// (nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetPciInfo_v3),
// then older names.
//
// Errors: a missing library, a missing required symbol, or NVML failing to initialize (driver not
// loaded, ...) make Init() return Unavailable (PermissionDenied for NO_PERMISSION) with a message
// naming the library, symbol or NVML error. NOT_SUPPORTED from a metric (utilization, temperature)
// yields std::nullopt; memory NOT_SUPPORTED yields 0. Topology functions are optional: when the
// library lacks them the corresponding GpuLink fields are std::nullopt.
//
// Owns the library handle: the destructor calls nvmlShutdown() and dlclose(). Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace dgpu::agent {

class NvmlDiscovery final : public GpuDiscovery {
 public:
  explicit NvmlDiscovery(std::string library_path = "libnvidia-ml.so.1");
  ~NvmlDiscovery() override;
  NvmlDiscovery(const NvmlDiscovery&) = delete;
  NvmlDiscovery& operator=(const NvmlDiscovery&) = delete;

  Status Init() override;
  StatusOr<std::vector<GpuDevice>> Discover() override;
  StatusOr<std::vector<GpuLink>> DiscoverTopology() override;
  std::string name() const override { return "nvml"; }

 private:
  struct Api;  // Resolved function pointers.

  std::string library_path_;
  void* handle_ = nullptr;
  bool nvml_initialized_ = false;
  std::unique_ptr<Api> api_;
};

}  // namespace dgpu::agent
