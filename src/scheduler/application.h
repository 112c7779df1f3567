// Application: the commands the scheduler daemon offers, between the transports and the core.
//
// The REST server and the gRPC agent service parse a request into one of the plain structs
// below, say who asks (Caller), call a use case and turn its Result into an HTTP status or a
// grpc::Status. Everything between is here, once for both transports:
//   1. validation of what is not syntax (reserved env names, grace bounds, task ids of agents);
//   2. the authorization hook (Authorizer), asked before a use case acts;
//   3. the availability checks (leader, storage) and the work on the owner thread (CoreLoop),
//      with reads of stored tasks on the reader pool;
//   4. request metrics (GPU utilization reported by agents);
//   5. the durable reply: a mutating use case answers only once its changes are durable, and
//      acknowledged by the standby when one counts (CoreLoop::Context::OnDurable).
//
// Every use case answers exactly once through its callback: on the calling thread when it is
// refused before anything is posted, else on the owner thread, a reader thread or the journal's
// writer thread. Task pointers in a reply are valid during the callback only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "core/scheduler_core.h"
#include "core/types.h"
#include "scheduler/auth.h"
#include "scheduler/autoscale_runner.h"
#include "scheduler/core_loop.h"
#include "scheduler/leader_state.h"
#include "scheduler/metrics.h"
#include "scheduler/worker_pool.h"
#include "store/database.h"
#include "store/journal.h"

namespace dgpu::scheduler {

// --- Who asks, for what ------------------------------------------------------------------------

// The caller of a use case: the transport, the peer's address and who it is (auth.h).
struct Caller {
  enum class Transport { kRest, kGrpc };
  Transport transport = Transport::kRest;
  std::string peer;
  Identity identity;  // Without authentication: an admin with no name.
};

enum class Action {
  kSubmitTask,
  kCancelTask,
  kReadTasks,
  kSetQuota,
  kSetTeam,       // Set or delete a team's guarantees, cap and weight.
  kSetNodeMode,   // Cordon, uncordon or drain a node.
  kReadCluster,   // GPUs, agents, quota, teams, metrics.
  kTakeSnapshot,  // A copy of the whole database.
  kRegisterNode,
  kNodeHeartbeat,
  kReportStart,
  kReportFinish,
};
std::string_view ToString(Action action);

// What an action is about; fields that do not apply stay empty.
struct Target {
  core::TaskNumber task = 0;
  std::optional<core::Priority> priority;  // Of a task being submitted.
  std::string node_id;                     // Of an agent's actions.
  std::string team;                        // Of a task being submitted, or a team being set.
  std::string user;                        // Of a task being submitted (its `user` field).
};

// Decides whether a caller may do an action. OK allows it; any error refuses it and its message
// says why. Called on the transport's thread, before the use case changes anything.
class Authorizer {
 public:
  virtual ~Authorizer() = default;
  virtual Status Authorize(const Caller& caller, Action action, const Target& target) const = 0;
};

// Everyone may do everything (tests of the use cases).
class AllowAllAuthorizer final : public Authorizer {
 public:
  Status Authorize(const Caller&, Action, const Target&) const override { return OkStatus(); }
};

// The daemon's authorizer. REST callers by role: viewer reads; user also submits (to its own
// teams, as itself) and cancels (its own tasks: checked by the use case, which knows the owner);
// operator also cancels any task and cordons, uncordons and drains nodes; admin also sets
// quotas and teams and takes snapshots. Agent
// actions come from gRPC callers only, whose peers the transport admitted (auth.h).
class RoleAuthorizer final : public Authorizer {
 public:
  Status Authorize(const Caller& caller, Action action, const Target& target) const override;
};

// The lowest role that may do `action` over REST.
Role RequiredRole(Action action);

// --- Results -----------------------------------------------------------------------------------

enum class ErrorCode {
  kInvalidArgument,     // REST 400 invalid_field.
  kNotFound,            // REST 404 not_found.
  kAlreadyExists,       // REST 409 already_exists.
  kConflict,            // REST 409 conflict (a failed precondition).
  kForbidden,           // REST 403 forbidden.
  kTooManyPending,      // REST 429 too_many_pending: limits.max_pending_per_user reached.
  kNotLeader,           // REST 503 not_leader.
  kUnavailable,         // REST 503 unavailable.
  kStorageUnavailable,  // REST 503 storage_unavailable: not durable, or storage is failing.
  kLogUnavailable,      // REST 404 log_unavailable: no connected agent holds the task's log.
  kInternal,            // REST 500 internal.
};

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string field;  // The request field at fault; empty when none is.
  std::string message;
  // The status code the error came from; gRPC answers with it as it is.
  StatusCode cause = StatusCode::kInternal;
};

// The error a core or store Status stands for (InvalidArgument -> kInvalidArgument, ...).
Error ErrorFromStatus(const Status& status);

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit like StatusOr
  Result(Error error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  const T& value() const { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <typename T>
using Reply = std::function<void(const Result<T>&)>;

// A command that answers nothing but its success.
struct Done {};

// --- Requests and answers ----------------------------------------------------------------------

inline constexpr int32_t kMaxGraceSeconds = 86400;

struct SubmitRequest {
  core::TaskSpec spec;
  // A job array of this many tasks (indices 0..array-1, in one durable write); 0: one task.
  int array = 0;
};
struct Submitted {
  core::TaskNumber task = 0;  // The first of an array.
  core::TimeMicros created_at = 0;
  int count = 1;  // Tasks submitted: numbered task .. task + count - 1.
};

struct CancelRequest {
  core::TaskNumber task = 0;
  std::optional<int32_t> grace_seconds;  // 0..kMaxGraceSeconds; none: the agent's own.
};

struct TaskView {
  const core::Task* task = nullptr;
  core::PendingReason reason = core::PendingReason::kNone;
  // GetTask's, for a pending task: why its nodes cannot take it (ExplainPending); else empty.
  std::string pending_detail;
  core::TaskNumber reserved_for = 0;  // reason kReservedFor: whose planned start holds it.
};

// Where a task's log is: the node that ran (or runs) the member of the given rank.
struct LogSource {
  std::string node_id;
  std::string task_id;
  bool finished = false;  // The task has ended: its log grows no more.
};
// A read of a task's log from the agent of `node_id` (LogRequest in scheduler.proto).
struct LogRead {
  std::string node_id;
  std::string task_id;
  int64_t offset = 0;
  int32_t tail_lines = 0;  // > 0: from the start of the last tail_lines lines instead.
  int32_t max_bytes = 0;
};
struct LogPiece {
  int64_t offset = 0;  // Where `data` starts in the log.
  std::string data;    // Empty at the end of the log.
  int64_t size = 0;    // The log's size when it was read.
  // Not empty: the agent has no log of the task, and why (a task dispatched a moment ago may
  // not have one yet; a finished one whose file was removed never will).
  std::string missing;
};

struct ListTasksRequest {
  std::optional<core::TaskStatus> status;
  std::optional<core::Priority> priority;
  int limit = 50;
  int offset = 0;
  std::optional<core::TaskNumber> after;  // Keyset: only tasks older (numbered lower) than it.
  std::optional<std::string> team;
};
struct TaskPage {
  std::vector<TaskView> tasks;
  int64_t total = 0;
  core::TaskNumber next = 0;  // The `after` of the next page; 0 on the last one.
};

struct QuotaRequest {
  double online_percent = 0;
};
struct QuotaState {
  core::QuotaView quota;
  double online_percent = 0;
  std::vector<core::TeamView> teams;  // By name.
};
// PUT /teams/{name}: what is given changes, the rest stays (or takes the default of a new team:
// no guarantee, no cap, weight 1).
struct TeamRequest {
  std::string name;
  std::optional<int> online;
  std::optional<int> batch;
  std::optional<int> max_gpus;  // -1: no cap.
  std::optional<double> weight;
  std::optional<int64_t> default_time_limit;  // Seconds; 0: none.
};

// GET /usage: GPU time by team or user over [from, to) (store::UsageQuery); `to` 0: now.
struct UsageRequest {
  core::TimeMicros from = 0;
  core::TimeMicros to = 0;
  bool by_user = false;
};
struct UsageReport {
  core::TimeMicros from = 0;
  core::TimeMicros to = 0;
  bool by_user = false;
  std::vector<store::UsageRow> groups;
};

// POST /agents/{id}/cordon | uncordon | drain.
struct NodeModeRequest {
  std::string node_id;
  core::NodeMode mode = core::NodeMode::kCordoned;
  bool evict = false;                    // Drain only: stop the node's tasks (requeued).
  std::optional<int32_t> grace_seconds;  // 0..kMaxGraceSeconds; none: each task's own.
};
struct NodeModeSet {
  core::NodeView node;
  int evicted = 0;  // Stops ordered by a drain that evicts.
};

struct Readiness {
  bool leader = false;
  uint64_t epoch = 0;
  Status storage;
  std::string detail;
  bool ready() const { return leader && storage.ok(); }
};

// Agents report task ids as text; the use cases parse them.
struct RegisterRequest {
  struct Running {
    std::string task_id;
    std::vector<int> gpu_indices;
    int run = 0;  // core::RunNumber when it started; 0: not known (an older agent).
  };
  struct Finished {
    std::string task_id;
    bool success = false;
    int32_t exit_code = 0;
    std::string error;
    core::TimeMicros finished_at = 0;
    int run = 0;
    std::optional<core::ResourceUsage> usage;
  };
  std::string agent_id;
  std::string instance_id;  // Empty (an older agent): not checked.
  std::string node_group;   // agent.node_group; empty: none.
  std::string address;      // Empty: the caller's peer address.
  uint64_t epoch = 0;
  std::vector<core::GpuInfo> gpus;
  core::NodeResources resources;  // None reported: nothing counted.
  core::Labels labels;            // agent.labels.
  std::vector<Running> running;
  std::vector<Finished> finished;
};
struct Registered {
  uint64_t epoch = 0;
  std::vector<std::string> acknowledged_finishes;
};

struct HeartbeatReport {
  struct Gpu {
    int index = 0;
    std::string model;
    double utilization_pct = -1;  // Below 0: not known.
    bool healthy = true;
    std::string health_reason;
  };
  std::string agent_id;
  uint64_t epoch = 0;
  std::vector<std::string> running_task_ids;
  std::vector<Gpu> gpus;
  bool any_unhealthy = false;  // Some gpus[i].healthy is false.
  struct Usage {
    std::string task_id;
    int run = 0;
    core::ResourceUsage usage;
  };
  std::vector<Usage> usage;  // Of running tasks, where the agent measures it.
};
struct HeartbeatAnswer {
  uint64_t epoch = 0;
  bool reregister = false;              // The node is not known online: register again.
  std::vector<std::string> stop_tasks;  // Runs there but is not the agent's to run.
};

struct StartsRequest {
  struct Start {
    std::string task_id;
    core::TimeMicros started_at = 0;
    int run = 0;
    std::vector<int> cpu_set;  // The CPUs the run is bound to; empty: not bound.
  };
  std::string agent_id;
  uint64_t epoch = 0;
  std::vector<Start> starts;
};

struct FinishRequest {
  std::string agent_id;
  uint64_t epoch = 0;
  std::string task_id;
  bool success = false;
  int32_t exit_code = 0;
  std::string error;
  core::TimeMicros finished_at = 0;
  int run = 0;  // core::RunNumber of the run that ended; 0: not known (an older agent).
  std::optional<core::ResourceUsage> usage;
};
struct FinishRecorded {
  uint64_t epoch = 0;
};

// Orders to agents outside a scheduling pass (registration), on the owner thread.
class AgentChannel {
 public:
  virtual ~AgentChannel() = default;
  // An agent registers (again): its registration reconciles everything decided before, so what
  // waits for it is dropped, and a stream still open from its previous process is closed; what
  // is decided from now on waits for the stream that the new registration opens.
  virtual void BeginSession(const std::string& agent_id) = 0;
  virtual void OrderStops(const std::string& agent_id, const std::vector<std::string>& task_ids,
                          core::StopReason reason) = 0;
};

// The semantic checks of a task spec, for every transport: a task's env may not give the names
// dgpu sets (common/task_env.h).
std::optional<Error> ValidateTaskSpec(const core::TaskSpec& spec);

class WatchHub;
class WatchSink;
class LogRelay;

struct ApplicationDeps {
  CoreLoop* loop;
  LeaderState* leader;
  store::Database* db;
  WorkerPool* readers;  // Reads of stored tasks, off the owner thread.
  store::Journal* journal;
  Metrics* metrics;
  AgentChannel* agents;
  const Authorizer* authorizer;
  WorkerPool* background;  // Long jobs (database snapshots), off the owner and reader threads.
  int max_pending_per_user = 100000;     // limits.max_pending_per_user; tasks with a user only.
  AutoscaleRunner* autoscale = nullptr;  // Null: autoscaling is off.
  WatchHub* watch = nullptr;             // Null: GET /watch is unavailable.
  LogRelay* logs = nullptr;              // Null: task logs are unavailable.
  int max_gpus_per_node = 64;            // agent.max_gpus_per_node: a registration's bound.
};

class Application {
 public:
  explicit Application(ApplicationDeps deps) : d_(deps) {}

  // Client commands: validation, then authorization, then the leader and storage checks.
  void Submit(const Caller& caller, SubmitRequest request, Reply<Submitted> reply);
  void Cancel(const Caller& caller, const CancelRequest& request, Reply<Done> reply);
  void GetTask(const Caller& caller, core::TaskNumber task, Reply<TaskView> reply);
  // The task's history, oldest first: "submitted" (from the task), then what is stored. Read on
  // the readers pool once the database holds every change the core had made when the request
  // arrived (ReadCaughtUp); NotFound for a task the database does not hold.
  void TaskEvents(const Caller& caller, core::TaskNumber task,
                  Reply<std::vector<core::TaskEventRecord>> reply);
  // The page is read from the database on the readers pool, then overlaid with the core's view.
  void ListTasks(const Caller& caller, const ListTasksRequest& request, Reply<TaskPage> reply);
  void SetQuota(const Caller& caller, const QuotaRequest& request, Reply<Done> reply);
  void GetQuota(const Caller& caller, Reply<QuotaState> reply);
  // Teams: every team with limits, tasks or usage; one (not_found when unknown); set (durable,
  // answered with the team as it is then); delete (conflict while it has live tasks).
  void ListTeams(const Caller& caller, Reply<std::vector<core::TeamView>> reply);
  void GetTeam(const Caller& caller, const std::string& name, Reply<core::TeamView> reply);
  void SetTeam(const Caller& caller, const TeamRequest& request, Reply<core::TeamView> reply);
  void DeleteTeam(const Caller& caller, const std::string& name, Reply<Done> reply);
  void ListGpus(const Caller& caller, Reply<std::vector<core::GpuView>> reply);
  void ListAgents(const Caller& caller, Reply<std::vector<core::NodeView>> reply);
  // Read from the task history on the readers pool, caught up as TaskEvents is. InvalidArgument
  // when from is not before to.
  void Usage(const Caller& caller, const UsageRequest& request, Reply<UsageReport> reply);
  void GetAutoscale(const Caller& caller, Reply<AutoscaleStatus> reply);
  // Adds a watcher of the live feed (WatchHub::Add), or says why not (forbidden, unavailable).
  std::optional<Error> Watch(const Caller& caller, std::shared_ptr<WatchSink> sink,
                             std::optional<uint64_t> since);
  // Where the log of the task's member `rank` is: the node of that member, or for a task queued
  // again, the node of its latest run (from its events). log_unavailable when it never ran or
  // has no such member.
  void LocateLog(const Caller& caller, core::TaskNumber task, int rank, Reply<LogSource> reply);
  // Reads a part of a log from its node's agent (LogRelay); the leader only.
  void ReadLog(const Caller& caller, const LogRead& read, Reply<LogPiece> reply);
  // Cordon, uncordon or drain (durable; not_found for a node never registered).
  void SetNodeMode(const Caller& caller, const NodeModeRequest& request, Reply<NodeModeSet> reply);
  void Gauges(const Caller& caller, Reply<GaugeSnapshot> reply);
  // A consistent copy of the database in a new file (store::Database::Snapshot), taken on the
  // background pool; the caller owns the file. One at a time: while one is taken, another is
  // refused as unavailable.
  void Snapshot(const Caller& caller, Reply<store::SnapshotFile> reply);
  // Answers at once, without the core.
  Readiness Ready() const;

  // Agent commands: the epoch is observed first (fencing), then the leader check, validation and
  // authorization.
  void RegisterNode(const Caller& caller, RegisterRequest request, Reply<Registered> reply);
  void Heartbeat(const Caller& caller, HeartbeatReport report, Reply<HeartbeatAnswer> reply);
  // Starts the core cannot apply (unknown task, not running on this agent, no time) are logged
  // and dropped; the reply says only whether the report was taken.
  void ReportStarts(const Caller& caller, StartsRequest request, Reply<Done> reply);
  void ReportFinish(const Caller& caller, const FinishRequest& request,
                    Reply<FinishRecorded> reply);

 private:
  std::optional<Error> Authorize(const Caller& caller, Action action, const Target& target) const;
  std::optional<Error> RefuseClientWrite() const;
  // not_leader, naming the leader when it is known.
  Error StandbyError(std::string message) const;
  // The durable reply of every mutating use case: `reply` gets `value` once the batch's changes
  // are durable (and replicated when a standby counts), else `on_failure(status)` (default: the
  // storage error as kStorageUnavailable).
  template <typename T>
  static void ReplyWhenDurable(CoreLoop::Context& c, T value, Reply<T> reply,
                               std::function<Error(const Status&)> on_failure = nullptr);
  // Runs `read` on the readers pool once every change the core made before this call is in the
  // database (or its commit failed): read-your-writes for what is read from the history, whose
  // records are committed a moment after the core (and so GET /tasks/{id} and the watch feed)
  // shows the state they describe. Appends nothing, so it serves a standby too.
  void ReadCaughtUp(std::function<void()> read);
  void AnswerCancelOfUnknown(core::TaskNumber task, Reply<Done> reply);
  void AnswerRefusedFinish(const std::string& agent, core::TaskNumber task, const core::Task* t,
                           const Status& refused, const Reply<FinishRecorded>& reply) const;

  ApplicationDeps d_;
  std::atomic<bool> snapshotting_{false};
  // The agent instance behind each node's session, and where it registered from; the loop's
  // thread only.
  struct NodeInstance {
    std::string instance_id;
    std::string where;
  };
  std::map<std::string, NodeInstance> node_instances_;
};

}  // namespace dgpu::scheduler
