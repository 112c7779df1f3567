// The scheduling core's data model: tasks, nodes, GPUs, allocations and decisions.
//
// Pure values with no behaviour beyond small helpers; the engine (`scheduler_core.h`) owns the
// mutable state. Times are microseconds since the Unix epoch, always passed in by the caller:
// the core never reads a clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dgpu::core {

using TimeMicros = int64_t;
using TaskNumber = uint64_t;  // The numeric part of "task-<n>".

inline constexpr TimeMicros kMicrosPerSecond = 1'000'000;

enum class Priority : uint8_t { kHigh = 0, kLow = 1 };
inline constexpr int kPriorityCount = 2;

enum class TaskStatus : uint8_t { kPending, kRunning, kSuccess, kFailed, kCancelled };

// Why a pending task waits. Tasks behind an earlier task with the same shape report kQueued.
enum class PendingReason : uint8_t {
  kNone,            // Not pending.
  kQueued,          // Behind earlier tasks (or not yet looked at by a pass).
  kQuotaExhausted,  // Its priority class has too few quota GPUs left.
  kNoNodeFits,      // Enough GPUs in total, but no single node has enough free.
  kNoGpuModel,      // No online node has the requested GPU model.
  kExceedsCluster,  // Asks for more GPUs than any online node of that model has.
  kTeamLimit,       // Its team holds max_gpus already (running and stopping tasks).
  // Within its guarantee: borrowed tasks are being stopped to make room, and the GPUs they free
  // are kept for it.
  kWaitingForPreemption,
  // It failed and waits out its retry backoff (Task::retry_at) before it is queued again.
  kRetryBackoff,
  // Some node that passes its filters has the GPUs free, but none of them has the CPUs (or,
  // with the CPUs, the memory) it asks for free.
  kInsufficientCpu,
  kInsufficientMemory,
  // No online node of its GPU model that could hold it has the labels of its node_selector.
  kNoNodeMatches,
  // Held until its dependencies (TaskSpec::depends_on) are satisfied; not in any queue.
  kDependency,
  // A dependency can no longer be satisfied and CoreConfig::kill_invalid_dependencies is off:
  // held until it is cancelled.
  kDependencyNeverSatisfied,
  // It would start now on nodes kept for an older task's planned start (backfill), and its time
  // limit does not end before that start (SchedulerCore::ReservedFor names the task).
  kReservedFor,
};

enum class GpuStatus : uint8_t { kIdle, kBusy, kOffline, kUnhealthy };

// Whether an online node takes new tasks. Cordoned and draining nodes take none; their running
// tasks go on (a drain that evicts stops them: StopReason::kDrain). Offline is separate (a node
// not heard from): a node has a mode whether it is online or not. Releasing: cordoned by the
// autoscaler, which is giving the node back (core/autoscale.h).
enum class NodeMode : uint8_t { kSchedulable, kCordoned, kDraining, kReleasing };

// A node's labels (`rack: r1`), for filters such as node selectors.
using Labels = std::map<std::string, std::string>;

// Label keys and values, as Kubernetes spells them: a key is a name of at most 63 characters
// (letters, digits, '-', '_' and '.', beginning and ending with a letter or digit), optionally
// after a DNS-subdomain prefix and '/' ("topology.example.com/rack"); a value is such a name or
// empty. Why not, or an empty string.
std::string CheckLabelKey(std::string_view key);
std::string CheckLabelValue(std::string_view value);
// What is wrong with NVLink groups given as lists of GPU indices for a node of `gpus` GPUs
// (indices 0..gpus-1, none in two groups or twice, at least 2 GPUs a group, at most
// kMaxLinkGroups groups), or an empty string.
std::string CheckLinkGroups(const std::vector<std::vector<int>>& groups, int gpus);
// The most pairs a node selector, and labels a node, may have.
inline constexpr size_t kMaxSelectorEntries = 32;
// What is wrong with a node selector (a key or value, too many pairs, not sorted by key or a
// key twice), or an empty string.
std::string CheckSelector(const std::vector<std::pair<std::string, std::string>>& selector);
// The first pair of `selector` that `labels` lacks (its position), or selector.size().
size_t FirstUnmatched(const std::vector<std::pair<std::string, std::string>>& selector,
                      const Labels& labels);
// Whether `labels` has every pair of `selector`.
bool MatchesSelector(const std::vector<std::pair<std::string, std::string>>& selector,
                     const Labels& labels);
// "rack=r1,zone=a".
std::string FormatSelector(const std::vector<std::pair<std::string, std::string>>& selector);

// Why a task that holds GPUs is being stopped (Task::stop_reason while Task::stopping, and the
// reason carried by a stop order).
enum class StopReason : uint8_t {
  kNone,           // Not being stopped.
  kCancel,         // A user cancelled it.
  kPreempt,        // Its GPUs are taken back for a task with a better claim to them.
  kDrain,          // Its node is being drained.
  kMemberFailure,  // Another member of its gang failed.
  kTimeout,        // It ran longer than its timeout_seconds.
  kGpuFailure,     // One of its GPUs became unhealthy.
  kReconcile,      // Its agent runs it, but the scheduler did not assign it (or no longer) there.
  kMemberLost,     // Another member of its multi-node task was lost with its node.
  // Its agent reached no scheduler for agent.stop_tasks_after_disconnect and stopped it on its
  // own (never ordered by the core; the finish says so: the attempt counts as lost).
  kDisconnected,
};

std::string_view ToString(Priority p);
std::string_view ToString(TaskStatus s);
std::string_view ToString(PendingReason r);
std::string_view ToString(GpuStatus s);
std::string_view ToString(StopReason r);  // "" for kNone, else "cancel", "preempt", ...
std::string_view ToString(NodeMode m);    // "schedulable", "cordoned", "draining", "releasing"
// A node's state as the API shows it: "offline", else "online", "cordoned" (releasing too) or
// "draining".
std::string_view NodeStateName(bool online, NodeMode m);
// The life cycle of a stopped task: a task stopped for preempt, drain or gpu_failure goes back to
// its queue at its old position once its agent confirms; one stopped for member_failure or
// timeout fails; a cancelled one stays cancelled; member_lost puts it back at the head of its
// queue as a lost attempt (it fails with agent_lost after max_attempts). StopError is the error
// word it gets: "cancelled", "preempted", "drained", "member_failed", "timeout",
// "gpu_unhealthy", "agent_lost".
bool RequeuesWhenStopped(StopReason r);
std::string_view StopError(StopReason r);
std::optional<Priority> ParsePriority(std::string_view s);
std::optional<TaskStatus> ParseTaskStatus(std::string_view s);
std::optional<PendingReason> ParsePendingReason(std::string_view s);
std::optional<StopReason> ParseStopReason(std::string_view s);
std::optional<NodeMode> ParseNodeMode(std::string_view s);

inline bool IsFinished(TaskStatus s) {
  return s == TaskStatus::kSuccess || s == TaskStatus::kFailed || s == TaskStatus::kCancelled;
}

// "task-42" <-> 42. Parse returns nullopt for anything else.
std::string FormatTaskId(TaskNumber n);

// Every task belongs to a team; a submission that names none belongs to this one.
inline constexpr std::string_view kDefaultTeam = "default";
// Team names: [a-z0-9][a-z0-9_-]{0,62}.
bool IsValidTeamName(std::string_view name);
std::optional<TaskNumber> ParseTaskId(std::string_view id);

// GPUs given to a task on one node. A task's allocation is a list of these: one entry for a
// single-node task, several for a multi-node task (one member per node, in rank order).
// What a run used on a node, as its agent measured it in the run's cgroup (executor.isolation).
struct ResourceUsage {
  int64_t cpu_micros = 0;        // CPU time of all its processes.
  int64_t max_memory_bytes = 0;  // Its peak memory.
  bool operator==(const ResourceUsage&) const = default;
};

struct NodeAllocation {
  std::string node_id;
  std::vector<int> gpu_indices;  // In ascending order.
  // This member has ended (finished, or lost with its node) and its GPUs are free, while other
  // members of the task still run. Always false for a single-node task.
  bool ended = false;
  // CPUs (thousandths) and memory (MiB) this member was given on its node: the task's request,
  // or its GPUs' share there; 0 where the node reports none (nothing is counted there).
  int64_t cpus_milli = 0;
  int64_t memory_mb = 0;
  // What the member used: reported by its agent while it runs (not durable) and at its end
  // (durable with the finish); zero where nothing was measured.
  ResourceUsage usage;
  // The CPUs its agent bound it to (executor.cpu_binding: cpuset), from the start report;
  // empty: not bound.
  std::vector<int> cpu_set;
  bool operator==(const NodeAllocation&) const = default;
};
using Allocation = std::vector<NodeAllocation>;
// What a run used over its members: CPU time summed, the highest peak memory; nullopt when no
// member was measured.
std::optional<ResourceUsage> UsageOf(const Allocation& a);
// The position in `a` of the member on node_id that has not ended, or -1.
int RunningMemberOn(const Allocation& a, std::string_view node_id);
// Whether `a` has a member on node_id (ended or not).
bool HasMemberOn(const Allocation& a, std::string_view node_id);

// A task's dependency on another (TaskSpec::depends_on): it is not queued before the other
// (its parent) has started (kAfter), ended (kAfterAny), succeeded (kAfterOk) or ended without
// success (kAfterNotOk: failed or cancelled). A parent that is a member of a job array stands for
// every member of its array: the condition must hold for each of them (kAfterNotOk: all ended,
// one at least without success).
enum class DependencyCondition : uint8_t { kAfterOk, kAfterNotOk, kAfterAny, kAfter };
// Where a dependency stands: still waiting, satisfied, or never to be satisfied (the parent
// succeeded for kAfterNotOk, or did not for kAfterOk).
enum class DependencyState : uint8_t { kWaiting, kSatisfied, kNeverSatisfied };
struct Dependency {
  TaskNumber task = 0;  // The parent, as named at submission.
  DependencyCondition condition = DependencyCondition::kAfterOk;
  DependencyState state = DependencyState::kWaiting;
  bool operator==(const Dependency&) const = default;
};
using Dependencies = std::vector<Dependency>;
// The most dependencies a task may have.
inline constexpr size_t kMaxDependencies = 64;
std::string_view ToString(DependencyCondition c);  // "afterok", "afternotok", "afterany", "after"
std::string_view ToString(DependencyState s);      // "waiting", "satisfied", "never_satisfied"
std::optional<DependencyCondition> ParseDependencyCondition(std::string_view s);
std::optional<DependencyState> ParseDependencyState(std::string_view s);

// What the store knows of a task no longer in memory (finished and forgotten): enough to decide
// the dependencies of tasks submitted after it, or restored after a restart.
struct StoredTaskState {
  TaskNumber id = 0;
  TaskStatus status = TaskStatus::kPending;
  bool started = false;  // It has run (started_at or attempts set).
  int32_t array_index = -1;
  int32_t array_size = 0;
};

// What a user asks for. Validated by the REST layer (field by field) and again by the core.
// The fields a scheduling decision reads come last, next to Task's own (see Task).
struct TaskSpec {
  std::string name;
  std::string team = std::string(kDefaultTeam);  // Valid team name (IsValidTeamName).
  std::string user;                              // Who submitted it; may be empty.
  std::string gpu_model;                         // Empty: any model.
  std::string command;
  std::vector<std::pair<std::string, std::string>> env;  // Sorted by key, keys unique.
  std::string image;                                     // Docker executor only.
  // Only nodes with every one of these labels (agent.labels) take it. Sorted by key, keys
  // unique (IsValidLabelKey, IsValidLabelValue); empty: any node.
  std::vector<std::pair<std::string, std::string>> node_selector;
  // Tasks it waits for before it is queued (at most kMaxDependencies; parents exist when it is
  // submitted, so they never form a cycle). Each entry's state is kept by the core.
  Dependencies depends_on;
  // A member of a job array (POST /tasks with "array": N): its index in [0, array_size), which
  // its agent gives it as DGPU_ARRAY_INDEX. array_size 0: not an array (index -1).
  int32_t array_index = -1;
  int32_t array_size = 0;
  // A run that fails (exits non-zero or is killed from outside) is retried this many times:
  // the task is queued again after retry_backoff_seconds (at least 1) x 2^(retries so far), at
  // most an hour.
  int32_t max_retries = 0;
  int32_t retry_backoff_seconds = 10;
  int64_t timeout_seconds = 0;  // 0: no limit.
  // Seconds between SIGTERM and SIGKILL when it is preempted; -1: preemption.grace_period.
  int32_t preemption_grace_seconds = -1;
  // A gang: one member on each of `nodes` distinct nodes, each with gpu_count / nodes GPUs of
  // one model, all started in the same pass or none (1: an ordinary single-node task).
  int32_t nodes = 1;
  // CPUs in thousandths and memory in MiB that each member asks for on its node; 0: its GPUs'
  // share of the node it is placed on (the node's CPUs x its GPUs / the node's GPUs, the same for
  // memory), so a task that names neither fits wherever its GPUs fit.
  int64_t cpus_milli = 0;
  int64_t memory_mb = 0;
  Priority priority = Priority::kLow;
  // False: it never borrows GPUs beyond its team's guarantee, so it is never preempted.
  bool preemptible = true;
  int gpu_count = 1;  // In all: a gang's members together.
  bool operator==(const TaskSpec&) const = default;
};

// The most members a gang may have.
inline constexpr int kMaxGangNodes = 1024;

// GPUs of each member of a gang (of the one member of any other task).
inline int GpusPerNode(const TaskSpec& s) {
  return s.nodes > 1 ? s.gpu_count / s.nodes : s.gpu_count;
}

// The most members a job array may have.
inline constexpr int kMaxArraySize = 100000;
// The longest time limit (timeout_seconds, default time limits): ten years.
inline constexpr int64_t kMaxTimeLimitSeconds = 10LL * 365 * 24 * 3600;

// Whether a spec's array fields agree: a member has an index in [0, array_size); any other
// task has array_size 0 and index -1.
inline bool ValidArrayFields(const TaskSpec& s) {
  return s.array_size == 0 ? s.array_index == -1
                           : s.array_size > 0 && s.array_index >= 0 && s.array_index < s.array_size;
}

// Plain data: a task as the core, the store, replication and the API see it. The core's own
// per-task state (node slot, queue, spare buffers) lives in its private record, not here. A
// new member is reset where records are recycled (TaskPool::Delete); a test compares a
// recycled record with a new one.
// Member order is only a hint for the core's cache use: a start and a finish read and write the
// last ~150 bytes (the end of the spec and everything from `error` on), next to the core's own
// fields, which follow a Task in memory.
struct Task {
  TaskSpec spec;
  std::string error;  // Empty, or a machine word such as "agent_lost" / "timeout".
  TimeMicros created_at = 0;
  Allocation allocation;  // Set while running (and while a cancelled task is being stopped).
  TaskNumber id = 0;
  // Position in its priority's FIFO: lower runs first. Submissions get increasing values;
  // a task put back after losing its node gets a value below every other.
  int64_t queue_seq = 0;
  TimeMicros started_at = 0;  // 0: never started.
  TimeMicros finished_at = 0;
  int attempts = 0;  // Times it was started.
  int exit_code = 0;
  TaskStatus status = TaskStatus::kPending;
  // True once a cancelled running task's stop has been ordered but the agent has not yet
  // confirmed it: its GPUs stay held so that nothing else is started on them.
  bool stopping = false;
  StopReason stop_reason = StopReason::kNone;  // Set while stopping.
  // Runs beyond its team's (or its class's shared) guarantee on GPUs lent while idle, so it may
  // be preempted. Kept by the core as guarantees free up (quota.borrowing only).
  bool borrowed = false;
  int preemptions = 0;          // Times it was stopped and requeued by a preemption or an eviction.
  TaskNumber preempted_by = 0;  // While stopping for a preemption: the task it makes room for.
  int retries = 0;              // Times it failed and was queued again (spec.max_retries).
  TimeMicros retry_at = 0;      // Pending after a failure: not queued before this time; else 0.
  // A gang's rendezvous port on its rank 0's node (CoreConfig::gang_port_low..high), chosen at
  // its latest start; 0: never started as a gang.
  int32_t master_port = 0;

  int TotalGpus() const { return spec.gpu_count; }
  bool operator==(const Task&) const = default;
};

struct GpuInfo {
  int index = 0;
  std::string model;
  int64_t memory_mb = 0;
  std::string uuid;
  // An unhealthy GPU takes no task and does not count in quota totals until it is healthy again.
  bool healthy = true;
  std::string health_reason;  // Why it is unhealthy ("xid 79", ...); empty when healthy.
  // Its NVLink group on the node: GPUs of one group talk over NVLink, GPUs of different groups
  // (or of none) over PCIe. 0..kMaxLinkGroups-1; kNoLinkGroup for none.
  int link_group = -1;
};
inline constexpr int kNoLinkGroup = -1;
inline constexpr int kMaxLinkGroups = 64;

// What a node offers besides its GPUs, as its agent reports it at registration (after the
// reserves it keeps for the system). 0: not reported (an older agent, the simulator): nothing is
// counted against it and tasks are given none there.
// CPUs from thousandths of a CPU (NodeResources::cpus_milli, TaskSpec::cpus_milli).
inline double CpusOfMilli(int64_t milli) { return static_cast<double>(milli) / 1000.0; }

struct NodeResources {
  int64_t cpus_milli = 0;
  int64_t memory_mb = 0;
  std::string isolation;  // "cgroup_v2", "cgroup_v1" or "none"; empty: not reported.
  bool operator==(const NodeResources&) const = default;
};

// Which run of a task its latest start was: every start counts (retries too), a preempted or
// evicted one as well (it is counted in `preemptions`, not in `attempts`). An agent is told the
// number with each start and names it in what it reports, so that a late report of an earlier
// run (a finish sent again after its acknowledgement was lost) is never taken for the current
// run's. 0: never started.
inline int RunNumber(const Task& t) { return t.attempts + t.preemptions; }

// A task an agent reports as running, with the GPUs it runs on.
struct RunningReport {
  TaskNumber task = 0;
  std::vector<int> gpu_indices;
  int run = 0;  // RunNumber when it was started; 0: not known (an older agent).
};

// A finish an agent reports.
struct FinishReport {
  TaskNumber task = 0;
  bool success = false;
  int exit_code = 0;
  std::string error;  // "", "timeout", "signal:9", "cancelled", ...
  TimeMicros finished_at = 0;
  int run = 0;  // RunNumber of the run that ended; 0: not known (an older agent).
  std::optional<ResourceUsage> usage;  // What the run used, where its agent measured it.
};

// Whether a report names a run that ended before the task's latest one started (its end is
// recorded already). Reports without a run number are never stale.
inline bool IsEarlierRun(const Task& t, int run) { return run > 0 && run < RunNumber(t); }

// The end of a run its agent stopped on its own, cut off from every scheduler
// (StopReason::kDisconnected): the attempt was lost, the task did not fail.
inline bool IsDisconnectStop(const FinishReport& f) {
  return !f.success && f.error == StopError(StopReason::kDisconnected);
}

// An order for an agent. kStart carries the allocation on that node; kStop why the task is
// stopped and how long it may take to exit after SIGTERM before it is killed.
struct Decision {
  enum class Kind : uint8_t { kStart, kStop };
  Kind kind = Kind::kStart;
  TaskNumber task = 0;
  std::string node_id;
  std::vector<int> gpu_indices;           // kStart only.
  StopReason reason = StopReason::kNone;  // kStop only.
  int32_t grace_seconds = -1;             // kStop only; -1: the agent's own grace period.
  TaskNumber preempted_by = 0;            // kStop for preempt: the task it makes room for.
  bool operator==(const Decision&) const = default;
};

// A state change to make durable and to replicate, in the order the core made them.
// A team's guarantees inside the two classes, its cap and its fair-share weight.
struct TeamLimits {
  int online = 0;     // GPUs guaranteed to its high-priority tasks.
  int batch = 0;      // GPUs guaranteed to its low-priority tasks.
  int max_gpus = -1;  // Never more GPUs than this, borrowed or not; -1: no cap.
  double weight = 1;  // Share of idle GPUs among borrowers (> 0).
  // The time limit (seconds) of its tasks submitted without one; 0: the scheduler's.
  int64_t default_time_limit = 0;
  bool operator==(const TeamLimits&) const = default;
};

// A team as it is stored: its limits, or a deletion (a team named by the configuration that was
// deleted through the API stays deleted), and its fair-share usage.
struct TeamRecord {
  std::string name;
  bool set = false;  // Limits set through the API: they win over the configuration's.
  TeamLimits limits;
  bool deleted = false;
  // Decayed GPU-seconds (quota.fairshare_half_life) as of usage_at.
  double usage = 0;
  TimeMicros usage_at = 0;
  bool operator==(const TeamRecord&) const = default;
};

// A node's mode as it is stored: set by an operator (cordon, drain, uncordon), kept across
// restarts and failover, and applied when the node registers. Schedulable nodes have no record:
// a kNodeUpsert to kSchedulable removes it.
struct NodeRecord {
  std::string id;
  NodeMode mode = NodeMode::kSchedulable;
  bool operator==(const NodeRecord&) const = default;
};

// One entry of a task's history as it is stored and served (GET /api/v1/tasks/{id}/events):
// `type` is one of "scheduled", "started", "preempted", "requeued", "node_lost", "finished",
// "cancelled" ("submitted" is the task's created_at, not stored); `message` says it for people.
struct TaskEventRecord {
  TaskNumber task = 0;
  TimeMicros time = 0;
  std::string type;
  std::string node_id;  // Where it happened; empty when nowhere in particular.
  std::string message;

  bool operator==(const TaskEventRecord&) const = default;
};

struct Change {
  enum class Kind : uint8_t {
    kTaskUpsert,
    kQuotaPercent,
    kNextTaskNumber,
    kTeamUpsert,
    kNodeUpsert,
    // A job array submitted at once: `task` is its first member (array_index 0), and member i
    // (0 <= i < task.spec.array_size) is ArrayMember(task, i). One change for all members keeps
    // a large array one short write and one short replication message.
    kTaskArray,
    // An entry of a task's history (`event`), added by the scheduler from the core's events.
    kTaskEvent,
  };
  Kind kind = Kind::kTaskUpsert;
  Task task;                   // kTaskUpsert: the task as it is after the change; kTaskArray.
  double online_percent = 0;   // kQuotaPercent.
  TaskNumber next_number = 0;  // kNextTaskNumber.
  TeamRecord team;             // kTeamUpsert: limits set, a deletion, or usage.
  NodeRecord node;             // kNodeUpsert: a node's mode.
  TaskEventRecord event;       // kTaskEvent.
};

// Member `index` of the array whose first member is `first` (a kTaskArray change): numbered
// first.id + index, queued at first.queue_seq + index, array_index `index`; the rest as `first`.
Task ArrayMember(const Task& first, int32_t index);

// Something that happened in the core, for metrics, logs and (later) audit, watchers and task
// history. Events come out in the order they happened, beside the durable changes of the same
// commands (SchedulerCore::TakeEvents).
struct Event {
  enum class Kind : uint8_t {
    kTaskSubmitted,     // Queued.
    kTaskScheduled,     // A start was ordered (node_id, gpus), or a running task was adopted.
    kTaskStarted,       // Its agent confirmed the start.
    kTaskStopping,      // A stop was ordered on node_id (reason); its GPUs stay held until it ends.
    kTaskStopped,       // A stopping task ended (or its node was lost); its GPUs are free.
    kTaskRequeued,      // Put back at the head of its queue (detail: why, e.g. "agent_lost").
    kTaskFinished,      // Reached a final status (status, exit_code, detail: the error word).
    kNodeJoined,        // A node registered (again) with `gpus` GPUs.
    kNodeLost,          // A node went offline (silent, or reported lost).
    kQuotaChanged,      // The online share changed (online_percent).
    kNodeStateChanged,  // A node's mode or a GPU's health changed (detail says what).
    // A borrowed task is stopped to make room for a task within its guarantee (detail: that
    // task's id, node_id: where).
    kTaskPreempted,
    kTeamChanged,  // A team's guarantees or cap were set, or it was deleted (detail: its name).
  };
  Kind kind = Kind::kTaskSubmitted;
  TimeMicros time = 0;
  TaskNumber task = 0;  // Task events.
  Priority priority = Priority::kLow;
  TaskStatus status = TaskStatus::kPending;  // The task's status after the event.
  StopReason reason = StopReason::kNone;     // kTaskStopping.
  int gpus = 0;                              // The task's GPU count; a joining node's GPUs.
  int exit_code = 0;                         // kTaskFinished.
  TimeMicros created_at = 0;                 // Task events: when the task was submitted.
  double online_percent = 0;                 // kQuotaChanged.
  std::string node_id;  // Where it happened (task events with a node, node events).
  // kTaskRequeued / kTaskFinished / kTaskStopped: the error word; kTaskScheduled: "adopted" for
  // a queued task found running at registration; kNodeJoined: its address; kNodeLost: why
  // ("heartbeat_timeout", "lost"); kNodeStateChanged: the new mode ("cordoned", ...) or
  // "gpu <index> unhealthy: <reason>" / "gpu <index> healthy".
  std::string detail;
};

std::string_view ToString(Event::Kind k);  // "task_submitted", "node_lost", ...

}  // namespace dgpu::core
