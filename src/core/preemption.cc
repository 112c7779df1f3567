// Preemption: the post-filter stage's plans, applied alike whoever made them, and the built-in
// post-filter (quota.borrowing): a task within its guarantee that finds no room takes GPUs, CPUs
// and memory back from borrowed tasks, on one node (a gang: on one node per member), no more than
// it needs.
//
// Which tasks may be taken is counted per node and model (ModelSlice::eligible, per class), and
// three more placement indexes order the placeable nodes by free + eligible GPUs (of class 0, of
// class 1, of both): the nodes where stopping eligible tasks could make room for k GPUs are the
// index's nodes with a count >= k, found in a few word scans however large the cluster is.
#include "core/core_internal.h"

namespace dgpu::core {

namespace {
// At most this many nodes are looked at closely per search, and the best of the first few that
// work is taken: a search stays in microseconds on any cluster.
constexpr int kMaxNodesExamined = 64;
constexpr int kMaxPlansCompared = 32;
}  // namespace

bool SchedulerCore::Eligible(const TaskRecord& t) const {
  if (!config_.borrowing || !t.borrowed || !t.spec.preemptible ||
      t.status != TaskStatus::kRunning || t.stopping || std::ssize(t.allocation) != t.spec.nodes ||
      t.node_slot >= nodes_.size()) {
    return false;
  }
  // Every member holds its GPUs (a gang is taken back whole: none of its members has ended, and
  // none waits for its node to register again).
  for (size_t i = 0; i < t.allocation.size(); ++i) {
    const NodeAllocation& m = t.allocation[i];
    const NodeState* node = i == 0 ? nodes_[t.node_slot].get() : FindNodeState(m.node_id);
    if (m.ended || m.gpu_indices.empty() || node == nullptr) return false;
    const int pos = node->Position(m.gpu_indices[0]);
    if (pos < 0 || node->gpu_task[static_cast<size_t>(pos)] != t.id) return false;
  }
  return true;
}

void SchedulerCore::UpdateEligible(TaskRecord& t) { CountEligible(t, Eligible(t)); }

void SchedulerCore::CountEligible(TaskRecord& t, bool want) {
  if (want == t.eligible_counted) return;
  // Counted while every member holds its GPUs (Eligible), taken out before any member ends.
  for (size_t i = 0; i < t.allocation.size(); ++i) {
    const NodeAllocation& m = t.allocation[i];
    NodeState& node = i == 0 ? *nodes_[t.node_slot] : *FindNodeState(m.node_id);
    const int pos = node.Position(m.gpu_indices[0]);
    NodeState::ModelSlice* slice = node.Slice(node.gpu_model[static_cast<size_t>(pos)]);
    const int gpus = static_cast<int>(m.gpu_indices.size());
    slice->eligible[PrioIndex(t.spec.priority)] += want ? gpus : -gpus;
    ReclaimSync(node);
  }
  t.eligible_counted = want;
}

void SchedulerCore::CountIncoming(TaskRecord& t, bool counted) {
  if (counted == t.incoming_counted) return;
  for (size_t i = 0; i < t.allocation.size(); ++i) {
    const NodeAllocation& m = t.allocation[i];
    if (m.ended) continue;  // Its GPUs are free already, and left `incoming` then (EndMember).
    NodeState* node = i == 0 ? nodes_[t.node_slot].get() : FindNodeState(m.node_id);
    if (node == nullptr) continue;
    const int sign = counted ? 1 : -1;
    node->incoming += sign * static_cast<int>(m.gpu_indices.size());
    node->incoming_cpus_milli += sign * m.cpus_milli;
    node->incoming_memory_mb += sign * m.memory_mb;
  }
  t.incoming_counted = counted;
}

void SchedulerCore::ReclaimSync(NodeState& node) {
  if (!config_.borrowing || !node.in_index) return;
  for (auto& s : node.slices) {
    if (s.capacity <= 0) continue;
    const int keys[3] = {s.free + s.eligible[0], s.free + s.eligible[1],
                         s.free + s.eligible[0] + s.eligible[1]};
    for (int i = 0; i < 3; ++i) {
      const int key = std::min(keys[i], s.capacity);
      if (key == s.reclaim_key[i]) continue;
      reclaim_[i].Move(s.model, node.Entry(), s.reclaim_key[i], key);
      s.reclaim_key[i] = key;
    }
  }
}

void SchedulerCore::ReclaimInsert(NodeState& node) {
  if (!config_.borrowing) return;
  for (auto& s : node.slices) {
    if (s.capacity <= 0) continue;
    const int keys[3] = {s.free + s.eligible[0], s.free + s.eligible[1],
                         s.free + s.eligible[0] + s.eligible[1]};
    for (int i = 0; i < 3; ++i) {
      s.reclaim_key[i] = std::min(keys[i], s.capacity);
      reclaim_[i].Insert(s.model, node.Entry(), s.reclaim_key[i], s.capacity);
    }
  }
}

void SchedulerCore::ReclaimErase(NodeState& node) {
  if (!config_.borrowing) return;
  for (auto& s : node.slices) {
    if (s.capacity <= 0) continue;
    for (int i = 0; i < 3; ++i)
      reclaim_[i].Erase(s.model, node.Entry(), s.reclaim_key[i], s.capacity);
  }
}

std::optional<SchedulerCore::VictimPlan> SchedulerCore::PlanVictims(const TaskRecord& t,
                                                                    const NodeState& node,
                                                                    int model, int victim_class,
                                                                    TimeMicros now) {
  const auto* slice = const_cast<NodeState&>(node).Slice(model);
  if (slice == nullptr) return std::nullopt;
  // What will be free here for t: free GPUs, CPUs and memory, and those of victims stopping
  // here, less what is kept for other tasks waiting for them.
  const Amounts have = Available(node, model, t.id);
  const Amounts want = NeedOn(t, node);
  const Amounts need{want.gpus - have.gpus, want.cpus_milli - have.cpus_milli,
                     want.memory_mb - have.memory_mb};
  const bool short_of_rest = need.cpus_milli > 0 || need.memory_mb > 0;
  if (need.gpus <= 0 && !short_of_rest) {
    VictimPlan share;  // Room without stopping anything more.
    share.slot = node.slot;
    return share;
  }
  struct Candidate {
    TaskRecord* task;
    Amounts frees;                             // Usable GPUs of `model`, CPUs, memory.
    std::tuple<int, int, int64_t> preference;  // Lower: stopped first.
  };
  std::vector<Candidate> candidates;
  Amounts available;
  for (size_t pos = 0; pos < node.gpu_task.size(); ++pos) {
    const TaskNumber id = node.gpu_task[pos];
    // Tasks on other GPUs of the node free CPUs and memory only: looked at when those are short.
    const bool gpu_counts = node.gpu_model[pos] == model && node.Usable(pos);
    if (id == 0 || (!gpu_counts && !short_of_rest)) continue;
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& c) { return c.task->id == id; });
    if (it == candidates.end()) {
      TaskRecord* v = tasks_.Find(id);
      // Never one started in this very pass.
      if (v == nullptr || !v->eligible_counted || v->start_order >= pass_first_start_) continue;
      const int vp = PrioIndex(v->spec.priority);
      if (victim_class >= 0 && vp != victim_class) continue;
      if (config_.min_runtime > 0 && v->started_at + config_.min_runtime > now) {
        const TimeMicros ready = v->started_at + config_.min_runtime;
        if (preempt_wake_at_ == 0 || ready < preempt_wake_at_) preempt_wake_at_ = ready;
        continue;
      }
      // Other class's borrowers first, then the group most over its guarantee, then the
      // youngest.
      const auto& g =
          quota_tree_.node(groups_[static_cast<size_t>(teams_[v->team].group[vp])].node);
      const int over = g.used - g.limits.guarantee;
      Amounts rest;
      for (size_t i = 0; i < v->allocation.size(); ++i) {
        const NodeAllocation& m = v->allocation[i];
        if (i == 0 ? v->node_slot == node.slot : m.node_id == node.id) {
          rest = {0, m.cpus_milli, m.memory_mb};
          break;
        }
      }
      candidates.push_back({v,
                            rest,
                            {vp == PrioIndex(t.spec.priority) ? 1 : 0, -over,
                             -static_cast<int64_t>(v->start_order)}});
      available.cpus_milli += rest.cpus_milli;
      available.memory_mb += rest.memory_mb;
      it = candidates.end() - 1;
    }
    if (gpu_counts) {
      it->frees.gpus++;
      available.gpus++;
    }
  }
  if (!available.Covers(need)) return std::nullopt;
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.preference != b.preference ? a.preference < b.preference : a.task->id < b.task->id;
  });
  // Takes candidates in `order` until they free enough, then lets go again (last taken first)
  // of every one the others can do without: no victim more than needed.
  auto choose = [&](const std::vector<size_t>& order) {
    std::vector<size_t> chosen;
    Amounts freed;
    auto add = [&](size_t i, int sign) {
      freed.gpus += sign * candidates[i].frees.gpus;
      freed.cpus_milli += sign * candidates[i].frees.cpus_milli;
      freed.memory_mb += sign * candidates[i].frees.memory_mb;
    };
    for (size_t i : order) {
      if (freed.Covers(need)) break;
      chosen.push_back(i);
      add(i, +1);
    }
    for (size_t j = chosen.size(); j-- > 0;) {
      add(chosen[j], -1);
      if (freed.Covers(need)) {
        chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(j));
      } else {
        add(chosen[j], +1);
      }
    }
    return chosen;
  };
  std::vector<size_t> by_preference(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) by_preference[i] = i;
  std::vector<size_t> by_size = by_preference;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    return candidates[a].frees.gpus > candidates[b].frees.gpus;
  });
  std::vector<size_t> chosen = choose(by_preference);
  std::vector<size_t> fewest = choose(by_size);
  if (fewest.size() < chosen.size()) chosen = std::move(fewest);
  // Stopped in preference order.
  std::sort(chosen.begin(), chosen.end());
  VictimPlan plan;
  plan.slot = node.slot;
  for (size_t i : chosen) {
    plan.victims.push_back(candidates[i].task);
    plan.freed += candidates[i].frees.gpus;
    plan.lost += static_cast<int64_t>(candidates[i].task->spec.gpu_count) *
                 std::max<TimeMicros>(0, now - candidates[i].task->started_at);
    if (PrioIndex(candidates[i].task->spec.priority) == PrioIndex(t.spec.priority)) {
      plan.own_class++;
    }
  }
  return plan;
}

SchedulerCore::Amounts SchedulerCore::NeedOn(const Task& t, const NodeState& node) {
  return {GpusPerNode(t.spec), node.GivenCpus(t.spec), node.GivenMemory(t.spec)};
}

SchedulerCore::Amounts SchedulerCore::Available(const NodeState& node, int model,
                                                TaskNumber task) const {
  const auto* slice = const_cast<NodeState&>(node).Slice(model);
  if (slice == nullptr) return {};
  // What is promised here to its own reservation is its own.
  Amounts own;
  if (const Reservation* r = reservations_.empty() ? nullptr : ReservationOf(task);
      r != nullptr && r->preemption) {
    for (size_t i = 0; i < r->slots.size(); ++i) {
      if (r->slots[i] == node.slot)
        own = {r->per_slot, r->slot_cpus_milli[i], r->slot_memory_mb[i]};
    }
  }
  return {
      slice->free + node.incoming - (node.promised - own.gpus),
      node.free_cpus_milli + node.incoming_cpus_milli - (node.promised_cpus_milli - own.cpus_milli),
      node.free_memory_mb + node.incoming_memory_mb - (node.promised_memory_mb - own.memory_mb)};
}

bool SchedulerCore::WaitingForVictims(TaskRecord& t) {
  // While every node kept for it will have room for a member once the victims stopping there
  // (or those it shares them with) are gone, it waits for them.
  if (const Reservation* own = reservations_.empty() ? nullptr : ReservationOf(t.id);
      own != nullptr && own->preemption) {
    for (int m : ModelsFor(t.spec.gpu_model)) {
      bool room = true;
      bool stopping = false;
      for (uint32_t slot : own->slots) {
        const NodeState& node = *nodes_[slot];
        room = room && node.Placeable() && Available(node, m, t.id).Covers(NeedOn(t, node));
        stopping = stopping || node.incoming > 0;
      }
      if (room && stopping) return true;
    }
    DropReservation(t.id);
  }
  // Victims stopping for it without a node kept for it (a new leader restored them): keep it.
  if (t.spec.nodes > 1) return false;
  for (const PendingPreemption& pp : preemptions_) {
    if (pp.preemptor != t.id) continue;
    const TaskRecord* v = tasks_.Find(pp.victim);
    if (v == nullptr || !v->stopping || v->stop_reason != StopReason::kPreempt ||
        v->preempted_by != t.id || !nodes_[pp.slot]->Placeable()) {
      continue;
    }
    Reserve(t.spec.priority, t.id, pp.slot, true);
    queues_[PrioIndex(t.spec.priority)]->excluded.push_back(pp.slot);
    return true;
  }
  return false;
}

bool SchedulerCore::ChoiceOf(const TaskRecord& t, const PreemptionPlan& plan,
                             PreemptionChoice& out) {
  out.victims.clear();
  out.slots.clear();
  for (const std::string& id : plan.nodes) {
    const NodeState* node = FindNodeState(id);
    if (node == nullptr || !node->Placeable() ||
        std::find(out.slots.begin(), out.slots.end(), node->slot) != out.slots.end()) {
      return false;
    }
    out.slots.push_back(node->slot);
  }
  if (std::ssize(out.slots) != t.spec.nodes) return false;
  for (const Victim& v : plan.victims) {
    TaskRecord* victim = tasks_.Find(v.task);
    // Only running tasks not already being stopped: anything else is no victim (and the hook
    // gets no error back; it sees the tasks' states itself).
    if (victim == nullptr || victim->status != TaskStatus::kRunning || victim->stopping ||
        victim->id == t.id || victim->node_slot >= nodes_.size()) {
      continue;
    }
    out.victims.push_back({victim, victim->node_slot, v.grace_seconds});
  }
  return !out.victims.empty();
}

void SchedulerCore::ApplyPreemption(TaskRecord& t, const PreemptionChoice& choice, TimeMicros now) {
  for (const PreemptionChoice::Chosen& v : choice.victims) {
    // A gang victim may be chosen on two nodes: it is stopped once, every member.
    if (!v.task->stopping) Preempt(*v.task, t, *nodes_[v.slot], v.grace_seconds, now);
  }
  ReservePreempted(t.spec.priority, t.id, choice.slots);
  // The rest of this pass skips its nodes too.
  auto& excluded = queues_[PrioIndex(t.spec.priority)]->excluded;
  excluded.insert(excluded.end(), choice.slots.begin(), choice.slots.end());
}

bool SchedulerCore::Reclaim(const TaskRecord& t, TimeMicros now, PreemptionChoice& out) {
  if (t.spec.nodes > 1) return ReclaimGang(t, now, out);
  const int prio = PrioIndex(t.spec.priority);
  const std::vector<int>& models = ModelsFor(t.spec.gpu_model);
  auto fits_model = [&](const NodeState& node, int* model) {
    for (int m : models) {
      if (const auto* s = const_cast<NodeState&>(node).Slice(m); s != nullptr && s->capacity > 0) {
        *model = m;
        return true;
      }
    }
    return false;
  };
  // A selector's labels on bits first: the search walks past the nodes it turns away.
  SelectorSets sets;
  const bool any_match = t.spec.node_selector.empty() || SetsOf(t.spec.node_selector, &sets);
  // A node whose victims would leave room for t's GPUs but that could not hold its CPUs or
  // memory with nothing else running is no use: kept for it, t would never start there.
  auto passes_filters = [&](const NodeState& node) {
    return any_match && HasAll(sets, node.slot) &&
           Feasible(t, node, Against::kEmpty, /*selector_checked=*/true);
  };
  stats_.reclaim_searches++;
  // Nodes the starvation guard keeps for other tasks are left alone; a node kept for other
  // preemptors may be shared (Available counts what they were promised).
  const std::vector<uint32_t>& skip = GuardedForOthers(t.id);
  std::optional<VictimPlan> best;
  auto better = [](const VictimPlan& a, const VictimPlan& b) {
    return std::make_tuple(a.victims.size(), a.own_class, a.lost, a.freed) <
           std::make_tuple(b.victims.size(), b.own_class, b.lost, b.freed);
  };
  // First the nodes where victims already stop: room there costs no new victim.
  std::vector<uint32_t>& stopping_on = reclaim_nodes_;
  stopping_on.clear();
  for (const PendingPreemption& pp : preemptions_) {
    if (std::find(stopping_on.begin(), stopping_on.end(), pp.slot) == stopping_on.end() &&
        std::find(skip.begin(), skip.end(), pp.slot) == skip.end()) {
      stopping_on.push_back(pp.slot);
    }
  }
  for (uint32_t slot : stopping_on) {
    const NodeState& node = *nodes_[slot];
    if (node.incoming <= 0) continue;
    int model = 0;
    if (!node.Placeable() || !fits_model(node, &model) || !passes_filters(node)) continue;
    auto plan = PlanVictims(t, node, model, 1 - prio, now);
    if (plan && (!best || better(*plan, *best))) best = std::move(plan);
  }
  // Other class's borrowers first: only if none of them can make room, any class's.
  for (const int victim_class : {1 - prio, -1}) {
    if (best && best->victims.empty()) break;
    const int index = victim_class < 0 ? 2 : victim_class;
    int examined = 0;
    int plans = 0;
    reclaim_[index].ForEachFit(models, t.spec.gpu_count, skip, [&](uint32_t slot, int model, int) {
      // Nodes its filters turn away do not count towards the search's bound.
      const NodeState& node = *nodes_[slot];
      if (!passes_filters(node)) return true;
      if (++examined > kMaxNodesExamined) return false;
      auto plan = PlanVictims(t, node, model, victim_class, now);
      if (!plan) return true;
      if (!best || better(*plan, *best)) best = std::move(plan);
      return ++plans < kMaxPlansCompared;
    });
    if (best) break;
  }
  if (!best) return false;
  out.victims.clear();
  for (TaskRecord* v : best->victims) out.victims.push_back({v, best->slot, -1});
  out.slots.assign(1, best->slot);
  return true;
}

const std::vector<uint32_t>& SchedulerCore::GuardedForOthers(TaskNumber task) {
  reclaim_excluded_.clear();
  for (const Reservation& r : reservations_) {
    if (!r.preemption && r.task != task) {
      reclaim_excluded_.insert(reclaim_excluded_.end(), r.slots.begin(), r.slots.end());
    }
  }
  return reclaim_excluded_;
}

bool SchedulerCore::Feasible(const Task& t, const NodeState& node, Against against,
                             bool selector_checked) const {
  return (!any_node_resources_ ||
          node.ResourceShortage(t.spec, /*empty=*/against == Against::kEmpty) ==
              PendingReason::kNone) &&
         PassesFilters(t, node, selector_checked);
}

SchedulerCore::FilterVerdict SchedulerCore::CheckFilters(const Task& t, const NodeState& node,
                                                         bool selector_checked) const {
  // The built-in one: the task's node selector.
  if (!selector_checked) {
    if (const size_t i = FirstUnmatched(t.spec.node_selector, node.labels);
        i < t.spec.node_selector.size()) {
      return {FilterVerdict::kSelector, static_cast<uint32_t>(i)};
    }
  }
  if (config_.policies.filters.empty()) return {};
  const NodeFacts facts{node.id, node.labels};
  for (size_t i = 0; i < config_.policies.filters.size(); ++i) {
    if (!config_.policies.filters[i]->Feasible(t, facts)) {
      return {FilterVerdict::kFilter, static_cast<uint32_t>(i)};
    }
  }
  return {};
}

bool SchedulerCore::ReclaimGang(const TaskRecord& t, TimeMicros now, PreemptionChoice& out) {
  const int prio = PrioIndex(t.spec.priority);
  const int per_node = GpusPerNode(t.spec);
  const std::vector<int>& models = ModelsFor(t.spec.gpu_model);
  stats_.reclaim_searches++;
  SelectorSets sets;
  if (!t.spec.node_selector.empty() && !SetsOf(t.spec.node_selector, &sets)) return false;
  const std::vector<uint32_t>& skip = GuardedForOthers(t.id);
  // One member per node, all of one model: on each node that can make room for a member, the
  // fewest victims (PlanVictims, as for a single node), then the best `nodes` of those plans.
  // Other class's borrowers first; only if they cannot make room for every member, any class's.
  const auto members = static_cast<size_t>(t.spec.nodes);
  const int limit = std::max(kMaxNodesExamined, 4 * t.spec.nodes);
  std::vector<VictimPlan> plans;
  for (const int victim_class : {1 - prio, -1}) {
    const int index = victim_class < 0 ? 2 : victim_class;
    for (int m : models) {
      plans.clear();
      int examined = 0;
      reclaim_[index].ForEachFitOf(m, per_node, skip, [&](uint32_t slot, int, int) {
        if (!HasAll(sets, slot)) return true;
        const NodeState& node = *nodes_[slot];
        if (!Feasible(t, node, Against::kEmpty, /*selector_checked=*/true)) return true;
        if (++examined > limit) return false;
        if (auto plan = PlanVictims(t, node, m, victim_class, now)) plans.push_back(*plan);
        return true;
      });
      if (plans.size() < members) continue;
      std::sort(plans.begin(), plans.end(), [](const VictimPlan& a, const VictimPlan& b) {
        return std::make_tuple(a.victims.size(), a.own_class, a.lost, a.freed, a.slot) <
               std::make_tuple(b.victims.size(), b.own_class, b.lost, b.freed, b.slot);
      });
      if (!config_.topology_key.empty()) OneValueFirst(plans, members);
      plans.resize(members);
      out.victims.clear();
      out.slots.clear();
      for (const VictimPlan& plan : plans) {
        for (TaskRecord* v : plan.victims) out.victims.push_back({v, plan.slot, -1});
        out.slots.push_back(plan.slot);
      }
      return true;
    }
  }
  return false;
}

void SchedulerCore::OneValueFirst(std::vector<VictimPlan>& plans, size_t members) const {
  // Plans are in order, best first. A value's cost: the victims, then the work lost, of its
  // best `members` plans; the cheapest value that has that many wins (ties: by name).
  struct Cost {
    size_t plans = 0;
    size_t victims = 0;
    int64_t lost = 0;
  };
  std::vector<Cost> costs(topology_.size());
  int32_t best = -1;
  for (const VictimPlan& plan : plans) {
    const int32_t value = nodes_[plan.slot]->topology;
    if (value < 0) continue;
    Cost& c = costs[static_cast<size_t>(value)];
    if (c.plans == members) continue;
    ++c.plans;
    c.victims += plan.victims.size();
    c.lost += plan.lost;
    if (c.plans < members) continue;
    if (best < 0) {
      best = value;
      continue;
    }
    const Cost& b = costs[static_cast<size_t>(best)];
    if (std::tie(c.victims, c.lost) < std::tie(b.victims, b.lost) ||
        (std::tie(c.victims, c.lost) == std::tie(b.victims, b.lost) &&
         topology_[static_cast<size_t>(value)].name < topology_[static_cast<size_t>(best)].name)) {
      best = value;
    }
  }
  if (best < 0) return;
  std::stable_partition(plans.begin(), plans.end(), [&](const VictimPlan& plan) {
    return nodes_[plan.slot]->topology == best;
  });
}

void SchedulerCore::Preempt(TaskRecord& v, const TaskRecord& t, const NodeState& node,
                            int32_t grace_seconds, TimeMicros now) {
  const int32_t grace = grace_seconds >= 0                     ? grace_seconds
                        : v.spec.preemption_grace_seconds >= 0 ? v.spec.preemption_grace_seconds
                                                               : config_.preemption_grace_seconds;
  v.preempted_by = t.id;
  EmitEvent(Event::Kind::kTaskPreempted, v, now, node.id, FormatTaskId(t.id));
  // Every member of a gang is stopped; the GPUs of each will be free on its node.
  (void)StopTask(v.id, StopReason::kPreempt, grace, now);
  CountIncoming(v, true);
  preemptions_.push_back(
      {v.id, t.id, node.slot,
       now + std::max<int32_t>(grace, 0) * kMicrosPerSecond + config_.heartbeat_timeout});
  stats_.preemptions++;
}

void SchedulerCore::ExpirePreemptions(TimeMicros now) {
  if (preempt_wake_at_ != 0 && now >= preempt_wake_at_) {
    preempt_wake_at_ = 0;
    pass_needed_ = true;
  }
  for (size_t i = 0; i < preemptions_.size();) {
    const PendingPreemption pp = preemptions_[i];
    TaskRecord* v = tasks_.Find(pp.victim);
    const bool stopping = v != nullptr && v->stopping && v->stop_reason == StopReason::kPreempt &&
                          v->preempted_by == pp.preemptor;
    if (stopping && now <= pp.deadline) {
      ++i;
      continue;
    }
    preemptions_[i] = preemptions_.back();
    preemptions_.pop_back();
    if (stopping) {
      // Its agent did not confirm the stop in time: the node-loss rule, for this task.
      const std::string node = nodes_[pp.slot]->id;
      LoseHeld(*v, now, node);
    }
  }
}

}  // namespace dgpu::core
