// The scheduling pass, as a pipeline of stages (see "How to add a policy" in
// docs/architecture.md):
//
//   queue order   classes in priority order; inside one, shape heads merged by queue position
//                 (SchedulePhase), with the starvation guard deciding who goes first
//   admission     the team's cap, then the quota tree: its team and class stay within what
//                 they may hold (Admit); with borrowing, heads within their guarantee go in a
//                 first phase and borrowers in a second, team by team in fair-share order
//   filter+score  nodes that can take the task (GPU model, node state, GPU health, the
//                 config's filters) and the best fit among them (FindNode); the placement index
//                 answers both for the default rules without looking at every node
//   reserve       the starving head's reservation: nodes kept for it, skipped by the others
//                 (HoldForOldest)
//   permit        every member of the task has its place (all-or-nothing: a gang whose members
//                 do not all fit in this pass holds nothing), then the start (StartTask,
//                 StartGang)
//   post-filter   a head that cannot start is handed to the config's post-filter (PostFilter);
//                 with borrowing, a head within its guarantee takes GPUs back from borrowers
//                 (Reclaim, preemption.cc)
#include "core/core_internal.h"

namespace dgpu::core {

inline void SchedulerCore::TakeGpus(NodeState& node, const Task& t, int model, int count,
                                    NodeAllocation& na) {
  const TaskNumber id = t.id;
  std::vector<int>& indices = na.gpu_indices;
  const size_t positions = node.gpu_task.size();
  for (size_t pos = 0; pos < positions && std::ssize(indices) < count; ++pos) {
    if (node.gpu_task[pos] == 0 && node.gpu_model[pos] == model && node.Usable(pos)) {
      node.gpu_task[pos] = id;
      indices.push_back(node.indices_are_positions ? static_cast<int>(pos) : node.gpus[pos].index);
    }
  }
  auto* slice = node.Slice(model);
  const int old_free = slice->free;
  slice->free -= count;
  if (node.reports_resources) {
    na.cpus_milli = node.GivenCpus(t.spec);
    na.memory_mb = node.GivenMemory(t.spec);
    node.free_cpus_milli -= na.cpus_milli;
    node.free_memory_mb -= na.memory_mb;
  } else {
    na.cpus_milli = na.memory_mb = 0;
  }
  if (node.in_index) index_.Move(model, node.Entry(), old_free, slice->free, node.Room());
}

void SchedulerCore::StartTask(Task& t, uint32_t slot, int model, TimeMicros now) {
  // The node was chosen just now and is likely not in cache: fetch it first and do what does not
  // need it (the task's record, the allocation's buffers, the decision) while it comes.
  NodeState& node = *nodes_[slot];
  PrefetchLines<true>(&node, kNodeHotBytes);
  auto& record = static_cast<TaskRecord&>(t);
  // Charged before it leaves its queue: room kept for it (a preemption) is its own.
  ChargeTask(record, +1);
  Dequeue(t);
  const int count = t.spec.gpu_count;
  t.status = TaskStatus::kRunning;
  record.node_slot = slot;
  t.attempts++;
  t.started_at = now;
  t.error.clear();
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
  TakeGpus(node, t, model, count, na);
  if (config_.borrowing) {
    UpdateEligible(record);
    ReclaimSync(node);
  }
  d.node_id = node.id;
  d.gpu_indices.assign(na.gpu_indices.begin(), na.gpu_indices.end());
  Emit(t);
  if (config_.record_events) EmitEvent(Event::Kind::kTaskScheduled, t, now, node.id);
}

void SchedulerCore::StartGang(Task& t, const std::vector<uint32_t>& slots, int model,
                              TimeMicros now) {
  auto& record = static_cast<TaskRecord&>(t);
  ChargeTask(record, +1);
  Dequeue(t);
  t.status = TaskStatus::kRunning;
  record.node_slot = slots.front();
  t.attempts++;
  t.started_at = now;
  t.error.clear();
  running_count_[PrioIndex(t.spec.priority)]++;
  stats_.decisions++;
  stats_.gang_starts++;
  pass_needed_ = true;
  const int per_node = GpusPerNode(t.spec);
  t.master_port = FreeGangPort(*nodes_[slots.front()]);
  // Members in rank order: rank 0 on the first node found (the best fit).
  t.allocation.clear();
  t.allocation.resize(slots.size());
  for (size_t rank = 0; rank < slots.size(); ++rank) {
    NodeState& node = *nodes_[slots[rank]];
    NodeAllocation& na = t.allocation[rank];
    na.node_id = node.id;
    TakeGpus(node, t, model, per_node, na);
    Decision& d = decisions_.emplace_back();
    d.kind = Decision::Kind::kStart;
    d.task = t.id;
    d.node_id = node.id;
    d.gpu_indices = na.gpu_indices;
  }
  if (config_.borrowing) {
    UpdateEligible(record);
    for (uint32_t slot : slots) ReclaimSync(*nodes_[slot]);
  }
  Emit(t);
  if (config_.record_events) {
    for (const NodeAllocation& na : t.allocation) {
      EmitEvent(Event::Kind::kTaskScheduled, t, now, na.node_id);
    }
  }
}

bool SchedulerCore::StillNoRoom(const Shape& shape, const std::vector<int>& models,
                                const std::vector<uint32_t>& excluded) const {
  const uint64_t seen = shape.no_room_seq;
  if (seen == 0 || structure_seq_ > seen || resource_seq_ > seen) return false;
  // Short of CPUs or memory where its GPUs fit: a start can take those GPUs (no_node_fits then).
  // And where the nodes with room were all kept for others, a start there by their owner can
  // leave them short (insufficient_*): only a wait for GPUs nobody keeps is kept.
  if (any_node_resources_ &&
      (shape.no_room_reason == PendingReason::kInsufficientCpu ||
       shape.no_room_reason == PendingReason::kInsufficientMemory ||
       (shape.no_room_reason == PendingReason::kNoNodeFits && !excluded.empty()))) {
    return false;
  }
  // Nodes excluded then may not be now: only a superset of them is as restrictive.
  for (uint8_t i = 0; i < shape.no_room_excluded_count; ++i) {
    if (std::find(excluded.begin(), excluded.end(), shape.no_room_excluded[i]) == excluded.end()) {
      return false;
    }
  }
  const auto k = static_cast<size_t>(shape.per_node);
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
  const int per_node = GpusPerNode(t.spec);
  if (per_node > max_capacity) return PendingReason::kExceedsCluster;
  if (t.spec.nodes > 1) {
    // A gang's members share one model: too few nodes of that size for it in any model.
    int most = 0;
    for (int m : models) most = std::max(most, index_.NodesWithCapacity(m, per_node));
    if (most < t.spec.nodes) return PendingReason::kExceedsCluster;
  }
  if (!t.spec.node_selector.empty() && !EnoughNodesMatch(t, models)) {
    return PendingReason::kNoNodeMatches;
  }
  // Among the nodes it selects: one that waits for CPUs or memory no such node has waits for
  // ever, not for room.
  if (any_node_resources_ && !CouldEverHold(t, models)) return PendingReason::kExceedsCluster;
  const QuotaTree::NodeId leaf = QuotaLeaf(t);
  if (!quota_tree_.Admits(leaf, t.spec.gpu_count)) {
    // Strict quotas where the task's team guarantee, or the part of the class that no team
    // holds, is smaller than the task even when nothing else runs: it waits for the teams'
    // limits to change, and must not hold its class's queue as a wait for GPUs would. (Larger
    // than the whole class quota stays quota_exhausted, as without teams.)
    const QuotaTree::NodeId cls = class_node_[PrioIndex(t.spec.priority)];
    for (QuotaTree::NodeId n = leaf; n != cls && n > QuotaTree::kRoot;
         n = quota_tree_.node(n).parent) {
      const int allowed = quota_tree_.Allowed(n);
      if (t.spec.gpu_count > allowed && allowed < quota_tree_.Allowed(cls)) {
        return PendingReason::kTeamLimit;
      }
    }
    return PendingReason::kQuotaExhausted;
  }
  if (any_node_resources_) {
    if (PendingReason r = ShortageWhereGpusFit(t, models); r != PendingReason::kNone) {
      return r;
    }
  }
  return PendingReason::kNoNodeFits;
}

bool SchedulerCore::EnoughNodesMatch(const Task& t, const std::vector<int>& models) const {
  // Online schedulable nodes of its model with the labels it asks for, large enough for a member.
  return EnoughNodesWhere(t, models, [&](const NodeState& n) {
    return MatchesSelector(t.spec.node_selector, n.labels);
  });
}

bool SchedulerCore::CouldEverHold(const Task& t, const std::vector<int>& models) const {
  // Only a request of its own can be larger than every node: a share of a node that has the
  // GPUs always fits there.
  if (t.spec.cpus_milli <= 0 && t.spec.memory_mb <= 0) return true;
  return EnoughNodesWhere(t, models, [&](const NodeState& n) {
    return n.ResourceShortage(t.spec, /*empty=*/true) == PendingReason::kNone &&
           MatchesSelector(t.spec.node_selector, n.labels);
  });
}

PendingReason SchedulerCore::ShortageWhereGpusFit(const Task& t,
                                                  const std::vector<int>& models) const {
  // The nodes with the GPUs free (and through the filters), in best-fit order: enough of them
  // for every member, one of them short of CPUs or memory. Else its GPUs are what it lacks.
  // Model by model: a gang's members share one.
  const int per_node = GpusPerNode(t.spec);
  static const std::vector<uint32_t> kNoneExcluded;
  for (int m : models) {
    int gpu_fits = 0;
    PendingReason shortage = PendingReason::kNone;
    index_.ForEachFitOf(m, per_node, kNoneExcluded, [&](uint32_t slot, int, int) {
      const NodeState& n = *nodes_[slot];
      if (!PassesFilters(t, n)) return true;
      ++gpu_fits;
      if (shortage == PendingReason::kNone) shortage = n.ResourceShortage(t.spec);
      return gpu_fits < t.spec.nodes || shortage == PendingReason::kNone;
    });
    if (gpu_fits >= t.spec.nodes && shortage != PendingReason::kNone) return shortage;
  }
  return PendingReason::kNone;
}

void SchedulerCore::Schedule(TimeMicros now) {
  stats_.passes++;
  if (!retry_wait_.empty()) QueueDueRetries(now);
  // Fair-share usage follows time whether or not the pass has work (it decides orders).
  if (config_.borrowing) AccrueUsage(now);
  // A pass leaves every queue head unable to start (or held back), and only the commands that
  // flag pass_needed_ can change that: another pass would decide nothing.
  // Borrowed tasks that were too young to be preempted may not be any more.
  if (preempt_wake_at_ != 0 && now >= preempt_wake_at_) {
    preempt_wake_at_ = 0;
    pass_needed_ = true;
  }
  if (!pass_needed_) {
    stats_.passes_skipped++;
    return;
  }
  pass_needed_ = false;
  in_pass_ = true;
  pass_first_start_ = next_start_order_;
  // Queue order, first level: classes in priority order.
  if (!config_.borrowing) {
    for (int p = 0; p < kPriorityCount; ++p) SchedulePhase(p, Phase::kAll, now);
  } else {
    // Guarantees first, in both classes; then what is idle is lent.
    bool held[kPriorityCount] = {false, false};
    for (int p = 0; p < kPriorityCount; ++p) held[p] = SchedulePhase(p, Phase::kGuaranteed, now);
    for (int p = 0; p < kPriorityCount; ++p) {
      if (!held[p]) SchedulePhase(p, Phase::kBorrowing, now);
    }
  }
  in_pass_ = false;
}

// --- Admission --------------------------------------------------------------------------------

bool SchedulerCore::Admit(int prio, const Shape& shape) const {
  // Every task of a shape belongs to the shape's team and class: its leaf decides for all.
  return quota_tree_.Admits(teams_[static_cast<size_t>(shape.team)].leaf[prio], shape.gpu_count);
}

bool SchedulerCore::InPhase(const Shape& shape, Phase phase, int prio) const {
  switch (phase) {
    case Phase::kAll:
      return true;
    case Phase::kGuaranteed:
      return WithinGuarantee(shape.team, prio, shape.gpu_count,
                             OwnReserved(shape.tasks.front().second));
    case Phase::kBorrowing:
      return shape.tried_in_pass != stats_.passes;
  }
  return true;
}

// --- Filter and score -------------------------------------------------------------------------

std::optional<PlacementIndex::Fit> SchedulerCore::FindNode(
    const Shape& shape, const Task& t, const std::vector<int>& models,
    const std::vector<uint32_t>& excluded) const {
  // Model, node state and GPU health are filters the index applies by holding only placeable
  // nodes, and only their usable GPUs; best fit is its order.
  if (config_.policies.filters.empty() && !any_node_resources_ && t.spec.node_selector.empty()) {
    return index_.FindBestFit(models, shape.gpu_count, excluded);
  }
  // The index passes over nodes short of what the task asks for of its own, and over the nodes
  // without a selector's labels (its sets) a word of 64 at a time.
  const SelectorSets* sets = ShapeSets(shape);
  if (sets == nullptr) return std::nullopt;
  return index_.FindBestFitWhere(
      models, shape.gpu_count, excluded, NodeState::Need(t.spec), *sets,
      [&](uint32_t slot) { return Fits(t, *nodes_[slot], /*selector_checked=*/true); });
}

int SchedulerCore::FindGang(const Shape& shape, const Task& t, const std::vector<int>& models,
                            const std::vector<uint32_t>& excluded, std::vector<uint32_t>& slots) {
  // Model by model (one model for all members), best fit per member: the nodes with the fewest
  // free GPUs that still fit, then by id.
  const auto wanted = static_cast<size_t>(shape.nodes);
  const SelectorSets* sets = ShapeSets(shape);
  if (sets == nullptr) {
    slots.clear();
    return -1;
  }
  for (int m : models) {
    slots.clear();
    if (!config_.topology_key.empty()) {
      PackByTopology(shape, t, m, excluded, *sets, slots);
    } else {
      index_.ForEachFitOf(m, shape.per_node, excluded, NodeState::Need(t.spec), *sets,
                          [&](uint32_t slot, int, int) {
                            if (!Fits(t, *nodes_[slot], /*selector_checked=*/true)) return true;
                            slots.push_back(slot);
                            return slots.size() < wanted;
                          });
    }
    if (!Permit(shape, m, slots)) continue;
    // Ranks in best-fit order: fewest free first, then node id (the index lists nodes that
    // registered out of id order after the others until it renumbers them).
    std::sort(slots.begin(), slots.end(), [&](uint32_t a, uint32_t b) {
      const int fa = nodes_[a]->Slice(m)->free;
      const int fb = nodes_[b]->Slice(m)->free;
      return fa != fb ? fa < fb : nodes_[a]->rank < nodes_[b]->rank;
    });
    return m;
  }
  slots.clear();
  return -1;
}

void SchedulerCore::PackByTopology(const Shape& shape, const Task& t, int model,
                                   const std::vector<uint32_t>& excluded, const SelectorSets& sets,
                                   std::vector<uint32_t>& slots) {
  // The nodes that fit a member, gathered by value in best-fit order until one value has them
  // all: one value is the fewest, and its nodes came first in best-fit order. A node without the
  // label is a value of its own.
  const auto wanted = static_cast<size_t>(shape.nodes);
  std::vector<uint32_t> alone;
  std::vector<int32_t> seen;  // Values in the order their first node came.
  int32_t whole = -1;
  index_.ForEachFitOf(model, shape.per_node, excluded, NodeState::Need(t.spec), sets,
                      [&](uint32_t slot, int, int) {
                        if (!Fits(t, *nodes_[slot], /*selector_checked=*/true)) return true;
                        const int32_t value = nodes_[slot]->topology;
                        if (value < 0) {
                          alone.push_back(slot);
                          return true;
                        }
                        auto& nodes = by_topology_[static_cast<size_t>(value)];
                        if (nodes.empty()) seen.push_back(value);
                        nodes.push_back(slot);
                        if (nodes.size() < wanted) return true;
                        whole = value;
                        return false;
                      });
  // The scratch is left empty for the next gang: only the values filled here are cleared.
  struct ClearSeen {
    std::vector<std::vector<uint32_t>>& by_value;
    const std::vector<int32_t>& seen;
    ~ClearSeen() {
      for (int32_t value : seen) by_value[static_cast<size_t>(value)].clear();
    }
  } clear_seen{by_topology_, seen};
  if (whole >= 0) {
    slots = by_topology_[static_cast<size_t>(whole)];
    return;
  }
  // No value holds it: as few values as can. Groups (a value's nodes, or a node without the
  // label), largest first (ties: best fit); the largest whole while no group holds the rest,
  // then the smallest group that does (best fit), its best nodes.
  std::vector<const std::vector<uint32_t>*> groups;
  groups.reserve(seen.size() + alone.size());
  for (int32_t value : seen) groups.push_back(&by_topology_[static_cast<size_t>(value)]);
  std::vector<std::vector<uint32_t>> singles;
  singles.reserve(alone.size());
  for (uint32_t slot : alone) groups.push_back(&singles.emplace_back(1, slot));
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto* a, const auto* b) { return a->size() > b->size(); });
  slots.clear();
  size_t next = 0;
  while (slots.size() < wanted && next < groups.size()) {
    const size_t rest = wanted - slots.size();
    // The smallest group from `next` on that holds the rest, the first of that size (sorted by
    // size: the groups of one size are together, in best-fit order).
    size_t fits = groups.size();
    for (size_t i = next; i < groups.size() && groups[i]->size() >= rest; ++i) fits = i;
    while (fits < groups.size() && fits > next &&
           groups[fits - 1]->size() == groups[fits]->size()) {
      --fits;
    }
    if (fits < groups.size()) {
      slots.insert(slots.end(), groups[fits]->begin(),
                   groups[fits]->begin() + static_cast<std::ptrdiff_t>(rest));
      return;
    }
    slots.insert(slots.end(), groups[next]->begin(), groups[next]->end());
    ++next;
  }
}

// --- Permit and start -------------------------------------------------------------------------

int32_t SchedulerCore::FreeGangPort(const NodeState& node) const {
  std::vector<int32_t> used;
  for (TaskNumber id : node.HeldTasks()) {
    const TaskRecord* t = tasks_.Find(id);
    if (t != nullptr && t->spec.nodes > 1 && !t->allocation.empty() &&
        t->allocation[0].node_id == node.id) {
      used.push_back(t->master_port);
    }
  }
  for (int32_t port = config_.gang_port_low; port <= config_.gang_port_high; ++port) {
    if (std::find(used.begin(), used.end(), port) == used.end()) return port;
  }
  return 0;
}

bool SchedulerCore::Permit(const Shape& shape, int model, const std::vector<uint32_t>& slots) {
  // All or nothing: a place for every member, on distinct placeable nodes with room. Nothing is
  // held before this says yes, so a gang that does not fit keeps nothing from anyone.
  if (std::ssize(slots) != shape.nodes) return false;
  // Rank 0's node gives the gang its rendezvous port.
  if (FreeGangPort(*nodes_[slots.front()]) == 0) return false;
  for (size_t i = 0; i < slots.size(); ++i) {
    const NodeState& n = *nodes_[slots[i]];
    const NodeState::ModelSlice* s = const_cast<NodeState&>(n).Slice(model);
    if (!n.in_index || s == nullptr || s->free < shape.per_node ||
        std::find(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(i), slots[i]) !=
            slots.begin() + static_cast<std::ptrdiff_t>(i)) {
      return false;
    }
  }
  return true;
}

PendingReason SchedulerCore::TryStart(int prio, Shape& shape, const std::vector<uint32_t>& excluded,
                                      TimeMicros now, Phase phase) {
  Task& t = shape.tasks.front_task();
  // With borrowing, a head beyond its guarantee waits for the second phase (kQueued: not
  // tried), and one tried in the first is not tried again.
  if (phase != Phase::kAll && !InPhase(shape, phase, prio)) return PendingReason::kQueued;
  stats_.shape_checks++;
  PendingReason r = TryStartHead(prio, shape, t, excluded, now, phase);
  // A head within its guarantee that waits is not tried again as a borrower in this pass.
  if (phase == Phase::kGuaranteed && r != PendingReason::kNone) shape.tried_in_pass = stats_.passes;
  return r;
}

PendingReason SchedulerCore::TryStartHead(int prio, Shape& shape, Task& t,
                                          const std::vector<uint32_t>& excluded, TimeMicros now,
                                          Phase phase) {
  auto& record = static_cast<TaskRecord&>(t);
  const auto& models = ShapeModels(shape);
  // Nodes kept for other tasks are skipped; its own reservation is its to use.
  const std::vector<uint32_t>* skip = &excluded;
  const Reservation* own = reservations_.empty() ? nullptr : ReservationOf(t.id);
  if (own != nullptr) {
    own_excluded_.clear();
    for (uint32_t slot : excluded) {
      if (std::find(own->slots.begin(), own->slots.end(), slot) == own->slots.end()) {
        own_excluded_.push_back(slot);
      }
    }
    skip = &own_excluded_;
  }
  const int own_gpus = own != nullptr && own->preemption ? own->gpus : 0;
  if (PendingReason r = TeamAdmits(shape.team, shape.gpu_count, own_gpus);
      r != PendingReason::kNone) {
    return r;
  }
  if (!Admit(prio, shape)) return PostFilter(t, Diagnose(t, models), now);
  // A task that may not be preempted may not borrow either.
  if (phase == Phase::kBorrowing && !shape.preemptible) return PendingReason::kQuotaExhausted;
  // The nodes its victims freed, first.
  if (own != nullptr && own->preemption && shape.nodes > 1 &&
      StartReservedGang(t, *own, models, now)) {
    return PendingReason::kNone;
  }
  if (own != nullptr && own->preemption && shape.nodes == 1) {
    for (uint32_t slot : own->slots) {
      NodeState& n = *nodes_[slot];
      if (!n.in_index) continue;
      for (int m : models) {
        const NodeState::ModelSlice* s = n.Slice(m);
        if (s == nullptr || s->free < shape.gpu_count || !Fits(t, n)) continue;
        StartTask(t, slot, m, now);
        return PendingReason::kNone;
      }
    }
  }
  std::optional<PlacementIndex::Fit> fit;
  PendingReason r = PendingReason::kNone;
  if (StillNoRoom(shape, models, *skip)) {
    // Within quota, so Diagnose would answer from the nodes alone, which have not changed.
    r = shape.no_room_reason;
    if (phase == Phase::kAll) return r;
  } else if (shape.nodes > 1) {
    const int model = FindGang(shape, t, models, *skip, gang_slots_);
    if (model >= 0) {
      StartGang(t, gang_slots_, model, now);
      return PendingReason::kNone;
    }
    r = Diagnose(t, models);
    shape.RememberNoRoom(change_seq_, *skip, r);
    if (phase == Phase::kAll) return PostFilter(t, r, now);
  } else {
    fit = FindNode(shape, t, models, *skip);
    if (!fit) {
      r = Diagnose(t, models);
      shape.RememberNoRoom(change_seq_, *skip, r);
      if (phase == Phase::kAll) return PostFilter(t, r, now);
    }
  }
  if (!fit) {
    // Short of CPUs or memory where its GPUs fit: taking GPUs back would not help.
    if (!IsTransient(r) || r == PendingReason::kInsufficientCpu ||
        r == PendingReason::kInsufficientMemory) {
      return r;
    }
    // Within its guarantee: take GPUs back from borrowers. A borrower waits for idle GPUs: on
    // some node (no_node_fits), or anywhere (quota_exhausted: nothing to borrow).
    if (phase == Phase::kGuaranteed) return Reclaim(record, PendingReason::kNoNodeFits, *skip, now);
    const int idle = total_online_gpus_ - quota_tree_.node(QuotaTree::kRoot).used;
    return idle >= shape.gpu_count ? PendingReason::kNoNodeFits : PendingReason::kQuotaExhausted;
  }
  // Permit: a single-node task needs one node, which the fit is.
  StartTask(t, fit->slot, fit->model, now);
  return PendingReason::kNone;
}

void SchedulerCore::StartPreemptors(int prio, TimeMicros now) {
  std::vector<TaskNumber> waiting;
  for (const Reservation& r : reservations_) {
    if (r.preemption && PrioIndex(r.priority) == prio) waiting.push_back(r.task);
  }
  for (TaskNumber id : waiting) {
    TaskRecord* t = tasks_.Find(id);
    const Reservation* r = ReservationOf(id);
    if (t == nullptr || r == nullptr || t->status != TaskStatus::kPending || t->shape == nullptr) {
      continue;
    }
    if (TeamAdmits(t->team, t->spec.gpu_count, OwnReserved(id)) != PendingReason::kNone) continue;
    if (t->spec.nodes > 1) {
      (void)StartReservedGang(*t, *r, ShapeModels(*t->shape), now);
      continue;
    }
    const uint32_t slot = r->slots.front();
    NodeState& n = *nodes_[slot];
    if (!n.in_index) continue;
    for (int m : ShapeModels(*t->shape)) {
      const NodeState::ModelSlice* s = n.Slice(m);
      if (s == nullptr || s->free < t->spec.gpu_count || !Fits(*t, n)) continue;
      StartTask(*t, slot, m, now);
      break;
    }
  }
}

bool SchedulerCore::StartReservedGang(Task& t, const Reservation& r, const std::vector<int>& models,
                                      TimeMicros now) {
  const int per_node = GpusPerNode(t.spec);
  for (int m : models) {
    bool room = true;
    for (uint32_t slot : r.slots) {
      NodeState& n = *nodes_[slot];
      const NodeState::ModelSlice* s = n.Slice(m);
      room = room && n.in_index && s != nullptr && s->free >= per_node && Fits(t, n);
    }
    if (!room) continue;
    // Starting drops the reservation: its nodes are copied first.
    std::vector<uint32_t> slots = r.slots;
    StartGang(t, slots, m, now);
    return true;
  }
  return false;
}

// A head waiting for its victims would keep every task of its shape waiting behind it for a
// grace period each: the tasks behind it that are within their guarantee too take GPUs back
// in the same pass, each for itself (a bounded number per pass).
void SchedulerCore::ReclaimBehind(int prio, Shape& shape, TimeMicros now) {
  // New searches per pass; tasks already waiting for their own victims are passed over, so a
  // burst of arrivals takes back room kMaxNew tasks a pass, not kMaxNew in all.
  constexpr int kMaxNew = 64;
  int fresh = 0;
  std::vector<TaskRecord*> behind;
  shape.tasks.ForEachBehindHead([&](Task& t) {
    auto* record = static_cast<TaskRecord*>(&t);
    behind.push_back(record);
    if (OwnReserved(record->id) == 0) ++fresh;
    return fresh < kMaxNew;
  });
  for (TaskRecord* t : behind) {
    const int own = OwnReserved(t->id);
    if (TeamAdmits(shape.team, shape.gpu_count, own) != PendingReason::kNone ||
        !WithinGuarantee(shape.team, prio, shape.gpu_count, own)) {
      return;
    }
    if (own > 0) continue;  // Already waiting for its own victims.
    if (Reclaim(*t, PendingReason::kNoNodeFits, queues_[prio]->excluded, now) !=
        PendingReason::kWaitingForPreemption) {
      return;
    }
  }
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
  if (WaitsForNodeRoom(reason) && own == nullptr) {
    Task& t = *tasks_.Find(q.oldest);
    if (t.spec.nodes > 1) {
      own = ReserveForGang(static_cast<Priority>(prio), t);
    } else {
      // Not a node kept for another task, nor one its filters (its selector) turn away:
      // neither could use it.
      auto fit = index_.FindMostFree(
          ModelsFor(head_shape.model), t.spec.gpu_count, [&](uint32_t slot, int model) {
            return ReservedForOther(slot, t.id) || !PassesFilters(t, *nodes_[slot])
                       ? 0
                       : nodes_[slot]->Slice(model)->capacity;
          });
      if (fit) own = &Reserve(static_cast<Priority>(prio), t.id, fit->slot);
    }
  }
  if (!WaitsForNodeRoom(reason) || own == nullptr) {
    for (Shape* s : q.active) {
      if (s != &head_shape) s->reason = PendingReason::kQueued;
    }
    return true;
  }
  excluded.insert(excluded.end(), own->slots.begin(), own->slots.end());
  return false;
}

const SchedulerCore::Reservation* SchedulerCore::ReserveForGang(Priority p, const Task& t) {
  // The gang's nodes drain as their tasks end: the nodes with the most free GPUs (of one model,
  // large enough for a member) and kept for nobody else, so that it waits the least.
  const int per_node = GpusPerNode(t.spec);
  std::vector<uint32_t>& chosen = gang_slots_;
  for (int m : ModelsFor(t.spec.gpu_model)) {
    chosen.clear();
    index_.ForEachMostFree(m, [&](uint32_t slot, int) {
      const NodeState::ModelSlice* s = nodes_[slot]->Slice(m);
      if (s->capacity >= per_node && !ReservedForOther(slot, t.id) &&
          PassesFilters(t, *nodes_[slot])) {
        chosen.push_back(slot);
      }
      return std::ssize(chosen) < t.spec.nodes;
    });
    if (std::ssize(chosen) < t.spec.nodes) continue;
    const Reservation* r = nullptr;
    for (uint32_t slot : chosen) r = &Reserve(p, t.id, slot);
    return r;
  }
  return nullptr;
}

// --- Queue order inside a class ---------------------------------------------------------------

bool SchedulerCore::SchedulePhase(int prio, Phase phase, TimeMicros now) {
  PriorityQueue& q = *queues_[prio];
  if (q.empty()) return false;
  // Tasks whose victims have freed their GPUs start first, whatever holds the queue: those GPUs
  // were taken back for them and nobody else may use them.
  if (phase == Phase::kGuaranteed && !reservations_.empty()) StartPreemptors(prio, now);
  if (q.empty()) return false;
  // The oldest pending task of this class.
  Shape* oldest_shape = nullptr;
  for (Shape* s : q.active) {
    if (oldest_shape == nullptr || s->tasks.front() < oldest_shape->tasks.front()) {
      oldest_shape = s;
    }
  }
  TaskNumber oldest = oldest_shape->tasks.front().second;
  if (q.oldest != oldest) ResetGuard(q, oldest);

  // Nodes kept for other tasks (each task may use its own: TryStart). The guard's node for
  // this class's oldest task is skipped by the others once it holds (HoldForOldest).
  std::vector<uint32_t>& excluded = q.excluded;
  excluded.clear();
  for (const Reservation& r : reservations_) {
    if (r.task == q.oldest && !r.preemption) continue;
    excluded.insert(excluded.end(), r.slots.begin(), r.slots.end());
  }
  // The guard acts in the phase its oldest task belongs to.
  const bool oldest_here = InPhase(*oldest_shape, phase, prio);

  // The oldest task has been overtaken too often. Blocked by quota: nothing younger of this
  // class starts. Blocked by fragmentation: a node is reserved for it, and younger tasks may
  // still start on other nodes (backfill).
  Shape* held_shape = nullptr;  // Its head was tried first and waits; skip it below.
  if (oldest_here && q.bypassed >= config_.max_bypass) {
    PendingReason r = TryStart(prio, *oldest_shape, excluded, now, phase);
    if (r == PendingReason::kWaitingForPreemption) ReclaimBehind(prio, *oldest_shape, now);
    if (r == PendingReason::kNone) {
      // Started: the queue flows again (Dequeue reset the guard).
    } else if (IsTransient(r)) {
      if (HoldForOldest(prio, *oldest_shape, r, excluded)) return true;
      held_shape = oldest_shape;
    } else {
      // Can never start as things are (or waits for its victims): it must not hold others,
      // nor keep a node for the guard.
      oldest_shape->reason = r;
      ResetGuard(q, q.oldest);
    }
    if (q.empty()) return false;
  }

  // Shape heads in queue order; borrowers team by team, the team with the least fair-share
  // usage over its weight first (a start raises its team's key, so teams take turns).
  auto& heads = q.heads;
  heads.clear();
  const bool fair = phase == Phase::kBorrowing;
  auto& fair_heads = q.fair_heads;
  fair_heads.clear();
  for (Shape* s : q.active) {
    if (s == held_shape) continue;
    if (fair) {
      if (s->tried_in_pass == stats_.passes) continue;
      fair_heads.push_back({FairShareKey(s->team), s->tasks.front(), s});
    } else {
      heads.emplace_back(s->tasks.front(), s);
    }
  }
  std::make_heap(heads.begin(), heads.end(), std::greater<>());
  std::make_heap(fair_heads.begin(), fair_heads.end(), std::greater<>());

  PendingReason oldest_reason = PendingReason::kNone;
  bool oldest_waiting = false;
  while (!heads.empty() || !fair_heads.empty()) {
    Shape* shape = nullptr;
    TaskQueue::Key pos;
    if (fair) {
      std::pop_heap(fair_heads.begin(), fair_heads.end(), std::greater<>());
      auto [key, head_pos, head_shape] = fair_heads.back();
      fair_heads.pop_back();
      const double current = FairShareKey(head_shape->team);
      if (current > key) {
        // Its team started something since: back in line with its new key.
        fair_heads.push_back({current, head_pos, head_shape});
        std::push_heap(fair_heads.begin(), fair_heads.end(), std::greater<>());
        continue;
      }
      pos = head_pos;
      shape = head_shape;
    } else {
      std::pop_heap(heads.begin(), heads.end(), std::greater<>());
      std::tie(pos, shape) = heads.back();
      heads.pop_back();
    }
    TaskNumber id = pos.second;
    PendingReason r = TryStart(prio, *shape, excluded, now, phase);
    if (r == PendingReason::kQueued) continue;  // Not this phase's.
    if (r == PendingReason::kWaitingForPreemption) ReclaimBehind(prio, *shape, now);
    if (r != PendingReason::kNone) {
      shape->reason = r;
      if (id == q.oldest && oldest_here) {
        oldest_waiting = true;
        oldest_reason = r;
      }
      continue;
    }
    if (!q.holding && oldest_waiting && IsTransient(oldest_reason) &&
        ++q.bypassed >= config_.max_bypass) {
      Shape* os = tasks_.Find(q.oldest)->shape;
      if (os != nullptr && HoldForOldest(prio, *os, oldest_reason, excluded)) return true;
    }
    // Shapes stay during a pass, even when starting their head empties them.
    if (!shape->tasks.empty()) {
      if (fair) {
        fair_heads.push_back({FairShareKey(shape->team), shape->tasks.front(), shape});
        std::push_heap(fair_heads.begin(), fair_heads.end(), std::greater<>());
      } else {
        heads.emplace_back(shape->tasks.front(), shape);
        std::push_heap(heads.begin(), heads.end(), std::greater<>());
      }
    }
  }
  return false;
}

}  // namespace dgpu::core
