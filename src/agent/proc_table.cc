#include "agent/proc_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>

namespace dgpu::agent {
namespace {

std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string data;
  char buffer[4096];
  while (data.size() < limit) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return data;
}

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::optional<ProcStat> ParseProcStat(std::string_view text) {
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
  //  stime cutime cstime priority nice num_threads itrealvalue starttime ..."; comm may hold
  // spaces and parentheses, so fields are counted from the last ')'.
  size_t open_paren = text.find('(');
  size_t close_paren = text.rfind(')');
  if (open_paren == std::string_view::npos || close_paren == std::string_view::npos ||
      close_paren < open_paren) {
    return std::nullopt;
  }
  ProcStat stat;
  std::string_view pid_text = text.substr(0, open_paren);
  while (!pid_text.empty() && pid_text.back() == ' ') pid_text.remove_suffix(1);
  if (!ParseNumber(pid_text, &stat.pid)) return std::nullopt;

  std::vector<std::string_view> fields;  // fields[0] is field 3 (state).
  std::string_view rest = text.substr(close_paren + 1);
  size_t pos = 0;
  while (pos < rest.size() && fields.size() < 20) {
    while (pos < rest.size() && (rest[pos] == ' ' || rest[pos] == '\n')) ++pos;
    size_t end = rest.find_first_of(" \n", pos);
    if (end == std::string_view::npos) end = rest.size();
    if (end > pos) fields.push_back(rest.substr(pos, end - pos));
    pos = end;
  }
  if (fields.size() < 20 || fields[0].size() != 1) return std::nullopt;
  stat.state = fields[0][0];
  if (!ParseNumber(fields[1], &stat.ppid) || !ParseNumber(fields[2], &stat.pgid) ||
      !ParseNumber(fields[3], &stat.sid) || !ParseNumber(fields[19], &stat.start_time)) {
    return std::nullopt;
  }
  return stat;
}

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  auto text = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text.has_value()) return std::nullopt;
  return ParseProcStat(*text);
}

std::vector<ProcStat> ListProcessesFrom(pid_t min_pid, const std::vector<pid_t>& also) {
  std::vector<ProcStat> result;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return result;
  while (dirent* entry = readdir(dir)) {
    pid_t pid = 0;
    std::string_view name(entry->d_name);
    if (!ParseNumber(name, &pid) || pid <= 0) continue;
    if (pid < min_pid && std::find(also.begin(), also.end(), pid) == also.end()) continue;
    if (auto stat = ReadProcStat(pid)) result.push_back(*stat);
  }
  closedir(dir);
  return result;
}

std::vector<ProcStat> ListProcesses() { return ListProcessesFrom(0, {}); }

std::optional<pid_t> LastAllocatedPid() {
  // "0.00 0.01 0.05 1/123 4567": the last field is the most recently allocated pid.
  auto data = ReadSmallFile("/proc/loadavg", 256);
  if (!data.has_value()) return std::nullopt;
  std::string_view text(*data);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  size_t space = text.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  pid_t pid = 0;
  if (!ParseNumber(text.substr(space + 1), &pid) || pid <= 0) return std::nullopt;
  return pid;
}

bool EnvironContains(pid_t pid, std::string_view entry) {
  auto data = ReadSmallFile("/proc/" + std::to_string(pid) + "/environ", 1u << 20);
  if (!data.has_value()) return false;
  std::string_view all(*data);
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\0', pos);
    if (end == std::string_view::npos) end = all.size();
    if (all.substr(pos, end - pos) == entry) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace dgpu::agent
