// Helpers shared by the agent's tests.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "agent/executor.h"

namespace dgpu::agent::testing {

// A fresh directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dgpu-agent-XXXXXX").string();
    char* made = mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void WriteFile(const std::string& path, const std::string& text, bool executable = false) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  if (executable) std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

inline int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Polls `condition` every 5 ms until it holds or `limit` passes; returns whether it held.
template <typename Condition>
bool WaitUntil(Condition condition, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// Reads a pid written by a task ("123\n"); nullopt until the file holds a full line.
inline std::optional<pid_t> ReadPidFile(const std::string& path) {
  std::string text = ReadFile(path);
  if (text.empty() || text.back() != '\n') return std::nullopt;
  return static_cast<pid_t>(std::stol(text));
}

inline bool ProcessGone(pid_t pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

// Polls the executor (with `now` from `clock`) until `task_id` exits.
template <typename Clock>
std::optional<TaskExit> PollUntilExitWithClock(
    Executor& executor, const std::string& task_id, Clock clock,
    std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  std::optional<TaskExit> found;
  WaitUntil(
      [&] {
        for (auto& exit : executor.Poll(clock())) {
          if (exit.task_id == task_id) found = exit;
        }
        return found.has_value();
      },
      limit);
  return found;
}

inline std::optional<TaskExit> PollUntilExit(
    Executor& executor, const std::string& task_id,
    std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  return PollUntilExitWithClock(executor, task_id, UnixMicros, limit);
}

}  // namespace dgpu::agent::testing
