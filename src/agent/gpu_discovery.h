// GPU discovery: what GPUs a node has, their current metrics and how they are connected.
//
// Implementations: NvmlDiscovery (libnvidia-ml loaded at run time), SmiDiscovery (nvidia-smi CSV
// query) and FakeDiscovery (deterministic GPUs for development and tests).
//
// Contract shared by every implementation:
//   - Init() must succeed before Discover()/DiscoverTopology(); calling them earlier returns
//     FailedPrecondition. Init() failing with Unavailable means "this method does not work on this
//     machine" (no library, no symbol, no driver, no binary): the caller may fall back to another
//     method (see InitDiscoveryWithFallback).
//   - A metric the hardware or driver does not report is std::nullopt, never an error.
//   - Objects are not thread-safe: one thread at a time may call them. They own every resource
//     they acquire (library handles, child processes) and release it on destruction.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgpu::agent {

struct GpuDevice {
  int index = 0;                       // NVML / nvidia-smi index (PCI bus order).
  std::string uuid;                    // "GPU-..."
  std::string name;                    // Model, e.g. "Tesla V100-SXM2-32GB".
  int64_t memory_total_mb = 0;         // MiB; 0 when the driver does not report it.
  int64_t memory_used_mb = 0;          // MiB; 0 when the driver does not report it.
  std::optional<int> utilization_pct;  // 0..100; nullopt = unknown.
  std::optional<int> temperature_c;    // nullopt = unknown.
  std::string pci_bus_id;              // e.g. "00000000:07:00.0"; empty when unknown.
  // Set by the GpuMonitor from the health checks (CheckHealth, the health-check program).
  bool healthy = true;
  std::string health_reason;  // Why it is unhealthy; empty when healthy.
  // The minor number of its device file, /dev/nvidia<minor> (NVML); nullopt when unknown.
  std::optional<int> minor_number;
  // Its NVLink group (LinkGroups), set by the GpuMonitor; -1: in none.
  int link_group = -1;

  bool operator==(const GpuDevice&) const = default;
};

// A GPU found faulty by a health check, and why ("xid 79", "uncorrectable ECC errors: 2").
struct GpuFault {
  int index = 0;
  std::string reason;
  bool operator==(const GpuFault&) const = default;
};

// Closest common PCIe ancestor of two GPUs (NVML nvmlGpuTopologyLevel_t values).
enum class PcieAncestor : int {
  kInternal = 0,     // Same board (multi-GPU card).
  kSingle = 10,      // One PCIe switch between them.
  kMultiple = 20,    // Several PCIe switches, no host bridge.
  kHostBridge = 30,  // Same host bridge.
  kNode = 40,        // Same NUMA node, different host bridges.
  kSystem = 50,      // Across NUMA nodes (SMP interconnect).
};

// How two GPUs of the same node are connected. Fields are nullopt where the method cannot tell.
struct GpuLink {
  int gpu_a = 0;  // Index of the first GPU; always gpu_a < gpu_b.
  int gpu_b = 0;
  std::optional<int> nvlink_count;            // Active NVLinks joining the pair (0 = none).
  std::optional<PcieAncestor> pcie_ancestor;  // Closest common PCIe ancestor.

  bool operator==(const GpuLink&) const = default;
};

// NVLink groups from a node's links: the GPUs joined by active NVLinks (nvlink_count > 0),
// directly or through other GPUs, numbered from 0 in the order of their lowest index. The group
// of each GPU by index; a GPU joined to none is not listed. Groups past kMaxLinkGroups (64) are
// left out. A GPU whose NVLinks all lead to NVSwitches reports no GPU peer: every GPU of such a
// node talks to every other at full speed, as if none were grouped.
std::map<int, int> LinkGroups(const std::vector<GpuLink>& links);

class GpuDiscovery {
 public:
  virtual ~GpuDiscovery() = default;

  // Prepares the method (loads libraries, checks binaries). Idempotent once it has succeeded.
  virtual Status Init() = 0;

  // Static information plus current metrics of every GPU, ordered by index.
  virtual StatusOr<std::vector<GpuDevice>> Discover() = 0;

  // One entry per unordered pair of GPUs (a < b), ordered by (a, b). Methods that cannot see the
  // topology return an empty vector, not an error.
  virtual StatusOr<std::vector<GpuLink>> DiscoverTopology() = 0;

  // The GPUs that are faulty now, by index; a GPU not listed is healthy. What each method can
  // see: NVML critical XID errors (through its event API; an XID keeps its GPU faulty until
  // the agent restarts, as the GPU needs a reset), uncorrectable ECC errors, pages pending
  // retirement, a GPU lost from the bus; nvidia-smi the ECC and retired-page fields it
  // reports; the fake the indices listed in its fault file. An error means the check could not
  // run (the caller keeps what it knew).
  virtual StatusOr<std::vector<GpuFault>> CheckHealth() = 0;

  // "nvml", "nvidia-smi" or "fake".
  virtual std::string name() const = 0;
};

struct FakeDiscoveryOptions {
  int count = 4;
  std::string model = "Tesla V100-SXM2-32GB";
  int64_t memory_mb = 32768;
  // Distinguishes the fake GPUs of several agents on one host; uuids are
  // "GPU-fake-<uuid_tag>-<index>" and do not depend on the host name.
  std::string uuid_tag = "0";
  // gpu.fake.fault_file: lines "INDEX [REASON]" ('#' starts a comment) list faulty GPUs; a
  // missing file means none. Empty: no faults.
  std::string fault_file;
  // gpu.fake.nvlink_groups: GPUs joined by NVLink (each pair of a group by two links).
  std::vector<std::vector<int>> nvlink_groups;
};

// Parses a fault file's text (see FakeDiscoveryOptions::fault_file). InvalidArgument naming the
// line for anything but an index from 0 to 1023 followed by an optional reason. A GPU without a
// reason gets "fault listed in <file>".
StatusOr<std::vector<GpuFault>> ParseFaultFile(std::string_view text, const std::string& file);

struct DiscoveryOptions {
  // dlopen() argument for NVML; a bare soname searches the usual library path.
  std::string nvml_library_path = "libnvidia-ml.so.1";
  // nvidia-smi binary: a path, or a bare name looked up on PATH.
  std::string nvidia_smi_path = "nvidia-smi";
  int64_t nvidia_smi_timeout_ms = 10000;
  FakeDiscoveryOptions fake;
};

// Creates (does not Init) the discovery for method "nvml", "nvidia-smi" or "fake".
// Unknown method: InvalidArgument naming it.
StatusOr<std::unique_ptr<GpuDiscovery>> MakeDiscovery(std::string_view method,
                                                      const DiscoveryOptions& options);

struct InitializedDiscovery {
  std::unique_ptr<GpuDiscovery> discovery;  // Init() has succeeded on it.
  // Why earlier methods of the chain were skipped (empty when the requested one worked).
  std::vector<Status> skipped;
};

// Creates and initializes `method`; when its Init() fails with Unavailable, falls back along
// nvml -> nvidia-smi (and nvidia-smi -> nvml). "fake" never falls back. Returns the first error
// when nothing works (with the fall-back's error appended to the message).
StatusOr<InitializedDiscovery> InitDiscoveryWithFallback(std::string_view method,
                                                         const DiscoveryOptions& options);

}  // namespace dgpu::agent
