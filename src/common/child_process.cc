#include "common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

extern char** environ;

namespace dgpu::common {
namespace {

std::mutex registry_mutex;
std::set<pid_t>& Registry() {
  static auto* pids = new std::set<pid_t>();  // Never destroyed: children may outlive statics.
  return *pids;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

StatusOr<std::string> FindExecutable(const std::string& name) {
  if (name.empty()) return InvalidArgument("empty program name");
  if (name.find('/') != std::string::npos) {
    if (IsExecutableFile(name)) return name;
    return NotFound("program '" + name + "' does not exist or is not executable");
  }
  const char* path_env = getenv("PATH");
  std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return NotFound("program '" + name + "' not found on PATH");
}

StatusOr<pid_t> SpawnChild(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgument("empty argv");
  StatusOr<std::string> program = FindExecutable(options.argv[0]);
  if (!program.ok()) return program.status();

  std::vector<char*> argv;
  for (const auto& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  char** env_array = environ;
  if (options.env.has_value()) {
    for (const auto& entry : *options.env) envp.push_back(const_cast<char*>(entry.c_str()));
    envp.push_back(nullptr);
    env_array = envp.data();
  }

  // posix_spawn (glibc: clone with CLONE_VM | CLONE_VFORK) instead of fork: the agent's page
  // tables are not copied, which made fork + exec the agent's largest cost per task. The file
  // actions run in order in the child; sources on fds 0-2 are first moved above them so that
  // opening /dev/null on 0 cannot overwrite them.
  std::vector<int> moved;
  auto above_stdio = [&moved](int fd) {
    if (fd < 0 || fd >= 3) return fd;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (copy >= 0) moved.push_back(copy);
    return copy;
  };
  const int in_fd = above_stdio(options.stdin_fd);
  const int out_fd = above_stdio(options.stdout_fd);
  const int err_fd = above_stdio(options.stderr_fd);
  auto close_moved = [&moved] {
    for (int fd : moved) close(fd);
  };
  if ((options.stdin_fd >= 0 && in_fd < 0) || (options.stdout_fd >= 0 && out_fd < 0) ||
      (options.stderr_fd >= 0 && err_fd < 0)) {
    const int error = errno;
    close_moved();
    return Internal(std::string("fcntl: ") + strerror(error));
  }

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  auto onto = [&actions](int fd, int target) {
    if (fd >= 0) {
      posix_spawn_file_actions_adddup2(&actions, fd, target);
    } else {
      posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDWR, 0);
    }
  };
  onto(in_fd, 0);
  onto(out_fd, 1);
  onto(err_fd, 2);
  if (!options.working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, options.working_dir.c_str());
  }
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  // Default dispositions for every signal (the agent ignores SIGPIPE, and ignored signals would
  // otherwise survive exec) and an empty mask.
  sigset_t all;
  sigset_t none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  if (options.new_session) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);

  pid_t pid = -1;
  int error;
  {
    // Held across the spawn so that no reaper can see this child before it is registered.
    std::lock_guard<std::mutex> lock(registry_mutex);
    error = posix_spawn(&pid, program->c_str(), &actions, &attr, argv.data(), env_array);
    if (error == 0) Registry().insert(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close_moved();
  if (error == 0) return pid;

  // The child failed before or at exec (and has been reaped by posix_spawn). It reports only an
  // errno, so tell a missing working directory apart from a failed exec here.
  std::string what = "exec of '" + *program + "'";
  if (!options.working_dir.empty()) {
    struct stat st {};
    if (stat(options.working_dir.c_str(), &st) != 0) {
      error = errno;
      what = "chdir to '" + options.working_dir + "'";
    } else if (!S_ISDIR(st.st_mode) || access(options.working_dir.c_str(), X_OK) != 0) {
      what = "chdir to '" + options.working_dir + "'";
    }
  }
  if (error == EAGAIN || error == ENOMEM) {
    return ResourceExhausted("spawn of '" + *program + "' failed: " + strerror(error));
  }
  std::string message = what + " failed: " + strerror(error);
  if (error == EACCES || error == EPERM) return PermissionDenied(message);
  return FailedPrecondition(message);
}

void ReleaseChild(pid_t pid) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  Registry().erase(pid);
}

bool IsRegisteredChild(pid_t pid) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return Registry().count(pid) > 0;
}

bool ReapAdoptedChild(pid_t pid) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (Registry().count(pid) > 0) return false;
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

std::optional<int> TryReapChild(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  if (r < 0) status = 127 << 8;
  ReleaseChild(pid);
  return status;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "signal " + std::to_string(WTERMSIG(wait_status));
  return "wait status " + std::to_string(wait_status);
}

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                                   std::optional<std::vector<std::string>> env,
                                   const std::atomic<bool>* cancel) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Internal(std::string("pipe2: ") + strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Internal(std::string("pipe2: ") + strerror(errno));
  }
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = std::move(env);
  spawn.stdout_fd = out_pipe[1];
  spawn.stderr_fd = err_pipe[1];
  StatusOr<pid_t> pid = SpawnChild(spawn);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (!pid.ok()) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return pid.status();
  }

  constexpr size_t kMaxCapture = 4u << 20;
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool timed_out = false;
  bool cancelled = false;
  const auto should_cancel = [cancel] { return cancel != nullptr && cancel->load(); };
  const int64_t max_wait_ms = cancel != nullptr ? 100 : 1000;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (should_cancel()) {
      cancelled = true;
      break;
    }
    int r = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), max_wait_ms)));
    if (r < 0 && errno == EINTR) continue;  // revents are stale: a read could block.
    if (r < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[8192];
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        if (sinks[i]->size() < kMaxCapture) sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  if (timed_out || cancelled) kill(-*pid, SIGKILL);
  // The pipes are closed (or the child killed); wait for the exit, bounded by the deadline.
  std::optional<int> status;
  while (!(status = TryReapChild(*pid)).has_value()) {
    if (!timed_out && !cancelled) {
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out = true;
      } else if (should_cancel()) {
        cancelled = true;
      }
      if (timed_out || cancelled) kill(-*pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (cancelled) {
    return Status(StatusCode::kCancelled, "'" + argv[0] + "' was stopped: shutting down");
  }
  if (timed_out) {
    return Status(StatusCode::kDeadlineExceeded,
                  "'" + argv[0] + "' did not finish within " + std::to_string(timeout_ms) + " ms");
  }
  result.wait_status = *status;
  return result;
}

std::string FirstOutputLine(const std::string& text, size_t max_chars) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = text.find_first_of("\r\n", begin);
  std::string line = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
  if (line.size() > max_chars) line = line.substr(0, max_chars) + "...";
  return line;
}

Status RunToSuccess(const std::vector<std::string>& argv, int64_t timeout_ms,
                    const std::atomic<bool>* cancel) {
  std::string command;
  for (const std::string& arg : argv) command += (command.empty() ? "" : " ") + arg;
  StatusOr<CommandResult> r = RunCommand(argv, timeout_ms, std::nullopt, cancel);
  if (!r.ok()) {
    switch (r.status().code()) {
      case StatusCode::kDeadlineExceeded:
        return Status(StatusCode::kDeadlineExceeded, command + " did not finish within " +
                                                         std::to_string(timeout_ms / 1000) + " s");
      case StatusCode::kCancelled:
        return r.status();
      default:
        return Status(r.status().code(), command + " cannot run: " + r.status().message());
    }
  }
  if (WIFEXITED(r->wait_status) && WEXITSTATUS(r->wait_status) == 0) return OkStatus();
  std::string said = FirstOutputLine(r->out);
  if (said.empty()) said = FirstOutputLine(r->err);
  return Status(StatusCode::kUnavailable, command + " failed (" +
                                              DescribeWaitStatus(r->wait_status) + ")" +
                                              (said.empty() ? "" : ": " + said));
}

}  // namespace dgpu::common
