#include "agent/task_shim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "agent/log_writer.h"
#include "agent/proc_table.h"

namespace dgpu::agent {
namespace {

constexpr int kDrainMillis = 2000;  // Pipe drain after the last process ended.

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

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t w = write(fd, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data.remove_prefix(static_cast<size_t>(w));
  }
}

// The record in place (a temporary file renamed over it: a reader sees all of it or nothing);
// false (with errno) on a failure. Not synced: it has to outlive the agent process, which reads
// it and keeps the finish in its own synced outbox, not the machine (a task does not outlive its
// machine either, and before the agent has read it the exit is as exposed as it was when the
// agent reaped its tasks itself).
bool WriteRecord(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    errno = written ? errno : saved;
    return false;
  }
  return true;
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

// The leader (argv[0] a path): waits until `go` reaches its end (the shim has written the pids
// record), then a new session, stdin /dev/null, output on `out`, the dispositions and mask a
// program expects. Never returns.
[[noreturn]] void ExecLeader(char** argv, int go, int out, int error_fd) {
  char byte;
  ssize_t r;
  do {
    r = read(go, &byte, 1);
  } while (r < 0 && errno == EINTR);
  if (r != 0) _exit(126);  // The shim gave up on it.
  setsid();
  sigset_t none;
  sigemptyset(&none);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0 && null_fd != 0) {
    dup2(null_fd, 0);
    close(null_fd);
  }
  if (out != 1) dup2(out, 1);
  if (out != 2) dup2(out, 2);
  execv(argv[0], argv);  // A path: the agent found the program on its own PATH.
  const int err = errno;
  ssize_t ignored = write(error_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

}  // namespace

std::string FormatShimExitRecord(const ShimExitRecord& record) {
  return std::to_string(kTaskShimProtocol) + " " + std::to_string(record.wait_status) + " " +
         std::to_string(record.unix_micros) + "\n";
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
  return std::to_string(kTaskShimProtocol) + " " + std::to_string(r.shim) + " " +
         std::to_string(r.shim_start_time) + " " + std::to_string(r.leader) + " " +
         std::to_string(r.leader_start_time) + "\n";
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

int RunTaskShim(int argc, char** argv) {
  // dgpu-task-shim --task-shim 1 RECORDS MAX_LOG_BYTES -- ARGV...
  int version = 0;
  int64_t max_log_bytes = -1;
  if (argc < 7 || std::string_view(argv[1]) != kTaskShimFlag || !ParseNumber(argv[2], &version) ||
      version != kTaskShimProtocol || !ParseNumber(argv[4], &max_log_bytes) || max_log_bytes < 0 ||
      std::string_view(argv[5]) != "--") {
    static const char kUsage[] =
        "usage: dgpu-task-shim --task-shim 1 RECORDS MAX_LOG_BYTES -- ARGV... (started by "
        "dgpu-agent)\n";
    WriteAll(2, kUsage);
    return 2;
  }
  const std::string record_path = std::string(argv[3]) + ".exit";
  const std::string pids_path = std::string(argv[3]) + ".pids";
  char** task_argv = argv + 6;
  const int hello_fd = 0;

  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) signal(sig, SIG_IGN);
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child, nullptr);  // Before the fork: no exit goes unseen.
  const int sfd = signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);

  auto refuse = [&](const std::string& why) {
    WriteAll(hello_fd, std::to_string(kTaskShimProtocol) + " error " + why + "\n");
    return 1;
  };
  if (sfd < 0) return refuse(std::string("signalfd: ") + strerror(errno));
  int pipe_fds[2] = {-1, -1};
  if (max_log_bytes > 0 && pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return refuse(std::string("cannot make the log pipe: ") + strerror(errno));
  }
  int error_pipe[2];
  int go_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0 || pipe2(go_pipe, O_CLOEXEC) != 0) {
    return refuse(std::string("pipe: ") + strerror(errno));
  }
  const pid_t leader = fork();
  if (leader < 0) return refuse(std::string("fork: ") + strerror(errno));
  if (leader == 0) {
    close(go_pipe[1]);
    ExecLeader(task_argv, go_pipe[0], pipe_fds[1] >= 0 ? pipe_fds[1] : 1, error_pipe[1]);
  }
  close(go_pipe[0]);
  close(error_pipe[1]);
  if (pipe_fds[1] >= 0) close(pipe_fds[1]);
  // Unreaped, the leader keeps its pid: its start time names it for whoever adopts it later.
  const auto self_stat = ReadProcStat(getpid());
  const auto stat = ReadProcStat(leader);
  ShimPidsRecord pids{getpid(), self_stat ? self_stat->start_time : 0, leader,
                      stat ? stat->start_time : 0};
  if (!WriteRecord(pids_path, FormatShimPidsRecord(pids))) {
    const std::string why = std::string("cannot write ") + pids_path + ": " + strerror(errno);
    kill(leader, SIGKILL);
    waitpid(leader, nullptr, 0);
    return refuse(why);
  }
  close(go_pipe[1]);  // The leader runs its command now.
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(error_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (got == sizeof(exec_errno)) {
    waitpid(leader, nullptr, 0);
    return refuse(std::string("cannot run ") + task_argv[0] + ": " + strerror(exec_errno));
  }
  WriteAll(hello_fd, std::to_string(kTaskShimProtocol) + " ok " + std::to_string(leader) + " " +
                         std::to_string(stat ? stat->start_time : 0) + "\n");
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) {
    dup3(null_fd, hello_fd, O_CLOEXEC);
    close(null_fd);
  }

  LogCopier copier(1, max_log_bytes);
  std::vector<char> buffer(size_t{64} << 10);
  int log_pipe = pipe_fds[0];
  bool children_left = true;
  int64_t drain_until = 0;
  while (children_left || log_pipe >= 0) {
    pollfd fds[2] = {{sfd, POLLIN, 0}, {log_pipe, POLLIN, 0}};
    int timeout = -1;
    if (!children_left) {
      const int64_t left = (drain_until - NowMicros()) / 1000;
      if (left <= 0) break;  // Something outside the task holds the pipe.
      timeout = static_cast<int>(left) + 1;
    }
    const int n = poll(fds, log_pipe >= 0 ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) break;
    if (log_pipe >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t r = read(log_pipe, buffer.data(), buffer.size());
      if (r > 0) {
        copier.Write(buffer.data(), static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        close(log_pipe);
        log_pipe = -1;
      }
    }
    if ((fds[0].revents & POLLIN) != 0 || n == 0) {
      signalfd_siginfo info;
      while (read(sfd, &info, sizeof(info)) == sizeof(info)) {
      }
    }
    while (children_left) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid == 0) break;
      if (pid < 0) {
        if (errno == EINTR) continue;
        children_left = false;  // ECHILD: every process of the task has ended.
        drain_until = NowMicros() + int64_t{kDrainMillis} * 1000;
        break;
      }
      if (pid == leader && !WriteRecord(record_path, FormatShimExitRecord({status, NowMicros()}))) {
        WriteAll(2, "dgpu: cannot record the task's exit in " + record_path + ": " +
                        strerror(errno) + "\n");
      }
    }
  }
  return 0;
}

}  // namespace dgpu::agent
