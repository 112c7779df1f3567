#include "agent/task_shim.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <vector>

#include "agent/shim_runtime.h"

namespace dgpu::agent {
namespace {

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// Splits on single spaces; at most `max` fields, the last holding the rest.
std::vector<std::string_view> Fields(std::string_view text, size_t max) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max) {
    const size_t space = text.find(' ');
    if (space == std::string_view::npos) break;
    out.push_back(text.substr(0, space));
    text.remove_prefix(space + 1);
  }
  out.push_back(text);
  return out;
}

// A record line, "<version> <n fields>\n" of this protocol: its n fields; nullopt otherwise.
std::optional<std::vector<std::string_view>> RecordFields(std::string_view text, size_t n) {
  if (text.empty() || text.back() != '\n') return std::nullopt;
  text.remove_suffix(1);
  auto f = Fields(text, n + 1);
  int version = 0;
  if (f.size() != n + 1 || !ParseNumber(f[0], &version) || version != kTaskShimProtocol) {
    return std::nullopt;
  }
  f.erase(f.begin());
  return f;
}

std::optional<std::string> ReadSmall(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[256];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  close(fd);
  if (n <= 0) return std::nullopt;
  return std::string(buffer, static_cast<size_t>(n));
}

}  // namespace

std::string FormatShimExitRecord(const ShimExitRecord& record) {
  char text[128];
  return std::string(
      text, dgpu_format_exit_record(text, sizeof(text), record.wait_status, record.unix_micros));
}

std::optional<ShimExitRecord> ParseShimExitRecord(std::string_view text) {
  const auto f = RecordFields(text, 2);
  ShimExitRecord r;
  if (!f || !ParseNumber((*f)[0], &r.wait_status) || !ParseNumber((*f)[1], &r.unix_micros)) {
    return std::nullopt;
  }
  return r;
}

std::optional<ShimExitRecord> ReadShimExitRecord(const std::string& path) {
  auto text = ReadSmall(path);
  if (!text.has_value()) return std::nullopt;
  return ParseShimExitRecord(*text);
}

std::string FormatShimPidsRecord(const ShimPidsRecord& r) {
  char text[128];
  return std::string(text, dgpu_format_pids_record(text, sizeof(text), r.shim, r.shim_start_time,
                                                   r.leader, r.leader_start_time));
}

std::optional<ShimPidsRecord> ParseShimPidsRecord(std::string_view text) {
  const auto f = RecordFields(text, 4);
  ShimPidsRecord r;
  if (!f || !ParseNumber((*f)[0], &r.shim) || r.shim <= 0 ||
      !ParseNumber((*f)[1], &r.shim_start_time) || !ParseNumber((*f)[2], &r.leader) ||
      r.leader <= 0 || !ParseNumber((*f)[3], &r.leader_start_time)) {
    return std::nullopt;
  }
  return r;
}

std::optional<ShimPidsRecord> ReadShimPidsRecord(const std::string& path) {
  auto text = ReadSmall(path);
  if (!text.has_value()) return std::nullopt;
  return ParseShimPidsRecord(*text);
}

std::optional<ShimHello> ParseShimHello(std::string_view line) {
  const auto f = Fields(line, 3);
  int version = 0;
  if (f.size() < 2 || !ParseNumber(f[0], &version) || version != kTaskShimProtocol) {
    return std::nullopt;
  }
  ShimHello hello;
  if (f[1] == "error" && f.size() == 3) {
    hello.error = std::string(f[2]);
    return hello;
  }
  if (f[1] != "ok" || f.size() != 3) return std::nullopt;
  const auto ids = Fields(f[2], 2);
  if (ids.size() != 2 || !ParseNumber(ids[0], &hello.leader) || hello.leader <= 0 ||
      !ParseNumber(ids[1], &hello.leader_start_time)) {
    return std::nullopt;
  }
  hello.ok = true;
  return hello;
}

int RunTaskShim(int argc, char** argv) { return dgpu_task_shim_run(argc, argv); }

}  // namespace dgpu::agent
