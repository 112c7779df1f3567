// The scheduling pass: which queued tasks may start now, where, and starting them.
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
    if (node.gpu_task[pos] == 0 && node.gpu_model[pos] == model) {
      node.gpu_task[pos] = t.id;
      na.gpu_indices.push_back(node.indices_are_positions ? static_cast<int>(pos)
                                                          : node.gpus[pos].index);
    }
  }
  auto* slice = node.Slice(model);
  const int old_free = slice->free;
  slice->free -= count;
  if (node.online) index_.Move(model, node.Entry(), old_free, slice->free);
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
  for (int p = 0; p < kPriorityCount; ++p) SchedulePriority(p, now);
  in_pass_ = false;
}

void SchedulerCore::SchedulePriority(int prio, TimeMicros now) {
  PriorityQueue& q = *queues_[prio];
  if (q.empty()) return;
  const int other = 1 - prio;
  std::vector<uint32_t>& excluded = q.excluded;
  excluded.clear();
  if (queues_[other]->reserved_slot >= 0) {
    excluded.push_back(static_cast<uint32_t>(queues_[other]->reserved_slot));
  }

  // Tries to start the head of a shape. Returns kNone when it started.
  auto try_start = [&](Shape& shape) -> PendingReason {
    stats_.shape_checks++;
    Task& t = shape.tasks.front_task();
    const auto& models = ShapeModels(shape);
    if (!quota_tree_.Admits(class_node_[prio], shape.gpu_count)) return Diagnose(t, models);
    // Within quota, so Diagnose would answer from the nodes alone, which have not changed.
    if (StillNoRoom(shape, models, excluded)) return shape.no_room_reason;
    auto fit = index_.FindBestFit(models, shape.gpu_count, excluded);
    if (!fit) {
      PendingReason r = Diagnose(t, models);
      shape.RememberNoRoom(change_seq_, excluded, r);
      return r;
    }
    StartTask(t, fit->slot, fit->model, now);
    return PendingReason::kNone;
  };

  // The oldest pending task of this priority.
  Shape* oldest_shape = nullptr;
  for (Shape* s : q.active) {
    if (oldest_shape == nullptr || s->tasks.front() < oldest_shape->tasks.front()) {
      oldest_shape = s;
    }
  }
  TaskNumber oldest = oldest_shape->tasks.front().second;
  if (q.oldest != oldest) {
    q.oldest = oldest;
    q.bypassed = 0;
    q.holding = false;
    SetReservation(q, -1);
  }

  // The oldest task has been overtaken too often. Blocked by quota: nothing younger of this
  // priority starts (returns true). Blocked by fragmentation: a node is reserved for it, and
  // younger tasks may still start on other nodes (backfill; returns false).
  auto hold = [&](Shape& head_shape, PendingReason reason) -> bool {
    q.holding = true;
    head_shape.reason = reason;
    if (reason == PendingReason::kNoNodeFits && q.reserved_slot < 0) {
      Task& t = *tasks_.Find(oldest);
      // Not the node the other priority keeps: neither head could use it.
      const int other_reserved = queues_[other]->reserved_slot;
      auto fit = index_.FindMostFree(
          ModelsFor(head_shape.model), t.spec.gpu_count, [&](uint32_t slot, int model) {
            return static_cast<int>(slot) == other_reserved ? 0
                                                            : nodes_[slot]->Slice(model)->capacity;
          });
      if (fit) SetReservation(q, static_cast<int>(fit->slot));
    }
    if (reason != PendingReason::kNoNodeFits || q.reserved_slot < 0) {
      for (Shape* s : q.active) {
        if (s != &head_shape) s->reason = PendingReason::kQueued;
      }
      return true;
    }
    excluded.push_back(static_cast<uint32_t>(q.reserved_slot));
    return false;
  };

  Shape* held_shape = nullptr;  // Its head was tried first and waits; skip it below.
  if (q.bypassed >= config_.max_bypass) {
    PendingReason r = try_start(*oldest_shape);
    if (r == PendingReason::kNone) {
      // Started: the queue flows again (Dequeue reset the guard).
    } else if (IsTransient(r)) {
      if (hold(*oldest_shape, r)) return;
      held_shape = oldest_shape;
    } else {
      // Can never start as things are: it must not hold others, nor keep a node.
      oldest_shape->reason = r;
      q.bypassed = 0;
      q.holding = false;
      SetReservation(q, -1);
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
    PendingReason r = try_start(*shape);
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
      if (os != nullptr && hold(*os, oldest_reason)) return;
    }
    // Shapes stay during a pass, even when starting their head empties them.
    if (!shape->tasks.empty()) {
      heads.emplace_back(shape->tasks.front(), shape);
      std::push_heap(heads.begin(), heads.end(), std::greater<>());
    }
  }
}

}  // namespace dgpu::core
