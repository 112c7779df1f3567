// SmiDiscovery: GPU discovery by running nvidia-smi's CSV query.
//
// Runs `<path> --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,
// temperature.gpu,pci.bus_id --format=csv,noheader,nounits` without a shell, with a timeout.
// Errors: binary missing -> Unavailable from Init(); non-zero exit -> Unavailable naming the exit
// and the first output line; timeout -> DeadlineExceeded; unparsable output -> InvalidArgument
// naming the line. No topology (DiscoverTopology returns an empty vector). Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu_discovery.h"

namespace dgpu::agent {

// The query arguments (everything after the program name).
std::vector<std::string> NvidiaSmiQueryArgs();

// Parses the query's output: one GPU per line, 8 comma-separated fields, spaces around fields
// ignored; blank lines and CR line endings allowed. "[N/A]" / "[Not Supported]" (with or without
// brackets) give nullopt for utilization and temperature, 0 for memory and "" for the bus id.
// Index, uuid and name are required. Any other malformed line: InvalidArgument naming the
// line number and text.
StatusOr<std::vector<GpuDevice>> ParseNvidiaSmiCsv(std::string_view output);

// The health query's arguments: index, ecc.errors.uncorrected.volatile.total and
// retired_pages.pending, CSV without header or units.
std::vector<std::string> NvidiaSmiHealthArgs();

// Parses the health query's output: a GPU with a non-zero uncorrectable ECC count or pages
// pending retirement ("Yes") is faulty; "[N/A]" / "[Not Supported]" says nothing. InvalidArgument
// naming the line for anything else.
StatusOr<std::vector<GpuFault>> ParseNvidiaSmiHealthCsv(std::string_view output);

class SmiDiscovery final : public GpuDiscovery {
 public:
  explicit SmiDiscovery(std::string nvidia_smi_path = "nvidia-smi", int64_t timeout_ms = 10000);

  // Checks the binary exists and that one query succeeds.
  Status Init() override;
  StatusOr<std::vector<GpuDevice>> Discover() override;
  StatusOr<std::vector<GpuLink>> DiscoverTopology() override;
  StatusOr<std::vector<GpuFault>> CheckHealth() override;
  std::string name() const override { return "nvidia-smi"; }

 private:
  StatusOr<std::vector<GpuDevice>> Query();
  // Runs nvidia-smi with `args`; its stdout, or Unavailable naming the exit and first line.
  StatusOr<std::string> Run(const std::vector<std::string>& args);

  std::string path_;
  int64_t timeout_ms_;
  bool initialized_ = false;
};

}  // namespace dgpu::agent
