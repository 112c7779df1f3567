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
//   post-filter   a head that cannot start, on every path, waits for victims already stopping
//                 for it or is handed to the post-filter (PostFilter): the configured hook, else
//                 the built-in reclaim of borrowed room for a head within its guarantee
//                 (Reclaim, preemption.cc); its plan is applied alike (ApplyPreemption)
#include "core/core_internal.h"

namespace dgpu::core {

inline void SchedulerCore::TakeGpus(NodeState& node, const Task& t, int model, int count,
                                    NodeAllocation& na) {
  const TaskNumber id = t.id;
  std::vector<int>& indices = na.gpu_indices;
  const size_t positions = node.gpu_task.size();
  if (node.Linked()) {
    TakeLinkedGpus(node, id, model, count, indices);
  } else {
    for (size_t pos = 0; pos < positions && std::ssize(indices) < count; ++pos) {
      if (node.gpu_task[pos] == 0 && node.gpu_model[pos] == model && node.Usable(pos)) {
        node.gpu_task[pos] = id;
        indices.push_back(node.indices_are_positions ? static_cast<int>(pos)
                                                     : node.gpus[pos].index);
      }
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

// On a node with NVLink groups (a GPU in no group is a group of its own): a task of several
// GPUs takes them inside the group with the fewest free GPUs that holds them all, else from the
// groups with the most free first (spanning the fewest); a task of one GPU takes it from the
// group with the fewest free, so that whole groups stay free for larger tasks. Ties: the lower
// group, then the lower positions.
void SchedulerCore::TakeLinkedGpus(NodeState& node, TaskNumber id, int model, int count,
                                   std::vector<int>& indices) {
  const size_t positions = node.gpu_task.size();
  const auto free_here = [&](size_t pos) {
    return node.gpu_task[pos] == 0 && node.gpu_model[pos] == model && node.Usable(pos);
  };
  // Free GPUs per group; the GPUs in no group are counted apart (each a group of one).
  std::array<int16_t, kMaxLinkGroups> free{};
  int alone = 0;
  for (size_t pos = 0; pos < positions; ++pos) {
    if (!free_here(pos)) continue;
    const int g = node.gpu_link[pos];
    if (g < 0) {
      ++alone;
    } else {
      ++free[static_cast<size_t>(g)];
    }
  }
  // The positions taken, in the order of the groups chosen; sorted below.
  absl::InlinedVector<int, 8> taken;
  const auto take_from = [&](int group) {
    for (size_t pos = 0; pos < positions && std::ssize(taken) < count; ++pos) {
      if (free_here(pos) && node.gpu_link[pos] == group) {
        node.gpu_task[pos] = id;
        taken.push_back(static_cast<int>(pos));
      }
    }
  };
  const int groups = node.link_groups;
  int holder = -1;  // The tightest group that holds them all.
  for (int g = 0; g < groups; ++g) {
    const int f = free[static_cast<size_t>(g)];
    if (f >= count && (holder < 0 || f < free[static_cast<size_t>(holder)])) holder = g;
  }
  if (count == 1 && alone > 0) {
    take_from(kNoLinkGroup);
  } else if (holder >= 0) {
    take_from(holder);
  } else {
    absl::InlinedVector<int, 8> order;
    for (int g = 0; g < groups; ++g) {
      if (free[static_cast<size_t>(g)] > 0) order.push_back(g);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return free[static_cast<size_t>(a)] > free[static_cast<size_t>(b)];
    });
    for (int g : order) take_from(g);
    take_from(kNoLinkGroup);
  }
  std::sort(taken.begin(), taken.end());
  for (int pos : taken) {
    indices.push_back(node.indices_are_positions ? pos : node.gpus[static_cast<size_t>(pos)].index);
  }
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
  return EnoughNodesWhere(t, models,
                          [&](const NodeState& n) { return Feasible(t, n, Against::kEmpty); });
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
  if (!parent_changes_.empty() || !dependency_settle_.empty()) ResolveDependencies(now);
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
  // Planned starts are made again by every pass, from the cluster as it is now.
  if (config_.backfill) {
    backfill_plan_.clear();
    ready_lists_.clear();
    plan_mark_ = ++mark_generation_;
  }
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
  const bool linked = any_linked_nodes_ && shape.gpu_count > 1;
  if (!linked && config_.policies.filters.empty() && !any_node_resources_ &&
      t.spec.node_selector.empty()) {
    return index_.FindBestFit(models, shape.gpu_count, excluded);
  }
  // The index passes over nodes short of what the task asks for of its own, and over the nodes
  // without a selector's labels (its sets) a word of 64 at a time.
  const SelectorSets* sets = ShapeSets(shape);
  if (sets == nullptr) return std::nullopt;
  PlacementIndex::Room need = NodeState::Need(t.spec);
  const auto fits = [&](uint32_t slot) {
    return Feasible(t, *nodes_[slot], Against::kFree, /*selector_checked=*/true);
  };
  // Several GPUs: first the nodes with room inside one NVLink group (or without groups), then
  // any.
  if (linked) {
    need.linked = shape.gpu_count;
    if (auto fit = index_.FindBestFitWhere(models, shape.gpu_count, excluded, need, *sets, fits)) {
      return fit;
    }
    need.linked = 0;
  }
  return index_.FindBestFitWhere(models, shape.gpu_count, excluded, need, *sets, fits);
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
      index_.ForEachFitOf(
          m, shape.per_node, excluded, NodeState::Need(t.spec), *sets,
          [&](uint32_t slot, int, int) {
            if (!Feasible(t, *nodes_[slot], Against::kFree, /*selector_checked=*/true)) return true;
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
  const int wanted = shape.nodes;
  const int k = shape.per_node;
  slots.clear();
  // Which nodes of each value fit a member. When only free GPUs decide (no selector, no
  // configured filter, no CPU or memory asked or reported), the index counts them by value and
  // free GPUs, and a value's best nodes are found by walking its label set alone. Otherwise
  // every node that fits is walked once and gathered by value, in best-fit order.
  const bool counted = sets.empty() && config_.policies.filters.empty() && !any_node_resources_;
  if (!topology_ranked_) {
    // Values by name, for ties: computed again only after new values appeared.
    std::vector<int32_t> order(topology_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return topology_[static_cast<size_t>(a)].name < topology_[static_cast<size_t>(b)].name;
    });
    for (size_t i = 0; i < order.size(); ++i) {
      topology_[static_cast<size_t>(order[i])].rank = static_cast<uint32_t>(i);
    }
    topology_ranked_ = true;
  }
  auto& groups = topology_groups_;
  auto& alone = topology_alone_;
  groups.clear();
  alone.clear();
  std::vector<int32_t> seen;  // Values gathered (not counted), for the clearing below.
  struct ClearSeen {
    std::vector<std::vector<uint32_t>>& by_value;
    const std::vector<int32_t>& seen;
    ~ClearSeen() {
      for (int32_t value : seen) by_value[static_cast<size_t>(value)].clear();
    }
  } clear_seen{by_topology_, seen};
  // Nodes in `excluded` that the counts include: (value, free GPUs), at most a handful.
  absl::InlinedVector<std::pair<int32_t, int>, 8> skipped;
  const auto free_of = [&](uint32_t slot) { return nodes_[slot]->Slice(model)->free; };
  if (counted) {
    for (auto it = excluded.begin(); it != excluded.end(); ++it) {
      if (std::find(excluded.begin(), it, *it) != it) continue;  // Listed twice: counted once.
      NodeState& node = *nodes_[*it];
      const NodeState::ModelSlice* s = node.in_index ? node.Slice(model) : nullptr;
      if (s == nullptr || s->capacity == 0 || s->free < k || node.topology < 0) continue;
      skipped.emplace_back(node.topology, s->free);
    }
    // Written in place: this loop is the one that visits every value.
    groups.resize(topology_.size());
    TopologyGroup* end = groups.data();
    for (int32_t v = 0; v < static_cast<int32_t>(topology_.size()); ++v) {
      int32_t count = 0;
      int64_t whole = 0;
      const auto counts = index_.GroupCounts(model, v);
      for (size_t f = static_cast<size_t>(k); f < counts.size(); ++f) {
        count += counts[f];
        whole += static_cast<int64_t>(counts[f]) * static_cast<int64_t>(f - static_cast<size_t>(k));
      }
      for (const auto& [value, free] : skipped) {
        if (value != v) continue;
        --count;
        whole -= free - k;
      }
      if (count > 0) *end++ = {v, count, whole, topology_[static_cast<size_t>(v)].rank};
    }
    groups.resize(static_cast<size_t>(end - groups.data()));
    const PlacementIndex::SetId unlabelled[] = {unlabelled_set_};
    index_.ForEachFitOf(model, k, excluded, PlacementIndex::kNoNeed, unlabelled,
                        [&](uint32_t slot, int, int) {
                          alone.push_back(slot);
                          return std::ssize(alone) < wanted;
                        });
  } else {
    index_.ForEachFitOf(
        model, k, excluded, NodeState::Need(t.spec), sets, [&](uint32_t slot, int, int) {
          if (!Feasible(t, *nodes_[slot], Against::kFree, /*selector_checked=*/true)) return true;
          const int32_t value = nodes_[slot]->topology;
          if (value < 0) {
            alone.push_back(slot);
            return true;
          }
          auto& nodes = by_topology_[static_cast<size_t>(value)];
          if (nodes.empty()) seen.push_back(value);
          nodes.push_back(slot);
          return true;
        });
    for (int32_t v : seen) {
      groups.push_back({v, static_cast<int32_t>(by_topology_[static_cast<size_t>(v)].size()), 0,
                        topology_[static_cast<size_t>(v)].rank});
    }
  }
  // Ties after the counts and the tightness: values by name, then the nodes without the label
  // in best-fit order.
  for (size_t i = 0; i < alone.size(); ++i) {
    groups.push_back({-static_cast<int32_t>(i) - 1, 1, free_of(alone[i]) - k,
                      static_cast<uint32_t>(topology_.size() + i)});
  }

  // The GPUs left free on the best `n` nodes of a group: what "tightest" compares.
  const auto tight = [&](const TopologyGroup& g, int n) -> int64_t {
    if (g.value < 0) return free_of(alone[static_cast<size_t>(-g.value - 1)]) - k;
    int64_t sum = 0;
    if (!counted) {
      const auto& nodes = by_topology_[static_cast<size_t>(g.value)];
      for (int i = 0; i < n; ++i) sum += free_of(nodes[static_cast<size_t>(i)]) - k;
      return sum;
    }
    const auto counts = index_.GroupCounts(model, g.value);
    for (size_t f = static_cast<size_t>(k); f < counts.size() && n > 0; ++f) {
      int32_t here = counts[f];
      for (const auto& [value, free] : skipped)
        here -= value == g.value && free == static_cast<int>(f);
      const int taken = std::min(n, here);
      sum += static_cast<int64_t>(taken) * static_cast<int64_t>(f - static_cast<size_t>(k));
      n -= taken;
    }
    return sum;
  };
  const auto named_before = [](const TopologyGroup& a, const TopologyGroup& b) {
    return a.order < b.order;
  };
  const auto take = [&](const TopologyGroup& g, int n) {
    if (g.value < 0) {
      slots.push_back(alone[static_cast<size_t>(-g.value - 1)]);
      return;
    }
    if (!counted) {
      const auto& nodes = by_topology_[static_cast<size_t>(g.value)];
      slots.insert(slots.end(), nodes.begin(), nodes.begin() + n);
      return;
    }
    const PlacementIndex::SetId in_value[] = {topology_[static_cast<size_t>(g.value)].set};
    int left = n;
    index_.ForEachFitOf(model, k, excluded, PlacementIndex::kNoNeed, in_value,
                        [&](uint32_t slot, int, int) {
                          slots.push_back(slot);
                          return --left > 0;
                        });
  };

  // Whole groups, the most nodes first (ties: the tightest, then by name), until one holds the
  // rest: of those, the tightest for the rest, then the smallest, then by name. At most
  // `wanted` groups are taken whole: only those are put in order.
  if (!counted) {
    for (TopologyGroup& g : groups) g.whole = tight(g, g.count);
  }
  const auto larger = [&](const TopologyGroup& a, const TopologyGroup& b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.whole != b.whole) return a.whole < b.whole;
    return named_before(a, b);
  };
  const auto ordered = std::min(groups.size(), static_cast<size_t>(wanted));
  std::partial_sort(groups.begin(), groups.begin() + static_cast<std::ptrdiff_t>(ordered),
                    groups.end(), larger);
  int rest = wanted;
  for (size_t next = 0; next < groups.size() && rest > 0; ++next) {
    // groups[next] is the largest left: when it holds the rest, so may others after it.
    if (groups[next].count >= rest) {
      const TopologyGroup* holds = nullptr;
      int64_t holds_tight = 0;
      for (size_t i = next; i < groups.size(); ++i) {
        const TopologyGroup& g = groups[i];
        if (g.count < rest) continue;
        const int64_t gt = g.count == rest ? g.whole : tight(g, rest);
        if (holds == nullptr || gt < holds_tight ||
            (gt == holds_tight &&
             (g.count < holds->count || (g.count == holds->count && named_before(g, *holds))))) {
          holds = &g;
          holds_tight = gt;
        }
      }
      take(*holds, rest);
      return;
    }
    take(groups[next], groups[next].count);
    rest -= groups[next].count;
  }
}

void SchedulerCore::FirstValueHolding(std::vector<uint32_t>& slots, int n) const {
  std::vector<int> seen(topology_.size(), 0);
  for (uint32_t slot : slots) {
    const int32_t value = nodes_[slot]->topology;
    if (value < 0 || ++seen[static_cast<size_t>(value)] < n) continue;
    std::stable_partition(slots.begin(), slots.end(),
                          [&](uint32_t s) { return nodes_[s]->topology == value; });
    return;
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
  if (!Admit(prio, shape)) return PostFilter(record, Diagnose(t, models), now);
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
        if (s == nullptr || s->free < shape.gpu_count || !Feasible(t, n, Against::kFree)) continue;
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
  } else if (shape.nodes > 1) {
    const int model = FindGang(shape, t, models, *skip, gang_slots_);
    if (model >= 0) {
      StartGang(t, gang_slots_, model, now);
      return PendingReason::kNone;
    }
    r = Diagnose(t, models);
    shape.RememberNoRoom(change_seq_, *skip, r);
  } else {
    fit = FindNode(shape, t, models, *skip);
    if (!fit) {
      r = Diagnose(t, models);
      shape.RememberNoRoom(change_seq_, *skip, r);
    }
  }
  if (!fit) {
    if (!IsTransient(r)) return r;
    if (phase == Phase::kAll) return PostFilter(record, r, now);
    // Within its guarantee: room on some node, taken back from borrowers (GPUs, or the CPUs or
    // memory they hold where its GPUs fit). A borrower takes nothing back: it waits for idle
    // GPUs on some node (no_node_fits), or anywhere (quota_exhausted: nothing to borrow).
    if (phase == Phase::kGuaranteed) {
      return PostFilter(record, WaitsForNodeRoom(r) ? r : PendingReason::kNoNodeFits, now);
    }
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
    // Without borrowing (a configured post-filter's victims) the quota still admits it: its
    // victims may not have freed what its class may hold.
    if (!config_.borrowing && !Admit(prio, *t->shape)) continue;
    if (t->spec.nodes > 1) {
      (void)StartReservedGang(*t, *r, ShapeModels(*t->shape), now);
      continue;
    }
    const uint32_t slot = r->slots.front();
    NodeState& n = *nodes_[slot];
    if (!n.in_index) continue;
    for (int m : ShapeModels(*t->shape)) {
      const NodeState::ModelSlice* s = n.Slice(m);
      if (s == nullptr || s->free < t->spec.gpu_count || !Feasible(*t, n, Against::kFree)) continue;
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
      room = room && n.in_index && s != nullptr && s->free >= per_node &&
             Feasible(t, n, Against::kFree);
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
    if (PostFilter(*t, PendingReason::kNoNodeFits, now) != PendingReason::kWaitingForPreemption) {
      return;
    }
  }
}

// --- Post-filter ------------------------------------------------------------------------------

PendingReason SchedulerCore::PostFilter(TaskRecord& t, PendingReason why, TimeMicros now) {
  if (!IsTransient(why)) return why;
  PostFilterHook* hook = config_.policies.post_filter.get();
  // The built-in reclaim: with borrowing, for a head within its guarantee waiting for room on a
  // node (a head over its class's quota waits for its class to shrink).
  if (hook == nullptr &&
      (!config_.borrowing || !WaitsForNodeRoom(why) ||
       !WithinGuarantee(t.team, PrioIndex(t.spec.priority), t.spec.gpu_count, OwnReserved(t.id)))) {
    return why;
  }
  if (WaitingForVictims(t)) return PendingReason::kWaitingForPreemption;
  // Restored tasks whose nodes have not registered yet hold GPUs that are not counted: what
  // could be taken is not known until they are back.
  if (unclaimed_tasks_ > 0) return why;
  PreemptionChoice& choice = preemption_choice_;
  const bool chosen =
      hook != nullptr ? ChoiceOf(t, hook->Plan(*this, t, why), choice) : Reclaim(t, now, choice);
  if (!chosen) return why;
  ApplyPreemption(t, choice, now);
  return PendingReason::kWaitingForPreemption;
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
            return ReservedForOther(slot, t.id) || !Feasible(t, *nodes_[slot], Against::kEmpty)
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
  // With a topology key, the first value whose nodes in that order hold every member, else
  // the same nodes as without.
  const int per_node = GpusPerNode(t.spec);
  const bool topology = !config_.topology_key.empty();
  std::vector<uint32_t>& chosen = gang_slots_;
  for (int m : ModelsFor(t.spec.gpu_model)) {
    chosen.clear();
    index_.ForEachMostFree(m, [&](uint32_t slot, int) {
      const NodeState::ModelSlice* s = nodes_[slot]->Slice(m);
      if (s->capacity >= per_node && !ReservedForOther(slot, t.id) &&
          Feasible(t, *nodes_[slot], Against::kEmpty)) {
        chosen.push_back(slot);
      }
      return topology || std::ssize(chosen) < t.spec.nodes;
    });
    if (std::ssize(chosen) < t.spec.nodes) continue;
    if (topology) FirstValueHolding(chosen, t.spec.nodes);
    chosen.resize(static_cast<size_t>(t.spec.nodes));
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
  if (phase != Phase::kBorrowing && !reservations_.empty()) StartPreemptors(prio, now);
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
    if (r == PendingReason::kWaitingForPreemption && phase == Phase::kGuaranteed) {
      ReclaimBehind(prio, *oldest_shape, now);
    }
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
    // With backfill, the nodes of starts planned before its limit would end are kept from it.
    const std::vector<uint32_t>& skip =
        config_.backfill ? BackfillSkip(shape->tasks.front_task(), excluded, now) : excluded;
    PendingReason r = TryStart(prio, *shape, skip, now, phase);
    if (r == PendingReason::kQueued) continue;  // Not this phase's.
    if (r == PendingReason::kWaitingForPreemption && phase == Phase::kGuaranteed) {
      ReclaimBehind(prio, *shape, now);
    }
    if (r != PendingReason::kNone && config_.backfill && WaitsForNodeRoom(r)) {
      const Task& head = shape->tasks.front_task();
      const TaskNumber holder = &skip != &excluded ? HeldBackFor(*shape, head, excluded, now) : 0;
      if (holder != 0) {
        r = PendingReason::kReservedFor;
        shape->reserved_for = holder;
      } else if (std::ssize(backfill_plan_) < config_.backfill_depth &&
                 PlannedStartOf(head.id) == nullptr) {
        PlanStart(prio, head, excluded, now);
      }
    }
    if (r != PendingReason::kNone) {
      shape->reason = r;
      if (id == q.oldest && oldest_here) {
        oldest_waiting = true;
        oldest_reason = r;
      }
      continue;
    }
    // A start planned for the oldest task (backfill) keeps its nodes: overtaking it is the plan.
    if (!q.holding && oldest_waiting && IsTransient(oldest_reason) &&
        (!config_.backfill || PlannedStartOf(q.oldest) == nullptr) &&
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
