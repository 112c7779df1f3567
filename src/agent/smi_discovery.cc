#include "agent/smi_discovery.h"

#include <sys/wait.h>

#include <charconv>
#include <functional>
#include <optional>

#include "common/child_process.h"

namespace dgpu::agent {
namespace {

constexpr size_t kFieldCount = 8;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool IsUnavailable(std::string_view field) {
  return field == "[N/A]" || field == "N/A" || field == "[Not Supported]" ||
         field == "Not Supported";
}

template <typename T>
std::optional<T> ParseInteger(std::string_view s) {
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::string FirstLine(const std::string& text) {
  std::string_view trimmed = Trim(text);
  return std::string(trimmed.substr(0, trimmed.find('\n')));
}

using BadLine = std::function<Status(const std::string&)>;

// Calls fn(fields, bad) for each line of nvidia-smi's CSV output that is not blank, with its
// comma-separated fields trimmed; bad(why) is the InvalidArgument that names `what`, the line's
// number and text. A line without `field_count` fields is refused before fn sees it. The first
// error ends the walk.
Status ForEachCsvLine(
    std::string_view output, std::string_view what, size_t field_count,
    const std::function<Status(const std::vector<std::string_view>&, const BadLine&)>& fn) {
  int line_number = 0;
  size_t pos = 0;
  while (pos < output.size()) {
    size_t end = output.find('\n', pos);
    if (end == std::string_view::npos) end = output.size();
    std::string_view line = output.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (Trim(line).empty()) continue;
    const BadLine bad = [&](const std::string& why) {
      return InvalidArgument(std::string(what) + " line " + std::to_string(line_number) + ": " +
                             why + ": '" + std::string(Trim(line)) + "'");
    };
    std::vector<std::string_view> fields;
    for (size_t start = 0;;) {
      size_t comma = line.find(',', start);
      fields.push_back(Trim(line.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (fields.size() != field_count) {
      return bad("expected " + std::to_string(field_count) + " fields, got " +
                 std::to_string(fields.size()));
    }
    if (Status s = fn(fields, bad); !s.ok()) return s;
  }
  return OkStatus();
}

// One line of the metrics query into `out`.
Status ParseGpuLine(const std::vector<std::string_view>& fields, const BadLine& bad,
                    std::vector<GpuDevice>* out) {
  GpuDevice gpu;
  auto index = ParseInteger<int>(fields[0]);
  if (!index.has_value() || *index < 0) return bad("index '" + std::string(fields[0]) + "'");
  gpu.index = *index;
  if (fields[1].empty() || IsUnavailable(fields[1])) return bad("missing uuid");
  gpu.uuid = fields[1];
  if (fields[2].empty() || IsUnavailable(fields[2])) return bad("missing name");
  gpu.name = fields[2];

  auto memory = [&](size_t i, int64_t* value_out) -> bool {
    if (IsUnavailable(fields[i])) return true;
    auto value = ParseInteger<int64_t>(fields[i]);
    if (!value.has_value() || *value < 0) return false;
    *value_out = *value;
    return true;
  };
  if (!memory(3, &gpu.memory_total_mb)) {
    return bad("memory.total '" + std::string(fields[3]) + "'");
  }
  if (!memory(4, &gpu.memory_used_mb)) return bad("memory.used '" + std::string(fields[4]) + "'");
  auto metric = [&](size_t i, std::optional<int>* value_out) -> bool {
    if (IsUnavailable(fields[i])) return true;
    auto value = ParseInteger<int>(fields[i]);
    if (!value.has_value()) return false;
    *value_out = *value;
    return true;
  };
  if (!metric(5, &gpu.utilization_pct)) {
    return bad("utilization.gpu '" + std::string(fields[5]) + "'");
  }
  if (!metric(6, &gpu.temperature_c)) {
    return bad("temperature.gpu '" + std::string(fields[6]) + "'");
  }
  if (!IsUnavailable(fields[7])) gpu.pci_bus_id = fields[7];
  out->push_back(std::move(gpu));
  return OkStatus();
}

// One line of the health query into `out` (a faulty GPU only).
Status ParseHealthLine(const std::vector<std::string_view>& fields, const BadLine& bad,
                       std::vector<GpuFault>* out) {
  auto index = ParseInteger<int>(fields[0]);
  if (!index.has_value() || *index < 0) return bad("index '" + std::string(fields[0]) + "'");
  std::string reason;
  if (!IsUnavailable(fields[1])) {
    auto ecc = ParseInteger<uint64_t>(fields[1]);
    if (!ecc.has_value()) return bad("ECC count '" + std::string(fields[1]) + "'");
    if (*ecc > 0) reason = "uncorrectable ECC errors: " + std::to_string(*ecc);
  }
  if (fields[2] == "Yes") {
    reason +=
        std::string(reason.empty() ? "" : "; ") + "retired pages pending (the GPU needs a reset)";
  } else if (fields[2] != "No" && !IsUnavailable(fields[2])) {
    return bad("retired_pages.pending '" + std::string(fields[2]) + "'");
  }
  if (!reason.empty()) out->push_back({*index, std::move(reason)});
  return OkStatus();
}

}  // namespace

std::vector<std::string> NvidiaSmiQueryArgs() {
  return {
      "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,"
      "pci.bus_id",
      "--format=csv,noheader,nounits"};
}

StatusOr<std::vector<GpuDevice>> ParseNvidiaSmiCsv(std::string_view output) {
  std::vector<GpuDevice> devices;
  Status s = ForEachCsvLine(
      output, "nvidia-smi output", kFieldCount,
      [&](const auto& fields, const BadLine& bad) { return ParseGpuLine(fields, bad, &devices); });
  if (!s.ok()) return s;
  return devices;
}

std::vector<std::string> NvidiaSmiHealthArgs() {
  return {"--query-gpu=index,ecc.errors.uncorrected.volatile.total,retired_pages.pending",
          "--format=csv,noheader,nounits"};
}

StatusOr<std::vector<GpuFault>> ParseNvidiaSmiHealthCsv(std::string_view output) {
  std::vector<GpuFault> faults;
  Status s = ForEachCsvLine(output, "nvidia-smi health output", 3,
                            [&](const auto& fields, const BadLine& bad) {
                              return ParseHealthLine(fields, bad, &faults);
                            });
  if (!s.ok()) return s;
  return faults;
}

SmiDiscovery::SmiDiscovery(std::string nvidia_smi_path, int64_t timeout_ms)
    : path_(std::move(nvidia_smi_path)), timeout_ms_(timeout_ms) {}

StatusOr<std::string> SmiDiscovery::Run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {path_};
  argv.insert(argv.end(), args.begin(), args.end());
  StatusOr<common::CommandResult> result = common::RunCommand(argv, timeout_ms_);
  if (!result.ok()) return result.status();
  if (!WIFEXITED(result->wait_status) || WEXITSTATUS(result->wait_status) != 0) {
    std::string detail = FirstLine(result->out);
    if (detail.empty()) detail = FirstLine(result->err);
    return Unavailable("'" + path_ + "' failed with " +
                       common::DescribeWaitStatus(result->wait_status) +
                       (detail.empty() ? "" : ": " + detail));
  }
  return std::move(result->out);
}

StatusOr<std::vector<GpuDevice>> SmiDiscovery::Query() {
  StatusOr<std::string> out = Run(NvidiaSmiQueryArgs());
  if (!out.ok()) return out.status();
  return ParseNvidiaSmiCsv(*out);
}

StatusOr<std::vector<GpuFault>> SmiDiscovery::CheckHealth() {
  if (!initialized_) return FailedPrecondition("SmiDiscovery::Init() has not succeeded");
  StatusOr<std::string> out = Run(NvidiaSmiHealthArgs());
  if (!out.ok()) return out.status();
  return ParseNvidiaSmiHealthCsv(*out);
}

Status SmiDiscovery::Init() {
  if (initialized_) return OkStatus();
  StatusOr<std::string> program = common::FindExecutable(path_);
  if (!program.ok()) return Unavailable(program.status().message());
  StatusOr<std::vector<GpuDevice>> devices = Query();
  if (!devices.ok()) return devices.status();
  initialized_ = true;
  return OkStatus();
}

StatusOr<std::vector<GpuDevice>> SmiDiscovery::Discover() {
  if (!initialized_) return FailedPrecondition("SmiDiscovery::Init() has not succeeded");
  return Query();
}

StatusOr<std::vector<GpuLink>> SmiDiscovery::DiscoverTopology() {
  if (!initialized_) return FailedPrecondition("SmiDiscovery::Init() has not succeeded");
  return std::vector<GpuLink>{};
}

}  // namespace dgpu::agent
