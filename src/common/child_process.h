// Child processes of the agent and the scheduler: spawning without a shell, running a command to
// completion with a timeout, and a process-wide record of the children spawned here.
//
// Why a process-wide record: the executor makes the agent a child subreaper, so processes that a
// task leaves behind are re-parented to the agent and must be reaped by it. Such "adopted"
// children are told apart from the agent's own children (tasks, nvidia-smi, docker helpers) by
// this record: every child spawned through SpawnChild is registered until ReleaseChild. Code that
// forks in an agent process must use SpawnChild so that its children are never reaped by others.
//
// All functions are thread-safe. Errors are returned as Status, never thrown.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dgpu::common {

struct SpawnOptions {
  // argv[0] is a path, or a bare name looked up on the agent's PATH. Must not be empty.
  std::vector<std::string> argv;
  // Complete environment as "KEY=VALUE" entries; nullopt inherits the agent's environment.
  std::optional<std::vector<std::string>> env;
  std::string working_dir;  // Empty: the agent's working directory.
  int stdin_fd = -1;        // Duplicated onto the child's stdin; -1 = /dev/null.
  int stdout_fd = -1;       // Duplicated onto the child's stdout; -1 = /dev/null.
  int stderr_fd = -1;       // Duplicated onto the child's stderr; -1 = /dev/null.
  bool new_session = true;  // setsid(): the child leads a new session and process group.
};

// Spawns with posix_spawn (vfork-like: the agent's memory is not copied). Returns once exec has
// succeeded (the pid is then registered), or an error when the program cannot be found (NotFound)
// or exec/chdir fails (the child is reaped; FailedPrecondition or PermissionDenied, the message
// naming the program and errno). The child starts with default signal dispositions, an empty signal
// mask, stdin from stdin_fd (else /dev/null) and no other inherited fds.
StatusOr<pid_t> SpawnChild(const SpawnOptions& options);

// Forgets a registered child after it has been reaped.
void ReleaseChild(pid_t pid);

// True while `pid` is registered by SpawnChild.
bool IsRegisteredChild(pid_t pid);

// Reaps `pid` with waitpid(WNOHANG) only if it is not registered, i.e. a process the agent
// adopted as child subreaper. Atomic with respect to SpawnChild. True when it was reaped.
bool ReapAdoptedChild(pid_t pid);

// waitpid(pid, WNOHANG) on a registered child; on exit returns the wait status and releases it.
// nullopt while the child runs. A child reaped elsewhere (ECHILD) reports status 0x7f00 (127).
std::optional<int> TryReapChild(pid_t pid);

// Finds an executable on the agent's PATH (or checks a path containing '/').
StatusOr<std::string> FindExecutable(const std::string& name);

struct CommandResult {
  int wait_status = 0;  // As returned by waitpid.
  std::string out;      // Captured stdout.
  std::string err;      // Captured stderr.
};

// Runs argv to completion, capturing stdout and stderr (each capped at 4 MiB). After timeout_ms the
// child's process group is killed and DeadlineExceeded returned.
// When `cancel` turns true the child's process group is killed too and Cancelled returned (seen
// within 100 ms).
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                                   std::optional<std::vector<std::string>> env = std::nullopt,
                                   const std::atomic<bool>* cancel = nullptr);

// "exit code N" / "signal N" for a wait status.
std::string DescribeWaitStatus(int wait_status);

// Runs argv (RunCommand) and says why it did not succeed: OK on exit code 0, else an error whose
// message starts with the command line: "CMD failed (exit code 1): <first output line>",
// "CMD did not finish within N s" (DeadlineExceeded), "CMD cannot run: ..." (as SpawnChild),
// "'CMD' was stopped: shutting down" (Cancelled).
Status RunToSuccess(const std::vector<std::string>& argv, int64_t timeout_ms,
                    const std::atomic<bool>* cancel = nullptr);

// The first non-blank line of a program's output, trimmed, cut at `max_chars` (then "...").
std::string FirstOutputLine(const std::string& text, size_t max_chars = 200);

}  // namespace dgpu::common
