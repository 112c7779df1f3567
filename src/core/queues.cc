// Pending tasks: shape queues per priority, reservations for starving heads, and what the
// queues answer (pending reasons, heads, order).
#include "core/core_internal.h"

namespace dgpu::core {

void SchedulerCore::Enqueue(Task& t) {
  auto& q = *queues_[PrioIndex(t.spec.priority)];
  auto& record = static_cast<TaskRecord&>(t);
  Shape& shape = q.ShapeFor(record.team, t.spec);
  q.Insert(shape, t.queue_seq, &t);
  record.shape = &shape;
  pending_count_[PrioIndex(t.spec.priority)]++;
  teams_[record.team].pending++;
  if (!t.spec.user.empty()) pending_by_user_[t.spec.user]++;
  // Behind the head of its shape it cannot start before the head does: no new pass needed,
  // unless the head waits for victims (the others may take GPUs back too: ReclaimBehind).
  if (shape.tasks.front().second == t.id || shape.reason == PendingReason::kWaitingForPreemption) {
    pass_needed_ = true;
  }
}

void SchedulerCore::Dequeue(Task& t) {
  auto& record = static_cast<TaskRecord&>(t);
  auto& q = *queues_[PrioIndex(t.spec.priority)];
  if (record.shape == nullptr) {
    if (t.retry_at != 0) {
      LeaveRetryWait(t);
    } else if (!dependency_wait_.empty()) {
      LeaveDependencyWait(record);
    }
    return;
  }
  if (q.Erase(*record.shape, t.queue_seq, t.id)) {
    pending_count_[PrioIndex(t.spec.priority)]--;
    teams_[record.team].pending--;
    if (!t.spec.user.empty()) {
      auto it = pending_by_user_.find(t.spec.user);
      if (it != pending_by_user_.end() && --it->second == 0) pending_by_user_.erase(it);
    }
    PrefetchQueued(*record.shape);
  }
  record.shape = nullptr;
  // Outside a pass, a task leaving its queue (cancelled, adopted, finished elsewhere) can give
  // the next one its turn. Within one, it is a start, which only takes room.
  if (!in_pass_) pass_needed_ = true;
  if (q.oldest == t.id) ResetGuard(q, 0);
  // A node its victims free is kept for it only while it waits; so is a planned start.
  if (!reservations_.empty()) DropReservation(t.id);
  if (!backfill_plan_.empty()) {
    std::erase_if(backfill_plan_, [&](const PlannedStart& p) { return p.task == t.id; });
  }
}

void SchedulerCore::ResetGuard(PriorityQueue& q, TaskNumber oldest) {
  // The guard's reservation goes; one made by a preemption stays while its victims stop.
  const Reservation* r = ReservationOf(q.oldest);
  if (r != nullptr && !r->preemption) DropReservation(q.oldest);
  q.oldest = oldest;
  q.bypassed = 0;
  q.holding = false;
}

const SchedulerCore::Reservation& SchedulerCore::Reserve(Priority p, TaskNumber task, uint32_t slot,
                                                         bool preemption) {
  if (preemption) return ReservePreempted(p, task, {slot});
  // Other tasks see a different set of nodes: another pass may find more.
  pass_needed_ = true;
  if (auto at = reservation_at_.find(task); at != reservation_at_.end()) {
    Reservation& r = reservations_[at->second];
    if (std::find(r.slots.begin(), r.slots.end(), slot) == r.slots.end()) r.slots.push_back(slot);
    return r;
  }
  Reservation& r = reservations_.emplace_back();
  r.priority = p;
  r.task = task;
  r.slots = {slot};
  reservation_at_[task] = static_cast<uint32_t>(reservations_.size() - 1);
  return r;
}

const SchedulerCore::Reservation& SchedulerCore::ReservePreempted(
    Priority p, TaskNumber task, const std::vector<uint32_t>& slots) {
  pass_needed_ = true;
  const TaskRecord* t = tasks_.Find(task);
  Reservation* r = nullptr;
  if (auto at = reservation_at_.find(task); at != reservation_at_.end()) {
    // Its victims' nodes replace what the guard kept (or what an earlier preemption did).
    r = &reservations_[at->second];
    CountReservation(*r, -1, /*rebalance=*/false);
  } else {
    r = &reservations_.emplace_back();
    r->priority = p;
    r->task = task;
    reservation_at_[task] = static_cast<uint32_t>(reservations_.size() - 1);
  }
  r->slots = slots;
  r->preemption = true;
  r->gpus = t->spec.gpu_count;
  r->per_slot = GpusPerNode(t->spec);
  r->team = t->team;
  r->slot_cpus_milli.clear();
  r->slot_memory_mb.clear();
  for (uint32_t slot : slots) {
    r->slot_cpus_milli.push_back(nodes_[slot]->GivenCpus(t->spec));
    r->slot_memory_mb.push_back(nodes_[slot]->GivenMemory(t->spec));
  }
  CountReservation(*r, +1);
  return *r;
}

const SchedulerCore::Reservation* SchedulerCore::ReservationOf(TaskNumber task) const {
  // A handful are found faster by looking at each.
  if (reservations_.size() <= 8) {
    for (const Reservation& r : reservations_) {
      if (r.task == task) return &r;
    }
    return nullptr;
  }
  auto at = reservation_at_.find(task);
  return at == reservation_at_.end() ? nullptr : &reservations_[at->second];
}

void SchedulerCore::IndexReservationsFrom(size_t first) {
  for (size_t i = first; i < reservations_.size(); ++i) {
    reservation_at_[reservations_[i].task] = static_cast<uint32_t>(i);
  }
}

void SchedulerCore::DropReservation(TaskNumber task) {
  if (task == 0) return;
  auto at = reservation_at_.find(task);
  if (at == reservation_at_.end()) return;
  const size_t i = at->second;
  reservation_at_.erase(at);
  CountReservation(reservations_[i], -1);
  // Erased in place: the order (the order preemptors start in) stays.
  reservations_.erase(reservations_.begin() + static_cast<std::ptrdiff_t>(i));
  IndexReservationsFrom(i);
  pass_needed_ = true;
}

void SchedulerCore::DropReservationsOn(uint32_t slot) {
  // A reservation is all its nodes or nothing: one that loses a node goes.
  auto gone = [&](const Reservation& r) {
    return std::find(r.slots.begin(), r.slots.end(), slot) != r.slots.end();
  };
  for (const Reservation& r : reservations_) {
    if (gone(r)) CountReservation(r, -1);
  }
  auto it = std::remove_if(reservations_.begin(), reservations_.end(), gone);
  if (it == reservations_.end()) return;
  reservations_.erase(it, reservations_.end());
  reservation_at_.clear();
  IndexReservationsFrom(0);
  pass_needed_ = true;
}

void SchedulerCore::CountWaiting(const Task& t, int sign) {
  pending_count_[PrioIndex(t.spec.priority)] += static_cast<size_t>(sign);
  teams_[static_cast<const TaskRecord&>(t).team].pending += static_cast<size_t>(sign);
  if (t.spec.user.empty()) return;
  if (sign > 0) {
    pending_by_user_[t.spec.user]++;
  } else if (auto it = pending_by_user_.find(t.spec.user);
             it != pending_by_user_.end() && --it->second == 0) {
    pending_by_user_.erase(it);
  }
}

void SchedulerCore::WaitForRetry(Task& t) {
  retry_wait_.emplace(t.retry_at, t.id);
  CountWaiting(t, +1);
}

void SchedulerCore::LeaveRetryWait(Task& t) {
  retry_wait_.erase({t.retry_at, t.id});
  CountWaiting(t, -1);
  t.retry_at = 0;
}

void SchedulerCore::QueueDueRetries(TimeMicros now) {
  while (!retry_wait_.empty() && retry_wait_.begin()->first <= now) {
    TaskRecord* t = tasks_.Find(retry_wait_.begin()->second);
    LeaveRetryWait(*t);
    Enqueue(*t);
    pass_needed_ = true;
  }
}

void SchedulerCore::RetryLater(Task& t, const FinishReport& report, TimeMicros now,
                               std::string_view node) {
  // The run failed: back to the queue at its old place once the backoff is over.
  running_count_[PrioIndex(t.spec.priority)]--;
  t.status = TaskStatus::kPending;
  t.exit_code = report.exit_code;
  t.error = report.error;
  t.allocation.clear();
  static_cast<TaskRecord&>(t).node_slot = kNoSlot;
  const int shift = std::min(t.retries, 12);
  const int64_t delay_seconds = std::min<int64_t>(
      int64_t{std::max(t.spec.retry_backoff_seconds, 1)} << shift, kMaxRetryBackoffSeconds);
  t.retries++;
  t.retry_at = std::max<TimeMicros>(now + delay_seconds * kMicrosPerSecond, 1);
  WaitForRetry(t);
  Emit(t);
  if (config_.record_events) {
    EmitEvent(Event::Kind::kTaskRequeued, t, now, node,
              "retry " + std::to_string(t.retries) + " of " + std::to_string(t.spec.max_retries) +
                  " after " + (t.error.empty() ? std::string() : t.error + ", ") + "exit code " +
                  std::to_string(report.exit_code));
  }
}

PendingReason SchedulerCore::ReasonOf(const Task& t) const {
  if (t.status != TaskStatus::kPending) return PendingReason::kNone;
  if (t.retry_at != 0) return PendingReason::kRetryBackoff;
  if (!dependency_wait_.empty() && dependency_wait_.contains(t.id)) {
    return AnyDependency(t, DependencyState::kNeverSatisfied)
               ? PendingReason::kDependencyNeverSatisfied
               : PendingReason::kDependency;
  }
  // The core's own record knows its shape; a copy is looked up by its spec.
  const TaskRecord* record = tasks_.Find(t.id);
  const Shape* s = nullptr;
  if (record == &t) {
    s = record->shape;
  } else if (const int team = TeamIdOf(t.spec.team); team >= 0) {
    s = queues_[PrioIndex(t.spec.priority)]->FindShape(team, t.spec);
  }
  if (s == nullptr || s->tasks.empty() || s->tasks.front().second != t.id) {
    // Behind its shape's head, it may wait for victims of its own (SchedulerCore::ReclaimBehind).
    return OwnReserved(t.id) > 0 ? PendingReason::kWaitingForPreemption : PendingReason::kQueued;
  }
  return s->reason;
}

TaskNumber SchedulerCore::ReservedFor(const Task& t) const {
  const TaskRecord* record = tasks_.Find(t.id);
  if (record == nullptr || record->shape == nullptr || record->status != TaskStatus::kPending) {
    return 0;
  }
  const Shape& s = *record->shape;
  if (s.tasks.empty() || s.tasks.front().second != t.id) return 0;
  return s.reason == PendingReason::kReservedFor ? s.reserved_for : 0;
}

std::optional<std::string> SchedulerCore::ReservedNode(Priority p) const {
  for (const Reservation& r : reservations_) {
    if (r.priority == p && !r.slots.empty()) return nodes_[r.slots.front()]->id;
  }
  return std::nullopt;
}

std::vector<SchedulerCore::ReservationView> SchedulerCore::Reservations() const {
  std::vector<ReservationView> out;
  for (const Reservation& r : reservations_) {
    ReservationView& v = out.emplace_back();
    v.priority = r.priority;
    v.task = r.task;
    for (uint32_t slot : r.slots) v.nodes.push_back(nodes_[slot]->id);
  }
  return out;
}

void SchedulerCore::QueueHeads(std::vector<QueueHead>& out) const {
  out.clear();
  for (int p = 0; p < kPriorityCount; ++p) {
    for (const Shape* s : queues_[p]->active) {
      out.push_back({static_cast<Priority>(p), &s->model, s->gpu_count, s->tasks.front().second,
                     s->reason, s->tasks.size()});
    }
  }
}

std::vector<TaskNumber> SchedulerCore::QueueOrder(Priority p) const {
  std::vector<std::pair<int64_t, TaskNumber>> all;
  for (const Shape* s : queues_[PrioIndex(p)]->active) {
    s->tasks.ForEach([&](const TaskQueue::Key& key) { all.push_back(key); });
  }
  std::sort(all.begin(), all.end());
  std::vector<TaskNumber> out;
  out.reserve(all.size());
  for (const auto& [seq, id] : all) out.push_back(id);
  return out;
}

}  // namespace dgpu::core
