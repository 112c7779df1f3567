/* A stand-in for libnvidia-ml.so.1 with two canned GPUs, for the NvmlDiscovery tests.
 *
 * Return codes are injectable through the environment (read at every call):
 *   FAKE_NVML_INIT_RC, FAKE_NVML_COUNT_RC, FAKE_NVML_MEM_RC, FAKE_NVML_UTIL_RC,
 *   FAKE_NVML_TEMP_RC, FAKE_NVML_NVLINK_RC, FAKE_NVML_TOPO_RC.
 * Built twice: normally, and with FAKE_NVML_OMIT_UUID to lack nvmlDeviceGetUUID.
 * The unversioned nvmlInit / nvmlDeviceGetCount fail or lie, so a loader that does not prefer the
 * versioned names notices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
struct FakeDevice {
  int index;
};
typedef struct FakeDevice* nvmlDevice_t;

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned gpu, memory;
} nvmlUtilization_t;
typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

static struct FakeDevice g_devices[2] = {{0}, {1}};
static int g_initialized = 0;
static const unsigned g_buses[2] = {0x07, 0x0F};

static int EnvRc(const char* name) {
  const char* value = getenv(name);
  return value != NULL ? atoi(value) : 0;
}

nvmlReturn_t nvmlInit(void) { return 999; }

nvmlReturn_t nvmlInit_v2(void) {
  int rc = EnvRc("FAKE_NVML_INIT_RC");
  if (rc != 0) return rc;
  g_initialized = 1;
  return 0;
}

nvmlReturn_t nvmlShutdown(void) {
  g_initialized = 0;
  return 0;
}

const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount(unsigned* count) {
  *count = 99;
  return 0;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!g_initialized) return 1;
  int rc = EnvRc("FAKE_NVML_COUNT_RC");
  if (rc != 0) return rc;
  *count = 2;
  return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!g_initialized) return 1;
  if (index >= 2) return 2;
  *device = &g_devices[index];
  return 0;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  snprintf(name, length, "NVIDIA A100-SXM4-80GB");
  return 0;
}

#ifndef FAKE_NVML_OMIT_UUID
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  snprintf(uuid, length, "GPU-aaaaaaaa-bbbb-cccc-dddd-00000000000%d", device->index);
  return 0;
}
#endif

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  int rc = EnvRc("FAKE_NVML_MEM_RC");
  if (rc != 0) return rc;
  const unsigned long long mib = 1024ULL * 1024ULL;
  memory->total = 81920ULL * mib;
  memory->used = (1024ULL + 512ULL * (unsigned)device->index) * mib;
  memory->free = memory->total - memory->used;
  return 0;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  int rc = EnvRc("FAKE_NVML_UTIL_RC");
  if (rc != 0) return rc;
  utilization->gpu = 37 + 20 * (unsigned)device->index;
  utilization->memory = 5;
  return 0;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned* temperature) {
  int rc = EnvRc("FAKE_NVML_TEMP_RC");
  if (rc != 0) return rc;
  if (sensor != 0) return 2;
  *temperature = 41 + 3 * (unsigned)device->index;
  return 0;
}

static void FillPci(int index, nvmlPciInfo_t* pci) {
  memset(pci, 0, sizeof(*pci));
  pci->domain = 0;
  pci->bus = g_buses[index];
  pci->device = 0;
  pci->pciDeviceId = 0x20B210DE;
  snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", g_buses[index]);
  snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", g_buses[index]);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  FillPci(device->index, pci);
  return 0;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int* level) {
  int rc = EnvRc("FAKE_NVML_TOPO_RC");
  if (rc != 0) return rc;
  *level = (a == b) ? 0 : 30; /* Host bridge. */
  return 0;
}

/* 12 links per GPU (like A100); links 0-7 are active and join the two GPUs. */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int* active) {
  int rc = EnvRc("FAKE_NVML_NVLINK_RC");
  if (rc != 0) return rc;
  if (link >= 12) return 2;
  *active = link < 8 ? 1 : 0;
  return 0;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link,
                                                 nvmlPciInfo_t* pci) {
  if (link >= 12) return 2;
  FillPci(1 - device->index, pci);
  return 0;
}
