// Commands and the task life cycle: submission, cancellation, start confirmations,
// finishes, node loss, quota changes.
#include "core/scheduler_core.h"

#include <cmath>

#include "core/core_internal.h"

namespace dgpu::core {

SchedulerCore::SchedulerCore(CoreConfig config) : config_(std::move(config)) {
  for (auto& q : queues_) q = std::make_unique<PriorityQueue>();
  RebuildQuotaTree();
  TeamId(std::string(kDefaultTeam));
  for (const auto& [name, limits] : config_.teams) {
    TeamState& team = teams_[static_cast<size_t>(TeamId(name))];
    team.configured = true;
    team.limits = limits;
  }
  RebuildQuotaTree();
  last_team_ = 0;
  if (!config_.topology_key.empty()) unlabelled_set_ = index_.NewSet();
}

SchedulerCore::~SchedulerCore() = default;

void SchedulerCore::Emit(const Task& t) {
  // A parent that tasks wait on: they learn of it at the next pass (ResolveDependencies).
  if (!dependents_.empty() && dependents_.contains(WatchKey(t))) parent_changes_.push_back(t.id);
  if (!config_.record_changes) return;
  Change c;
  c.kind = Change::Kind::kTaskUpsert;
  c.task = t;
  changes_.push_back(std::move(c));
}

void SchedulerCore::EmitEvent(Event::Kind kind, const Task& t, TimeMicros now,
                              std::string_view node, std::string_view detail) {
  if (!config_.record_events) return;
  Event& e = events_.emplace_back();
  e.kind = kind;
  e.time = now;
  e.task = t.id;
  e.priority = t.spec.priority;
  e.status = t.status;
  e.reason = t.stop_reason;
  e.gpus = t.spec.gpu_count;
  e.exit_code = t.exit_code;
  e.created_at = t.created_at;
  e.node_id = node;
  e.detail = detail;
}

Event& SchedulerCore::EmitNodeEvent(Event::Kind kind, const std::string& node_id, TimeMicros now) {
  Event& e = events_.emplace_back();
  e.kind = kind;
  e.time = now;
  e.node_id = node_id;
  return e;
}

bool SchedulerCore::EndMember(Task& t, int member) {
  auto& record = static_cast<TaskRecord&>(t);
  // A gang is preemptible only while every member runs; counted out before one ends.
  CountEligible(record, false);
  NodeAllocation& m = t.allocation[static_cast<size_t>(member)];
  NodeState* n = FindNodeState(m.node_id);
  if (n != nullptr) {
    // Its GPUs are free for others at once: worth a pass.
    pass_needed_ = true;
    ReleaseOnNode(*n, t.id, m);
    // A stopping victim's GPUs, CPUs and memory on this node are free now, no longer incoming.
    if (record.incoming_counted) {
      n->incoming -= static_cast<int>(m.gpu_indices.size());
      n->incoming_cpus_milli -= m.cpus_milli;
      n->incoming_memory_mb -= m.memory_mb;
    }
  }
  m.ended = true;
  return std::all_of(t.allocation.begin(), t.allocation.end(),
                     [](const NodeAllocation& a) { return a.ended; });
}

void SchedulerCore::OrderStops(Task& t, int32_t grace_seconds, TimeMicros now) {
  for (const auto& na : t.allocation) {
    if (na.ended) continue;
    decisions_.push_back(Decision{
        Decision::Kind::kStop, t.id, na.node_id, {}, t.stop_reason, grace_seconds, t.preempted_by});
    EmitEvent(Event::Kind::kTaskStopping, t, now, na.node_id);
  }
}

Status SchedulerCore::FinishMember(Task& t, int member, const FinishReport& report,
                                   TimeMicros now) {
  const std::string node = t.allocation[static_cast<size_t>(member)].node_id;
  const bool last = EndMember(t, member);
  if (!report.success && t.status == TaskStatus::kRunning && !t.stopping) {
    // The first member to fail fails the task: the others are stopped. One stopped by its
    // agent for the task's time limit means the gang ran past it: the task fails as timeout.
    const bool timed_out = report.error == StopError(StopReason::kTimeout);
    t.exit_code = report.exit_code;
    t.error = timed_out ? std::string(StopError(StopReason::kTimeout))
                        : std::string(StopError(StopReason::kMemberFailure)) + ":" + node;
    t.stopping = true;
    t.stop_reason = timed_out ? StopReason::kTimeout : StopReason::kMemberFailure;
    if (!last) {
      OrderStops(t, -1, now);
      Emit(t);
      return OkStatus();
    }
  }
  if (!last) {
    Emit(t);
    return OkStatus();
  }
  // The last member has ended: the task ends as its members' ends say.
  FinishReport end = report;
  if (t.stop_reason == StopReason::kMemberFailure || t.stop_reason == StopReason::kTimeout) {
    end.exit_code = t.exit_code;
  }
  return ApplyFinish(t, end, now);
}

void SchedulerCore::LoseHeld(Task& t, TimeMicros now, const std::string& node) {
  if (t.allocation.size() > 1) {
    const int member = RunningMemberOn(t.allocation, node);
    if (member < 0) return;
    if (!EndMember(t, member)) {
      // The others cannot go on without it: they are stopped, and the task goes back to the head
      // of its queue (a lost attempt, EndStop) once they have ended.
      if (!t.stopping) {
        t.stopping = true;
        t.stop_reason = StopReason::kMemberLost;
        OrderStops(t, -1, now);
      }
      Emit(t);
      return;
    }
    // Nothing of it runs any more: it ends as a single-node task whose node is gone.
  }
  if (!t.stopping) {
    RequeueOrFail(t, now, "agent_lost");
    return;
  }
  const StopReason reason = t.stop_reason;
  const bool ends_stop = t.status == TaskStatus::kRunning;
  if (!ends_stop) EmitEvent(Event::Kind::kTaskStopped, t, now, node, "agent_lost");
  ReleaseGpus(t);
  if (ends_stop) {
    EndStop(t, reason, now, node);
  } else {
    Emit(t);
  }
}

void SchedulerCore::RequeueOrFail(Task& t, TimeMicros now, std::string_view error) {
  ReleaseGpus(t);
  RequeueOrFailReleased(t, now, error);
}

void SchedulerCore::RequeueOrFailReleased(Task& t, TimeMicros now, std::string_view error) {
  // Only the events need the node's name.
  std::string node =
      config_.record_events && !t.allocation.empty() ? t.allocation[0].node_id : std::string();
  running_count_[PrioIndex(t.spec.priority)]--;
  if (t.attempts >= config_.max_attempts) {
    t.status = TaskStatus::kFailed;
    t.error = std::string(error);
    t.exit_code = -1;
    t.finished_at = now;
    EmitEvent(Event::Kind::kTaskFinished, t, now, node, error);
  } else {
    t.status = TaskStatus::kPending;
    t.allocation.clear();
    static_cast<TaskRecord&>(t).node_slot = kNoSlot;
    t.error = std::string(error);  // Why it was put back; cleared when it starts again.
    t.queue_seq = next_front_seq_--;
    Enqueue(t);
    EmitEvent(Event::Kind::kTaskRequeued, t, now, node, error);
  }
  Emit(t);
}

Status SchedulerCore::CheckSpec(const TaskSpec& spec) const {
  if (spec.gpu_count < 1 || spec.gpu_count > kMaxGpuCount) {
    return InvalidArgument("gpu_count must be between 1 and " + std::to_string(kMaxGpuCount));
  }
  if (spec.nodes < 1 || spec.nodes > kMaxGangNodes) {
    return InvalidArgument("nodes must be between 1 and " + std::to_string(kMaxGangNodes));
  }
  if (spec.gpu_count % spec.nodes != 0) {
    return InvalidArgument("gpu_count " + std::to_string(spec.gpu_count) +
                           " is not split evenly over " + std::to_string(spec.nodes) + " nodes");
  }
  if (spec.command.empty()) return InvalidArgument("command must not be empty");
  if (spec.priority != Priority::kHigh && spec.priority != Priority::kLow) {
    return InvalidArgument("priority must be high or low");
  }
  if (spec.timeout_seconds < 0 || spec.timeout_seconds > kMaxTimeLimitSeconds) {
    return InvalidArgument("timeout_seconds must be between 0 and " +
                           std::to_string(kMaxTimeLimitSeconds));
  }
  if (spec.preemption_grace_seconds < -1) {
    return InvalidArgument("preemption_grace_seconds must be -1 or more");
  }
  if (!IsValidTeamName(spec.team))
    return InvalidArgument("team name '" + spec.team + "' is not valid");
  if (spec.max_retries < 0 || spec.retry_backoff_seconds < 0) {
    return InvalidArgument("max_retries and retry_backoff_seconds must not be negative");
  }
  if (spec.cpus_milli < 0 || spec.memory_mb < 0) {
    return InvalidArgument("cpus and memory_mb must not be negative");
  }
  if (!ValidArrayFields(spec)) {
    return InvalidArgument(
        "array_index must be in [0, array_size) for an array's member, -1 "
        "otherwise");
  }
  if (std::string why = CheckSelector(spec.node_selector); !why.empty()) {
    return InvalidArgument("node_selector: " + why);
  }
  if (spec.depends_on.size() > kMaxDependencies) {
    return InvalidArgument("depends_on has " + std::to_string(spec.depends_on.size()) +
                           " entries; the limit is " + std::to_string(kMaxDependencies));
  }
  for (size_t i = 0; i < spec.depends_on.size(); ++i) {
    if (spec.depends_on[i].state != DependencyState::kWaiting) {
      return InvalidArgument("depends_on[" + std::to_string(i) + "] must be waiting");
    }
  }
  return OkStatus();
}

Status TooManyTeams() {
  return InvalidArgument("too many teams (at most " + std::to_string(kMaxTeams) + ")");
}

StatusOr<int> SchedulerCore::TeamForSubmission(const std::string& name) {
  int team = TeamIdOf(name);
  if (team < 0) {
    if (teams_.size() >= kMaxTeams) return TooManyTeams();
    team = TeamId(name);
  }
  last_team_ = team;
  return team;
}

SchedulerCore::TaskRecord& SchedulerCore::Queue(const TaskSpec& spec, int team, TimeMicros now,
                                                bool enqueue) {
  TaskRecord& t = *NewTask(next_number_++);
  t.team = static_cast<uint16_t>(team);
  // The allocation buffers its start will reuse were last touched when the record's previous
  // task started; a task that starts soon after it is submitted finds them in cache (queue
  // heads fetch them for the others, see PrefetchQueued).
  if (!t.spare_allocation.empty()) __builtin_prefetch(t.spare_allocation.data(), 1);
  t.spec = spec;
  // No time limit asked for: its team's default, else the scheduler's.
  if (spec.timeout_seconds == 0) {
    const int64_t team_default = teams_[static_cast<size_t>(team)].limits.default_time_limit;
    t.spec.timeout_seconds = team_default > 0 ? team_default : config_.default_time_limit;
  }
  t.status = TaskStatus::kPending;
  t.queue_seq = next_back_seq_++;
  t.created_at = now;
  if (enqueue) Enqueue(t);
  EmitEvent(Event::Kind::kTaskSubmitted, t, now);
  return t;
}

StatusOr<SchedulerCore::DependencyWait> SchedulerCore::CheckDependencies(Dependencies& deps,
                                                                         TimeMicros now) {
  // What parents did so far is counted first, so that the new task starts from the same count.
  if (!parent_changes_.empty() || !dependency_settle_.empty()) ResolveDependencies(now);
  DependencyWait wait;
  if (Status s = CountDependencies(next_number_, deps, &wait, /*restoring=*/false); !s.ok()) {
    return s;
  }
  return wait;
}

bool SchedulerCore::StartDependencyWait(TaskRecord& t, const DependencyWait& wait) {
  if (AllDependenciesSatisfied(t)) {
    Enqueue(t);  // Satisfied already.
    return false;
  }
  HoldForDependencies(t, wait);
  return true;
}

StatusOr<TaskNumber> SchedulerCore::Submit(const TaskSpec& spec, TimeMicros now) {
  if (Status s = CheckSpec(spec); !s.ok()) return s;
  const StatusOr<int> team = TeamForSubmission(spec.team);
  if (!team.ok()) return team.status();
  if (spec.depends_on.empty()) {
    TaskRecord& t = Queue(spec, *team, now);
    Emit(t);
    return t.id;
  }
  Dependencies deps = spec.depends_on;
  StatusOr<DependencyWait> wait = CheckDependencies(deps, now);
  if (!wait.ok()) return wait.status();
  TaskRecord& t = Queue(spec, *team, now, /*enqueue=*/false);
  t.spec.depends_on = std::move(deps);
  if (StartDependencyWait(t, *wait)) {
    SettleDependencies(t, now);  // Held (recorded), or failed at once.
  } else {
    Emit(t);
  }
  return t.id;
}

StatusOr<TaskNumber> SchedulerCore::SubmitArray(TaskSpec spec, int count, TimeMicros now) {
  if (count < 1 || count > kMaxArraySize) {
    return InvalidArgument("array must be between 1 and " + std::to_string(kMaxArraySize));
  }
  spec.array_index = 0;
  spec.array_size = count;
  if (Status s = CheckSpec(spec); !s.ok()) return s;
  const StatusOr<int> team = TeamForSubmission(spec.team);
  if (!team.ok()) return team.status();
  // Dependencies are the same for every member: worked out once, before anything is queued.
  StatusOr<DependencyWait> wait = DependencyWait{};
  if (!spec.depends_on.empty()) {
    wait = CheckDependencies(spec.depends_on, now);
    if (!wait.ok()) return wait.status();
  }
  // Members are numbered and queued one after another: nothing else runs between them, so
  // member i is the first one's number + i and queue position + i (what kTaskArray records).
  std::vector<TaskRecord*> held;
  TaskRecord& first = Queue(spec, *team, now, /*enqueue=*/spec.depends_on.empty());
  if (!spec.depends_on.empty() && StartDependencyWait(first, *wait)) held.push_back(&first);
  const TaskNumber id = first.id;
  if (config_.record_changes) {
    Change c;
    c.kind = Change::Kind::kTaskArray;
    c.task = first;
    changes_.push_back(std::move(c));
  }
  for (int i = 1; i < count; ++i) {
    spec.array_index = i;
    TaskRecord& t = Queue(spec, *team, now, /*enqueue=*/spec.depends_on.empty());
    if (!spec.depends_on.empty() && StartDependencyWait(t, *wait)) held.push_back(&t);
  }
  // One that can never be satisfied fails (or is held) now; waiting ones are recorded already.
  if (!held.empty() && AnyDependency(first, DependencyState::kNeverSatisfied)) {
    for (TaskRecord* t : held) SettleDependencies(*t, now);
  }
  return id;
}

Status SchedulerCore::Cancel(TaskNumber id, TimeMicros now, int32_t grace_seconds) {
  if (grace_seconds < -1) return InvalidArgument("grace_seconds must be -1 or more");
  pass_needed_ = true;
  TaskRecord* found = tasks_.Find(id);
  if (found == nullptr) return NotFound(FormatTaskId(id) + " not found");
  Task& t = *found;
  if (IsFinished(t.status)) {
    return FailedPrecondition(FormatTaskId(id) + " already finished with status " +
                              std::string(ToString(t.status)));
  }
  if (t.status == TaskStatus::kPending) {
    Dequeue(t);
  } else {
    // Running: keep its GPUs until the agent confirms the stop.
    running_count_[PrioIndex(t.spec.priority)]--;
    t.stopping = true;
    t.stop_reason = StopReason::kCancel;
  }
  t.status = TaskStatus::kCancelled;
  UpdateEligible(*found);
  t.error = "cancelled";
  t.finished_at = now;
  Emit(t);
  OrderStops(t, grace_seconds, now);
  EmitEvent(Event::Kind::kTaskFinished, t, now,
            t.allocation.empty() ? std::string_view() : t.allocation[0].node_id, t.error);
  return OkStatus();
}

Status SchedulerCore::StopTask(TaskNumber id, StopReason reason, int32_t grace_seconds,
                               TimeMicros now) {
  if (reason == StopReason::kNone || reason == StopReason::kReconcile) {
    return InvalidArgument(
        "stop reason must be one of cancel, preempt, drain, member_failure, timeout, "
        "gpu_failure");
  }
  if (reason == StopReason::kCancel) return Cancel(id, now, grace_seconds);
  if (grace_seconds < -1) return InvalidArgument("grace_seconds must be -1 or more");
  TaskRecord* found = tasks_.Find(id);
  if (found == nullptr) return NotFound(FormatTaskId(id) + " not found");
  Task& t = *found;
  if (t.status != TaskStatus::kRunning) {
    return FailedPrecondition(FormatTaskId(id) + " is not running (status " +
                              std::string(ToString(t.status)) + ")");
  }
  if (!t.stopping) {
    t.stopping = true;
    t.stop_reason = reason;
    UpdateEligible(*found);
    Emit(t);
  }
  OrderStops(t, grace_seconds, now);
  return OkStatus();
}

void SchedulerCore::EndStop(Task& t, StopReason reason, TimeMicros now, std::string_view node) {
  if (reason == StopReason::kMemberLost) {
    // Not a stop anyone asked for: the task lost its node.
    RequeueOrFailReleased(t, now, StopError(reason));
    return;
  }
  running_count_[PrioIndex(t.spec.priority)]--;
  // The reason's error word, unless the task already has it with a detail ("member_failed:n2").
  const std::string_view word = StopError(reason);
  if (!(t.error.size() > word.size() && t.error.starts_with(word) && t.error[word.size()] == ':')) {
    t.error = std::string(word);
  }
  if (reason == StopReason::kPreempt || reason == StopReason::kDrain) {
    // A preempted (or evicted) run is not a lost attempt: attempts counts the others.
    t.preemptions++;
    t.preempted_by = 0;
    t.attempts = std::max(0, t.attempts - 1);
  }
  if (RequeuesWhenStopped(reason)) {
    // Back at its old place in its queue: being stopped was not its fault.
    t.status = TaskStatus::kPending;
    t.allocation.clear();
    static_cast<TaskRecord&>(t).node_slot = kNoSlot;
    Enqueue(t);
  } else {
    t.status = TaskStatus::kFailed;
    t.finished_at = now;
  }
  Emit(t);
  if (config_.record_events) {
    EmitEvent(Event::Kind::kTaskStopped, t, now, node, t.error);
    events_.back().reason = reason;
    EmitEvent(RequeuesWhenStopped(reason) ? Event::Kind::kTaskRequeued : Event::Kind::kTaskFinished,
              t, now, node, t.error);
  }
}

Status SchedulerCore::Heartbeat(const std::string& node_id, TimeMicros now) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  if (!node->online) return FailedPrecondition("node " + node_id + " is offline; register again");
  node->last_heartbeat = now;
  return OkStatus();
}

Status SchedulerCore::NodeLost(const std::string& node_id, TimeMicros now) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  TakeNodeOffline(*node, now, "lost");
  return OkStatus();
}

Status SchedulerCore::TaskStarted(TaskNumber id, const std::string& node_id, TimeMicros now,
                                  int run, std::vector<int> cpu_set) {
  TaskRecord* found = tasks_.Find(id);
  if (found == nullptr) return NotFound(FormatTaskId(id) + " not found");
  Task& t = *found;
  if (t.status != TaskStatus::kRunning || RunningMemberOn(t.allocation, node_id) < 0) {
    return FailedPrecondition(FormatTaskId(id) + " is not running on node " + node_id);
  }
  if (IsEarlierRun(t, run)) {
    return FailedPrecondition(FormatTaskId(id) + " run " + std::to_string(run) +
                              " has ended; run " + std::to_string(RunNumber(t)) + " is the latest");
  }
  // A task on several nodes started when its last member did: the latest confirmation.
  t.started_at = now;
  t.allocation[static_cast<size_t>(RunningMemberOn(t.allocation, node_id))].cpu_set =
      std::move(cpu_set);
  Emit(t);
  EmitEvent(Event::Kind::kTaskStarted, t, now, node_id);
  return OkStatus();
}

Status SchedulerCore::ApplyFinish(Task& t, const FinishReport& report, TimeMicros now) {
  const bool events = config_.record_events;
  std::string node = events && !t.allocation.empty() ? t.allocation[0].node_id : std::string();
  const bool was_running = t.status == TaskStatus::kRunning;
  const bool was_stopping = t.stopping;
  const StopReason stop_reason = t.stop_reason;
  ReleaseGpus(t);
  if (was_running && was_stopping) {
    t.exit_code = report.exit_code;
    if (stop_reason == StopReason::kMemberFailure && t.retries < t.spec.max_retries) {
      // A gang whose member failed runs again whole, as a failed single-node run would.
      FinishReport failed = report;
      failed.error = t.error;
      RetryLater(t, failed, now, node);
      return OkStatus();
    }
    EndStop(t, stop_reason, report.finished_at != 0 ? report.finished_at : now, node);
    return OkStatus();
  }
  if (was_running && !report.success && t.retries < t.spec.max_retries) {
    RetryLater(t, report, now, node);
    return OkStatus();
  }
  if (was_running) {
    running_count_[PrioIndex(t.spec.priority)]--;
    t.status = report.success ? TaskStatus::kSuccess : TaskStatus::kFailed;
    t.exit_code = report.exit_code;
    t.error = report.error;
    t.finished_at = report.finished_at != 0 ? report.finished_at : now;
  } else {
    t.exit_code = report.exit_code;  // A cancelled task stays cancelled.
  }
  Emit(t);
  if (events) {
    EmitEvent(was_running ? Event::Kind::kTaskFinished : Event::Kind::kTaskStopped, t, now, node,
              t.error);
    events_.back().reason = stop_reason;
  }
  return OkStatus();
}

Status SchedulerCore::TaskFinished(const std::string& node_id, const FinishReport& report,
                                   TimeMicros now) {
  TaskRecord* found = tasks_.Find(report.task);
  if (found == nullptr) return NotFound(FormatTaskId(report.task) + " not found");
  Task& t = *found;
  if (IsEarlierRun(t, report.run)) {
    return AlreadyExists(FormatTaskId(report.task) + " run " + std::to_string(report.run) +
                         " has ended already; run " + std::to_string(RunNumber(t)) +
                         " is the latest");
  }
  bool held = t.status == TaskStatus::kRunning || t.stopping;
  // The node's own id, when the record knows its slot, saves reading the allocation.
  const std::string* held_on = nullptr;
  if (found->node_slot < nodes_.size()) {
    held_on = &nodes_[found->node_slot]->id;
  } else if (!t.allocation.empty()) {
    held_on = &t.allocation[0].node_id;
  }
  const bool multi = t.allocation.size() > 1;
  const int member = multi ? RunningMemberOn(t.allocation, node_id) : 0;
  if (!held || t.allocation.empty() || held_on == nullptr || member < 0 ||
      (!multi && *held_on != node_id)) {
    return FailedPrecondition(FormatTaskId(report.task) + " is not running on node " + node_id +
                              " (status " + std::string(ToString(t.status)) + ")");
  }
  if (report.usage.has_value()) t.allocation[static_cast<size_t>(member)].usage = *report.usage;
  if (IsDisconnectStop(report)) {
    // The agent stopped it itself, cut off from the schedulers: not the task's failure, a lost
    // attempt, as if the node had been declared lost (it may come back before it was).
    LoseHeld(t, now, node_id);
    return OkStatus();
  }
  if (multi) return FinishMember(t, member, report, now);
  return ApplyFinish(t, report, now);
}

Status SchedulerCore::RecordUsage(const std::string& node_id, TaskNumber task, int run,
                                  const ResourceUsage& usage) {
  TaskRecord* t = tasks_.Find(task);
  if (t == nullptr) return NotFound(FormatTaskId(task) + " not found");
  const int member = RunningMemberOn(t->allocation, node_id);
  if (!(t->status == TaskStatus::kRunning || t->stopping) || member < 0 ||
      (run > 0 && run != RunNumber(*t))) {
    return FailedPrecondition(FormatTaskId(task) + " run " + std::to_string(run) +
                              " is not running on node " + node_id);
  }
  t->allocation[static_cast<size_t>(member)].usage = usage;
  return OkStatus();
}

Status SchedulerCore::SetOnlinePercent(double online_percent, TimeMicros now) {
  if (!(online_percent >= 0.0 && online_percent <= 1.0)) {
    return InvalidArgument("online_percent must be a number between 0 and 1");
  }
  config_.online_percent = online_percent;
  RecomputeQuota();
  pass_needed_ = true;
  if (config_.record_changes) {
    Change c;
    c.kind = Change::Kind::kQuotaPercent;
    c.online_percent = online_percent;
    changes_.push_back(std::move(c));
  }
  if (config_.record_events) {
    Event& e = events_.emplace_back();
    e.kind = Event::Kind::kQuotaChanged;
    e.time = now;
    e.online_percent = online_percent;
  }
  return OkStatus();
}

void SchedulerCore::Tick(TimeMicros now) {
  if (!retry_wait_.empty()) QueueDueRetries(now);
  if (!parent_changes_.empty() || !dependency_settle_.empty()) ResolveDependencies(now);
  if (!preemptions_.empty() || preempt_wake_at_ != 0) ExpirePreemptions(now);
  // Fair-share usage is written out now and then, for a restart or a standby to start from.
  if (config_.borrowing && now - usage_written_at_ >= 60 * kMicrosPerSecond) {
    usage_written_at_ = now;
    AccrueUsage(now);
    for (TeamState& team : teams_) {
      if (team.usage == team.stored_usage) continue;
      team.stored_usage = team.usage;
      EmitTeam(team);
    }
  }
  for (auto& node : nodes_) {
    bool expired = now - node->last_heartbeat > config_.heartbeat_timeout;
    if (!expired) continue;
    // Online nodes that went silent, and restored tasks whose node never came back.
    if (node->online || node->HoldsAny()) TakeNodeOffline(*node, now, "heartbeat_timeout");
  }
}

void SchedulerCore::Forget(TaskNumber id) {
  TaskRecord* t = tasks_.Find(id);
  if (t != nullptr && IsFinished(t->status) && !t->stopping) {
    if (!parent_seen_.empty()) parent_seen_.erase(id);
    tasks_.Erase(id);
    task_pool_.Delete(t);
  }
}

std::vector<Decision> SchedulerCore::TakeDecisions() { return std::exchange(decisions_, {}); }

void SchedulerCore::TakeDecisions(std::vector<Decision>& out) {
  // Their GPU lists are kept for the next starts.
  for (Decision& d : out) {
    if (d.gpu_indices.capacity() == 0 || spare_gpu_lists_.size() >= kMaxSpareGpuLists) continue;
    d.gpu_indices.clear();
    spare_gpu_lists_.push_back(std::move(d.gpu_indices));
  }
  out.clear();
  out.swap(decisions_);
}

std::vector<Change> SchedulerCore::TakeChanges() { return std::exchange(changes_, {}); }

std::vector<Event> SchedulerCore::TakeEvents() { return std::exchange(events_, {}); }

const Task* SchedulerCore::FindTask(TaskNumber id) const { return LookupTask(id); }

}  // namespace dgpu::core
