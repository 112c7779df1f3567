// Reconciliation with what agents report when they (re)register, and restoring saved state.
#include "core/core_internal.h"

namespace dgpu::core {
namespace {

// Whether a queued task takes back a run its agent reports (still running, or ended): a run
// this scheduler never heard of (a start by an earlier leader that did not reach it), or its
// latest run when that run was lost with its node (its end was never recorded). Not a run that
// ended here (a failure waiting for its retry, a preemption), nor an earlier one.
bool TakesBackRun(const Task& t, int run) {
  const int latest = RunNumber(t);
  return run == 0 || run > latest ||
         (run == latest && t.error == StopError(StopReason::kMemberLost));
}

// A run taken back is the task's latest, and the task has run at least once.
void AdoptRun(Task& t, int run) {
  t.attempts = std::max(t.attempts, std::max(1, run - t.preemptions));
}

}  // namespace

Status SchedulerCore::RegisterNode(const std::string& node_id, const std::string& address,
                                   const std::vector<GpuInfo>& gpus, const NodeResources& resources,
                                   const std::vector<RunningReport>& running,
                                   const std::vector<FinishReport>& finished, TimeMicros now) {
  if (node_id.empty()) return InvalidArgument("node id must not be empty");
  if (resources.cpus_milli < 0 || resources.memory_mb < 0) {
    return InvalidArgument("node cpus and memory must not be negative");
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].index < 0) return InvalidArgument("gpu index must not be negative");
    if (gpus[i].model.empty()) return InvalidArgument("gpu model must not be empty");
    for (size_t j = 0; j < i; ++j) {
      if (gpus[j].index == gpus[i].index) {
        return InvalidArgument("gpu index " + std::to_string(gpus[i].index) + " is listed twice");
      }
    }
  }

  pass_needed_ = true;
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) node = &AddNodeState(node_id);
  if (config_.record_events) {
    Event& e = EmitNodeEvent(Event::Kind::kNodeJoined, node_id, now);
    e.gpus = static_cast<int>(gpus.size());
    e.detail = address;
  }

  // 1. Record finishes first, so that a task that ended while the agent was away is not lost.
  for (const auto& f : finished) {
    TaskRecord* found = tasks_.Find(f.task);
    if (found == nullptr) continue;
    Task& t = *found;
    if (IsEarlierRun(t, f.run)) continue;  // Its end is recorded already.
    const int member = RunningMemberOn(t.allocation, node_id);
    bool held_here = (t.status == TaskStatus::kRunning || t.stopping) && member >= 0;
    if (IsDisconnectStop(f)) {
      // The agent, cut off, stopped it itself: a lost attempt if it is still held here;
      // queued again or running elsewhere already, the cut run changes nothing.
      if (held_here) LoseHeld(t, now, node_id);
      continue;
    }
    if (held_here && t.allocation.size() > 1) {
      (void)FinishMember(t, member, f, now);
    } else if (held_here) {
      (void)ApplyFinish(t, f, now);
    } else if (t.status == TaskStatus::kPending && TakesBackRun(t, f.run)) {
      // It ran to its end there although it is queued here: it was put back when this node
      // vanished, or a previous leader started it and failed before that start reached this
      // scheduler. Agents run only what a leader ordered, so this was a real run: starting it
      // again would run it twice.
      Dequeue(t);
      AdoptRun(t, f.run);
      t.status = f.success ? TaskStatus::kSuccess : TaskStatus::kFailed;
      t.exit_code = f.exit_code;
      t.error = f.error;
      t.finished_at = f.finished_at != 0 ? f.finished_at : now;
      Emit(t);
      EmitEvent(Event::Kind::kTaskFinished, t, now, node_id, t.error);
    }
  }

  // 2. Take the node out of the pool while its GPUs are rebuilt.
  IndexErase(*node);
  if (node->online) {
    total_online_gpus_ -= node->HealthyGpus();
    node->online = false;
  }
  std::vector<TaskNumber> held = node->HeldTasks();
  // Its GPU table is rebuilt: what counted as eligible is counted again below (a gang's on its
  // other members' nodes too).
  for (TaskNumber id : held) CountEligible(*tasks_.Find(id), false);
  unclaimed_tasks_ -= node->unclaimed.size();
  node->address = address;
  node->gpus = gpus;
  std::sort(node->gpus.begin(), node->gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  node->gpu_model.assign(node->gpus.size(), 0);
  node->gpu_task.assign(node->gpus.size(), 0);
  node->slices.clear();
  node->ClearUnclaimed();
  // What its tasks were given is taken again as they are adopted below.
  node->cpus_milli = node->free_cpus_milli = resources.cpus_milli;
  node->memory_mb = node->free_memory_mb = resources.memory_mb;
  node->isolation = resources.isolation;
  node->reports_resources = node->ReportsResources();
  if (node->reports_resources) any_node_resources_ = true;
  node->indices_are_positions = true;
  node->any_unhealthy = false;
  // NVLink groups: gpu_link is kept only for a node with some.
  node->gpu_link.clear();
  node->link_groups = 0;
  for (const GpuInfo& g : node->gpus) {
    const bool in_one = g.link_group >= 0 && g.link_group < kMaxLinkGroups;
    node->gpu_link.push_back(static_cast<int16_t>(in_one ? g.link_group : kNoLinkGroup));
    if (in_one) {
      node->link_groups = std::max(node->link_groups, static_cast<int16_t>(g.link_group + 1));
    }
  }
  if (node->Linked()) {
    any_linked_nodes_ = true;
  } else {
    node->gpu_link.clear();
  }
  for (size_t i = 0; i < node->gpus.size(); ++i) {
    if (node->gpus[i].index != static_cast<int>(i)) node->indices_are_positions = false;
    int m = InternModel(node->gpus[i].model);
    node->gpu_model[i] = m;
    auto* s = node->Slice(m);
    if (s == nullptr) {
      node->slices.push_back({m, 0, 0});
      s = &node->slices.back();
    }
    if (!node->gpus[i].healthy) {
      node->any_unhealthy = true;
      continue;
    }
    s->capacity++;
    s->free++;
  }

  // Claims GPU positions for a task if they all exist, share one model and are free.
  auto claim = [&](const std::vector<int>& indices, TaskNumber task) -> bool {
    std::vector<int> pos;
    for (int idx : indices) {
      int p = node->Position(idx);
      if (p < 0 || node->gpu_task[p] != 0) return false;
      if (!pos.empty() && node->gpu_model[p] != node->gpu_model[pos[0]]) return false;
      if (std::find(pos.begin(), pos.end(), p) != pos.end()) return false;
      pos.push_back(p);
    }
    for (int p : pos) {
      node->gpu_task[p] = task;
      if (node->Usable(static_cast<size_t>(p))) node->Slice(node->gpu_model[p])->free--;
    }
    return true;
  };

  // 3. Adopt what runs there, take back what had been put back in the queue, stop the rest.
  std::set<TaskNumber> reported;
  std::set<TaskNumber> seen;
  for (const auto& r : running) {
    // A task is reported once; a repeat (with the same or other GPUs) is ignored.
    if (!seen.insert(r.task).second) continue;
    reported.insert(r.task);
    Task* t = tasks_.Find(r.task);
    const int member = t == nullptr ? -1 : RunningMemberOn(t->allocation, node_id);
    bool held_here =
        t != nullptr && (t->status == TaskStatus::kRunning || t->stopping) && member >= 0;
    if (held_here && claim(t->allocation[static_cast<size_t>(member)].gpu_indices, t->id)) {
      const NodeAllocation& mine = t->allocation[static_cast<size_t>(member)];
      node->free_cpus_milli -= mine.cpus_milli;
      node->free_memory_mb -= mine.memory_mb;
      if (t->stopping) {
        decisions_.push_back(
            {Decision::Kind::kStop, t->id, node_id, {}, t->stop_reason, -1, t->preempted_by});
      }
      continue;
    }
    // A gang's member alone is never taken back: the gang starts whole or not at all.
    if (t != nullptr && t->status == TaskStatus::kPending && t->spec.nodes == 1 &&
        TakesBackRun(*t, r.run) && static_cast<int>(r.gpu_indices.size()) == t->spec.gpu_count &&
        claim(r.gpu_indices, t->id)) {
      Dequeue(*t);
      if (r.run > 0) AdoptRun(*t, r.run);
      t->status = TaskStatus::kRunning;
      std::vector<int> idx = r.gpu_indices;
      std::sort(idx.begin(), idx.end());
      t->allocation = {NodeAllocation{node_id, idx, false, node->GivenCpus(t->spec),
                                      node->GivenMemory(t->spec)}};
      node->free_cpus_milli -= t->allocation[0].cpus_milli;
      node->free_memory_mb -= t->allocation[0].memory_mb;
      static_cast<TaskRecord*>(t)->node_slot = node->slot;
      t->error.clear();
      ChargeTask(*static_cast<TaskRecord*>(t), +1);
      running_count_[PrioIndex(t->spec.priority)]++;
      Emit(*t);
      EmitEvent(Event::Kind::kTaskScheduled, *t, now, node_id, "adopted");
      continue;
    }
    if (held_here) {
      // Known here but its GPUs are unusable (gone, or clash): treat as lost below.
      reported.erase(r.task);
    }
    decisions_.push_back({Decision::Kind::kStop, r.task, node_id, {}, StopReason::kReconcile});
    if (config_.record_events) {
      EmitNodeEvent(Event::Kind::kTaskStopping, node_id, now).task = r.task;
      events_.back().reason = StopReason::kReconcile;
    }
  }

  // 4. Tasks believed to run here but not reported are lost.
  std::sort(held.begin(), held.end(), [&](TaskNumber a, TaskNumber b) {
    return tasks_.Find(a)->queue_seq > tasks_.Find(b)->queue_seq;
  });
  for (TaskNumber id : held) {
    if (reported.count(id) != 0) continue;
    Task& t = *tasks_.Find(id);
    if (!(t.status == TaskStatus::kRunning || t.stopping)) continue;
    // Its GPU claims were reset above; releasing its GPUs only fixes the quota use.
    LoseHeld(t, now, node_id);
  }

  // 5. Back in the pool (placement only if schedulable: a node keeps its mode).
  if (config_.borrowing) {
    for (TaskNumber id : node->HeldTasks()) UpdateEligible(*tasks_.Find(id));
  }
  structure_seq_ = ++change_seq_;
  node->online = true;
  node->last_heartbeat = now;
  IndexInsert(*node);
  total_online_gpus_ += node->HealthyGpus();
  RecomputeQuota();

  // 6. Tasks that run on a GPU reported unhealthy are stopped (and requeued once confirmed).
  if (node->any_unhealthy) {
    for (size_t pos = 0; pos < node->gpus.size(); ++pos) {
      const TaskNumber id = node->gpu_task[pos];
      const Task* t = id == 0 || node->Usable(pos) ? nullptr : tasks_.Find(id);
      if (t != nullptr && t->status == TaskStatus::kRunning && !t->stopping) {
        (void)StopTask(id, StopReason::kGpuFailure, -1, now);
      }
    }
  }
  return OkStatus();
}

Status SchedulerCore::Restore(Task task, TimeMicros now) {
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;
  if (task.id == 0) return InvalidArgument("task number must not be 0");
  if (tasks_.Find(task.id) != nullptr)
    return AlreadyExists(FormatTaskId(task.id) + " already exists");
  if (task.stopping && task.status != TaskStatus::kCancelled &&
      (task.status != TaskStatus::kRunning || task.stop_reason == StopReason::kNone ||
       task.stop_reason == StopReason::kCancel || task.stop_reason == StopReason::kReconcile)) {
    return InvalidArgument(FormatTaskId(task.id) + " is stopping with status " +
                           std::string(ToString(task.status)) + " and stop reason '" +
                           std::string(ToString(task.stop_reason)) + "'");
  }
  // A task that holds GPUs must name them, on nodes that have not registered yet: checked
  // before anything changes.
  const bool held = task.status == TaskStatus::kRunning || task.stopping;
  if (held) {
    if (task.allocation.empty()) {
      return InvalidArgument(FormatTaskId(task.id) + " is running but has no allocation");
    }
    if (std::all_of(task.allocation.begin(), task.allocation.end(),
                    [](const NodeAllocation& a) { return a.ended; })) {
      return InvalidArgument(FormatTaskId(task.id) + " is running but every member has ended");
    }
    if (std::ssize(task.allocation) != task.spec.nodes) {
      return InvalidArgument(FormatTaskId(task.id) + " runs on " +
                             std::to_string(task.allocation.size()) + " nodes, not its " +
                             std::to_string(task.spec.nodes));
    }
    for (const NodeAllocation& member : task.allocation) {
      if (std::ssize(member.gpu_indices) != GpusPerNode(task.spec)) {
        return InvalidArgument(FormatTaskId(task.id) + " holds " +
                               std::to_string(member.gpu_indices.size()) + " GPUs on " +
                               member.node_id + ", not " + std::to_string(GpusPerNode(task.spec)));
      }
    }
    for (const NodeAllocation& member : task.allocation) {
      const NodeState* node = FindNodeState(member.node_id);
      if (node != nullptr && node->online) {
        return FailedPrecondition("restore running tasks before their nodes register");
      }
    }
  }
  if (task.spec.nodes < 1 || task.spec.nodes > kMaxGangNodes ||
      task.spec.gpu_count % task.spec.nodes != 0) {
    return InvalidArgument(FormatTaskId(task.id) + " has gpu_count " +
                           std::to_string(task.spec.gpu_count) + " over " +
                           std::to_string(task.spec.nodes) + " nodes");
  }
  if (!IsValidTeamName(task.spec.team)) {
    return InvalidArgument(FormatTaskId(task.id) + " has a team name that is not valid: '" +
                           task.spec.team + "'");
  }
  const int team = TeamId(task.spec.team);
  TaskRecord& t = *NewTask(task.id);
  static_cast<Task&>(t) = std::move(task);
  t.team = static_cast<uint16_t>(team);
  t.borrowed = false;  // Decided again by ChargeTask below (held tasks only).
  if (!t.stopping) t.stop_reason = StopReason::kNone;
  next_number_ = std::max(next_number_, t.id + 1);
  if (t.status == TaskStatus::kPending) {
    t.allocation.clear();
    next_back_seq_ = std::max(next_back_seq_, t.queue_seq + 1);
    next_front_seq_ = std::min(next_front_seq_, t.queue_seq - 1);
    if (t.retry_at != 0) {
      WaitForRetry(t);  // Queued once its backoff is over (at the next tick if it is already).
    } else if (!AllDependenciesSatisfied(t)) {
      // Held again, its waiting entries counted anew; settled (and recorded) by the first pass.
      DependencyWait wait;
      if (Status s = CountDependencies(t.id, t.spec.depends_on, &wait, /*restoring=*/true);
          !s.ok()) {
        return s;
      }
      HoldForDependencies(t, std::move(wait));
      dependency_settle_.push_back(t.id);
    } else {
      Enqueue(t);
    }
    NoteIfWatched(t);
    return OkStatus();
  }
  NoteIfWatched(t);
  // A stop recorded before stop orders carried a reason was a cancellation.
  if (t.stopping && t.stop_reason == StopReason::kNone && t.status == TaskStatus::kCancelled) {
    t.stop_reason = StopReason::kCancel;
  }
  if (!held) return OkStatus();
  // Its nodes are not known yet: hold the task on placeholders until they register again or
  // heartbeat_timeout passes.
  for (const NodeAllocation& member : t.allocation) {
    NodeState* node = FindNodeState(member.node_id);
    if (node == nullptr) {
      node = &AddNodeState(member.node_id);
      node->last_heartbeat = now;
    }
    node->last_heartbeat = std::max(node->last_heartbeat, now);
    if (!member.ended) {
      node->AddUnclaimed(t.id);
      unclaimed_tasks_++;
    }
  }
  t.node_slot = FindNodeState(t.allocation[0].node_id)->slot;
  ChargeTask(t, +1);
  if (t.stopping && t.stop_reason == StopReason::kPreempt && t.preempted_by != 0) {
    // Victims stopping for a task: the node they free is kept for it again (Reclaim), and the
    // node-loss rule applies if their agents do not confirm in time.
    const int32_t grace = t.spec.preemption_grace_seconds >= 0 ? t.spec.preemption_grace_seconds
                                                               : config_.preemption_grace_seconds;
    CountIncoming(t, true);
    preemptions_.push_back(
        {t.id, t.preempted_by, t.node_slot,
         now + std::max<int32_t>(grace, 0) * kMicrosPerSecond + config_.heartbeat_timeout});
  }
  if (t.status == TaskStatus::kRunning) running_count_[PrioIndex(t.spec.priority)]++;
  return OkStatus();
}

void SchedulerCore::SetNextTaskNumber(TaskNumber next) {
  next_number_ = std::max(next_number_, next);
  if (config_.record_changes) {
    Change c;
    c.kind = Change::Kind::kNextTaskNumber;
    c.next_number = next_number_;
    changes_.push_back(std::move(c));
  }
}

}  // namespace dgpu::core
