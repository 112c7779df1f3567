#include "reference_scheduler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <tuple>

namespace dgpu::core::testing {
namespace {

constexpr int kMaxGpuCount = 1024;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A reason a bypass counts against: the task could start once GPUs free up.
bool IsTransient(PendingReason r) {
  return r == PendingReason::kNoNodeFits || r == PendingReason::kQuotaExhausted;
}

}  // namespace

ReferenceScheduler::ReferenceScheduler(CoreConfig config) : config_(config) {}

// ------------------------------------------------------------------------------------------
// Derived state: every value below is recomputed from the tasks and nodes when asked.

bool ReferenceScheduler::HeldOn(const Task& t, const std::string& node_id) const {
  return Holds(t) && !t.allocation.empty() && t.allocation[0].node_id == node_id;
}

std::vector<TaskNumber> ReferenceScheduler::QueueOrder(Priority p) const {
  std::vector<std::pair<int64_t, TaskNumber>> keys;
  for (const auto& [id, t] : tasks_) {
    if (t.status == TaskStatus::kPending && t.spec.priority == p)
      keys.emplace_back(t.queue_seq, id);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<TaskNumber> out;
  for (const auto& [seq, id] : keys) out.push_back(id);
  return out;
}

int ReferenceScheduler::UsedGpus(Priority p) const {
  int used = 0;
  for (const auto& [id, t] : tasks_) {
    if (Holds(t) && t.spec.priority == p) used += t.spec.gpu_count;
  }
  return used;
}

int ReferenceScheduler::TotalOnlineGpus() const {
  int total = 0;
  for (const auto& [id, node] : nodes_) {
    if (node.online) total += static_cast<int>(node.gpus.size());
  }
  return total;
}

int ReferenceScheduler::QuotaOf(Priority p) const {
  const int total = TotalOnlineGpus();
  const int online =
      std::clamp(static_cast<int>(std::lround(total * config_.online_percent)), 0, total);
  return p == Priority::kHigh ? online : total - online;
}

// Models named like `wanted` (ignoring case); if none is, those whose name contains it. Every
// model ever seen counts, in the order first seen.
std::vector<std::string> ReferenceScheduler::MatchingModels(const std::string& wanted) const {
  std::vector<std::string> exact;
  std::vector<std::string> partial;
  for (const std::string& m : models_) {
    if (wanted.empty() || Lower(m) == Lower(wanted)) exact.push_back(m);
    if (Lower(m).find(Lower(wanted)) != std::string::npos) partial.push_back(m);
  }
  return exact.empty() ? partial : exact;
}

// The online node, not excluded, with the fewest free GPUs of a matching model that are still
// enough; ties on node id, then on the model first seen.
std::optional<ReferenceScheduler::Fit> ReferenceScheduler::BestFit(
    const Task& t, const std::set<std::string>& excluded) const {
  const std::vector<std::string> models = MatchingModels(t.spec.gpu_model);
  std::optional<std::tuple<int, std::string, size_t>> best;  // (free, node, model rank)
  for (const auto& [id, node] : nodes_) {
    if (!node.online || excluded.count(id) != 0) continue;
    for (size_t rank = 0; rank < models.size(); ++rank) {
      const int free =
          static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(), [&](const Gpu& g) {
            return g.task == 0 && g.info.model == models[rank];
          }));
      if (free < t.spec.gpu_count) continue;
      auto candidate = std::make_tuple(free, id, rank);
      if (!best || candidate < *best) best = candidate;
    }
  }
  if (!best) return std::nullopt;
  return Fit{std::get<1>(*best), models[std::get<2>(*best)]};
}

// For a reservation: the online node with the most free GPUs of a matching model among those
// with enough GPUs of it in all; ties on node id.
std::optional<std::string> ReferenceScheduler::MostFreeNode(
    const Task& t, const std::set<std::string>& excluded) const {
  const std::vector<std::string> models = MatchingModels(t.spec.gpu_model);
  std::optional<std::pair<int, std::string>> best;  // (-free, node)
  for (const auto& [id, node] : nodes_) {
    if (!node.online || excluded.count(id) != 0) continue;
    for (const std::string& model : models) {
      int capacity = 0;
      int free = 0;
      for (const Gpu& g : node.gpus) {
        if (g.info.model != model) continue;
        capacity++;
        if (g.task == 0) free++;
      }
      if (capacity < t.spec.gpu_count) continue;
      auto candidate = std::make_pair(-free, id);
      if (!best || candidate < *best) best = candidate;
    }
  }
  if (!best) return std::nullopt;
  return best->second;
}

PendingReason ReferenceScheduler::Diagnose(const Task& t) const {
  int max_capacity = 0;
  for (const std::string& model : MatchingModels(t.spec.gpu_model)) {
    for (const auto& [id, node] : nodes_) {
      if (!node.online) continue;
      const int capacity = static_cast<int>(std::count_if(
          node.gpus.begin(), node.gpus.end(), [&](const Gpu& g) { return g.info.model == model; }));
      max_capacity = std::max(max_capacity, capacity);
    }
  }
  if (max_capacity == 0) return PendingReason::kNoGpuModel;
  if (t.spec.gpu_count > max_capacity) return PendingReason::kExceedsCluster;
  if (UsedGpus(t.spec.priority) + t.spec.gpu_count > QuotaOf(t.spec.priority)) {
    return PendingReason::kQuotaExhausted;
  }
  return PendingReason::kNoNodeFits;
}

// ------------------------------------------------------------------------------------------
// Changes of state shared by several commands

void ReferenceScheduler::LeaveQueue(const Task& t) {
  // The oldest task leaving its queue ends its guard (and frees its reservation).
  Guard& guard = GuardOf(t);
  if (guard.oldest == t.id) guard = Guard{};
}

void ReferenceScheduler::Start(Task& t, const Fit& fit, TimeMicros now) {
  LeaveQueue(t);
  NodeAllocation allocation{fit.node_id, {}};
  for (Gpu& g : nodes_.at(fit.node_id).gpus) {
    if (std::ssize(allocation.gpu_indices) == t.spec.gpu_count) break;
    if (g.task != 0 || g.info.model != fit.model) continue;
    g.task = t.id;
    allocation.gpu_indices.push_back(g.info.index);
  }
  t.status = TaskStatus::kRunning;
  t.attempts++;
  t.started_at = now;
  t.error.clear();
  t.allocation = {allocation};
  decisions_.push_back(
      {Decision::Kind::kStart, t.id, fit.node_id, allocation.gpu_indices, StopReason::kNone});
}

void ReferenceScheduler::Release(Task& t) {
  for (const NodeAllocation& na : t.allocation) {
    auto node = nodes_.find(na.node_id);
    if (node == nodes_.end()) continue;
    for (Gpu& g : node->second.gpus) {
      if (g.task == t.id) g.task = 0;
    }
  }
  t.stopping = false;
  t.stop_reason = StopReason::kNone;
}

void ReferenceScheduler::RequeueOrFail(Task& t, TimeMicros now) {
  Release(t);
  t.error = "agent_lost";
  if (t.attempts >= config_.max_attempts) {
    t.status = TaskStatus::kFailed;
    t.exit_code = -1;
    t.finished_at = now;
  } else {
    t.status = TaskStatus::kPending;
    t.allocation.clear();
    t.queue_seq = next_front_seq_--;
  }
}

// A task stopped for `reason` has ended: back to its queue at its old place, or failed.
void ReferenceScheduler::EndStop(Task& t, StopReason reason, TimeMicros now) {
  Release(t);
  t.error = std::string(StopError(reason));
  if (reason == StopReason::kPreempt || reason == StopReason::kDrain) {
    // A preempted (or evicted) run is not a lost attempt.
    t.preemptions++;
    t.preempted_by = 0;
    t.attempts = std::max(0, t.attempts - 1);
  }
  if (RequeuesWhenStopped(reason)) {
    t.status = TaskStatus::kPending;
    t.allocation.clear();
  } else {
    t.status = TaskStatus::kFailed;
    t.finished_at = now;
  }
}

// The node of a task that holds GPUs is gone, or came back without it: a stop ends as if
// confirmed, a cancelled task's GPUs are free, anything else lost its run.
void ReferenceScheduler::LoseHeld(Task& t, TimeMicros now) {
  if (t.stopping && t.status == TaskStatus::kRunning) {
    EndStop(t, t.stop_reason, now);
  } else if (t.stopping) {
    Release(t);
  } else {
    RequeueOrFail(t, now);
  }
}

void ReferenceScheduler::ApplyFinish(Task& t, const FinishReport& report, TimeMicros now) {
  t.exit_code = report.exit_code;
  if (t.status == TaskStatus::kRunning && t.stopping) {
    EndStop(t, t.stop_reason, report.finished_at != 0 ? report.finished_at : now);
    return;
  }
  Release(t);
  if (t.status != TaskStatus::kRunning) return;  // A cancelled task stays cancelled.
  t.status = report.success ? TaskStatus::kSuccess : TaskStatus::kFailed;
  t.error = report.error;
  t.finished_at = report.finished_at != 0 ? report.finished_at : now;
}

void ReferenceScheduler::TakeOffline(const std::string& node_id, TimeMicros now) {
  Node& node = nodes_.at(node_id);
  if (node.online) {
    node.online = false;
    for (Guard& guard : guards_) {
      if (guard.reserved_node == node_id) guard.reserved_node.reset();
    }
  }
  // Put back so that the task that was queued first ends up first.
  std::vector<Task*> held;
  for (auto& [id, t] : tasks_) {
    if (HeldOn(t, node_id)) held.push_back(&t);
  }
  std::sort(held.begin(), held.end(),
            [](const Task* a, const Task* b) { return a->queue_seq > b->queue_seq; });
  for (Task* t : held) LoseHeld(*t, now);
}

bool ReferenceScheduler::Claim(Node& node, const std::vector<int>& indices, TaskNumber task) const {
  std::vector<Gpu*> claimed;
  for (int index : indices) {
    auto it = std::find_if(node.gpus.begin(), node.gpus.end(),
                           [&](const Gpu& g) { return g.info.index == index; });
    if (it == node.gpus.end() || it->task != 0) return false;
    if (!claimed.empty() && it->info.model != claimed[0]->info.model) return false;
    if (std::find(claimed.begin(), claimed.end(), &*it) != claimed.end()) return false;
    claimed.push_back(&*it);
  }
  for (Gpu* g : claimed) g->task = task;
  return true;
}

void ReferenceScheduler::Adopt(Task& t, const std::string& node_id,
                               const std::vector<int>& indices) {
  LeaveQueue(t);
  t.status = TaskStatus::kRunning;
  std::vector<int> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  t.allocation = {NodeAllocation{node_id, sorted}};
  t.error.clear();
}

// ------------------------------------------------------------------------------------------
// Commands

StatusOr<TaskNumber> ReferenceScheduler::Submit(const TaskSpec& spec, TimeMicros now) {
  if (spec.gpu_count < 1 || spec.gpu_count > kMaxGpuCount) {
    return InvalidArgument("gpu_count must be between 1 and " + std::to_string(kMaxGpuCount));
  }
  if (spec.command.empty()) return InvalidArgument("command must not be empty");
  if (spec.priority != Priority::kHigh && spec.priority != Priority::kLow) {
    return InvalidArgument("priority must be high or low");
  }
  if (spec.timeout_seconds < 0) return InvalidArgument("timeout_seconds must not be negative");
  Task t;
  t.spec = spec;
  t.id = next_number_++;
  t.queue_seq = next_back_seq_++;
  t.created_at = now;
  tasks_.emplace(t.id, t);
  return t.id;
}

Status ReferenceScheduler::Cancel(TaskNumber id, TimeMicros now, int32_t grace_seconds) {
  if (grace_seconds < -1) return InvalidArgument("grace_seconds must be -1 or more");
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return NotFound(FormatTaskId(id) + " not found");
  Task& t = it->second;
  if (IsFinished(t.status)) {
    return FailedPrecondition(FormatTaskId(id) + " already finished with status " +
                              std::string(ToString(t.status)));
  }
  if (t.status == TaskStatus::kPending) {
    LeaveQueue(t);
  } else {
    // Its GPUs stay held until the agent reports the finish or the node is lost.
    t.stopping = true;
    t.stop_reason = StopReason::kCancel;
    for (const NodeAllocation& na : t.allocation) {
      decisions_.push_back(
          {Decision::Kind::kStop, t.id, na.node_id, {}, StopReason::kCancel, grace_seconds});
    }
  }
  t.status = TaskStatus::kCancelled;
  t.error = "cancelled";
  t.finished_at = now;
  return OkStatus();
}

Status ReferenceScheduler::StopTask(TaskNumber id, StopReason reason, int32_t grace_seconds,
                                    TimeMicros now) {
  if (reason == StopReason::kNone || reason == StopReason::kReconcile) {
    return InvalidArgument(
        "stop reason must be one of cancel, preempt, drain, member_failure, timeout, "
        "gpu_failure");
  }
  if (reason == StopReason::kCancel) return Cancel(id, now, grace_seconds);
  if (grace_seconds < -1) return InvalidArgument("grace_seconds must be -1 or more");
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return NotFound(FormatTaskId(id) + " not found");
  Task& t = it->second;
  if (t.status != TaskStatus::kRunning) {
    return FailedPrecondition(FormatTaskId(id) + " is not running (status " +
                              std::string(ToString(t.status)) + ")");
  }
  // It keeps its GPUs until its end is confirmed; a second stop keeps the first reason.
  if (!t.stopping) {
    t.stopping = true;
    t.stop_reason = reason;
  }
  for (const NodeAllocation& na : t.allocation) {
    decisions_.push_back(
        {Decision::Kind::kStop, t.id, na.node_id, {}, t.stop_reason, grace_seconds});
  }
  return OkStatus();
}

Status ReferenceScheduler::RegisterNode(const std::string& node_id, const std::string& address,
                                        const std::vector<GpuInfo>& gpus,
                                        const std::vector<RunningReport>& running,
                                        const std::vector<FinishReport>& finished, TimeMicros now) {
  if (node_id.empty()) return InvalidArgument("node id must not be empty");
  std::set<int> indices;
  for (const GpuInfo& g : gpus) {
    if (g.index < 0) return InvalidArgument("gpu index must not be negative");
    if (g.model.empty()) return InvalidArgument("gpu model must not be empty");
    if (!indices.insert(g.index).second) {
      return InvalidArgument("gpu index " + std::to_string(g.index) + " is listed twice");
    }
  }
  if (nodes_.count(node_id) == 0) node_order_.push_back(node_id);
  Node& node = nodes_[node_id];

  // 1. Finishes first. One of a task queued here is a real run that ended: record it.
  for (const FinishReport& f : finished) {
    auto it = tasks_.find(f.task);
    if (it == tasks_.end()) continue;
    Task& t = it->second;
    if (HeldOn(t, node_id)) {
      ApplyFinish(t, f, now);
    } else if (t.status == TaskStatus::kPending) {
      LeaveQueue(t);
      t.attempts = std::max(t.attempts, 1);
      t.status = f.success ? TaskStatus::kSuccess : TaskStatus::kFailed;
      t.exit_code = f.exit_code;
      t.error = f.error;
      t.finished_at = f.finished_at != 0 ? f.finished_at : now;
    }
  }

  // 2. The node's GPUs as reported now, all free until claimed below.
  std::vector<TaskNumber> held;
  for (const auto& [id, t] : tasks_) {
    if (HeldOn(t, node_id)) held.push_back(id);
  }
  node.online = false;
  node.address = address;
  node.gpus.clear();
  for (const GpuInfo& g : gpus) node.gpus.push_back({g, 0});
  std::sort(node.gpus.begin(), node.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.info.index < b.info.index; });
  for (const Gpu& g : node.gpus) {
    if (std::find(models_.begin(), models_.end(), g.info.model) == models_.end()) {
      models_.push_back(g.info.model);
    }
  }

  // 3. Adopt what runs here as assigned, take back what was put back in the queue, stop the rest.
  // A task is listed once; a repeat (with the same or other GPUs) is ignored.
  std::set<TaskNumber> listed;
  std::set<TaskNumber> reported;
  for (const RunningReport& r : running) {
    if (!listed.insert(r.task).second) continue;
    reported.insert(r.task);
    auto it = tasks_.find(r.task);
    Task* t = it == tasks_.end() ? nullptr : &it->second;
    const bool held_here = t != nullptr && HeldOn(*t, node_id);
    if (held_here && Claim(node, t->allocation[0].gpu_indices, t->id)) {
      if (t->stopping) {
        decisions_.push_back({Decision::Kind::kStop, t->id, node_id, {}, t->stop_reason});
      }
      continue;
    }
    if (t != nullptr && t->status == TaskStatus::kPending &&
        std::ssize(r.gpu_indices) == t->spec.gpu_count && Claim(node, r.gpu_indices, t->id)) {
      Adopt(*t, node_id, r.gpu_indices);
      continue;
    }
    if (held_here) reported.erase(r.task);  // Its GPUs are gone or taken: lost, below.
    decisions_.push_back({Decision::Kind::kStop, r.task, node_id, {}, StopReason::kReconcile});
  }

  // 4. What was believed to run here but was not reported is lost.
  std::sort(held.begin(), held.end(), [&](TaskNumber a, TaskNumber b) {
    return tasks_.at(a).queue_seq > tasks_.at(b).queue_seq;
  });
  for (TaskNumber id : held) {
    Task& t = tasks_.at(id);
    if (reported.count(id) == 0 && Holds(t)) LoseHeld(t, now);
  }

  node.online = true;
  node.last_heartbeat = now;
  return OkStatus();
}

Status ReferenceScheduler::Heartbeat(const std::string& node_id, TimeMicros now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return NotFound("node " + node_id + " is not registered");
  if (!it->second.online) {
    return FailedPrecondition("node " + node_id + " is offline; register again");
  }
  it->second.last_heartbeat = now;
  return OkStatus();
}

Status ReferenceScheduler::NodeLost(const std::string& node_id, TimeMicros now) {
  if (nodes_.count(node_id) == 0) return NotFound("node " + node_id + " is not registered");
  TakeOffline(node_id, now);
  return OkStatus();
}

Status ReferenceScheduler::TaskStarted(TaskNumber id, const std::string& node_id, TimeMicros now) {
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return NotFound(FormatTaskId(id) + " not found");
  Task& t = it->second;
  if (t.status != TaskStatus::kRunning || t.allocation.empty() ||
      t.allocation[0].node_id != node_id) {
    return FailedPrecondition(FormatTaskId(id) + " is not running on node " + node_id);
  }
  t.started_at = now;
  return OkStatus();
}

Status ReferenceScheduler::TaskFinished(const std::string& node_id, const FinishReport& report,
                                        TimeMicros now) {
  auto it = tasks_.find(report.task);
  if (it == tasks_.end()) return NotFound(FormatTaskId(report.task) + " not found");
  Task& t = it->second;
  if (!HeldOn(t, node_id)) {
    return FailedPrecondition(FormatTaskId(report.task) + " is not running on node " + node_id +
                              " (status " + std::string(ToString(t.status)) + ")");
  }
  ApplyFinish(t, report, now);
  return OkStatus();
}

Status ReferenceScheduler::SetOnlinePercent(double online_percent, TimeMicros /*now*/) {
  if (!(online_percent >= 0.0 && online_percent <= 1.0)) {
    return InvalidArgument("online_percent must be a number between 0 and 1");
  }
  config_.online_percent = online_percent;
  return OkStatus();
}

void ReferenceScheduler::Tick(TimeMicros now) {
  for (const std::string& id : node_order_) {
    const Node& node = nodes_.at(id);
    if (now - node.last_heartbeat <= config_.heartbeat_timeout) continue;
    const bool holds_any =
        std::any_of(node.gpus.begin(), node.gpus.end(), [](const Gpu& g) { return g.task != 0; });
    if (node.online || holds_any) TakeOffline(id, now);
  }
}

void ReferenceScheduler::Forget(TaskNumber id) {
  auto it = tasks_.find(id);
  if (it != tasks_.end() && IsFinished(it->second.status) && !it->second.stopping) {
    tasks_.erase(it);
  }
}

// ------------------------------------------------------------------------------------------
// The scheduling pass

void ReferenceScheduler::Schedule(TimeMicros now) {
  SchedulePriority(Priority::kHigh, now);
  SchedulePriority(Priority::kLow, now);
}

PendingReason ReferenceScheduler::TryStart(Task& t, const std::set<std::string>& excluded,
                                           TimeMicros now) {
  if (UsedGpus(t.spec.priority) + t.spec.gpu_count > QuotaOf(t.spec.priority)) {
    return Diagnose(t);
  }
  std::optional<Fit> fit = BestFit(t, excluded);
  if (!fit) return Diagnose(t);
  Start(t, *fit, now);
  return PendingReason::kNone;
}

// The oldest task was overtaken too often. Waiting for quota: its priority holds (returns true:
// nothing younger of it starts in this pass). Waiting for room: a node is reserved for it, which
// younger tasks of its priority now skip as well (returns false: they start elsewhere).
bool ReferenceScheduler::Hold(Task& oldest, PendingReason reason, std::set<std::string>& excluded) {
  Guard& guard = GuardOf(oldest);
  const Priority p = oldest.spec.priority;
  guard.holding = true;
  shape_reasons_[{p, ShapeOf(oldest)}] = reason;
  if (reason == PendingReason::kNoNodeFits && !guard.reserved_node) {
    guard.reserved_node = MostFreeNode(oldest, excluded);
  }
  if (reason == PendingReason::kNoNodeFits && guard.reserved_node) {
    excluded.insert(*guard.reserved_node);
    return false;
  }
  for (TaskNumber id : QueueOrder(p)) {
    const ShapeKey shape = ShapeOf(tasks_.at(id));
    if (shape != ShapeOf(oldest)) shape_reasons_[{p, shape}] = PendingReason::kQueued;
  }
  return true;
}

// Tasks are tried in queue order. When one does not start, the later ones of its shape (same
// model and GPU count) could not either and are not tried in this pass. Each younger task that
// starts while the oldest waits for quota or room counts as a bypass; after max_bypass of them
// the oldest is tried first in every pass and, while it still waits, holds (see Hold).
void ReferenceScheduler::SchedulePriority(Priority p, TimeMicros now) {
  const std::vector<TaskNumber> queue = QueueOrder(p);
  if (queue.empty()) return;
  Guard& guard = guards_[static_cast<int>(p)];
  std::set<std::string> excluded;  // The other priority's reserved node, and this one's.
  if (const Guard& other = guards_[1 - static_cast<int>(p)]; other.reserved_node) {
    excluded.insert(*other.reserved_node);
  }
  Task& oldest = tasks_.at(queue.front());
  if (guard.oldest != oldest.id) guard = Guard{oldest.id, 0, false, std::nullopt};

  std::set<ShapeKey> stuck;  // Shapes whose first task in this pass did not start.
  if (guard.bypassed >= config_.max_bypass) {
    const PendingReason r = TryStart(oldest, excluded, now);
    if (IsTransient(r)) {
      if (Hold(oldest, r, excluded)) return;
      stuck.insert(ShapeOf(oldest));
    } else if (r != PendingReason::kNone) {
      // It cannot start as things are: it must not hold the others.
      shape_reasons_[{p, ShapeOf(oldest)}] = r;
      if (guard.holding) holds_released_++;
      guard = Guard{oldest.id, 0, false, std::nullopt};
    }
  }

  bool oldest_waits = false;
  PendingReason oldest_reason = PendingReason::kNone;
  for (TaskNumber id : queue) {
    Task* t = &tasks_.at(id);
    if (t->status != TaskStatus::kPending || stuck.count(ShapeOf(*t)) != 0) continue;
    const PendingReason r = TryStart(*t, excluded, now);
    if (r != PendingReason::kNone) {
      stuck.insert(ShapeOf(*t));
      shape_reasons_[{p, ShapeOf(*t)}] = r;
      if (t->id == guard.oldest) {
        oldest_waits = true;
        oldest_reason = r;
      }
      continue;
    }
    // A younger task started while the oldest waits for GPUs that may free up: a bypass.
    if (!guard.holding && oldest_waits && IsTransient(oldest_reason) &&
        ++guard.bypassed >= config_.max_bypass) {
      if (Hold(tasks_.at(guard.oldest), oldest_reason, excluded)) return;
    }
  }
}

// ------------------------------------------------------------------------------------------
// Queries

std::vector<Decision> ReferenceScheduler::TakeDecisions() { return std::exchange(decisions_, {}); }

PendingReason ReferenceScheduler::ReasonOf(TaskNumber id) const {
  const Task& t = tasks_.at(id);
  if (t.status != TaskStatus::kPending) return PendingReason::kNone;
  for (const auto& [other_id, other] : tasks_) {
    const bool ahead = std::tie(other.queue_seq, other_id) < std::tie(t.queue_seq, id);
    if (other.status == TaskStatus::kPending && other.spec.priority == t.spec.priority &&
        ShapeOf(other) == ShapeOf(t) && ahead) {
      return PendingReason::kQueued;
    }
  }
  auto it = shape_reasons_.find({t.spec.priority, ShapeOf(t)});
  return it == shape_reasons_.end() ? PendingReason::kQueued : it->second;
}

QuotaView ReferenceScheduler::Quota() const {
  QuotaView v;
  v.total_gpus = TotalOnlineGpus();
  for (Priority p : {Priority::kHigh, Priority::kLow}) {
    v.quota[static_cast<int>(p)] = QuotaOf(p);
    v.used[static_cast<int>(p)] = UsedGpus(p);
  }
  return v;
}

std::vector<NodeView> ReferenceScheduler::Nodes() const {
  std::vector<NodeView> out;
  for (const auto& [id, node] : nodes_) {
    const int free = static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(),
                                                    [](const Gpu& g) { return g.task == 0; }));
    out.push_back({id,
                   node.address,
                   node.online,
                   static_cast<int>(node.gpus.size()),
                   free,
                   node.last_heartbeat,
                   NodeMode::kSchedulable,
                   {}});
  }
  return out;
}

std::vector<GpuView> ReferenceScheduler::Gpus() const {
  std::vector<GpuView> out;
  for (const auto& [id, node] : nodes_) {
    for (const Gpu& g : node.gpus) {
      const GpuStatus status = !node.online  ? GpuStatus::kOffline
                               : g.task != 0 ? GpuStatus::kBusy
                                             : GpuStatus::kIdle;
      out.push_back({id, g.info.index, g.info.model, g.info.memory_mb, status, g.task, ""});
    }
  }
  return out;
}

std::optional<std::string> ReferenceScheduler::ReservedNode(Priority p) const {
  return guards_[static_cast<int>(p)].reserved_node;
}

}  // namespace dgpu::core::testing
