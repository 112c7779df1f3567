// The task shim: the small process that is a task's parent, so that the task outlives the agent
// that started it (as slurmstepd, containerd-shim and Nomad's executor do for theirs).
//
// The agent starts one per task, in a session of its own, with the task's environment and
// working directory:
//   dgpu-task-shim --task-shim 2 RECORDS MAX_LOG_BYTES NCGROUPS [JOIN HOME]... -- ARGV...
// (RECORDS: a path prefix, <run dir>/<task id>; executor.run_dir, default work_dir/.run; per
// hierarchy of the task's cgroup (cgroup.h), JOIN its cgroup.procs and HOME the shim's own)
// fd 0 is the write end of the agent's handshake pipe, fds 1 and 2 the task's log (O_APPEND).
// The shim
//   - makes itself a child subreaper: every process the task starts stays its descendant, also
//     one that escaped with setsid() and lost its parent;
//   - with cgroups, starts the leader inside them and stays out itself, out of the reach of the
//     cgroup's kill and its out-of-memory killer: v1 (JOIN the task's cgroup.procs, HOME the
//     shim's own, per hierarchy) it moves itself into the task's for the spawn and back right
//     after; v2 (one pair, JOIN the task's cgroup directory, HOME empty) it starts the leader
//     there directly with clone3(CLONE_INTO_CGROUP), moving nothing. A cgroup it cannot join or
//     open fails the start;
//   - starts the leader with posix_spawn (no copy of the shim's memory): ARGV (ARGV[0] a path)
//     in a new session, stdin /dev/null, stdout and stderr on the log or, with MAX_LOG_BYTES > 0,
//     on a pipe the shim copies into the log and cuts at that size (log_writer.h);
//   - writes RECORDS.pids ("1 <shim pid> <shim start time> <leader pid> <leader start time>\n",
//     one write to a new file; not synced: it must outlive the agent, not the machine), so that
//     an agent started later finds and adopts the task. A shim killed (SIGKILL) between the spawn
//     and the record leaves a command nobody adopts: the next agent process stops it as a
//     leftover (found by its working directory and DGPU_TASK_ID). A shim that cannot write the
//     record kills the leader's process group and answers with the error;
//   - answers on fd 0 with one line, "1 ok <leader pid> <leader start time>" or "1 error <why>"
//     (the leader could not be started; the shim then exits 1), and closes it;
//   - ignores SIGTERM, SIGINT, SIGHUP and SIGPIPE: only its task's end ends it, never the agent's
//     (its process group is not the task's, so stopping the task does not reach it);
//   - reaps the leader and writes RECORDS.exit (one write to a new file, as RECORDS.pids; not
//     synced: the agent keeps the finish it reads there in its synced outbox): "1 <wait status>
//     <unix micros>\n". A reader that finds a record empty or without its newline has not found
//     it yet;
//   - reaps every other descendant, and exits 0 once none is left and its pipe has reached its
//     end, or 2 s after the last process ended when something outside the task still holds the
//     pipe.
// The leading "1" of the handshake and the records is the protocol version: an agent reads the
// records of every version it knows, so a newer agent adopts the shims of an older release. The
// leading "2" of the start (the arguments, the server's and its requests) is the start's own:
// an agent starts the shims of its own release only.
//
// Shims kept for the next task. A process start is the largest part of a task start (about
// 0.15 ms of CPU for a static no-op here, more for the agent's posix_spawn), so the agent keeps
// the shims whose task has ended and hands them the next one, as a pool:
//   dgpu-task-shim --task-shim-server 2
// fd 0 is a SOCK_SEQPACKET socket to the agent; fds 1 and 2 are /dev/null. Each request is one
// message, NUL-terminated fields "2", RECORDS, MAX_LOG_BYTES, CWD, NCGROUPS, the 2 x NCGROUPS
// cgroup paths (JOIN HOME, as above), ARGC, the ARGC arguments, then the environment's entries
// to the end, with the task's log passed as its one descriptor
// (SCM_RIGHTS); at most 256 KiB (a larger task gets a shim of its own, as above). The shim runs
// the task exactly as above (in CWD, with that environment) and answers on the socket: the
// handshake line as one message, then "1 done\n" once every process of the task has ended and
// its output is copied. Then it waits for the next request; the socket's end (the agent closed
// it, or died) ends it once it has no task. So a task outlives its agent alike: its shim, busy,
// finishes it and exits, and a new agent adopts it through its records like any other.
//
// Resident shims (cgroup v1; cgroup.h, "slots"):
//   dgpu-task-shim --task-shim-server 2 --resident
// The agent moves the shim into a slot, cgroups kept from task to task, once; its requests name
// no cgroup, and each task's leader starts where the shim lives, without a move. The shim keeps
// itself out of the reach of the slot's out-of-memory killer (oom_score_adj -1000, read at its
// start and given back to each leader for its spawn), and the agent's kill of the slot spares
// it. It counts in the slot's usage and pids (the agent sets the pids limit one higher).
//
// The shim's process is C (shim_runtime.h: linked against musl where it is installed, for a
// cheaper start); this header is the agent's side of the protocol.
//
// The agent finds the leader's exit in EXIT_RECORD, and the end of the task (all of its
// processes gone) in the end of the shim, or its "done". Stopping a task stays the agent's
// work: it signals the task's processes itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dgpu::agent {

// The flag of dgpu-task-shim, and of dgpu-agent that runs as a shim when no dgpu-task-shim is
// installed beside it.
inline constexpr const char* kTaskShimFlag = "--task-shim";
// A shim that runs the tasks it is sent, one after the other (see "Shims kept for the next task").
inline constexpr const char* kTaskShimServerFlag = "--task-shim-server";
// After the server's protocol: the shim lives in its tasks' cgroups (see "Resident shims").
inline constexpr const char* kTaskShimResidentFlag = "--resident";
inline constexpr int kTaskShimProtocol = 1;       // Handshake, records, "done".
inline constexpr int kTaskShimStartProtocol = 2;  // Arguments and requests.

// The leader's exit as the shim recorded it.
struct ShimExitRecord {
  int wait_status = 0;  // As returned by waitpid.
  int64_t unix_micros = 0;
};

// "1 <wait status> <micros>\n".
std::string FormatShimExitRecord(const ShimExitRecord& record);
// nullopt for anything but a complete record of a known version.
std::optional<ShimExitRecord> ParseShimExitRecord(std::string_view text);
// Reads and parses the record at `path`; nullopt when it does not exist (yet) or is not valid.
std::optional<ShimExitRecord> ReadShimExitRecord(const std::string& path);

// Who runs a task: RECORDS.pids. Start times are /proc/<pid>/stat field 22.
struct ShimPidsRecord {
  pid_t shim = 0;
  uint64_t shim_start_time = 0;
  pid_t leader = 0;
  uint64_t leader_start_time = 0;
};
std::string FormatShimPidsRecord(const ShimPidsRecord& record);
std::optional<ShimPidsRecord> ParseShimPidsRecord(std::string_view text);
std::optional<ShimPidsRecord> ReadShimPidsRecord(const std::string& path);

// The handshake line's content.
struct ShimHello {
  bool ok = false;
  pid_t leader = 0;
  uint64_t leader_start_time = 0;  // /proc/<pid>/stat field 22.
  std::string error;               // When !ok.
};
// Parses one handshake line (without its newline). nullopt when malformed.
std::optional<ShimHello> ParseShimHello(std::string_view line);

// Runs the shim; argv as above with argv[1] == kTaskShimFlag. Returns the process exit code:
// 0 when the task ran (whatever its own exit), 1 when it could not start, 2 for bad arguments.
int RunTaskShim(int argc, char** argv);

}  // namespace dgpu::agent
