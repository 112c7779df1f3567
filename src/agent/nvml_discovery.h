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
// Health (CheckHealth): a GPU whose handle is lost (GPU_IS_LOST), with uncorrectable volatile ECC
// errors (nvmlDeviceGetTotalEccErrors), with pages pending retirement
// (nvmlDeviceGetRetiredPagesPendingStatus), or that raised a critical XID event (an event set
// registered at the first check, drained without waiting at every check; XIDs that applications
// cause, 13 31 43 45 68 109, are ignored as NVIDIA's Kubernetes device plugin does). An XID keeps
// the GPU faulty until the agent restarts. Each of these functions is optional.
//
// Owns the library handle: the destructor calls nvmlShutdown() and dlclose(). Not thread-safe.
#pragma once

#include <map>
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
  StatusOr<std::vector<GpuFault>> CheckHealth() override;
  std::string name() const override { return "nvml"; }

 private:
  struct Api;  // Resolved function pointers.

  std::string library_path_;
  void* handle_ = nullptr;
  bool nvml_initialized_ = false;
  std::unique_ptr<Api> api_;
  // The XID event set, created at the first health check (null: not available).
  void* event_set_ = nullptr;
  bool events_tried_ = false;
  std::map<int, std::string> xid_faults_;  // Sticky until the agent restarts.
};

}  // namespace dgpu::agent
