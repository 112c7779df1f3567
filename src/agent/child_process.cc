#include "agent/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

extern char** environ;

namespace dgpu::agent {
namespace {

std::mutex registry_mutex;
std::set<pid_t>& Registry() {
  static auto* pids = new std::set<pid_t>();  // Never destroyed: children may outlive statics.
  return *pids;
}

// What the child reports through the error pipe when it cannot exec.
struct ChildFailure {
  int stage;  // 1 = chdir, 2 = exec, 3 = stdio setup.
  int error;
};

void CloseFrom(int first, int except, int max_fd) {
  // close_range(2) is async-signal-safe; the loop is the fall-back for older kernels.
  auto close_span = [max_fd](unsigned lo, unsigned hi) {
    if (lo > hi) return;
    if (syscall(SYS_close_range, lo, hi, 0) == 0) return;
    for (unsigned fd = lo; fd <= hi && fd < static_cast<unsigned>(max_fd); ++fd)
      close(static_cast<int>(fd));
  };
  close_span(static_cast<unsigned>(first), static_cast<unsigned>(except) - 1);
  close_span(static_cast<unsigned>(except) + 1, ~0U);
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

  // Everything the child needs is prepared before fork: only async-signal-safe calls follow it.
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
  const char* working_dir = options.working_dir.empty() ? nullptr : options.working_dir.c_str();
  rlimit nofile{};
  int max_fd = 65536;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      nofile.rlim_cur < 65536) {
    max_fd = static_cast<int>(nofile.rlim_cur);
  }

  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return Internal(std::string("pipe2: ") + strerror(errno));
  }
  // The child rewires fds 0-2; keep the error pipe above them even if the agent closed stdio.
  for (int& fd : error_pipe) {
    if (fd < 3) {
      int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
      close(fd);
      fd = moved;
    }
  }
  if (error_pipe[0] < 0 || error_pipe[1] < 0) {
    if (error_pipe[0] >= 0) close(error_pipe[0]);
    if (error_pipe[1] >= 0) close(error_pipe[1]);
    return Internal(std::string("fcntl: ") + strerror(errno));
  }

  pid_t pid;
  {
    // Held across fork so that no reaper can see this child before it is registered.
    std::lock_guard<std::mutex> lock(registry_mutex);
    pid = fork();
    if (pid == 0) {
      auto fail = [&](int stage) {
        ChildFailure failure{stage, errno};
        ssize_t ignored = write(error_pipe[1], &failure, sizeof(failure));
        (void)ignored;
        _exit(127);
      };
      if (options.new_session) setsid();
      sigset_t empty;
      sigemptyset(&empty);
      sigprocmask(SIG_SETMASK, &empty, nullptr);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
      int null_fd = open("/dev/null", O_RDWR);
      if (null_fd < 0) fail(3);
      int out_fd = options.stdout_fd >= 0 ? options.stdout_fd : null_fd;
      int err_fd = options.stderr_fd >= 0 ? options.stderr_fd : null_fd;
      // Sources that sit on 0-2 would be overwritten by the dup2 calls below.
      if (out_fd < 3) out_fd = fcntl(out_fd, F_DUPFD, 3);
      if (err_fd < 3) err_fd = fcntl(err_fd, F_DUPFD, 3);
      if (out_fd < 0 || err_fd < 0) fail(3);
      if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) fail(3);
      if (working_dir != nullptr && chdir(working_dir) != 0) fail(1);
      CloseFrom(3, error_pipe[1], max_fd);
      execve(program->c_str(), argv.data(), env_array);
      fail(2);
    }
    if (pid > 0) Registry().insert(pid);
  }
  close(error_pipe[1]);
  if (pid < 0) {
    int fork_errno = errno;
    close(error_pipe[0]);
    return ResourceExhausted(std::string("fork: ") + strerror(fork_errno));
  }
  ChildFailure failure{};
  ssize_t n;
  do {
    n = read(error_pipe[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n <= 0) return pid;  // EOF: exec succeeded and closed the pipe.

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ReleaseChild(pid);
  std::string what;
  switch (failure.stage) {
    case 1:
      what = "chdir to '" + options.working_dir + "'";
      break;
    case 2:
      what = "exec of '" + *program + "'";
      break;
    default:
      what = "stdio set-up for '" + *program + "'";
      break;
  }
  std::string message = what + " failed: " + strerror(failure.error);
  if (failure.error == EACCES || failure.error == EPERM) return PermissionDenied(message);
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
                                   std::optional<std::vector<std::string>> env) {
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
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int r = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) break;
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
  if (timed_out) kill(-*pid, SIGKILL);
  // The pipes are closed (or the child killed); wait for the exit, bounded by the deadline.
  std::optional<int> status;
  while (!(status = TryReapChild(*pid)).has_value()) {
    if (std::chrono::steady_clock::now() >= deadline && !timed_out) {
      timed_out = true;
      kill(-*pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (timed_out) {
    return Status(StatusCode::kDeadlineExceeded,
                  "'" + argv[0] + "' did not finish within " + std::to_string(timeout_ms) + " ms");
  }
  result.wait_status = *status;
  return result;
}

}  // namespace dgpu::agent
