// Read-only views of /proc used to follow a task's processes. Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace dgpu::agent {

struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  char state = '?';         // 'R', 'S', 'Z', ...
  uint64_t start_time = 0;  // Clock ticks after boot; with pid, identifies a process uniquely.

  bool zombie() const { return state == 'Z' || state == 'X'; }
};

// Parses the contents of /proc/<pid>/stat. nullopt when malformed.
std::optional<ProcStat> ParseProcStat(std::string_view text);

// /proc/<pid>/stat of one process; nullopt when it does not exist (or cannot be read).
std::optional<ProcStat> ReadProcStat(pid_t pid);

// Every process visible in /proc.
std::vector<ProcStat> ListProcesses();

// The processes whose pid is at least `min_pid`, plus those in `also` (read one by one). Cheaper
// than ListProcesses when only recently created processes matter: /proc is listed but only the
// candidates' stat files are read.
std::vector<ProcStat> ListProcessesFrom(pid_t min_pid, const std::vector<pid_t>& also);

// The last pid the kernel handed out (/proc/loadavg); nullopt if unreadable.
std::optional<pid_t> LastAllocatedPid();

// True when /proc/<pid>/environ holds exactly `entry` ("KEY=VALUE"). False when unreadable.
bool EnvironContains(pid_t pid, std::string_view entry);

}  // namespace dgpu::agent
