/* A stand-in for libnvidia-ml.so.1 with two canned GPUs, for the NvmlDiscovery tests.
 *
 * Return codes are injectable through the environment (read at every call):
 *   FAKE_NVML_INIT_RC, FAKE_NVML_COUNT_RC, FAKE_NVML_MEM_RC, FAKE_NVML_UTIL_RC,
 *   FAKE_NVML_TEMP_RC, FAKE_NVML_NVLINK_RC, FAKE_NVML_TOPO_RC.
 * Faults come from files in the directory $FAKE_NVML_FAULT_DIR, read at every call:
 *   xid          lines "GPU XID": each line is delivered once, in order, as a critical XID event
 *                by nvmlEventSetWait_v2 (to the sets that registered the GPU);
 *   ecc-<GPU>    the GPU's volatile uncorrectable ECC count;
 *   pending-<GPU> present: pages pending retirement;
 *   lost-<GPU>   present: the GPU is lost (GPU_IS_LOST from its handle lookup).
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

/* The path of fault file `name` (with the GPU's index appended when index >= 0), or NULL. */
static const char* FaultPath(const char* name, int index, char* buffer, size_t size) {
  const char* dir = getenv("FAKE_NVML_FAULT_DIR");
  if (dir == NULL) return NULL;
  if (index >= 0) {
    snprintf(buffer, size, "%s/%s-%d", dir, name, index);
  } else {
    snprintf(buffer, size, "%s/%s", dir, name);
  }
  return buffer;
}

static int FaultFileExists(const char* name, int index) {
  char path[4096];
  const char* p = FaultPath(name, index, path, sizeof(path));
  if (p == NULL) return 0;
  FILE* f = fopen(p, "r");
  if (f == NULL) return 0;
  fclose(f);
  return 1;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!g_initialized) return 1;
  if (index >= 2) return 2;
  if (FaultFileExists("lost", (int)index)) return 15;
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

/* Minor numbers in reverse index order, so that a test tells them from the indices. */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned* minor) {
  *minor = (unsigned)(1 - device->index); /* Two GPUs (nvmlDeviceGetCount_v2). */
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

/* Health: events, ECC counts, retired pages. */
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
struct FakeEventSet {
  unsigned long long registered[2]; /* event types per GPU */
  int delivered;                    /* lines of the xid file already delivered */
};
typedef struct FakeEventSet* nvmlEventSet_t;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  *set = calloc(1, sizeof(struct FakeEventSet));
  return *set != NULL ? 0 : 999;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  free(set);
  return 0;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set) {
  set->registered[device->index] |= types;
  return 0;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms) {
  (void)timeout_ms;
  char path[4096];
  const char* p = FaultPath("xid", -1, path, sizeof(path));
  FILE* f = p != NULL ? fopen(p, "r") : NULL;
  if (f == NULL) return 10;
  int line = 0, gpu = 0, xid = 0;
  while (fscanf(f, "%d %d", &gpu, &xid) == 2) {
    if (line++ < set->delivered) continue;
    set->delivered = line;
    if (gpu < 0 || gpu > 1 || (set->registered[gpu] & 0x8) == 0) continue;
    fclose(f);
    memset(data, 0, sizeof(*data));
    data->device = &g_devices[gpu];
    data->eventType = 0x8;
    data->eventData = (unsigned long long)xid;
    return 0;
  }
  fclose(f);
  return 10; /* TIMEOUT: nothing new */
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                         unsigned long long* count) {
  if (error_type != 1 || counter_type != 0) return 2;
  char path[4096];
  const char* p = FaultPath("ecc", device->index, path, sizeof(path));
  *count = 0;
  FILE* f = p != NULL ? fopen(p, "r") : NULL;
  if (f == NULL) return 0;
  if (fscanf(f, "%llu", count) != 1) *count = 0;
  fclose(f);
  return 0;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int* pending) {
  *pending = FaultFileExists("pending", device->index) ? 1 : 0;
  return 0;
}
