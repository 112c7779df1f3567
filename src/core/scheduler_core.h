// SchedulerCore: the pure, deterministic heart of dgpu.
//
// Commands go in (submit, cancel, node registered / heartbeat / lost, task started / finished,
// set quota, tick, schedule); decisions ("start T on N with GPUs [...]", "stop T on N") and
// durable changes come out through TakeDecisions() and TakeChanges(), in the order they were
// made. No sockets, files, threads or clock reads: time is an argument. Not thread-safe: one
// owner thread drives it (the daemon's core thread, the simulator, a test).
//
// Placement: a single-node task gets all its GPUs on one node, of one model. Best fit: the node
// with the fewest free GPUs of a matching model that still fit, ties broken on node id. The
// PlacementIndex keeps nodes bucketed by free-GPU count per model, so a decision costs
// O(GPUs per node * models), independent of the number of nodes.
//
// Queues: one FIFO per priority, made of sub-queues per shape (model, GPU count). A pass looks
// only at the head of each shape: when a head does not fit, nothing behind it with the same
// shape can fit either, so a pass costs O(shapes + tasks started), never a scan of the queue.
// The oldest pending task of a priority may be bypassed by younger ones at most
// `max_bypass` times; then its queue holds (nothing younger of that priority starts) and a node
// is reserved for it that the other priority may not use, until it starts.
//
// Quotas: online_quota = round(online GPUs * online_percent), batch_quota = the rest. A task
// starts only if its class stays within quota; running tasks are never stopped by a quota change.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "base/status.h"
#include "core/placement_index.h"
#include "core/policy.h"
#include "core/quota_tree.h"
#include "core/task_table.h"
#include "core/types.h"

namespace dgpu::core {

struct CoreConfig {
  double online_percent = 0.7;
  int max_attempts = 3;  // Starts before a task that keeps losing its node fails.
  int max_bypass = 16;   // Times the oldest task may be overtaken before its queue holds.
  // A gang's rendezvous port: the lowest of these that no other gang holding GPUs uses on its
  // rank 0's node (Task::master_port).
  int32_t gang_port_low = 29500;
  int32_t gang_port_high = 29999;
  // A node label key (scheduler.topology_key): a gang goes to the fewest distinct values of it
  // that can hold it, ties broken by best fit; a node without the label counts as a value of
  // its own. Empty: best fit alone.
  std::string topology_key;
  TimeMicros heartbeat_timeout = 15 * kMicrosPerSecond;  // Node silent this long is lost.
  bool record_changes = true;  // Off in the simulator, which persists nothing.
  bool record_events = true;   // Off in the simulator, which keeps its own statistics.
  Policies policies;           // Extra pass stages (policy.h); none by default.

  // Teams and borrowing (see "Teams, borrowing and preemption" in docs/architecture.md).
  // Without borrowing, class quotas and team guarantees are hard caps (v1's behaviour when no
  // team has a guarantee). With it, idle GPUs are lent beyond them and taken back by preemption.
  bool borrowing = false;
  int32_t preemption_grace_seconds = 30;  // A preempted task's SIGTERM-to-SIGKILL time.
  TimeMicros min_runtime = 0;             // No task younger than this is preempted.
  // Borrowers' usage (GPU-seconds) decays by half in this time (fair share).
  TimeMicros fairshare_half_life = TimeMicros{7} * 24 * 3600 * kMicrosPerSecond;
  // Teams named by the configuration; the API may change or delete them (RestoreTeam).
  std::map<std::string, TeamLimits> teams;
  // The time limit (seconds) given to a task submitted without one whose team has none of its
  // own (scheduler.default_time_limit); 0: none, the task runs until it ends.
  int64_t default_time_limit = 0;
  // A task whose dependency can no longer be satisfied fails with error
  // "dependency_never_satisfied" (scheduler.kill_invalid_dependencies); false: it stays pending
  // with that reason until it is cancelled.
  bool kill_invalid_dependencies = true;
  // Backfill (scheduler.backfill): a queue head that waits for room on some node gets a planned
  // start at once, from the time limits of the tasks holding its nodes, and a younger task
  // starts on those nodes now only if its own limit ends before then. At most backfill_depth
  // planned starts a pass.
  bool backfill = false;
  int backfill_depth = 100;
};

// Reads the stored state of the tasks numbered first..last (those that exist, in any order).
using StoredTaskLookup =
    std::function<StatusOr<std::vector<StoredTaskState>>(TaskNumber first, TaskNumber last)>;

struct QuotaView {
  int total_gpus = 0;  // GPUs on online nodes.
  int quota[kPriorityCount] = {0, 0};
  int used[kPriorityCount] = {0, 0};
  // GPUs a class uses beyond its quota (borrowed from the other's idle share), and GPUs of its
  // quota the other class uses while it leaves them idle.
  int borrowed[kPriorityCount] = {0, 0};
  int lent[kPriorityCount] = {0, 0};
};

struct TeamView {
  std::string name;
  // Limits set by the configuration or the API; a team without any exists because its tasks
  // name it, and shares the rest of each class with the others like it.
  bool configured = false;
  TeamLimits limits;
  struct ClassUse {
    int guaranteed = 0;  // As applied: guarantees are scaled down while the class quota is short.
    int used = 0;        // GPUs held by its running and stopping tasks of this class.
    int borrowed = 0;    // GPUs of those that run beyond the guarantee.
  };
  ClassUse classes[kPriorityCount];  // By priority: online (high), batch (low).
  size_t pending = 0;
  double usage = 0;  // Fair-share usage: decayed GPU-seconds, as of the last pass.
};

struct GpuView {
  std::string node_id;
  int index = 0;
  std::string model;
  int64_t memory_mb = 0;
  GpuStatus status = GpuStatus::kIdle;  // kUnhealthy wins over busy and idle; offline over all.
  TaskNumber current_task = 0;          // 0: none.
  std::string health_reason;            // Set when unhealthy.
};

struct NodeView {
  std::string id;
  std::string address;
  bool online = false;
  int gpu_count = 0;
  int free_gpus = 0;  // Free healthy GPUs.
  TimeMicros last_heartbeat = 0;
  NodeMode mode = NodeMode::kSchedulable;
  Labels labels;
  int tasks = 0;  // Tasks holding GPUs there (running or stopping).
  // What it offers besides GPUs (0: not reported) and what its tasks were given of it.
  NodeResources resources;
  int64_t allocated_cpus_milli = 0;
  int64_t allocated_memory_mb = 0;
  // Its GPUs' NVLink groups, as lists of GPU indices by group; empty: none.
  std::vector<std::vector<int>> nvlink_groups;
};

class SchedulerCore {
 public:
  explicit SchedulerCore(CoreConfig config = {});
  ~SchedulerCore();
  SchedulerCore(const SchedulerCore&) = delete;
  SchedulerCore& operator=(const SchedulerCore&) = delete;

  // --- Commands -------------------------------------------------------------------------------

  // Queues a new task; returns its number. InvalidArgument names the bad field.
  // A task with dependencies (spec.depends_on, every entry waiting) is held, pending with reason
  // kDependency, until each is satisfied; one that can no longer be is failed (or held, see
  // CoreConfig::kill_invalid_dependencies). InvalidArgument for a parent that does not exist
  // (neither in memory nor in the store, see SetStoredTaskLookup).
  StatusOr<TaskNumber> Submit(const TaskSpec& spec, TimeMicros now);
  // Queues a job array of `count` members (1 to kMaxArraySize) of `spec`: consecutive numbers
  // from the one returned, indices 0..count-1 (spec's array fields are set here), one durable
  // change (Change::Kind::kTaskArray) for all of them. Errors as Submit's; nothing is queued on
  // an error.
  StatusOr<TaskNumber> SubmitArray(TaskSpec spec, int count, TimeMicros now);

  // Pending: leaves the queue. Running: marked cancelled and a stop is ordered, with
  // `grace_seconds` between SIGTERM and SIGKILL (-1: the agent's own grace period); its GPUs stay
  // held until the agent reports the finish or the node is lost. NotFound / FailedPrecondition
  // (already finished); InvalidArgument for a grace below -1.
  Status Cancel(TaskNumber task, TimeMicros now, int32_t grace_seconds = -1);

  // Stops a running task for `reason` (not kNone or kReconcile; kCancel is Cancel): stop orders
  // go to its nodes with the grace (-1: the agent's own), and it keeps its GPUs and its status
  // `running` until its agent confirms the end or its node is lost. Then it goes back to its
  // queue at its old position (preempt, drain, gpu_failure) or fails (member_failure, timeout),
  // with StopError(reason) as its error. A task already stopping keeps its first reason; the
  // orders are sent again (an agent only ever shortens a grace). A failed stop's finished_at is
  // the agent's (else now). InvalidArgument (reason, grace below -1), NotFound,
  // FailedPrecondition (not running).
  Status StopTask(TaskNumber task, StopReason reason, int32_t grace_seconds, TimeMicros now);

  // A node (re)joins with its GPUs. `running` is what its agent runs now, `finished` what
  // finished since it last reported. Finishes are recorded first; then running tasks the core
  // knows on this node are adopted, tasks it had put back in the queue are taken back, tasks it
  // does not know (or has given elsewhere) are stopped, and tasks it believed ran there but are
  // not reported are lost (node-loss rule). A report of an earlier run than the task's latest
  // changes nothing (a finish) or is stopped (a run); a queued task takes a finish of its
  // latest run only if that run was lost (its end was never recorded).
  // `resources`: the CPUs and memory it offers (none reported: nothing counted there); the
  // tasks it runs hold what they were given at their start. InvalidArgument (negative values).
  Status RegisterNode(const std::string& node_id, const std::string& address,
                      const std::vector<GpuInfo>& gpus, const NodeResources& resources,
                      const std::vector<RunningReport>& running,
                      const std::vector<FinishReport>& finished, TimeMicros now);
  Status RegisterNode(const std::string& node_id, const std::string& address,
                      const std::vector<GpuInfo>& gpus, const std::vector<RunningReport>& running,
                      const std::vector<FinishReport>& finished, TimeMicros now) {
    return RegisterNode(node_id, address, gpus, NodeResources{}, running, finished, now);
  }

  // Cordons (no new tasks), marks draining (no new tasks either), or makes a node schedulable
  // again. Its running tasks go on (DrainNode evicts them). A node keeps its mode while offline
  // and when it registers again; a change of mode is durable (a kNodeUpsert change). NotFound
  // if never registered.
  Status SetNodeMode(const std::string& node_id, NodeMode mode, TimeMicros now);
  // Marks a node draining and, with `evict`, stops every task running there for kDrain, each
  // with `grace_seconds` between SIGTERM and SIGKILL (-1: its own preemption grace, else
  // preemption_grace_seconds); they go back to their queues at their old place once their
  // agent confirms, without counting an attempt. Returns how many stops it ordered. NotFound if
  // never registered; InvalidArgument for a grace below -1.
  StatusOr<int> DrainNode(const std::string& node_id, bool evict, int32_t grace_seconds,
                          TimeMicros now);
  // Puts back a stored node mode (start-up, promotion); a node not registered yet keeps it until
  // it does. InvalidArgument for an empty id.
  Status RestoreNodeMode(const NodeRecord& record);

  // Marks a GPU healthy or not. An unhealthy GPU leaves placement and the quota totals; a task
  // running on it is stopped for gpu_failure (and requeued once its agent confirms). Health
  // also comes with RegisterNode (GpuInfo::healthy). NotFound (node, GPU index).
  Status SetGpuHealth(const std::string& node_id, int gpu_index, bool healthy,
                      const std::string& reason, TimeMicros now);

  // Whether a GPU of the node is unhealthy (false for an unknown node).
  bool AnyUnhealthyGpu(const std::string& node_id) const;

  // Replaces a node's labels (node filters read them). NotFound if never registered.
  Status SetNodeLabels(const std::string& node_id, Labels labels);

  // Keeps a node alive. NotFound if never registered; FailedPrecondition if offline (it must
  // register again).
  Status Heartbeat(const std::string& node_id, TimeMicros now);

  // The node is gone: its GPUs leave the pool and its running tasks go back to the head of their
  // queue with attempts+1, or fail with error "agent_lost" after max_attempts.
  Status NodeLost(const std::string& node_id, TimeMicros now);

  // The agent confirms that it started run `run` of the task (records the real start time, and
  // the CPUs the member on that node is bound to). FailedPrecondition also for the start of an
  // earlier run (IsEarlierRun). `run` 0: not known.
  Status TaskStarted(TaskNumber task, const std::string& node_id, TimeMicros now, int run = 0,
                     std::vector<int> cpu_set = {});

  // The agent reports a finish. NotFound: unknown task. FailedPrecondition: the task is not
  // running on that node (a duplicate, or a report from the wrong node). AlreadyExists: the
  // report is of an earlier run than the task's latest (its end is recorded; a resend after a
  // lost acknowledgement). No change on error.
  Status TaskFinished(const std::string& node_id, const FinishReport& report, TimeMicros now);
  // What a running member on `node_id` has used so far (its agent's heartbeat): kept in its
  // allocation, not recorded as a change (its finish records the last figure). Ignored, with
  // FailedPrecondition, unless run `run` of the task runs there (run 0: whichever runs).
  Status RecordUsage(const std::string& node_id, TaskNumber task, int run,
                     const ResourceUsage& usage);

  // Sets the online share in [0,1]; batch gets the rest. Running tasks are never stopped.
  Status SetOnlinePercent(double online_percent, TimeMicros now);

  // Sets a team's guarantees, cap and weight (durable: a kTeamUpsert change). InvalidArgument
  // names the field: a bad name, negative numbers, a weight <= 0, a guarantee above max_gpus, or
  // guarantees of a class adding up to more than its quota while GPUs are online.
  Status SetTeam(const std::string& name, const TeamLimits& limits, TimeMicros now);
  // Removes a team's limits (its tasks, if any come later, share the rest of the classes).
  // NotFound: no such team with limits. FailedPrecondition: it has pending or running tasks.
  Status DeleteTeam(const std::string& name, TimeMicros now);
  // Puts back a stored team record (start-up, promotion): limits set through the API win over
  // the configuration's, a deletion removes the configuration's, usage is kept.
  Status RestoreTeam(const TeamRecord& record);

  // Marks nodes silent for longer than heartbeat_timeout as lost.
  void Tick(TimeMicros now);

  // A scheduling pass: starts every task that can start now, in queue order. Returns at once
  // when nothing that could let a task start happened since the last pass (a submission behind
  // the head of its queue, a heartbeat, a start confirmation do not).
  void Schedule(TimeMicros now);

  // --- Restoring state (start-up, or a standby applying the primary's log) -------------------

  // Puts a task back exactly as it was saved (pending: into its queue; running: onto its
  // allocation once its node registers; finished: kept for lookups). Its node need not be known
  // yet: running tasks whose node never comes back are lost after heartbeat_timeout from
  // `now` (see ExpectNodes).
  // Taken by value: a task moved in is not copied.
  Status Restore(Task task, TimeMicros now);
  void SetNextTaskNumber(TaskNumber next);
  // How the core reads tasks it has forgotten (the store): parents of dependencies. Without
  // one, a parent must be in memory.
  void SetStoredTaskLookup(StoredTaskLookup lookup) { stored_lookup_ = std::move(lookup); }
  // Drops a finished task from memory (history stays in the database).
  void Forget(TaskNumber task);

  // --- Outputs --------------------------------------------------------------------------------

  std::vector<Decision> TakeDecisions();
  // The same into `out` (its old contents dropped), swapping buffers so that a caller taking
  // decisions after every pass reuses their memory.
  void TakeDecisions(std::vector<Decision>& out);
  std::vector<Change> TakeChanges();
  // What happened since the last call, in order (see Event); empty when record_events is off.
  std::vector<Event> TakeEvents();
  bool HasDecisions() const { return !decisions_.empty(); }

  // Hints for a caller that knows which tasks it will report finished next (the simulator):
  // fetch into cache what finishing `t` (number n) reads, in two steps some work apart: the
  // record, then, once the record has arrived, its node. They change nothing.
  void PrefetchTask(TaskNumber n, const Task* t) const;
  void PrefetchTaskNode(const Task* t) const;

  // --- Queries --------------------------------------------------------------------------------

  // The pointer stays valid, and the task at that address, until the task is forgotten.
  const Task* FindTask(TaskNumber task) const;
  // The task's pending reason as of the last pass (kNone if not pending).
  PendingReason ReasonOf(const Task& task) const;
  QuotaView Quota() const;
  // Every team with limits, tasks or usage, by name.
  std::vector<TeamView> Teams() const;
  std::optional<TeamView> FindTeam(const std::string& name) const;
  double online_percent() const { return config_.online_percent; }
  const CoreConfig& config() const { return config_; }
  TaskNumber next_task_number() const { return next_number_; }
  std::vector<GpuView> Gpus() const;
  std::vector<NodeView> Nodes() const;
  std::optional<NodeView> FindNode(const std::string& node_id) const;
  size_t PendingCount(Priority p) const { return pending_count_[static_cast<int>(p)]; }
  // Pending tasks whose spec names `user` (limits.max_pending_per_user).
  size_t PendingOfUser(const std::string& user) const {
    auto it = pending_by_user_.find(user);
    return it == pending_by_user_.end() ? 0 : it->second;
  }
  size_t RunningCount(Priority p) const { return running_count_[static_cast<int>(p)]; }
  size_t TaskCount() const { return tasks_.size(); }
  // Calls fn(const Task&) for every task in memory, in no particular order.
  template <typename Fn>
  void ForEachTask(Fn&& fn) const {
    tasks_.ForEach([&](TaskNumber, const TaskRecord* t) { fn(static_cast<const Task&>(*t)); });
  }
  // The node kept for a starving task of priority p, if any (the first, if it holds several).
  std::optional<std::string> ReservedNode(Priority p) const;
  // Every reservation: the task and the nodes kept for it.
  struct ReservationView {
    Priority priority = Priority::kLow;
    TaskNumber task = 0;
    std::vector<std::string> nodes;
  };
  std::vector<ReservationView> Reservations() const;
  // The starts the last pass planned (backfill), in queue order: when, and on which nodes.
  struct PlannedStartView {
    Priority priority = Priority::kLow;
    TaskNumber task = 0;
    TimeMicros start_at = 0;
    std::vector<std::string> nodes;
  };
  std::vector<PlannedStartView> PlannedStarts() const;
  // The task whose planned start holds `task` back (its pending reason is kReservedFor), or 0.
  TaskNumber ReservedFor(const Task& task) const;
  // The head of every non-empty queue (one per priority, GPU model and count) with the reason it
  // waited after the last pass, in no particular order, into `out` (its old contents dropped).
  // O(queues): the simulator asks after every pass.
  struct QueueHead {
    Priority priority = Priority::kLow;
    const std::string* gpu_model = nullptr;  // Valid until the next command.
    int gpu_count = 0;
    TaskNumber task = 0;
    PendingReason reason = PendingReason::kQueued;
    size_t tasks = 0;  // Pending in its shape, the head included.
  };
  void QueueHeads(std::vector<QueueHead>& out) const;
  // Why a pending task's nodes cannot take it: every registered node counted by the first rule
  // that turns it away, in the order a pass applies them (online, schedulable, GPU model, GPU
  // count, node selector, each configured filter, CPUs and memory it could ever have, kept for
  // another task, free GPUs, free CPUs and memory), or as one that could take it (a member of
  // it) now. O(nodes): for a look at one task, not for lists.
  struct PendingDetail {
    int nodes = 0;                                      // Registered.
    int available = 0;                                  // Could take it (a member) now.
    int needed = 1;                                     // Its members: one node each.
    std::vector<std::pair<std::string, int>> rejected;  // Rule, nodes; in the pass's order.
    // "2 of 12 nodes can take it; 4 without label rack=r2, 3 cordoned, 3 with fewer than 4 free
    // GPUs" ("can take a member (it needs 4)" for a gang).
    std::string Text() const;
  };
  std::optional<PendingDetail> ExplainPending(TaskNumber task) const;
  // Pending task numbers of one priority in queue order (O(pending); for tests and snapshots).
  std::vector<TaskNumber> QueueOrder(Priority p) const;

  // Drops what passes remember to skip work (shapes found to have no room, and that nothing
  // happened since the last pass); for tests and benchmarks: a core that does so before every
  // pass must decide exactly as one that does not.
  void ForgetNoRoom() {
    structure_seq_ = ++change_seq_;
    pass_needed_ = true;
  }

  // Checks every invariant (O(everything)); for tests. Returns Internal naming the first broken.
  Status CheckInvariants() const;

  // Counters for the simulator and metrics.
  struct Stats {
    uint64_t decisions = 0;  // Start decisions made.
    uint64_t passes = 0;
    uint64_t shape_checks = 0;      // Shape heads examined by passes.
    uint64_t passes_skipped = 0;    // Passes with nothing to do since the last one (see Schedule).
    uint64_t preemptions = 0;       // Tasks stopped to make room for a task within its guarantee.
    uint64_t reclaim_searches = 0;  // Victim searches (each a head within its guarantee).
    uint64_t gang_starts = 0;       // Start decisions of gangs (one per gang, in `decisions`).
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Shape;
  struct NodeState;
  struct PriorityQueue;
  struct TaskRecord;

  // --- Teams, groups, borrowing (teams.cc) ---
  // A guarantee holder in one class: a team with a guarantee there, or the class's shared part
  // (what its teams without one share). With borrowing it knows which of its tasks run within
  // the guarantee and which borrow, each set in start order.
  struct Group {
    QuotaTree::NodeId node = 0;  // Its quota node: guarantee and use.
    int within_gpus = 0;
    int reserved = 0;  // GPUs its tasks waiting for their victims will take.
    absl::btree_set<std::pair<uint64_t, TaskNumber>> within;
    absl::btree_set<std::pair<uint64_t, TaskNumber>> borrowed;
  };
  struct TeamState {
    std::string name;
    bool configured = false;  // Has limits (configuration or API).
    bool api_set = false;     // Its limits (or deletion) came through the API and are stored.
    bool deleted = false;     // Deleted through the API: the configuration's limits are ignored.
    TeamLimits limits;
    QuotaTree::NodeId leaf[kPriorityCount] = {0, 0};
    int group[kPriorityCount] = {0, 0};  // Index in groups_.
    int used[kPriorityCount] = {0, 0};
    int borrowed_gpus[kPriorityCount] = {0, 0};
    int held_gpus = 0;      // Both classes, for max_gpus.
    int reserved_gpus = 0;  // Kept for its tasks waiting for their victims (CountReservation).
    size_t pending = 0;
    double usage = 0;  // Decayed GPU-seconds as of usage_at.
    TimeMicros usage_at = 0;
    double stored_usage = -1;  // Usage last written out (kTeamUpsert), to skip unchanged ones.
  };
  // The team's index, created (without limits) on first use; -1 when `create` is false and
  // there is none.
  int TeamId(const std::string& name, bool create = true);
  int TeamIdOf(const std::string& name) const;
  // Rebuilds the quota tree from the teams (root, classes, each class's shared node, a leaf per
  // team and class) and charges it with what each team holds.
  void RebuildQuotaTree();
  // Holds (sign +1) or gives back (-1) t's GPUs in the quota tree, its team and its group;
  // with borrowing, a start decides whether t borrows.
  void ChargeTask(TaskRecord& t, int sign);
  // Moves tasks between within and borrowed as guarantees and use change (borrowing only):
  // the youngest within tasks borrow while a group holds more than its guarantee within, the
  // oldest borrowers come back within while they fit.
  void RebalanceGroup(Group& g);
  void RebalanceGroups();
  void SetBorrowed(TaskRecord& t, bool borrowed);
  // Whether `gpus` more for `team` in class `prio` stay within its group's guarantee, counting
  // what is kept for preemptors (but `own_reserved`, the asking task's own).
  bool WithinGuarantee(int team, int prio, int gpus, int own_reserved = 0) const;
  // Whether a head of `team` may take `gpus` more: kNone, or kTeamLimit.
  PendingReason TeamAdmits(int team, int gpus, int own_reserved = 0) const;
  // The GPUs kept for task `id` by a preemption (0 if none).
  int OwnReserved(TaskNumber id) const;
  void AccrueUsage(TimeMicros now);
  double FairShareKey(int team) const;
  void EmitTeam(const TeamState& team);
  void TeamChanged(const TeamState& team, TimeMicros now);
  TeamView ViewOf(const TeamState& team) const;

  // --- Preemption (preemption.cc) ---
  // Whether t's GPUs may be taken back now: borrowed, preemptible, running and not stopping,
  // every member holding its GPUs (a gang is preempted whole). Counted per node slice
  // (eligible; a gang's on each member's node), which the reclaim indexes follow.
  bool Eligible(const TaskRecord& t) const;
  void UpdateEligible(TaskRecord& t);
  // Counts t's GPUs as eligible or not (false before its GPUs are released, or any member's),
  // on each member's node slice.
  void CountEligible(TaskRecord& t, bool eligible);
  // Counts a victim's GPUs as incoming on each of its members' nodes (those that still hold
  // them), or takes them out.
  void CountIncoming(TaskRecord& t, bool counted);
  // What the post-filter stage applies (ApplyPreemption): victims to stop, each with the node
  // its event names and its grace (-1: its own or the configuration's), and the nodes kept for
  // the waiting task, one per member.
  struct PreemptionChoice {
    struct Chosen {
      TaskRecord* task = nullptr;
      uint32_t slot = 0;
      int32_t grace_seconds = -1;
    };
    std::vector<Chosen> victims;
    std::vector<uint32_t> slots;
  };
  // The built-in post-filter for a gang: victims on as many nodes as it has members (false: no
  // such nodes).
  bool ReclaimGang(const TaskRecord& t, TimeMicros now, PreemptionChoice& out);
  // The nodes the starvation guard keeps for tasks other than `task` (in reclaim_excluded_).
  const std::vector<uint32_t>& GuardedForOthers(TaskNumber task);
  // The first of t's filters that turns `node` away: the built-in node selector (`which`: the
  // selector's entry the node lacks), then each configured filter (`which`: its position in
  // policies.filters). What PassesFilters tests and ExplainPending counts.
  struct FilterVerdict {
    enum Kind : uint8_t { kPasses, kSelector, kFilter } kind = kPasses;
    uint32_t which = 0;
  };
  FilterVerdict CheckFilters(const Task& t, const NodeState& node, bool selector_checked) const;
  // Whether every filter lets t run on `node`.
  // `selector_checked`: the caller tested the node selector already (HasAll).
  bool PassesFilters(const Task& t, const NodeState& node, bool selector_checked = false) const {
    return CheckFilters(t, node, selector_checked).kind == FilterVerdict::kPasses;
  }
  // The one node test of every path (the pass, the starvation guard, the reclaim, whether any
  // node could ever hold t): t's node selector (unless `selector_checked`: the caller tested it
  // with HasAll), the configured filters, and a member's CPUs and memory
  // (NodeState::ResourceShortage) against what the node has free now (kFree: the pass), or
  // would have with nothing else running (kEmpty: a node the guard keeps for t, or the reclaim
  // empties for it, must hold it once the others are gone). Its GPUs are the caller's to check
  // (the index's buckets, the victim plans).
  enum class Against : uint8_t { kFree, kEmpty };
  bool Feasible(const Task& t, const NodeState& node, Against against,
                bool selector_checked = false) const;
  // Where nodes report CPUs and memory: whether enough placeable nodes (one per member) could
  // hold t's own request with nothing else running (a look at every node, only for a task that
  // asks for CPUs or memory and found no node)...
  bool CouldEverHold(const Task& t, const std::vector<int>& models) const;
  // ...and why it found none: kInsufficientCpu or kInsufficientMemory when enough nodes have its
  // GPUs free and one of them lacks the rest; kNone when GPUs are what it lacks.
  PendingReason ShortageWhereGpusFit(const Task& t, const std::vector<int>& models) const;
  // Stops victim v (every member) for t, whose room is on `node`; `grace_seconds` -1: v's own
  // preemption grace, else the configuration's.
  void Preempt(TaskRecord& v, const TaskRecord& t, const NodeState& node, int32_t grace_seconds,
               TimeMicros now);
  void ReclaimSync(NodeState& node);
  void ReclaimInsert(NodeState& node);
  void ReclaimErase(NodeState& node);
  // The built-in post-filter, for a head within its guarantee that found no room: borrowed tasks
  // to stop on one node (false: none would make room). It skips the nodes the starvation guard
  // keeps for other tasks (GuardedForOthers), not every node the pass skips: a node kept for
  // another preemptor may be shared, Available counting what that one was promised.
  bool Reclaim(const TaskRecord& t, TimeMicros now, PreemptionChoice& out);
  // A configured hook's plan as a choice: its victims that run and are not stopping, and its
  // nodes (false: they do not name one placeable node per member, or no victim is left).
  bool ChoiceOf(const TaskRecord& t, const PreemptionPlan& plan, PreemptionChoice& out);
  // Stops the choice's victims for t and keeps its nodes for it; the rest of the pass skips them.
  void ApplyPreemption(TaskRecord& t, const PreemptionChoice& choice, TimeMicros now);
  // Whether t waits for victims already stopping for it: the nodes kept for it will hold it
  // once they are gone (else that reservation is dropped), or a new leader restored victims
  // stopping for it (a task on one node: their node is kept for it again).
  bool WaitingForVictims(TaskRecord& t);
  struct VictimPlan {
    uint32_t slot = 0;
    std::vector<TaskRecord*> victims;
    int own_class = 0;
    int freed = 0;
    // The run time its victims lose (GPUs x time since their start), in GPU-microseconds:
    // between nodes with as many victims, the one that throws away the least work wins.
    int64_t lost = 0;
  };
  // The fewest eligible tasks on `node` (model slice `model`) whose GPUs give `t` room, or
  // nullopt. `victim_class`: only that class's tasks (-1: any).
  std::optional<VictimPlan> PlanVictims(const TaskRecord& t, const NodeState& node, int model,
                                        int victim_class, TimeMicros now);
  // With a topology key: puts first the plans of the value whose best `members` plans stop the
  // fewest tasks (then lose the least work; then by name), when a value has that many.
  void OneValueFirst(std::vector<VictimPlan>& plans, size_t members) const;
  // Victims stopping for a preemptor: the node they free is kept for it; one that does not
  // confirm within grace + heartbeat_timeout is handled by the node-loss rule.
  struct PendingPreemption {
    TaskNumber victim = 0;
    TaskNumber preemptor = 0;
    uint32_t slot = 0;
    TimeMicros deadline = 0;
  };
  void ExpirePreemptions(TimeMicros now);
  Status CheckTeamInvariants() const;
  // A member's room on a node: GPUs of one model, CPUs and memory (0 where the node does not
  // report them).
  struct Amounts {
    int gpus = 0;
    int64_t cpus_milli = 0;
    int64_t memory_mb = 0;
    bool Covers(const Amounts& need) const {
      return gpus >= need.gpus && cpus_milli >= need.cpus_milli && memory_mb >= need.memory_mb;
    }
  };
  // What a member of t is given on `node`.
  static Amounts NeedOn(const Task& t, const NodeState& node);
  // What task `task` can count on in a node (GPUs of slice `model`): free, plus what victims
  // that are stopping hold, less what is kept for other waiting preemptors.
  Amounts Available(const NodeState& node, int model, TaskNumber task) const;
  std::vector<uint32_t> reclaim_excluded_;  // Scratch for Reclaim.
  std::vector<uint32_t> reclaim_nodes_;     // Scratch for Reclaim.
  PreemptionChoice preemption_choice_;      // Scratch for PostFilter.

  void Emit(const Task& t);
  // Submit's checks of a spec: InvalidArgument naming the field.
  Status CheckSpec(const TaskSpec& spec) const;
  // A new pending task of `spec` at the back of its queue, with its submission event; no change.
  TaskRecord& Queue(const TaskSpec& spec, int team, TimeMicros now, bool enqueue = true);
  // The team of a new task of `spec` (created if new); InvalidArgument (TooManyTeams) when a
  // new one would pass kMaxTeams.
  StatusOr<int> TeamForSubmission(const std::string& name);
  // Records an event about task t (node: where it happened, if anywhere).
  void EmitEvent(Event::Kind kind, const Task& t, TimeMicros now, std::string_view node = {},
                 std::string_view detail = {});
  Event& EmitNodeEvent(Event::Kind kind, const std::string& node_id, TimeMicros now);
  static constexpr size_t kStartPrefetchDistance = 16;
  void PrefetchQueued(const Shape& shape) const;
  // Starts t on the lowest free GPU positions of `model` on the node in `slot` (it has enough).
  void StartTask(Task& t, uint32_t slot, int model, TimeMicros now);
  // Starts gang t: member i (rank i) on the node in slots[i], GPUs of `model` (Permit said yes).
  void StartGang(Task& t, const std::vector<uint32_t>& slots, int model, TimeMicros now);
  // Gives task `id` the lowest `count` free usable positions of `model` on `node` (their indices
  // appended to `indices`), with the slice and the index.
  // Gives member `na` of t `count` GPUs of `model` on `node`, and its CPUs and memory there.
  void TakeGpus(NodeState& node, const Task& t, int model, int count, NodeAllocation& na);
  // TakeGpus's choice of positions on a node with NVLink groups (see pass.cc).
  static void TakeLinkedGpus(NodeState& node, TaskNumber id, int model, int count,
                             std::vector<int>& indices);
  // The part of a node a start or a release reads (see NodeState).
  static constexpr size_t kNodeHotBytes = 192;
  void ReleaseGpus(Task& t);
  // Frees what task `id` holds on `node`: its GPUs, and the CPUs and memory of its member
  // there (`member`, unless it has ended already).
  void ReleaseOnNode(NodeState& node, TaskNumber id, const NodeAllocation& member);
  void Enqueue(Task& t);
  void Dequeue(Task& t);
  // The starvation guard of queue q starts over with `oldest` as its oldest task (0: none); the
  // reservation of the task it guarded goes.
  void ResetGuard(PriorityQueue& q, TaskNumber oldest);
  void RequeueOrFail(Task& t, TimeMicros now, std::string_view error);
  // Retries (TaskSpec::max_retries): a failed run waits out its backoff in retry_wait_, pending
  // but in no queue (counted as pending all the same), then goes back to its old place.
  static constexpr int64_t kMaxRetryBackoffSeconds = 3600;
  void RetryLater(Task& t, const FinishReport& report, TimeMicros now, std::string_view node);
  void WaitForRetry(Task& t);
  void LeaveRetryWait(Task& t);  // Sets retry_at to 0.
  void QueueDueRetries(TimeMicros now);
  void CountWaiting(const Task& t, int sign);
  std::set<std::pair<TimeMicros, TaskNumber>> retry_wait_;
  // Dependencies (TaskSpec::depends_on, dependencies.cc). A task with one still waiting is
  // pending in no queue (counted as pending, as retry waits are). Its parents are watched by
  // their array's first number (a member stands for its whole array), or their own.
  struct DependencyWait {
    std::vector<TaskNumber> key;        // Per entry: the parent's watch key.
    std::vector<int32_t> members;       // Per entry: members of the parent (1, or its array's).
    std::vector<int32_t> remaining;     // Per entry: members whose condition is still open.
    std::vector<uint8_t> unsuccessful;  // Per kAfterNotOk entry: a member ended without success.
  };
  // What a parent has been counted for: it started (kAfter), it ended.
  static constexpr uint8_t kParentStarted = 1;
  static constexpr uint8_t kParentEnded = 2;
  // Works out where each waiting entry of `deps` (a task numbered `self`) stands from its
  // parents, in memory or in the store, and how many members each still waits for.
  // InvalidArgument names a parent that does not exist; `restoring`: such an entry can never be
  // satisfied instead (deleted by the store's retention).
  Status CountDependencies(TaskNumber self, Dependencies& deps, DependencyWait* wait,
                           bool restoring) const;
  static bool AnyDependency(const Task& t, DependencyState state);
  // Holds t (pending, in no queue) and watches its waiting entries' parents.
  void HoldForDependencies(TaskRecord& t, DependencyWait wait);
  // Submission: counts `deps` for the next task number (InvalidArgument: unknown parent).
  StatusOr<DependencyWait> CheckDependencies(Dependencies& deps, TimeMicros now);
  // Queues t if its entries are all satisfied; else holds it and returns true.
  bool StartDependencyWait(TaskRecord& t, const DependencyWait& wait);
  // Backfill (backfill.cc): starts planned in time for heads that wait for node room.
  struct PlannedStart {
    TaskNumber task = 0;
    Priority priority = Priority::kLow;
    TimeMicros start_at = 0;
    std::vector<uint32_t> slots;  // One per member.
  };
  // When t lets the GPUs it holds go at the latest: its time limit, its grace once stopping;
  // never (the largest time) without a limit.
  TimeMicros HeldUntil(const Task& t, TimeMicros now) const;
  // When `gpus` GPUs of `model` are free on the node as its holders' limits say; never when
  // not known.
  TimeMicros ReadyAt(const NodeState& node, int model, int gpus, TimeMicros now) const;
  // Plans t's start on the nodes ready first (not excluded, planned or kept for another task);
  // false when no node ever is as far as the limits tell.
  bool PlanStart(int prio, const Task& t, const std::vector<uint32_t>& excluded, TimeMicros now);
  // `excluded` plus the planned nodes t may not use now: those of every start planned before
  // its limit would end.
  const std::vector<uint32_t>& BackfillSkip(const Task& t, const std::vector<uint32_t>& excluded,
                                            TimeMicros now);
  const PlannedStart* PlannedStartOf(TaskNumber task) const;
  // The task whose planned start keeps shape's head t from room it would have now, or 0.
  TaskNumber HeldBackFor(Shape& shape, const Task& t, const std::vector<uint32_t>& excluded,
                         TimeMicros now);
  // Placeable nodes by when `gpus` GPUs of `model` are ready there (ReadyAt; never-ready ones
  // left out), then node order; made once a pass for each size a head plans.
  struct ReadyNode {
    TimeMicros ready = 0;
    uint64_t rank = 0;
    uint32_t slot = 0;
    bool operator<(const ReadyNode& o) const {
      return std::tie(ready, rank, slot) < std::tie(o.ready, o.rank, o.slot);
    }
  };
  struct ReadyList {
    int model = 0;
    int gpus = 0;
    std::vector<ReadyNode> nodes;
  };
  const std::vector<ReadyNode>& ReadyNodes(int model, int gpus, TimeMicros now);
  std::vector<PlannedStart> backfill_plan_;
  std::vector<uint32_t> backfill_skip_;
  std::vector<ReadyList> ready_lists_;
  std::vector<std::pair<TimeMicros, uint32_t>> plan_chosen_;
  // Per node slot: a mark, the pass's plan_mark_ once planned, a generation while excluded.
  std::vector<uint64_t> node_marks_;
  uint64_t mark_generation_ = 0;
  uint64_t plan_mark_ = 0;
  // Records what parent p has been counted for: what it is now.
  void NoteSeen(const Task& p);
  // The same for a task entering memory (restored) whose key is watched.
  void NoteIfWatched(const Task& t) {
    if (!dependents_.empty() && dependents_.contains(WatchKey(t))) NoteSeen(t);
  }
  // Counts one member of a parent for entry i of a held task: it started, or ended (success
  // says how); returns whether the entry's state changed.
  bool CountParent(Task& child, size_t i, bool started, bool ended, bool success);
  // Acts on a held task whose entries changed: queued once all are satisfied, failed (or held
  // with that reason) once one never will be. Returns false while it still waits.
  bool SettleDependencies(TaskRecord& t, TimeMicros now);
  void LeaveDependencyWait(TaskRecord& t);
  // Works through parents that changed (Emit notes them) and tasks to settle.
  void ResolveDependencies(TimeMicros now);
  static bool HasStarted(const Task& t);
  static TaskNumber WatchKey(const Task& t) {
    return t.spec.array_size > 0 ? t.id - static_cast<TaskNumber>(t.spec.array_index) : t.id;
  }
  StoredTaskLookup stored_lookup_;
  std::unordered_map<TaskNumber, DependencyWait> dependency_wait_;
  std::unordered_map<TaskNumber, std::vector<TaskNumber>> dependents_;  // key -> held tasks
  std::unordered_map<TaskNumber, uint8_t> parent_seen_;  // member -> kParent* counted
  std::vector<TaskNumber> parent_changes_;               // Members of watched keys emitted since.
  std::vector<TaskNumber> dependency_settle_;            // Held tasks to settle (restored ones).
  // The same for a task whose GPUs are already released.
  void RequeueOrFailReleased(Task& t, TimeMicros now, std::string_view error);
  // A running task stopped for `reason` has ended (its GPUs already released): back to its queue
  // or failed, as the reason says (see StopTask).
  void EndStop(Task& t, StopReason reason, TimeMicros now, std::string_view node);
  // t held GPUs on `node`, which is gone or came back without it: a stop ends as if confirmed,
  // a cancelled task's GPUs are free, a running one is requeued or fails (agent_lost). On
  // several nodes, only its member there ends, and the others are stopped (member_lost) until
  // the last one has.
  void LoseHeld(Task& t, TimeMicros now, const std::string& node);
  // Tasks on several nodes (one member per node, see RunningMemberOn).
  // Frees the member's GPUs and marks it ended; returns whether it was the last one running.
  bool EndMember(Task& t, int member);
  // Stop orders for every member still running, with t's stop reason.
  void OrderStops(Task& t, int32_t grace_seconds, TimeMicros now);
  // A member's agent reports its end: the task succeeds once all have, and the first failure
  // stops the others and fails it (member_failed:<node>).
  Status FinishMember(Task& t, int member, const FinishReport& report, TimeMicros now);
  void RecomputeQuota();
  // `why` goes into the node_lost event ("heartbeat_timeout", "lost").
  void TakeNodeOffline(NodeState& node, TimeMicros now, std::string_view why);
  Status ApplyFinish(Task& t, const FinishReport& report, TimeMicros now);
  // The pass's stages (pass.cc).
  bool Admit(int prio, const Shape& shape) const;
  // Whether enough online schedulable nodes (one per gang member) of one of `models`, large
  // enough for a member, have the labels of the task's node selector.
  bool EnoughNodesMatch(const Task& t, const std::vector<int>& models) const;
  // Whether at least one node per member of t is in the index, passes ok(node) and has a model
  // of `models` with room for a member when empty (a walk of every node).
  template <typename Ok>
  bool EnoughNodesWhere(const Task& t, const std::vector<int>& models, Ok&& ok) const;
  std::optional<PlacementIndex::Fit> FindNode(const Shape& shape, const Task& t,
                                              const std::vector<int>& models,
                                              const std::vector<uint32_t>& excluded) const;
  enum class Phase : uint8_t;
  // Tries to start the head of `shape`; kNone when it started, else why not (kQueued: not its
  // phase).
  PendingReason TryStart(int prio, Shape& shape, const std::vector<uint32_t>& excluded,
                         TimeMicros now, Phase phase);
  PendingReason TryStartHead(int prio, Shape& shape, Task& t, const std::vector<uint32_t>& excluded,
                             TimeMicros now, Phase phase);
  std::vector<uint32_t> own_excluded_;  // Scratch: excluded nodes minus a task's own.
  // Per label ("key\0value"), the placement index's set of the nodes that have it: a node
  // selector is tested on bits, and the index skips whole words of nodes without the labels.
  absl::flat_hash_map<std::string, PlacementIndex::SetId> label_sets_;
  using SelectorSets = absl::InlinedVector<PlacementIndex::SetId, 4>;
  // The set of the nodes labelled key=value; nullopt when no node ever was.
  std::optional<PlacementIndex::SetId> LabelSet(const std::string& key,
                                                const std::string& value) const;
  // The sets of the selector's labels into `sets`; false when a label is on no node.
  bool SetsOf(const std::vector<std::pair<std::string, std::string>>& selector,
              SelectorSets* sets) const;
  // The same for a shape's selector, kept in the shape; null when a label is on no node.
  const SelectorSets* ShapeSets(const Shape& shape) const;
  uint64_t label_generation_ = 1;  // Moves on when a label appears on a node for the first time.
  bool HasAll(const SelectorSets& sets, uint32_t slot) const {
    return index_.InAllSets(sets, slot);
  }
  // A place for each member of the gang at the head of `shape`, in rank order, into `slots`:
  // the model they share, or -1 (slots then empty) when they do not all fit.
  int FindGang(const Shape& shape, const Task& t, const std::vector<int>& models,
               const std::vector<uint32_t>& excluded, std::vector<uint32_t>& slots);
  // The permit stage: whether `slots` place every member of a task of `shape` (one per node,
  // distinct placeable nodes, each with room of `model`).
  bool Permit(const Shape& shape, int model, const std::vector<uint32_t>& slots);
  std::vector<uint32_t> gang_slots_;  // Scratch: a gang's nodes.
  // With a topology key: its values seen on nodes (NodeState::topology indexes them, and is
  // the node's group in the index), each value's name and label set, and the set of the nodes
  // without the label.
  struct TopologyValue {
    std::string name;
    PlacementIndex::SetId set = 0;
    uint32_t rank = 0;  // In name order, once topology_ranked_.
  };
  absl::flat_hash_map<std::string, int32_t> topology_values_;
  std::vector<TopologyValue> topology_;
  bool topology_ranked_ = true;
  PlacementIndex::SetId unlabelled_set_ = 0;
  // Scratch for PackByTopology, empty between gangs: the nodes that fit a member by value, in
  // best-fit order, where the index's counts are not exact (a selector, a filter, CPU or
  // memory); the groups it weighs; the nodes without the label that fit.
  std::vector<std::vector<uint32_t>> by_topology_;
  struct TopologyGroup {
    int32_t value;       // >= 0: a value; < 0: the node without the label at -value - 1 of `alone`.
    int32_t count;       // Nodes that fit a member.
    int64_t whole = 0;   // GPUs its nodes that fit would leave free, taken whole.
    uint32_t order = 0;  // For ties: values by name, then the nodes without the label.
  };
  std::vector<TopologyGroup> topology_groups_;
  std::vector<uint32_t> topology_alone_;
  // The nodes of `model` for the gang at the head of `shape` on the fewest values of the
  // topology key into `slots`: one value when one holds it (the tightest: fewest GPUs left free
  // on the nodes taken; then the fewest nodes that fit; then by name), else the values with the
  // most nodes that fit, whole, and the one chosen so that holds the rest. A node without the
  // label is a value of its own. Fewer than its members when they do not fit.
  void PackByTopology(const Shape& shape, const Task& t, int model,
                      const std::vector<uint32_t>& excluded, const SelectorSets& sets,
                      std::vector<uint32_t>& slots);
  // Puts first, in their order, the nodes of the first value of the topology key that has `n`
  // of `slots` (which are in order of preference); the order is kept when none has.
  void FirstValueHolding(std::vector<uint32_t>& slots, int n) const;
  // The lowest gang port no gang holding GPUs uses with its rank 0 on `node`; 0 if none is left.
  int32_t FreeGangPort(const NodeState& node) const;
  void ReclaimBehind(int prio, Shape& shape, TimeMicros now);
  // Starts the class's tasks waiting for victims whose node now has room for them.
  void StartPreemptors(int prio, TimeMicros now);
  // The post-filter stage, for a head that cannot start for `why`: waits for victims already
  // stopping for it, else asks the configured hook or the built-in reclaim (borrowing, a head
  // within its guarantee waiting for room on a node) and applies its plan. Returns
  // kWaitingForPreemption while victims stop for it, else `why`.
  PendingReason PostFilter(TaskRecord& t, PendingReason why, TimeMicros now);
  // Returns true when the queue holds (nothing younger starts); else adds the oldest task's
  // reserved nodes to `excluded`.
  bool HoldForOldest(int prio, Shape& head_shape, PendingReason reason,
                     std::vector<uint32_t>& excluded);
  // Passes with borrowing run in two phases: heads within their guarantee first (the others
  // wait for the second), then borrowers, team by team in fair-share order.
  enum class Phase : uint8_t { kAll, kGuaranteed, kBorrowing };
  // One class's part of a pass in one phase; returns true when its queue holds.
  bool SchedulePhase(int prio, Phase phase, TimeMicros now);
  bool InPhase(const Shape& shape, Phase phase, int prio) const;

  // Reservations (queues.cc): nodes kept for one task; no other task may start on them. The
  // starvation guard keeps them for a queue's oldest task; a preemption keeps the node its
  // victims free for the task they make room for.
  struct Reservation {
    Priority priority = Priority::kLow;
    TaskNumber task = 0;
    std::vector<uint32_t> slots;
    bool preemption = false;
    // A preemption's: the GPUs its task will take, counted against its team's cap and its
    // group's guarantee while its victims stop (CountReservation), and those it will take on
    // each of its nodes (a gang's member's; the task's own on one node), promised there.
    int gpus = 0;
    int per_slot = 0;
    int team = 0;
    // The CPUs and memory a member is given on each of its nodes (as slots), promised there.
    std::vector<int64_t> slot_cpus_milli;
    std::vector<int64_t> slot_memory_mb;
  };
  // Counts r's promised GPUs in its nodes, team and group (sign +1) or takes them out (-1; the
  // group then rebalances unless `rebalance` is false: the caller counts it again at once).
  void CountReservation(const Reservation& r, int sign, bool rebalance = true);
  const Reservation& Reserve(Priority p, TaskNumber task, uint32_t slot, bool preemption = false);
  // A preemption's reservation of `slots` for task (one per member), replacing what the guard
  // kept for it.
  const Reservation& ReservePreempted(Priority p, TaskNumber task,
                                      const std::vector<uint32_t>& slots);
  const Reservation* ReservationOf(TaskNumber task) const;
  // Starts gang t on the nodes a preemption kept for it once each has room for a member (of
  // one model); false when one has not yet.
  bool StartReservedGang(Task& t, const Reservation& r, const std::vector<int>& models,
                         TimeMicros now);
  // The starvation guard's reservation for gang t: as many nodes as it has members.
  const Reservation* ReserveForGang(Priority p, const Task& t);
  void DropReservation(TaskNumber task);
  void DropReservationsOn(uint32_t slot);
  bool ReservedForOther(uint32_t slot, TaskNumber task) const;

  // The placement index holds exactly the placeable nodes (online, schedulable), with their
  // usable GPUs. Call IndexErase before changing a node's slices, mode or online flag, and
  // IndexInsert after.
  void IndexInsert(NodeState& node);
  void IndexErase(NodeState& node);
  // Sets a node's mode (it differs) with its index entry, reservations and pass flags.
  void ApplyNodeMode(NodeState& node, NodeMode mode);
  // Makes the GPU at `pos` usable or not, with its slice, and the totals (node out of the index).
  void SetUsable(NodeState& node, size_t pos, bool healthy);
  PendingReason Diagnose(const Task& t, const std::vector<int>& models) const;
  const std::vector<int>& ModelsFor(const std::string& wanted);
  const std::vector<int>& ShapeModels(Shape& shape);
  int InternModel(const std::string& model);
  NodeState& AddNodeState(const std::string& id);
  NodeState* FindNodeState(const std::string& id);
  const NodeState* FindNodeState(const std::string& id) const;

  CoreConfig config_;
  TaskNumber next_number_ = 1;
  int64_t next_back_seq_ = 1;   // Increasing: normal submissions.
  int64_t next_front_seq_ = 0;  // Decreasing: tasks put back at the head.

  // A task as the core keeps it: the public record plus what only the core needs. Every Task the
  // core hands out or receives from its own tables is one of these.
  // Cache-line aligned, so that the hot end of a Task and these fields span as few lines as they
  // can (see Task).
  struct alignas(64) TaskRecord : Task {
    // Slot of the node in allocation[0], so that releasing GPUs needs no lookup by id string
    // (nor a read of the allocation). Set with the allocation; CheckInvariants verifies it.
    uint32_t node_slot = kNoSlot;
    uint16_t team = 0;              // Index in teams_.
    bool eligible_counted = false;  // Its GPUs count in its node slice's eligible GPUs.
    bool incoming_counted = false;  // A victim: its GPUs count in its node's incoming.
    uint64_t start_order = 0;       // With borrowing: its key in its group's sets.
    Shape* shape = nullptr;         // The queue it waits in while pending; nullptr otherwise.
    // The allocation of an earlier task in this slot, kept (stale) for the next start to build its
    // own in; empty while the task holds one.
    Allocation spare_allocation;
  };
  static constexpr uint32_t kNoSlot = ~uint32_t{0};

  // Tasks live in a pool (stable addresses, freed ones reused first, while still in cache) and
  // are found through a TaskTable: no allocation per task, one array access per lookup.
  class TaskPool {
   public:
    TaskPool() = default;
    ~TaskPool();
    TaskPool(const TaskPool&) = delete;
    TaskPool& operator=(const TaskPool&) = delete;
    TaskRecord* New();
    void Delete(TaskRecord* t);

   private:
    // Records come in 2 MiB chunks aligned to 2 MiB, which the kernel is asked to back with one
    // huge page each: a large queue then costs one page fault and one TLB entry per ~6,500
    // tasks instead of one per 12.
    static constexpr size_t kChunkBytes = size_t{2} << 20;
    static constexpr size_t kChunk = kChunkBytes / sizeof(TaskRecord);
    std::vector<TaskRecord*> chunks_;  // kChunk constructed records each.
    size_t used_in_last_ = kChunk;
    std::vector<TaskRecord*> free_;
  };
  TaskRecord* NewTask(TaskNumber id);
  TaskRecord* LookupTask(TaskNumber id) const { return tasks_.Find(id); }

  TaskPool task_pool_;
  TaskTable<TaskRecord> tasks_;
  std::vector<std::unique_ptr<NodeState>> nodes_;  // Slots; never shrinks.
  absl::flat_hash_map<std::string, uint32_t> node_slots_;
  std::map<std::string, uint32_t> nodes_by_id_;  // For ranks that follow id order.

  std::vector<std::string> models_;  // Interned GPU model names.
  std::unordered_map<std::string, int> model_ids_;
  // Cache of wanted-model string -> matching model ids; cleared when a model appears.
  // References into it stay valid until it is cleared (node-based map).
  std::unordered_map<std::string, std::vector<int>> model_match_cache_;
  uint64_t model_generation_ = 1;  // Bumped when a model appears (the cache is cleared).
  // What can give a waiting shape room it did not have, so that a pass need not search again
  // for a shape that found none (Shape::no_room_*), as long as nothing of this happened since:
  // GPUs released on a node, raising its free count of a model past the shape's GPU count
  // (room_seq_[model][k]: when a node last went from fewer than k to at least k free), or a
  // change of the node set, models or restored tasks (structure_seq_, which can also change why
  // tasks wait). Starts only take room. All are values of one increasing counter.
  uint64_t change_seq_ = 1;
  uint64_t structure_seq_ = 1;
  // Some node reports CPUs or memory (NodeResources): placement checks them, and a release of
  // them (resource_seq_, from the same counter) may give any waiting shape room.
  bool any_node_resources_ = false;
  // Some node has NVLink groups: a task of several GPUs looks for a node with room inside one
  // group first.
  bool any_linked_nodes_ = false;
  uint64_t resource_seq_ = 0;
  std::vector<std::vector<uint64_t>> room_seq_;
  bool StillNoRoom(const Shape& shape, const std::vector<int>& models,
                   const std::vector<uint32_t>& excluded) const;
  // Whether something happened since the last pass that can let a task start (a new queue head,
  // GPUs released, a start, nodes, quotas or reservations changed...). Without it a pass is
  // skipped.
  bool pass_needed_ = true;
  bool in_pass_ = false;

  PlacementIndex index_;
  std::unique_ptr<PriorityQueue> queues_[kPriorityCount];
  size_t pending_count_[kPriorityCount] = {0, 0};
  size_t running_count_[kPriorityCount] = {0, 0};

  int total_online_gpus_ = 0;
  // Admission: the cluster, its classes (one per priority) and, later, teams. Guarantees follow
  // the online GPUs (RecomputeQuota); running and stopping tasks are charged to their leaf.
  QuotaTree quota_tree_;
  QuotaTree::NodeId class_node_[kPriorityCount] = {0, 0};
  QuotaTree::NodeId shared_node_[kPriorityCount] = {0, 0};
  QuotaTree::NodeId QuotaLeaf(const Task& t) const {
    return teams_[static_cast<const TaskRecord&>(t).team].leaf[static_cast<int>(t.spec.priority)];
  }
  std::vector<TeamState> teams_;
  absl::flat_hash_map<std::string, int> team_ids_;
  int last_team_ = 0;  // The team of the last lookup: most submissions name the one before.
  std::vector<Group> groups_;
  uint64_t next_start_order_ = 1;
  uint64_t pass_first_start_ = 1;  // The first start order of the pass under way.
  TimeMicros usage_written_at_ = 0;
  // Reclaim indexes (borrowing only): placeable nodes by free + eligible GPUs of class 0, of
  // class 1, and of both, per model.
  PlacementIndex reclaim_[3];
  std::vector<PendingPreemption> preemptions_;
  TimeMicros preempt_wake_at_ = 0;  // A pass is due then: tasks reach min_runtime.
  size_t unclaimed_tasks_ = 0;      // Restored tasks still waiting for their nodes.

  // Usually a handful; many while a burst of preemptors waits for its victims.
  std::vector<Reservation> reservations_;
  // Each reservation's position in reservations_, by task (ReservationOf beyond a handful).
  std::unordered_map<TaskNumber, uint32_t> reservation_at_;
  void IndexReservationsFrom(size_t first);
  std::vector<Decision> decisions_;
  // GPU lists of decisions handed out through TakeDecisions(out), reused by the next starts.
  static constexpr size_t kMaxSpareGpuLists = 4096;
  std::vector<std::vector<int>> spare_gpu_lists_;
  std::vector<Change> changes_;
  std::vector<Event> events_;
  Stats stats_;
  // Pending tasks by user (limits.max_pending_per_user); tasks with a user only. Last: the
  // members the pass reads stay where they were.
  std::unordered_map<std::string, size_t> pending_by_user_;
};

}  // namespace dgpu::core
