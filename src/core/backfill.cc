// Backfill (CoreConfig::backfill): reservations in time, from the tasks' time limits.
//
// A head that waits for room on some node gets, at once, a planned start: the earliest time at
// which the limits of the tasks holding its candidate nodes free enough GPUs there (one node per
// member), and those nodes. A younger task may still start on them now if its own limit ends
// before that time; it starts on any other node as before. The plan is made again by every
// pass, in queue order, at most backfill_depth entries a pass; a node planned for one head is
// not planned for another. A task without a limit holds its GPUs for ever as the planner sees
// it: a node it holds is planned only if the node has room without those GPUs.
#include <algorithm>
#include <limits>

#include "core/core_internal.h"

namespace dgpu::core {
namespace {

constexpr TimeMicros kNever = std::numeric_limits<TimeMicros>::max();

// When t would be gone at the latest, were it started now: by its time limit; never without one.
TimeMicros EndIfStartedNow(const Task& t, TimeMicros now) {
  return t.spec.timeout_seconds > 0 ? now + t.spec.timeout_seconds * kMicrosPerSecond : kNever;
}

}  // namespace

TimeMicros SchedulerCore::HeldUntil(const Task& t, TimeMicros now) const {
  if (t.stopping) {
    // Its stop is ordered: gone once its grace is over (the node-loss rule covers the rest).
    const int32_t grace = t.spec.preemption_grace_seconds >= 0 ? t.spec.preemption_grace_seconds
                                                               : config_.preemption_grace_seconds;
    return now + std::max<int32_t>(grace, 0) * kMicrosPerSecond;
  }
  if (t.spec.timeout_seconds <= 0) return kNever;
  // started_at is the decision's time until its agent confirms the start.
  return std::max(t.started_at, TimeMicros{0}) + t.spec.timeout_seconds * kMicrosPerSecond;
}

TimeMicros SchedulerCore::ReadyAt(const NodeState& node, int model, int gpus,
                                  TimeMicros now) const {
  const NodeState::ModelSlice* s = node.Slice(model);
  if (s == nullptr || s->capacity < gpus) return kNever;
  int free = s->free;
  if (free >= gpus) return now;
  // The holders of the model's usable GPUs here, each once, with how many they hold.
  struct Holder {
    TimeMicros until;
    TaskNumber task;
    int gpus;
  };
  absl::InlinedVector<Holder, 8> holders;
  for (size_t pos = 0; pos < node.gpu_task.size(); ++pos) {
    const TaskNumber id = node.gpu_task[pos];
    if (id == 0 || node.gpu_model[pos] != model || !node.gpus[pos].healthy) continue;
    auto it = std::find_if(holders.begin(), holders.end(),
                           [id](const Holder& h) { return h.task == id; });
    if (it != holders.end()) {
      ++it->gpus;
      continue;
    }
    const TaskRecord* t = tasks_.Find(id);
    holders.push_back({t == nullptr ? kNever : HeldUntil(*t, now), id, 1});
  }
  std::sort(holders.begin(), holders.end(),
            [](const Holder& a, const Holder& b) { return a.until < b.until; });
  for (const Holder& h : holders) {
    if (h.until == kNever) return kNever;
    free += h.gpus;
    if (free >= gpus) return std::max(h.until, now);
  }
  return kNever;
}

const std::vector<SchedulerCore::ReadyNode>& SchedulerCore::ReadyNodes(int model, int gpus,
                                                                       TimeMicros now) {
  for (const ReadyList& list : ready_lists_) {
    if (list.model == model && list.gpus == gpus) return list.nodes;
  }
  ReadyList& list = ready_lists_.emplace_back();
  list.model = model;
  list.gpus = gpus;
  for (const auto& node : nodes_) {
    if (!node->in_index) continue;
    const TimeMicros ready = ReadyAt(*node, model, gpus, now);
    if (ready != kNever) list.nodes.push_back({ready, node->rank, node->slot});
  }
  std::sort(list.nodes.begin(), list.nodes.end());
  return list.nodes;
}

bool SchedulerCore::PlanStart(int prio, const Task& t, const std::vector<uint32_t>& excluded,
                              TimeMicros now) {
  const int per_node = GpusPerNode(t.spec);
  const auto members = static_cast<size_t>(std::max(1, t.spec.nodes));
  if (node_marks_.size() < nodes_.size()) node_marks_.resize(nodes_.size(), 0);
  // Marks: planned for another task in this pass (plan_mark_), or excluded for this one.
  const uint64_t skip = ++mark_generation_;
  for (uint32_t slot : excluded) node_marks_[slot] = skip;
  TimeMicros best = kNever;
  std::vector<uint32_t> best_slots;
  std::vector<std::pair<TimeMicros, uint32_t>>& chosen = plan_chosen_;
  for (int m : ModelsFor(t.spec.gpu_model)) {
    chosen.clear();
    // By the time they are ready, as the pass found them when it first planned this size.
    for (const ReadyNode& r : ReadyNodes(m, per_node, now)) {
      if (r.ready >= best) break;
      const NodeState& node = *nodes_[r.slot];
      if (node_marks_[r.slot] == skip || node_marks_[r.slot] == plan_mark_ || !node.in_index ||
          ReservedForOther(r.slot, t.id) || !Feasible(t, node, Against::kEmpty)) {
        continue;
      }
      // A node that took a task since is ready later: read again.
      const TimeMicros ready = ReadyAt(node, m, per_node, now);
      if (ready == kNever) continue;
      chosen.emplace_back(ready, r.slot);
      if (chosen.size() == members) break;
    }
    if (chosen.size() < members) continue;
    TimeMicros start = 0;
    for (const auto& [ready, slot] : chosen) start = std::max(start, ready);
    if (start >= best) continue;
    best = start;
    best_slots.clear();
    for (const auto& [ready, slot] : chosen) best_slots.push_back(slot);
  }
  if (best == kNever) return false;
  for (uint32_t slot : best_slots) node_marks_[slot] = plan_mark_;
  backfill_plan_.push_back({t.id, static_cast<Priority>(prio), best, std::move(best_slots)});
  return true;
}

const std::vector<uint32_t>& SchedulerCore::BackfillSkip(const Task& t,
                                                         const std::vector<uint32_t>& excluded,
                                                         TimeMicros now) {
  if (backfill_plan_.empty()) return excluded;
  const TimeMicros end = EndIfStartedNow(t, now);
  backfill_skip_.assign(excluded.begin(), excluded.end());
  for (const PlannedStart& p : backfill_plan_) {
    if (p.task == t.id || end <= p.start_at) continue;
    backfill_skip_.insert(backfill_skip_.end(), p.slots.begin(), p.slots.end());
  }
  return backfill_skip_;
}

const SchedulerCore::PlannedStart* SchedulerCore::PlannedStartOf(TaskNumber task) const {
  for (const PlannedStart& p : backfill_plan_) {
    if (p.task == task) return &p;
  }
  return nullptr;
}

TaskNumber SchedulerCore::HeldBackFor(Shape& shape, const Task& t,
                                      const std::vector<uint32_t>& excluded, TimeMicros now) {
  // Held back by a planned start if it has room once the planned nodes are not kept from it.
  const TimeMicros end = EndIfStartedNow(t, now);
  const PlannedStart* blocking = nullptr;
  for (const PlannedStart& p : backfill_plan_) {
    if (p.task != t.id && end > p.start_at) {
      blocking = &p;
      break;
    }
  }
  if (blocking == nullptr) return 0;
  const auto& models = ShapeModels(shape);
  const bool room = shape.nodes > 1 ? FindGang(shape, t, models, excluded, gang_slots_) >= 0
                                    : FindNode(shape, t, models, excluded).has_value();
  return room ? blocking->task : 0;
}

std::vector<SchedulerCore::PlannedStartView> SchedulerCore::PlannedStarts() const {
  std::vector<PlannedStartView> out;
  for (const PlannedStart& p : backfill_plan_) {
    PlannedStartView& v = out.emplace_back();
    v.priority = p.priority;
    v.task = p.task;
    v.start_at = p.start_at;
    for (uint32_t slot : p.slots) v.nodes.push_back(nodes_[slot]->id);
  }
  return out;
}

}  // namespace dgpu::core
