// Executors start tasks on the node's GPUs, stop them, and report how they ended.
//
// Threading: an Executor is owned by one thread (the agent's session loop) and is not
// thread-safe. No thread is created per task: the owner calls Poll(now) regularly (every
// 50-500 ms is reasonable), which reaps exited processes, enforces timeouts and kill grace
// periods, and returns the tasks that have finished since the last call.
//
// Errors: Start() returns an error only when it refuses a launch (InvalidArgument for a bad
// launch, AlreadyExists for a task id it still holds, FailedPrecondition for a GPU held by
// another task or after Detach()); nothing is started then. Once accepted, every task produces
// exactly one TaskExit from Poll() or StopAll(), including a task that could not be started
// (error "start_failed: ...").
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "core/types.h"

namespace dgpu::agent {

struct TaskLaunch {
  std::string task_id;  // [A-Za-z0-9_.-], 1-128 chars, not starting with '.' or '-'.
  std::string command;  // Run by /bin/sh -c (inside the container for docker).
  std::vector<std::pair<std::string, std::string>> env;  // Extra environment for the task.
  std::vector<int> gpu_indices;  // Node-local GPU indices, in the order the task sees them.
  int64_t timeout_seconds = 0;   // 0 = no limit.
  std::string image;             // Docker image; empty = the executor's default image.
  std::string user;              // The submitter (executor.run_as: submitter); may be empty.
  int array_index = -1;          // A job array's member: its index; -1 otherwise.
  int array_size = 0;            // A job array's member: the array's size; 0 otherwise.
  // A gang's member: its rank, the members' nodes (rank order) and where they meet.
  struct Gang {
    int node_rank = 0;
    int nnodes = 0;
    std::string master_addr;
    int master_port = 0;
    std::vector<std::string> hosts;
    int gpus_per_node = 0;
  };
  std::optional<Gang> gang;
  // Which run of the task this is (the scheduler's count of its starts); 0: not told (an older
  // scheduler). Reported back with the exit.
  int run = 0;
  // The CPUs (thousandths) and memory (MiB) the scheduler gave the task on this node; 0: not
  // told (an older scheduler, or a node that reports no resources): no limit.
  int64_t cpus_milli = 0;
  int64_t memory_mb = 0;
};

struct TaskExit {
  std::string task_id;
  bool success = false;  // True only when the task exited 0 on its own.
  int exit_code = -1;    // Exit status; 128+N when killed by signal N; -1 when it never ran.
  int signal = 0;        // Signal that killed the task's main process, 0 if none.
  // "" (exited by itself), "signal:N", "start_failed: <reason>", or the word of the order that
  // stopped it (StopErrorOf): "cancelled", "timeout", "preempted", "drained", ...
  std::string error;
  int64_t finished_at_unix_micros = 0;
  int run = 0;  // TaskLaunch::run of the run that ended.
  // What the run used, where the executor measures it (a cgroup per task); nullopt otherwise.
  std::optional<core::ResourceUsage> usage;

  bool operator==(const TaskExit&) const = default;
};

// A task an executor holds, as the agent reports it to the scheduler.
struct HeldTask {
  std::string task_id;
  std::vector<int> gpu_indices;
  int run = 0;
  int64_t started_at_micros = 0;
};

// Why a task is stopped and how long it may take to exit after SIGTERM before it is killed.
struct StopOrder {
  core::StopReason reason = core::StopReason::kCancel;
  std::chrono::milliseconds grace{-1};  // Negative: the executor's configured kill grace period.
  std::string preempted_by;             // Reason preempt: the task it makes room for.
};

// The error a task stopped for `reason` finishes with: core::StopError ("cancelled",
// "preempted", "timeout", ...), with kNone read as a cancel (an order without a reason).
std::string StopErrorOf(core::StopReason reason);

// The line a task's log gets when a stop order takes effect, without the newline:
// "dgpu: stopping task (reason: cancel, grace 5 s)"; fractions of a second as "grace 0.25 s";
// a preemption names the task it makes room for: "(reason: preempt, grace 30 s, for task-7)".
std::string StopLogLine(core::StopReason reason, std::chrono::milliseconds grace,
                        const std::string& preempted_by = {});

class Executor {
 public:
  virtual ~Executor() = default;

  // Starts a task; see the file comment for errors. Never blocks on the task itself.
  virtual Status Start(const TaskLaunch& launch) = 0;

  // Asks a task to stop: SIGTERM (or `docker stop`) now, SIGKILL once the order's grace period
  // is over; the task's log gets a StopLogLine. The TaskExit (error StopErrorOf(order.reason))
  // comes later from Poll(). NotFound for an unknown task id. An order for a task that is
  // already stopping keeps the first reason; it brings the SIGKILL forward when its grace ends
  // sooner (with another log line), and otherwise changes nothing.
  virtual Status Stop(const std::string& task_id, const StopOrder& order) = 0;

  // Advances the executor to `now_micros` (unix time, microseconds): reaps processes, applies
  // timeouts and kill deadlines, and returns the tasks that finished, each exactly once. A task
  // counts as finished, and releases its GPUs, only when all of its processes are gone.
  virtual std::vector<TaskExit> Poll(int64_t now_micros) = 0;

  // Ids of accepted tasks whose exit has not been returned yet, sorted.
  virtual std::vector<std::string> Running() const = 0;

  // True while a task whose exit has not been returned holds GPU `index`.
  virtual bool IsGpuBusy(int index) const = 0;

  // Shutdown: stops every task (SIGTERM, then SIGKILL after `grace`), waits for them (blocking,
  // at most grace plus a few seconds) and returns all exits not yet returned by Poll().
  virtual std::vector<TaskExit> StopAll(std::chrono::milliseconds grace) = 0;

  // Shutdown that leaves tasks running (keep_tasks_on_exit): forgets every task without
  // signalling it; later Start() calls fail with FailedPrecondition.
  virtual void Detach() = 0;

  // At start, before any Start(): adopts the tasks a previous agent process left running under
  // their shims, and those that ended meanwhile (their exits come from Poll). Returns them;
  // `lost` gets the ids of tasks whose shim is gone without a record of their end.
  virtual std::vector<HeldTask> Reattach(std::vector<std::string>* lost) {
    (void)lost;
    return {};
  }

  // What the owner's loop must wait for besides its own events: descriptors that turn readable
  // when the executor has work (e.g. the pidfd of a shim this process did not start and so gets
  // no SIGCHLD for), and the unix time (micros) by which Poll must run next at the latest
  // (INT64_MAX: nothing is due; an idle executor asks for nothing).
  virtual std::vector<int> WakeFds() const { return {}; }
  virtual int64_t NextPollMicros(int64_t now_micros) const {
    (void)now_micros;
    return INT64_MAX;
  }

  // What a running task has used so far, where the executor measures it; nullopt otherwise.
  virtual std::optional<core::ResourceUsage> Usage(const std::string& task_id) const {
    (void)task_id;
    return std::nullopt;
  }

  // The CPUs a running task is bound to (executor.cpu_binding: cpuset), sorted; empty when it
  // is not bound.
  virtual std::vector<int> CpuSet(const std::string& task_id) const {
    (void)task_id;
    return {};
  }

  // "process" or "docker".
  virtual std::string name() const = 0;
};

// Checks a task id: [A-Za-z0-9_.-], 1-128 characters, not starting with '.' or '-' (it names
// files and containers). InvalidArgument otherwise.
Status ValidateTaskId(std::string_view task_id);

// Checks the launch fields every executor relies on (task id, GPU indices, environment keys,
// timeout, command). InvalidArgument naming the field otherwise.
Status ValidateLaunch(const TaskLaunch& launch);

// Comma-joined indices: {0, 3} -> "0,3".
std::string JoinGpuIndices(const std::vector<int>& indices);

// Environment variables the executor sets for a task (common::kTaskEnvSetByDgpu), after the
// task's own env, whose reserved names (common::IsReservedTaskEnvName) are dropped:
// CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER=PCI_BUS_ID, NVIDIA_VISIBLE_DEVICES, DGPU_TASK_ID,
// DGPU_GPU_IDS (the node-local indices).
std::vector<std::pair<std::string, std::string>> ReservedTaskEnv(const TaskLaunch& launch);
// DGPU_ARRAY_INDEX and DGPU_ARRAY_SIZE for a job array's member (nothing otherwise), added to
// `env`.
void AddArrayEnv(const TaskLaunch& launch, std::vector<std::pair<std::string, std::string>>* env);
// A gang's member (nothing otherwise), added to `env` over the task's own: DGPU_NODE_RANK,
// DGPU_NNODES, DGPU_MASTER_ADDR, DGPU_MASTER_PORT, DGPU_HOSTFILE (`hostfile`, unless empty),
// and torchrun's MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK and WORLD_SIZE (the gang's GPUs).
void AddGangEnv(const TaskLaunch& launch, const std::string& hostfile,
                std::vector<std::pair<std::string, std::string>>* env);
// A gang's hostfile: one `<host> slots=<gpus>` line per member, in rank order.
std::string GangHostfile(const TaskLaunch::Gang& gang);
// Where a gang member's hostfile is written: the task's directory under the work directory.
std::string GangHostfilePath(const std::string& work_dir, const std::string& task_id);

}  // namespace dgpu::agent
