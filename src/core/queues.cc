// Pending tasks: shape queues per priority, reservations for starving heads, and what the
// queues answer (pending reasons, heads, order).
#include "core/core_internal.h"

namespace dgpu::core {

void SchedulerCore::Enqueue(Task& t) {
  auto& q = *queues_[PrioIndex(t.spec.priority)];
  Shape& shape = q.ShapeFor(t.spec);
  q.Insert(shape, t.queue_seq, &t);
  static_cast<TaskRecord&>(t).shape = &shape;
  pending_count_[PrioIndex(t.spec.priority)]++;
  // Behind the head of its shape it cannot start before the head does: no new pass needed.
  if (shape.tasks.front().second == t.id) pass_needed_ = true;
}

void SchedulerCore::Dequeue(Task& t) {
  auto& record = static_cast<TaskRecord&>(t);
  auto& q = *queues_[PrioIndex(t.spec.priority)];
  if (record.shape == nullptr) return;
  if (q.Erase(*record.shape, t.queue_seq, t.id)) {
    pending_count_[PrioIndex(t.spec.priority)]--;
    PrefetchQueued(*record.shape);
  }
  record.shape = nullptr;
  // Outside a pass, a task leaving its queue (cancelled, adopted, finished elsewhere) can give
  // the next one its turn. Within one, it is a start, which only takes room.
  if (!in_pass_) pass_needed_ = true;
  if (q.oldest == t.id) ResetGuard(q, 0);
}

void SchedulerCore::ResetGuard(PriorityQueue& q, TaskNumber oldest) {
  DropReservation(q.oldest);
  q.oldest = oldest;
  q.bypassed = 0;
  q.holding = false;
}

const SchedulerCore::Reservation& SchedulerCore::Reserve(Priority p, TaskNumber task,
                                                         uint32_t slot) {
  // Other tasks see a different set of nodes: another pass may find more.
  pass_needed_ = true;
  for (Reservation& r : reservations_) {
    if (r.task != task) continue;
    if (std::find(r.slots.begin(), r.slots.end(), slot) == r.slots.end()) r.slots.push_back(slot);
    return r;
  }
  return reservations_.emplace_back(Reservation{p, task, {slot}});
}

const SchedulerCore::Reservation* SchedulerCore::ReservationOf(TaskNumber task) const {
  for (const Reservation& r : reservations_) {
    if (r.task == task) return &r;
  }
  return nullptr;
}

void SchedulerCore::DropReservation(TaskNumber task) {
  if (task == 0) return;
  auto it = std::find_if(reservations_.begin(), reservations_.end(),
                         [&](const Reservation& r) { return r.task == task; });
  if (it == reservations_.end()) return;
  reservations_.erase(it);
  pass_needed_ = true;
}

void SchedulerCore::DropReservationsOn(uint32_t slot) {
  // A reservation is all its nodes or nothing: one that loses a node goes.
  auto gone = [&](const Reservation& r) {
    return std::find(r.slots.begin(), r.slots.end(), slot) != r.slots.end();
  };
  auto it = std::remove_if(reservations_.begin(), reservations_.end(), gone);
  if (it == reservations_.end()) return;
  reservations_.erase(it, reservations_.end());
  pass_needed_ = true;
}

PendingReason SchedulerCore::ReasonOf(const Task& t) const {
  if (t.status != TaskStatus::kPending) return PendingReason::kNone;
  // The core's own record knows its shape; a copy is looked up by its spec.
  const TaskRecord* record = tasks_.Find(t.id);
  const Shape* s =
      record == &t ? record->shape : queues_[PrioIndex(t.spec.priority)]->FindShape(t.spec);
  if (s == nullptr || s->tasks.empty() || s->tasks.front().second != t.id) {
    return PendingReason::kQueued;
  }
  return s->reason;
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
      out.push_back(
          {static_cast<Priority>(p), &s->model, s->gpu_count, s->tasks.front().second, s->reason});
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
