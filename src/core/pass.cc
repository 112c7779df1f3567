// The scheduling pass, as a pipeline of stages (see "How to add a policy" in
// docs/architecture.md):
//
//   queue order   classes in priority order; inside one, shape heads merged by queue position
//                 (SchedulePriority), with the starvation guard deciding who goes first
//   admission     the quota tree: the class (later the team) stays within what it may hold
//                 (Admit)
//   filter+score  nodes that can take the task (GPU model, node state, GPU health, the
//                 config's filters) and the best fit among them (FindNode); the placement index
//                 answers both for the default rules without looking at every node
//   reserve       the starving head's reservation: nodes kept for it, skipped by the others
//                 (HoldForOldest)
//   permit        every placement of the task is possible (all-or-nothing), then the start
//                 (StartTask)
//   post-filter   a head that cannot start is handed to the config's post-filter (preemption
//                 chooses victims there) (PostFilter)
#include "core/core_internal.h"

namespace dgpu::core {

void SchedulerCore::StartTask(Task& t, uint32_t slot, int model, TimeMicros now) {
  // The node was chosen just now and is likely not in cache: fetch it first and do what does not
  // need it (the task's record, the allocation's buffers, the decision) while it comes.
  NodeState& node = *nodes_[slot];
  PrefetchLines<true>(&node, kNodeHotBytes);
  Dequeue(t);
  auto& record = static_cast<TaskRecord&>(t);
  const int count = t.spec.gpu_count;
  t.status = TaskStatus::kRunning;
  record.node_slot = slot;
  t.attempts++;
  t.started_at = now;
  t.error.clear();
  quota_tree_.Charge(QuotaLeaf(t), count);
  running_count_[PrioIndex(t.spec.priority)]++;
  stats_.decisions++;
  // Heads tried earlier in this pass may now wait for another reason (their class's quota).
  pass_needed_ = true;
  // The allocation is built in place, in the buffers the pool slot kept from an earlier task
  // where it has them: the lowest free positions of the model, in position order, which is index
  // order (a node's GPUs are kept sorted by index).
  if (t.allocation.empty() && !record.spare_allocation.empty()) {
    t.allocation = std::move(record.spare_allocation);
    record.spare_allocation.clear();
  }
  t.allocation.resize(1);
  NodeAllocation& na = t.allocation[0];
  na.gpu_indices.clear();
  na.ended = false;
  // At least a typical node's worth, so that the buffer fits the next task in this slot too.
  na.gpu_indices.reserve(std::max(count, 8));
  Decision& d = decisions_.emplace_back();
  d.kind = Decision::Kind::kStart;
  d.task = t.id;
  if (!spare_gpu_lists_.empty()) {
    d.gpu_indices = std::move(spare_gpu_lists_.back());
    spare_gpu_lists_.pop_back();
  }
  d.gpu_indices.reserve(std::max(count, 8));

  // Now the node.
  na.node_id = node.id;
  const size_t positions = node.gpu_task.size();
  for (size_t pos = 0; pos < positions && std::ssize(na.gpu_indices) < count; ++pos) {
    if (node.gpu_task[pos] == 0 && node.gpu_model[pos] == model && node.Usable(pos)) {
      node.gpu_task[pos] = t.id;
      na.gpu_indices.push_back(node.indices_are_positions ? static_cast<int>(pos)
                                                          : node.gpus[pos].index);
    }
  }
  auto* slice = node.Slice(model);
  const int old_free = slice->free;
  slice->free -= count;
  if (node.in_index) index_.Move(model, node.Entry(), old_free, slice->free);
  d.node_id = node.id;
  d.gpu_indices.assign(na.gpu_indices.begin(), na.gpu_indices.end());
  Emit(t);
  if (config_.record_events) EmitEvent(Event::Kind::kTaskScheduled, t, now, node.id);
}

bool SchedulerCore::StillNoRoom(const Shape& shape, const std::vector<int>& models,
                                const std::vector<uint32_t>& excluded) const {
  const uint64_t seen = shape.no_room_seq;
  if (seen == 0 || structure_seq_ > seen) return false;
  // Nodes excluded then may not be now: only a superset of them is as restrictive.
  for (uint8_t i = 0; i < shape.no_room_excluded_count; ++i) {
    if (std::find(excluded.begin(), excluded.end(), shape.no_room_excluded[i]) == excluded.end()) {
      return false;
    }
  }
  const auto k = static_cast<size_t>(shape.gpu_count);
  for (int m : models) {
    const auto& seqs = room_seq_[static_cast<size_t>(m)];
    if (k < seqs.size() && seqs[k] > seen) return false;
  }
  return true;
}

PendingReason SchedulerCore::Diagnose(const Task& t, const std::vector<int>& models) const {
  int max_capacity = 0;
  for (int m : models) max_capacity = std::max(max_capacity, index_.MaxCapacity(m));
  if (max_capacity == 0) return PendingReason::kNoGpuModel;
  if (t.spec.gpu_count > max_capacity) return PendingReason::kExceedsCluster;
  if (!quota_tree_.Admits(QuotaLeaf(t), t.spec.gpu_count)) return PendingReason::kQuotaExhausted;
  return PendingReason::kNoNodeFits;
}

void SchedulerCore::Schedule(TimeMicros now) {
  stats_.passes++;
  // A pass leaves every queue head unable to start (or held back), and only the commands that
  // flag pass_needed_ can change that: another pass would decide nothing.
  if (!pass_needed_) {
    stats_.passes_skipped++;
    return;
  }
  pass_needed_ = false;
  in_pass_ = true;
  // Queue order, first level: classes in priority order.
  for (int p = 0; p < kPriorityCount; ++p) SchedulePriority(p, now);
  in_pass_ = false;
}

// --- Admission --------------------------------------------------------------------------------

bool SchedulerCore::Admit(int prio, const Shape& shape) const {
  // Every task of a shape belongs to the shape's class: the class node decides for all of them.
  return quota_tree_.Admits(class_node_[prio], shape.gpu_count);
}

// --- Filter and score -------------------------------------------------------------------------

std::optional<PlacementIndex::Fit> SchedulerCore::FindNode(
    const Shape& shape, const Task& t, const std::vector<int>& models,
    const std::vector<uint32_t>& excluded) const {
  // Model, node state and GPU health are filters the index applies by holding only placeable
  // nodes, and only their usable GPUs; best fit is its order.
  if (config_.policies.filters.empty()) {
    return index_.FindBestFit(models, shape.gpu_count, excluded);
  }
  return index_.FindBestFitWhere(models, shape.gpu_count, excluded, [&](uint32_t slot) {
    const NodeState& n = *nodes_[slot];
    const NodeFacts facts{n.id, n.labels};
    for (const auto& f : config_.policies.filters) {
      if (!f->Feasible(t, facts)) return false;
    }
    return true;
  });
}

// --- Permit and start -------------------------------------------------------------------------

PendingReason SchedulerCore::TryStart(int prio, Shape& shape, const std::vector<uint32_t>& excluded,
                                      TimeMicros now) {
  stats_.shape_checks++;
  Task& t = shape.tasks.front_task();
  const auto& models = ShapeModels(shape);
  if (!Admit(prio, shape)) return PostFilter(t, Diagnose(t, models), now);
  // Within quota, so Diagnose would answer from the nodes alone, which have not changed.
  if (StillNoRoom(shape, models, excluded)) return shape.no_room_reason;
  auto fit = FindNode(shape, t, models, excluded);
  if (!fit) {
    PendingReason r = Diagnose(t, models);
    shape.RememberNoRoom(change_seq_, excluded, r);
    return PostFilter(t, r, now);
  }
  // Permit: a single-node task needs one node, which the fit is.
  StartTask(t, fit->slot, fit->model, now);
  return PendingReason::kNone;
}

// --- Post-filter ------------------------------------------------------------------------------

PendingReason SchedulerCore::PostFilter(const Task& t, PendingReason why, TimeMicros now) {
  PostFilterHook* hook = config_.policies.post_filter.get();
  if (hook == nullptr || !IsTransient(why)) return why;
  for (const Victim& v : hook->Victims(*this, t, why)) {
    const Task* victim = tasks_.Find(v.task);
    // Only running tasks not already being stopped: anything else is no victim (and the hook
    // gets no error back; it sees the tasks' states itself).
    if (victim == nullptr || victim->status != TaskStatus::kRunning || victim->stopping) continue;
    (void)StopTask(v.task, StopReason::kPreempt, v.grace_seconds, now);
  }
  return why;
}

// --- Reserve: the starvation guard --------------------------------------------------------------

bool SchedulerCore::ReservedForOther(uint32_t slot, TaskNumber task) const {
  for (const Reservation& r : reservations_) {
    if (r.task == task) continue;
    if (std::find(r.slots.begin(), r.slots.end(), slot) != r.slots.end()) return true;
  }
  return false;
}

bool SchedulerCore::HoldForOldest(int prio, Shape& head_shape, PendingReason reason,
                                  std::vector<uint32_t>& excluded) {
  PriorityQueue& q = *queues_[prio];
  q.holding = true;
  head_shape.reason = reason;
  const Reservation* own = ReservationOf(q.oldest);
  if (reason == PendingReason::kNoNodeFits && own == nullptr) {
    Task& t = *tasks_.Find(q.oldest);
    // Not a node kept for another task: neither could use it.
    auto fit = index_.FindMostFree(
        ModelsFor(head_shape.model), t.spec.gpu_count, [&](uint32_t slot, int model) {
          return ReservedForOther(slot, t.id) ? 0 : nodes_[slot]->Slice(model)->capacity;
        });
    if (fit) own = &Reserve(static_cast<Priority>(prio), t.id, fit->slot);
  }
  if (reason != PendingReason::kNoNodeFits || own == nullptr) {
    for (Shape* s : q.active) {
      if (s != &head_shape) s->reason = PendingReason::kQueued;
    }
    return true;
  }
  excluded.insert(excluded.end(), own->slots.begin(), own->slots.end());
  return false;
}

// --- Queue order inside a class ---------------------------------------------------------------

void SchedulerCore::SchedulePriority(int prio, TimeMicros now) {
  PriorityQueue& q = *queues_[prio];
  if (q.empty()) return;
  // Nodes kept for tasks of other classes.
  std::vector<uint32_t>& excluded = q.excluded;
  excluded.clear();
  for (const Reservation& r : reservations_) {
    if (r.priority != static_cast<Priority>(prio)) {
      excluded.insert(excluded.end(), r.slots.begin(), r.slots.end());
    }
  }

  // The oldest pending task of this class.
  Shape* oldest_shape = nullptr;
  for (Shape* s : q.active) {
    if (oldest_shape == nullptr || s->tasks.front() < oldest_shape->tasks.front()) {
      oldest_shape = s;
    }
  }
  TaskNumber oldest = oldest_shape->tasks.front().second;
  if (q.oldest != oldest) ResetGuard(q, oldest);

  // The oldest task has been overtaken too often. Blocked by quota: nothing younger of this
  // class starts. Blocked by fragmentation: a node is reserved for it, and younger tasks may
  // still start on other nodes (backfill).
  Shape* held_shape = nullptr;  // Its head was tried first and waits; skip it below.
  if (q.bypassed >= config_.max_bypass) {
    PendingReason r = TryStart(prio, *oldest_shape, excluded, now);
    if (r == PendingReason::kNone) {
      // Started: the queue flows again (Dequeue reset the guard).
    } else if (IsTransient(r)) {
      if (HoldForOldest(prio, *oldest_shape, r, excluded)) return;
      held_shape = oldest_shape;
    } else {
      // Can never start as things are: it must not hold others, nor keep a node.
      oldest_shape->reason = r;
      ResetGuard(q, q.oldest);
    }
    if (q.empty()) return;
  }

  // Merge the shape heads by queue position (a min-heap; keys are unique).
  auto& heads = q.heads;
  heads.clear();
  for (Shape* s : q.active) {
    if (s != held_shape) heads.emplace_back(s->tasks.front(), s);
  }
  std::make_heap(heads.begin(), heads.end(), std::greater<>());

  PendingReason oldest_reason = PendingReason::kNone;
  bool oldest_waiting = false;
  while (!heads.empty()) {
    std::pop_heap(heads.begin(), heads.end(), std::greater<>());
    auto [pos, shape] = heads.back();
    heads.pop_back();
    TaskNumber id = pos.second;
    PendingReason r = TryStart(prio, *shape, excluded, now);
    if (r != PendingReason::kNone) {
      shape->reason = r;
      if (id == q.oldest) {
        oldest_waiting = true;
        oldest_reason = r;
      }
      continue;
    }
    if (!q.holding && oldest_waiting && IsTransient(oldest_reason) &&
        ++q.bypassed >= config_.max_bypass) {
      Shape* os = tasks_.Find(q.oldest)->shape;
      if (os != nullptr && HoldForOldest(prio, *os, oldest_reason, excluded)) return;
    }
    // Shapes stay during a pass, even when starting their head empties them.
    if (!shape->tasks.empty()) {
      heads.emplace_back(shape->tasks.front(), shape);
      std::push_heap(heads.begin(), heads.end(), std::greater<>());
    }
  }
}

}  // namespace dgpu::core
