#include "agent/nvml_discovery.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace dgpu::agent {
namespace {

// The subset of nvml.h this file needs, declared here so that the build needs no NVIDIA files.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;

constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInvalidArgument = 2;
constexpr NvmlReturn kNvmlNotSupported = 3;
constexpr NvmlReturn kNvmlNoPermission = 4;
constexpr NvmlReturn kNvmlDriverNotLoaded = 9;
constexpr NvmlReturn kNvmlLibraryNotFound = 12;
constexpr NvmlReturn kNvmlFunctionNotFound = 13;
constexpr NvmlReturn kNvmlGpuIsLost = 15;

using NvmlEventSet = struct NvmlEventSetOpaque*;
struct NvmlEventData {
  NvmlDevice device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x8;
constexpr int kNvmlMemoryErrorTypeUncorrected = 1;
constexpr int kNvmlVolatileEcc = 0;
constexpr int kNvmlFeatureEnabled = 1;
// XIDs that a faulty application causes, not the GPU (as NVIDIA's device plugin skips them).
constexpr int kApplicationXids[] = {13, 31, 43, 45, 68, 109};
constexpr char kLostReason[] = "GPU is lost (fell off the bus)";
// Events drained per check, so that a storm of them cannot hold the check up.
constexpr int kMaxEventsPerCheck = 1024;

constexpr unsigned kNvmlNameBufferSize = 96;
constexpr unsigned kNvmlUuidBufferSize = 96;
constexpr unsigned kNvmlTemperatureGpu = 0;
// Current hardware has at most 18 NVLinks per GPU; the driver tells how many exist by failing
// beyond the last one, this cap only bounds a misbehaving driver.
constexpr unsigned kMaxNvLinks = 18;

struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct NvmlUtilization {
  unsigned gpu;
  unsigned memory;
};

struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_sub_system_id;
  char bus_id[32];
};

std::string CString(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

}  // namespace

struct NvmlDiscovery::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*get_count)(unsigned*) = nullptr;
  NvmlReturn (*get_handle_by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*get_name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*get_uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*get_memory_info)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*get_utilization_rates)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*get_temperature)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*get_pci_info)(NvmlDevice, NvmlPciInfo*) = nullptr;
  // Optional (topology).
  NvmlReturn (*get_topology_common_ancestor)(NvmlDevice, NvmlDevice, int*) = nullptr;
  NvmlReturn (*get_nvlink_state)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*get_nvlink_remote_pci_info)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*get_minor_number)(NvmlDevice, unsigned*) = nullptr;  // Optional.
  // Optional (health).
  NvmlReturn (*event_set_create)(NvmlEventSet*) = nullptr;
  NvmlReturn (*event_set_free)(NvmlEventSet) = nullptr;
  NvmlReturn (*register_events)(NvmlDevice, unsigned long long, NvmlEventSet) = nullptr;
  NvmlReturn (*event_set_wait)(NvmlEventSet, NvmlEventData*, unsigned) = nullptr;
  NvmlReturn (*get_total_ecc_errors)(NvmlDevice, int, int, unsigned long long*) = nullptr;
  NvmlReturn (*get_retired_pages_pending)(NvmlDevice, int*) = nullptr;

  std::string Describe(NvmlReturn rc) const {
    std::string text;
    if (error_string != nullptr) {
      const char* s = error_string(rc);
      if (s != nullptr) text = s;
    }
    if (text.empty()) text = "NVML error";
    return text + " (" + std::to_string(rc) + ")";
  }

  Status Error(std::string_view call, NvmlReturn rc) const {
    std::string message = std::string(call) + " failed: " + Describe(rc);
    switch (rc) {
      case kNvmlNoPermission:
        return PermissionDenied(std::move(message));
      case kNvmlDriverNotLoaded:
      case kNvmlLibraryNotFound:
      case kNvmlFunctionNotFound:
      case kNvmlGpuIsLost:
        return Unavailable(std::move(message));
      default:
        return Internal(std::move(message));
    }
  }
};

namespace {

// Resolves the first of `names` the library exports. Returns the name used, or "" when none.
template <typename Fn>
std::string Resolve(void* handle, std::initializer_list<const char*> names, Fn* out) {
  for (const char* name : names) {
    dlerror();
    void* symbol = dlsym(handle, name);
    if (symbol != nullptr) {
      *out = reinterpret_cast<Fn>(symbol);
      return name;
    }
  }
  *out = nullptr;
  return "";
}

}  // namespace

NvmlDiscovery::NvmlDiscovery(std::string library_path) : library_path_(std::move(library_path)) {}

NvmlDiscovery::~NvmlDiscovery() {
  if (event_set_ != nullptr && api_ && api_->event_set_free != nullptr) {
    api_->event_set_free(static_cast<NvmlEventSet>(event_set_));
  }
  if (nvml_initialized_ && api_ && api_->shutdown != nullptr) api_->shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

Status NvmlDiscovery::Init() {
  if (nvml_initialized_) return OkStatus();
  if (handle_ == nullptr) {
    dlerror();
    handle_ = dlopen(library_path_.c_str(), RTLD_LAZY | RTLD_GLOBAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      return Unavailable("cannot load NVML library '" + library_path_ +
                         "': " + (why != nullptr ? why : "unknown dlopen error"));
    }
  }
  auto api = std::make_unique<Api>();
  std::vector<std::string> missing;
  auto require = [&](std::initializer_list<const char*> names, auto* out) {
    if (Resolve(handle_, names, out).empty()) missing.emplace_back(*names.begin());
  };
  require({"nvmlInit_v2", "nvmlInit"}, &api->init);
  require({"nvmlShutdown"}, &api->shutdown);
  require({"nvmlErrorString"}, &api->error_string);
  require({"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, &api->get_count);
  require({"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"},
          &api->get_handle_by_index);
  require({"nvmlDeviceGetName"}, &api->get_name);
  require({"nvmlDeviceGetUUID"}, &api->get_uuid);
  require({"nvmlDeviceGetMemoryInfo"}, &api->get_memory_info);
  require({"nvmlDeviceGetUtilizationRates"}, &api->get_utilization_rates);
  require({"nvmlDeviceGetTemperature"}, &api->get_temperature);
  // The v1 nvmlPciInfo_t has another layout, so only v3 and v2 are accepted.
  require({"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}, &api->get_pci_info);
  Resolve(handle_, {"nvmlDeviceGetTopologyCommonAncestor"}, &api->get_topology_common_ancestor);
  Resolve(handle_, {"nvmlDeviceGetNvLinkState"}, &api->get_nvlink_state);
  Resolve(handle_, {"nvmlDeviceGetMinorNumber"}, &api->get_minor_number);
  Resolve(handle_, {"nvmlDeviceGetNvLinkRemotePciInfo_v2"}, &api->get_nvlink_remote_pci_info);
  Resolve(handle_, {"nvmlEventSetCreate"}, &api->event_set_create);
  Resolve(handle_, {"nvmlEventSetFree"}, &api->event_set_free);
  Resolve(handle_, {"nvmlDeviceRegisterEvents"}, &api->register_events);
  Resolve(handle_, {"nvmlEventSetWait_v2", "nvmlEventSetWait"}, &api->event_set_wait);
  Resolve(handle_, {"nvmlDeviceGetTotalEccErrors"}, &api->get_total_ecc_errors);
  Resolve(handle_, {"nvmlDeviceGetRetiredPagesPendingStatus"}, &api->get_retired_pages_pending);
  if (!missing.empty()) {
    std::string list;
    for (const auto& name : missing) list += (list.empty() ? "" : ", ") + name;
    return Unavailable("NVML library '" + library_path_ + "' lacks symbol(s): " + list);
  }
  NvmlReturn rc = api->init();
  if (rc != kNvmlSuccess) return api->Error("nvmlInit_v2", rc);
  api_ = std::move(api);
  nvml_initialized_ = true;
  return OkStatus();
}

StatusOr<std::vector<GpuDevice>> NvmlDiscovery::Discover() {
  if (!nvml_initialized_) return FailedPrecondition("NvmlDiscovery::Init() has not succeeded");
  const Api& api = *api_;
  unsigned count = 0;
  NvmlReturn rc = api.get_count(&count);
  if (rc != kNvmlSuccess) return api.Error("nvmlDeviceGetCount_v2", rc);

  std::vector<GpuDevice> devices;
  devices.reserve(count);
  for (unsigned i = 0; i < count; ++i) {
    const std::string where = " (GPU " + std::to_string(i) + ")";
    NvmlDevice device = nullptr;
    rc = api.get_handle_by_index(i, &device);
    if (rc != kNvmlSuccess) return api.Error("nvmlDeviceGetHandleByIndex_v2" + where, rc);

    GpuDevice gpu;
    gpu.index = static_cast<int>(i);
    std::array<char, kNvmlNameBufferSize> name{};
    rc = api.get_name(device, name.data(), name.size());
    if (rc != kNvmlSuccess) return api.Error("nvmlDeviceGetName" + where, rc);
    gpu.name = CString(name.data(), name.size());

    std::array<char, kNvmlUuidBufferSize> uuid{};
    rc = api.get_uuid(device, uuid.data(), uuid.size());
    if (rc != kNvmlSuccess) return api.Error("nvmlDeviceGetUUID" + where, rc);
    gpu.uuid = CString(uuid.data(), uuid.size());

    NvmlMemory memory{};
    rc = api.get_memory_info(device, &memory);
    if (rc == kNvmlSuccess) {
      constexpr unsigned long long kMiB = 1024ULL * 1024ULL;
      gpu.memory_total_mb = static_cast<int64_t>(memory.total / kMiB);
      gpu.memory_used_mb = static_cast<int64_t>(memory.used / kMiB);
    } else if (rc != kNvmlNotSupported) {
      return api.Error("nvmlDeviceGetMemoryInfo" + where, rc);
    }

    NvmlUtilization utilization{};
    rc = api.get_utilization_rates(device, &utilization);
    if (rc == kNvmlSuccess) {
      gpu.utilization_pct = static_cast<int>(utilization.gpu);
    } else if (rc != kNvmlNotSupported) {
      return api.Error("nvmlDeviceGetUtilizationRates" + where, rc);
    }

    unsigned temperature = 0;
    rc = api.get_temperature(device, kNvmlTemperatureGpu, &temperature);
    if (rc == kNvmlSuccess) {
      gpu.temperature_c = static_cast<int>(temperature);
    } else if (rc != kNvmlNotSupported) {
      return api.Error("nvmlDeviceGetTemperature" + where, rc);
    }

    NvmlPciInfo pci{};
    rc = api.get_pci_info(device, &pci);
    if (rc == kNvmlSuccess) {
      gpu.pci_bus_id = CString(pci.bus_id, sizeof(pci.bus_id));
    } else if (rc != kNvmlNotSupported) {
      return api.Error("nvmlDeviceGetPciInfo_v3" + where, rc);
    }
    unsigned minor = 0;
    if (api.get_minor_number != nullptr && api.get_minor_number(device, &minor) == kNvmlSuccess) {
      gpu.minor_number = static_cast<int>(minor);
    }
    devices.push_back(std::move(gpu));
  }
  return devices;
}

StatusOr<std::vector<GpuFault>> NvmlDiscovery::CheckHealth() {
  if (!nvml_initialized_) return FailedPrecondition("NvmlDiscovery::Init() has not succeeded");
  const Api& api = *api_;
  unsigned count = 0;
  NvmlReturn rc = api.get_count(&count);
  if (rc != kNvmlSuccess) return api.Error("nvmlDeviceGetCount_v2", rc);
  std::map<int, std::vector<std::string>> reasons;
  std::vector<NvmlDevice> handles(count, nullptr);
  for (unsigned i = 0; i < count; ++i) {
    rc = api.get_handle_by_index(i, &handles[i]);
    if (rc == kNvmlGpuIsLost) {
      handles[i] = nullptr;
      reasons[static_cast<int>(i)].push_back(kLostReason);
    } else if (rc != kNvmlSuccess) {
      return api.Error("nvmlDeviceGetHandleByIndex_v2 (GPU " + std::to_string(i) + ")", rc);
    }
  }

  if (!events_tried_ && api.event_set_create != nullptr && api.register_events != nullptr &&
      api.event_set_wait != nullptr) {
    events_tried_ = true;
    NvmlEventSet set = nullptr;
    if (api.event_set_create(&set) == kNvmlSuccess) {
      event_set_ = set;
      // A GPU that cannot report XIDs (NOT_SUPPORTED) is still checked the other ways.
      for (NvmlDevice h : handles) {
        if (h != nullptr) (void)api.register_events(h, kNvmlEventTypeXidCriticalError, set);
      }
    }
  }
  if (event_set_ != nullptr) {
    for (int n = 0; n < kMaxEventsPerCheck; ++n) {
      NvmlEventData event{};
      rc = api.event_set_wait(static_cast<NvmlEventSet>(event_set_), &event, 0);
      if (rc != kNvmlSuccess) break;  // TIMEOUT (10): none left; else: again next check.
      if ((event.event_type & kNvmlEventTypeXidCriticalError) == 0) continue;
      const int xid = static_cast<int>(event.event_data);
      if (std::find(std::begin(kApplicationXids), std::end(kApplicationXids), xid) !=
          std::end(kApplicationXids)) {
        continue;
      }
      for (unsigned i = 0; i < count; ++i) {
        if (handles[i] == event.device && !xid_faults_.contains(static_cast<int>(i))) {
          xid_faults_[static_cast<int>(i)] = "xid " + std::to_string(xid);
        }
      }
    }
  }
  for (const auto& [index, reason] : xid_faults_) reasons[index].push_back(reason);

  for (unsigned i = 0; i < count; ++i) {
    if (handles[i] == nullptr) continue;
    const int index = static_cast<int>(i);
    unsigned long long ecc = 0;
    if (api.get_total_ecc_errors != nullptr) {
      rc = api.get_total_ecc_errors(handles[i], kNvmlMemoryErrorTypeUncorrected, kNvmlVolatileEcc,
                                    &ecc);
      if (rc == kNvmlSuccess && ecc > 0) {
        reasons[index].push_back("uncorrectable ECC errors: " + std::to_string(ecc));
      } else if (rc == kNvmlGpuIsLost) {
        reasons[index].push_back(kLostReason);
        continue;
      }
    }
    int pending = 0;
    if (api.get_retired_pages_pending != nullptr &&
        api.get_retired_pages_pending(handles[i], &pending) == kNvmlSuccess &&
        pending == kNvmlFeatureEnabled) {
      reasons[index].push_back("retired pages pending (the GPU needs a reset)");
    }
  }

  std::vector<GpuFault> faults;
  for (auto& [index, list] : reasons) {
    std::string joined;
    for (const std::string& r : list) joined += (joined.empty() ? "" : "; ") + r;
    faults.push_back({index, std::move(joined)});
  }
  return faults;
}

StatusOr<std::vector<GpuLink>> NvmlDiscovery::DiscoverTopology() {
  if (!nvml_initialized_) return FailedPrecondition("NvmlDiscovery::Init() has not succeeded");
  const Api& api = *api_;
  unsigned count = 0;
  NvmlReturn rc = api.get_count(&count);
  if (rc != kNvmlSuccess) return api.Error("nvmlDeviceGetCount_v2", rc);

  struct PciAddress {
    unsigned domain, bus, device;
    bool operator==(const PciAddress&) const = default;
  };
  struct DeviceLinks {
    NvmlDevice handle = nullptr;
    std::optional<PciAddress> address;
    // Remote PCI address of every active NVLink; nullopt when NVLink state is unknown.
    std::optional<std::vector<std::optional<PciAddress>>> active_remotes;
  };
  std::vector<DeviceLinks> devices(count);
  for (unsigned i = 0; i < count; ++i) {
    DeviceLinks& d = devices[i];
    rc = api.get_handle_by_index(i, &d.handle);
    if (rc != kNvmlSuccess) {
      return api.Error("nvmlDeviceGetHandleByIndex_v2 (GPU " + std::to_string(i) + ")", rc);
    }
    NvmlPciInfo pci{};
    if (api.get_pci_info(d.handle, &pci) == kNvmlSuccess) {
      d.address = PciAddress{pci.domain, pci.bus, pci.device};
    }
    if (api.get_nvlink_state == nullptr) continue;
    std::vector<std::optional<PciAddress>> remotes;
    bool known = true;
    for (unsigned link = 0; link < kMaxNvLinks; ++link) {
      int active = 0;
      rc = api.get_nvlink_state(d.handle, link, &active);
      // The driver signals "no such link" (and "no NVLink at all" on link 0) with these codes.
      if (rc == kNvmlInvalidArgument || rc == kNvmlNotSupported) break;
      if (rc != kNvmlSuccess) {
        known = false;
        break;
      }
      if (active == 0) continue;
      std::optional<PciAddress> remote;
      NvmlPciInfo remote_pci{};
      if (api.get_nvlink_remote_pci_info != nullptr &&
          api.get_nvlink_remote_pci_info(d.handle, link, &remote_pci) == kNvmlSuccess) {
        remote = PciAddress{remote_pci.domain, remote_pci.bus, remote_pci.device};
      }
      remotes.push_back(remote);
    }
    if (known) d.active_remotes = std::move(remotes);
  }

  std::vector<GpuLink> links;
  for (unsigned a = 0; a < count; ++a) {
    for (unsigned b = a + 1; b < count; ++b) {
      GpuLink link;
      link.gpu_a = static_cast<int>(a);
      link.gpu_b = static_cast<int>(b);
      if (api.get_topology_common_ancestor != nullptr) {
        int level = 0;
        if (api.get_topology_common_ancestor(devices[a].handle, devices[b].handle, &level) ==
                kNvmlSuccess &&
            level >= 0 && level <= 50 && level % 10 == 0) {
          link.pcie_ancestor = static_cast<PcieAncestor>(level);
        }
      }
      const auto& remotes = devices[a].active_remotes;
      if (remotes.has_value()) {
        int matched = 0;
        bool unresolved = false;
        for (const auto& remote : *remotes) {
          if (!remote.has_value() || !devices[b].address.has_value()) {
            unresolved = true;
          } else if (*remote == *devices[b].address) {
            ++matched;
          }
        }
        if (!unresolved) link.nvlink_count = matched;
      }
      links.push_back(link);
    }
  }
  return links;
}

}  // namespace dgpu::agent
