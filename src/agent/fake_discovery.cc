#include "agent/fake_discovery.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/types.h"

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
  if (std::string why = core::CheckLinkGroups(options_.nvlink_groups, options_.count);
      !why.empty()) {
    return InvalidArgument("gpu.fake.nvlink_groups: " + why);
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
  std::vector<int> group_of(static_cast<size_t>(options_.count), -1);
  for (size_t g = 0; g < options_.nvlink_groups.size(); ++g) {
    for (int i : options_.nvlink_groups[g]) group_of[static_cast<size_t>(i)] = static_cast<int>(g);
  }
  std::vector<GpuLink> links;
  for (int a = 0; a < options_.count; ++a) {
    for (int b = a + 1; b < options_.count; ++b) {
      const int ga = group_of[static_cast<size_t>(a)];
      const bool joined = ga >= 0 && ga == group_of[static_cast<size_t>(b)];
      links.push_back({a, b, joined ? 2 : 0, PcieAncestor::kHostBridge});
    }
  }
  return links;
}

StatusOr<std::vector<GpuFault>> FakeDiscovery::CheckHealth() {
  if (!initialized_) return FailedPrecondition("FakeDiscovery::Init() has not succeeded");
  if (options_.fault_file.empty()) return std::vector<GpuFault>{};
  std::ifstream in(options_.fault_file);
  if (!in) {
    if (errno == ENOENT) return std::vector<GpuFault>{};
    return Unavailable("cannot read gpu.fake.fault_file " + options_.fault_file + ": " +
                       std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  StatusOr<std::vector<GpuFault>> faults = ParseFaultFile(text.str(), options_.fault_file);
  if (!faults.ok()) return faults.status();
  std::vector<GpuFault> present;
  for (GpuFault& f : *faults) {
    if (f.index < options_.count) present.push_back(std::move(f));
  }
  return present;
}

StatusOr<std::vector<GpuFault>> ParseFaultFile(std::string_view text, const std::string& file) {
  std::vector<GpuFault> faults;
  int line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
    while (!line.empty() && is_space(line.front())) line.remove_prefix(1);
    while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
    if (line.empty()) continue;
    int index = -1;
    auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
    const bool ends = ptr == line.data() + line.size() || is_space(*ptr);
    if (ec != std::errc() || !ends || index < 0 || index > 1023) {
      return InvalidArgument(file + " line " + std::to_string(line_number) +
                             ": expected a GPU index from 0 to 1023 and an optional reason, got '" +
                             std::string(line) + "'");
    }
    std::string_view reason = line.substr(static_cast<size_t>(ptr - line.data()));
    while (!reason.empty() && is_space(reason.front())) reason.remove_prefix(1);
    GpuFault fault{index, reason.empty() ? "fault listed in " + file : std::string(reason)};
    bool listed = false;
    for (const GpuFault& f : faults) listed = listed || f.index == index;
    if (!listed) faults.push_back(std::move(fault));
  }
  return faults;
}

}  // namespace dgpu::agent
