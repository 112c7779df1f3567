// CheckInvariants: every rule the core keeps, checked the slow way (for tests).
#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

#include "core/core_internal.h"

namespace dgpu::core {

Status SchedulerCore::CheckInvariants() const {
  std::vector<std::pair<TaskNumber, const TaskRecord*>> all_tasks;
  tasks_.ForEach([&](TaskNumber id, const TaskRecord* t) { all_tasks.emplace_back(id, t); });
  int used[kPriorityCount] = {0, 0};
  size_t running[kPriorityCount] = {0, 0};
  size_t pending[kPriorityCount] = {0, 0};
  std::unordered_map<std::string, size_t> pending_users;
  for (const auto& [id, tp] : all_tasks) {
    const Task& t = *tp;
    int p = PrioIndex(t.spec.priority);
    bool held = t.status == TaskStatus::kRunning || t.stopping;
    const Shape* shape = tp->shape;
    if (t.status == TaskStatus::kPending && t.retry_at != 0) {
      // Waiting out a retry backoff: in no queue, in retry_wait_.
      if (shape != nullptr || !retry_wait_.contains({t.retry_at, id})) {
        return Internal(FormatTaskId(id) + " waits for a retry but is not kept as such");
      }
    } else if (t.status == TaskStatus::kPending && dependency_wait_.contains(id)) {
      // Held for its dependencies: in no queue, one entry at least not satisfied, and watched
      // by the key of each waiting one.
      if (shape != nullptr || AllDependenciesSatisfied(t)) {
        return Internal(FormatTaskId(id) + " is held for dependencies it does not wait for");
      }
      const DependencyWait& wait = dependency_wait_.at(id);
      for (size_t i = 0; i < t.spec.depends_on.size(); ++i) {
        if (t.spec.depends_on[i].state != DependencyState::kWaiting) continue;
        auto watchers = dependents_.find(wait.key[i]);
        if (wait.remaining[i] <= 0 || watchers == dependents_.end() ||
            std::find(watchers->second.begin(), watchers->second.end(), id) ==
                watchers->second.end()) {
          return Internal(FormatTaskId(id) + " waits on " + FormatTaskId(wait.key[i]) +
                          " but is not watching it");
        }
      }
    } else if (t.status == TaskStatus::kPending) {
      if (shape == nullptr || shape->model != t.spec.gpu_model ||
          shape->gpu_count != t.spec.gpu_count || shape->nodes != t.spec.nodes ||
          shape->per_node != GpusPerNode(t.spec) || shape->team != tp->team ||
          shape->preemptible != t.spec.preemptible ||
          queues_[p]->FindShape(tp->team, t.spec) != shape) {
        return Internal(FormatTaskId(id) + " does not point at its queue");
      }
    } else if (shape != nullptr) {
      return Internal(FormatTaskId(id) + " is not pending but points at a queue");
    }
    if (t.status == TaskStatus::kRunning) running[p]++;
    if (t.status == TaskStatus::kPending) pending[p]++;
    if (t.status != TaskStatus::kPending && dependency_wait_.contains(id)) {
      return Internal(FormatTaskId(id) + " is not pending but held for dependencies");
    }
    if (t.status == TaskStatus::kPending && !t.spec.user.empty()) pending_users[t.spec.user]++;
    // Stopping: cancelled (reason cancel), or still running for a reason that requeues or
    // fails it when it ends.
    const bool cancelled_stop =
        t.status == TaskStatus::kCancelled && t.stop_reason == StopReason::kCancel;
    const bool running_stop =
        t.status == TaskStatus::kRunning && t.stop_reason != StopReason::kNone &&
        t.stop_reason != StopReason::kCancel && t.stop_reason != StopReason::kReconcile;
    if (t.stopping && !cancelled_stop && !running_stop) {
      return Internal(FormatTaskId(id) + " is stopping with status " +
                      std::string(ToString(t.status)) + " and reason '" +
                      std::string(ToString(t.stop_reason)) + "'");
    }
    if (!t.stopping && t.stop_reason != StopReason::kNone) {
      return Internal(FormatTaskId(id) + " has a stop reason but is not stopping");
    }
    if (!held) continue;
    used[p] += t.spec.gpu_count;
    if (t.allocation.empty()) return Internal(FormatTaskId(id) + " holds GPUs but no allocation");
    if (std::all_of(t.allocation.begin(), t.allocation.end(),
                    [](const NodeAllocation& a) { return a.ended; })) {
      return Internal(FormatTaskId(id) + " holds GPUs but every member has ended");
    }
    if (t.stop_reason == StopReason::kMemberLost && t.allocation.size() == 1) {
      return Internal(FormatTaskId(id) + " runs on one node but stops for a lost member");
    }
    size_t gpus = 0;
    for (const auto& na : t.allocation) gpus += na.gpu_indices.size();
    if (static_cast<int>(gpus) != t.spec.gpu_count) {
      return Internal(FormatTaskId(id) + " holds the wrong number of GPUs");
    }
    if (std::ssize(t.allocation) != t.spec.nodes) {
      return Internal(FormatTaskId(id) + " has " + std::to_string(t.allocation.size()) +
                      " members, not its " + std::to_string(t.spec.nodes) + " nodes");
    }
    for (const auto& na : t.allocation) {
      if (std::ssize(na.gpu_indices) != GpusPerNode(t.spec)) {
        return Internal(FormatTaskId(id) + " holds the wrong number of GPUs on " + na.node_id);
      }
    }
    const NodeState* first = FindNodeState(t.allocation[0].node_id);
    if (first == nullptr || tp->node_slot != first->slot) {
      return Internal(FormatTaskId(id) + " has the wrong node slot for node " +
                      t.allocation[0].node_id);
    }
    for (size_t m = 0; m < t.allocation.size(); ++m) {
      const auto& na = t.allocation[m];
      for (size_t o = 0; o < m; ++o) {
        if (t.allocation[o].node_id == na.node_id) {
          return Internal(FormatTaskId(id) + " has two members on node " + na.node_id);
        }
      }
      const NodeState* n = FindNodeState(na.node_id);
      if (n == nullptr || n->HasTask(id) == na.ended) {
        return Internal(FormatTaskId(id) +
                        (na.ended ? " still holds node " : " is not listed on node ") + na.node_id);
      }
      if (na.ended || n->gpus.empty()) continue;
      for (int idx : na.gpu_indices) {
        int pos = n->Position(idx);
        if (pos < 0 || n->gpu_task[pos] != id) {
          return Internal(FormatTaskId(id) + " does not hold GPU " + std::to_string(idx) +
                          " of node " + na.node_id);
        }
      }
    }
  }
  for (int p = 0; p < kPriorityCount; ++p) {
    if (used[p] != quota_tree_.node(class_node_[p]).used) {
      return Internal("quota use out of step with running tasks");
    }
    if (running[p] != running_count_[p]) return Internal("running count out of step");
    if (pending[p] != pending_count_[p]) return Internal("pending count out of step");
  }
  if (pending_users.size() != pending_by_user_.size()) {
    return Internal("pending tasks by user out of step");
  }
  for (const auto& [user, count] : pending_users) {
    if (PendingOfUser(user) != count) return Internal("pending tasks of " + user + " out of step");
  }
  int total = 0;
  int busy_tasks = 0;
  for (const auto& n : nodes_) {
    int free = 0;
    for (size_t i = 0; i < n->gpus.size(); ++i) {
      TaskNumber tid = n->gpu_task[i];
      if (tid == 0) {
        if (n->gpus[i].healthy) free++;
        continue;
      }
      const Task* found = tasks_.Find(tid);
      if (found == nullptr) return Internal("a GPU is held by an unknown task");
      const Task& t = *found;
      if (!(t.status == TaskStatus::kRunning || t.stopping)) {
        return Internal("a GPU is held by " + FormatTaskId(tid) + " which does not run");
      }
      busy_tasks++;
    }
    if (free != n->FreeGpus()) return Internal("free count out of step on node " + n->id);
    // CPUs and memory: what it offers, less what the members holding its GPUs were given.
    int64_t free_cpus = n->cpus_milli;
    int64_t free_memory = n->memory_mb;
    std::vector<TaskNumber> counted;
    for (TaskNumber tid : n->gpu_task) {
      if (tid == 0 || std::find(counted.begin(), counted.end(), tid) != counted.end()) continue;
      counted.push_back(tid);
      const Task& t = *tasks_.Find(tid);
      const int member = RunningMemberOn(t.allocation, n->id);
      if (member < 0)
        return Internal(FormatTaskId(tid) + " holds GPUs of " + n->id + " as no member");
      free_cpus -= t.allocation[static_cast<size_t>(member)].cpus_milli;
      free_memory -= t.allocation[static_cast<size_t>(member)].memory_mb;
    }
    if (free_cpus != n->free_cpus_milli || free_memory != n->free_memory_mb) {
      return Internal("free CPUs or memory out of step on node " + n->id);
    }
    const bool any_unhealthy =
        std::any_of(n->gpus.begin(), n->gpus.end(), [](const GpuInfo& g) { return !g.healthy; });
    if (any_unhealthy != n->any_unhealthy) {
      return Internal("unhealthy flag out of step on node " + n->id);
    }
    if (n->in_index != n->Placeable()) {
      return Internal("node " + n->id + " is " + (n->in_index ? "" : "not ") +
                      "in the placement index but " + (n->Placeable() ? "" : "not ") + "placeable");
    }
    if (n->in_index && index_.RoomOf(n->slot) != n->Room()) {
      return Internal("free CPUs or memory out of step in the placement index on node " + n->id);
    }
    if (n->online) total += n->HealthyGpus();
  }
  int allocated = 0;
  for (const auto& [id, tp] : all_tasks) {
    const Task& t = *tp;
    if (!(t.status == TaskStatus::kRunning || t.stopping)) continue;
    for (const auto& na : t.allocation) {
      const NodeState* n = FindNodeState(na.node_id);
      if (!na.ended && !n->gpus.empty()) {
        allocated += static_cast<int>(na.gpu_indices.size());
      }
    }
  }
  if (allocated != busy_tasks) return Internal("allocated GPUs differ from busy GPUs");
  if (total != total_online_gpus_) return Internal("online GPU total out of step");
  int guaranteed = 0;
  int held = 0;
  for (QuotaTree::NodeId n : quota_tree_.Children(QuotaTree::kRoot)) {
    guaranteed += quota_tree_.node(n).limits.guarantee;
    held += quota_tree_.node(n).used;
  }
  if (guaranteed != total_online_gpus_ ||
      quota_tree_.node(QuotaTree::kRoot).limits.guarantee != total_online_gpus_) {
    return Internal("quotas do not add up");
  }
  if (held != quota_tree_.node(QuotaTree::kRoot).used) {
    return Internal("cluster quota use out of step with its classes");
  }
  if (reservation_at_.size() != reservations_.size()) {
    return Internal("the reservations' index is out of step with them");
  }
  for (size_t i = 0; i < reservations_.size(); ++i) {
    const Reservation& r = reservations_[i];
    auto at = reservation_at_.find(r.task);
    if (at == reservation_at_.end() || at->second != i) {
      return Internal("the reservation for " + FormatTaskId(r.task) + " is not indexed");
    }
    const TaskRecord* t = tasks_.Find(r.task);
    if (t == nullptr || t->status != TaskStatus::kPending || r.slots.empty()) {
      return Internal("a reservation is kept for " + FormatTaskId(r.task) +
                      ", which does not wait");
    }
    if (!r.preemption && queues_[PrioIndex(r.priority)]->oldest != r.task) {
      return Internal("a reservation is kept for " + FormatTaskId(r.task) +
                      ", which is not its queue's oldest task");
    }
    for (uint32_t slot : r.slots) {
      if (slot >= nodes_.size() || !nodes_[slot]->Placeable()) {
        return Internal("a reservation for " + FormatTaskId(r.task) +
                        " keeps a node that takes no tasks");
      }
    }
  }
  if (Status s = CheckTeamInvariants(); !s.ok()) return s;
  for (const auto& q : queues_) {
    size_t active = 0;
    for (const auto& [key, shape] : q->shapes) {
      const bool listed = shape->active_at >= 0 &&
                          static_cast<size_t>(shape->active_at) < q->active.size() &&
                          q->active[static_cast<size_t>(shape->active_at)] == shape.get();
      if (listed != !shape->tasks.empty()) return Internal("active shape list out of step");
      active += listed ? 1 : 0;
    }
    if (active != q->active.size()) return Internal("active shape list out of step");
  }
  return OkStatus();
}

Status SchedulerCore::CheckTeamInvariants() const {
  std::vector<int> used(teams_.size() * kPriorityCount, 0);
  std::vector<int> borrowed(teams_.size() * kPriorityCount, 0);
  std::vector<size_t> pending(teams_.size(), 0);
  std::map<std::pair<uint32_t, int>, std::array<int, kPriorityCount>> eligible;
  std::vector<int> within(groups_.size(), 0);
  std::string problem;
  tasks_.ForEach([&](TaskNumber id, const TaskRecord* t) {
    if (!problem.empty()) return;
    const int p = PrioIndex(t->spec.priority);
    if (t->team >= teams_.size() || teams_[t->team].name != t->spec.team) {
      problem = FormatTaskId(id) + " is not counted in its team";
      return;
    }
    if (t->status == TaskStatus::kPending) pending[t->team]++;
    const bool held = t->status == TaskStatus::kRunning || t->stopping;
    if (!held) {
      if (t->borrowed || t->eligible_counted)
        problem = FormatTaskId(id) + " borrows but holds nothing";
      return;
    }
    used[t->team * kPriorityCount + p] += t->spec.gpu_count;
    if (t->borrowed) borrowed[t->team * kPriorityCount + p] += t->spec.gpu_count;
    if (t->eligible_counted != Eligible(*t)) {
      problem = FormatTaskId(id) + " is counted as preemptible wrongly";
      return;
    }
    if (t->eligible_counted) {
      for (const NodeAllocation& m : t->allocation) {
        const NodeState& n = *FindNodeState(m.node_id);
        const int model = n.gpu_model[static_cast<size_t>(n.Position(m.gpu_indices[0]))];
        eligible[{n.slot, model}][p] += static_cast<int>(m.gpu_indices.size());
      }
    }
    if (!config_.borrowing) {
      if (t->borrowed) problem = FormatTaskId(id) + " borrows without borrowing";
      return;
    }
    const size_t gi = static_cast<size_t>(teams_[t->team].group[p]);
    const Group& g = groups_[gi];
    const std::pair<uint64_t, TaskNumber> key{t->start_order, id};
    if ((t->borrowed ? g.borrowed.count(key) : g.within.count(key)) != 1 ||
        (t->borrowed ? g.within.count(key) : g.borrowed.count(key)) != 0) {
      problem =
          FormatTaskId(id) + " is not in its group as " + (t->borrowed ? "borrowing" : "within");
      return;
    }
    if (!t->borrowed) within[gi] += t->spec.gpu_count;
  });
  if (!problem.empty()) return Internal(problem);
  for (size_t i = 0; i < teams_.size(); ++i) {
    const TeamState& team = teams_[i];
    int held = 0;
    for (int p = 0; p < kPriorityCount; ++p) {
      if (team.used[p] != used[i * kPriorityCount + p] ||
          quota_tree_.node(team.leaf[p]).used != team.used[p]) {
        return Internal("team " + team.name + " use out of step with its tasks");
      }
      if (team.borrowed_gpus[p] != borrowed[i * kPriorityCount + p]) {
        return Internal("team " + team.name + " borrowed GPUs out of step with its tasks");
      }
      held += team.used[p];
    }
    if (held != team.held_gpus) return Internal("team " + team.name + " held GPUs out of step");
    if (team.pending != pending[i]) return Internal("team " + team.name + " pending out of step");
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    if (g.within_gpus != within[gi]) return Internal("a group's GPUs within out of step");
    const int guarantee = quota_tree_.node(g.node).limits.guarantee;
    if (g.within_gpus > guarantee) return Internal("a group holds more than its guarantee within");
    if (!g.borrowed.empty() &&
        g.within_gpus + g.reserved + tasks_.Find(g.borrowed.begin()->second)->spec.gpu_count <=
            guarantee) {
      return Internal("a group's oldest borrower fits within its guarantee but still borrows");
    }
  }
  for (const auto& n : nodes_) {
    for (const auto& s : n->slices) {
      auto it = eligible.find({n->slot, s.model});
      for (int p = 0; p < kPriorityCount; ++p) {
        const int want = it == eligible.end() ? 0 : it->second[p];
        if (s.eligible[p] != want) return Internal("preemptible GPUs out of step on node " + n->id);
      }
      if (config_.borrowing && n->in_index && s.capacity > 0) {
        const int keys[3] = {s.free + s.eligible[0], s.free + s.eligible[1],
                             s.free + s.eligible[0] + s.eligible[1]};
        for (int i = 0; i < 3; ++i) {
          if (s.reclaim_key[i] != std::min(keys[i], s.capacity)) {
            return Internal("reclaim index out of step on node " + n->id);
          }
        }
      }
    }
  }
  // What preemptions promise and what their victims will free, per node.
  std::map<uint32_t, std::array<int64_t, 6>>
      under_way;  // promised, then incoming: GPUs, CPUs, MiB.
  for (const Reservation& r : reservations_) {
    if (!r.preemption) continue;
    for (size_t i = 0; i < r.slots.size(); ++i) {
      auto& c = under_way[r.slots[i]];
      c[0] += r.per_slot;
      c[1] += r.slot_cpus_milli[i];
      c[2] += r.slot_memory_mb[i];
    }
  }
  tasks_.ForEach([&](TaskNumber, const TaskRecord* record) {
    const TaskRecord& t = *record;
    if (!t.incoming_counted) return;
    for (size_t i = 0; i < t.allocation.size(); ++i) {
      const NodeAllocation& m = t.allocation[i];
      const NodeState* node = i == 0 ? nodes_[t.node_slot].get() : FindNodeState(m.node_id);
      if (m.ended || node == nullptr) continue;
      auto& c = under_way[node->slot];
      c[3] += std::ssize(m.gpu_indices);
      c[4] += m.cpus_milli;
      c[5] += m.memory_mb;
    }
  });
  for (const auto& n : nodes_) {
    auto it = under_way.find(n->slot);
    const std::array<int64_t, 6> want =
        it == under_way.end() ? std::array<int64_t, 6>{} : it->second;
    const std::array<int64_t, 6> have = {
        n->promised, n->promised_cpus_milli, n->promised_memory_mb,
        n->incoming, n->incoming_cpus_milli, n->incoming_memory_mb};
    if (want != have) return Internal("promised or incoming room out of step on node " + n->id);
  }
  return OkStatus();
}

}  // namespace dgpu::core
