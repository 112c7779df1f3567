// Teams: guarantees inside the classes, caps, the quota tree built from them, which running
// tasks borrow, and fair-share usage.
//
// The quota tree is root -> class (online, batch) -> a leaf per team with a guarantee in that
// class, and the class's shared node -> a leaf per team without one. A guarantee holder (a
// team's leaf with a guarantee, or a class's shared node) is a Group: with borrowing, its tasks
// are within its guarantee, oldest start first, and those beyond it borrow.
#include <cmath>

#include "core/core_internal.h"

namespace dgpu::core {

namespace {
constexpr int kUnbounded = 1 << 29;  // A borrowing limit nothing reaches.
}  // namespace

int SchedulerCore::TeamIdOf(const std::string& name) const {
  if (static_cast<size_t>(last_team_) < teams_.size() &&
      teams_[static_cast<size_t>(last_team_)].name == name) {
    return last_team_;
  }
  auto it = team_ids_.find(name);
  return it == team_ids_.end() ? -1 : it->second;
}

int SchedulerCore::TeamId(const std::string& name, bool create) {
  int id = TeamIdOf(name);
  if (id >= 0 || !create) {
    if (id >= 0) last_team_ = id;
    return id;
  }
  id = static_cast<int>(teams_.size());
  TeamState& team = teams_.emplace_back();
  team.name = name;
  team_ids_.emplace(name, id);
  last_team_ = id;
  // A team without limits: a leaf below each class's shared node.
  for (int p = 0; p < kPriorityCount; ++p) {
    team.leaf[p] = quota_tree_.Add(name, shared_node_[p], {0, kUnbounded, QuotaTree::kNoCap});
    team.group[p] = p;  // Groups 0 and 1 are the classes' shared parts.
  }
  return id;
}

void SchedulerCore::RebuildQuotaTree() {
  quota_tree_ = QuotaTree();
  class_node_[PrioIndex(Priority::kHigh)] = quota_tree_.Add("online", QuotaTree::kRoot);
  class_node_[PrioIndex(Priority::kLow)] = quota_tree_.Add("batch", QuotaTree::kRoot);
  for (int p = 0; p < kPriorityCount; ++p) {
    shared_node_[p] = quota_tree_.Add("shared", class_node_[p]);
  }
  // Groups are rebuilt with the tree; their task sets are refilled below.
  std::vector<Group> old_groups = std::move(groups_);
  groups_.clear();
  int shared_group[kPriorityCount];
  for (int p = 0; p < kPriorityCount; ++p) {
    shared_group[p] = static_cast<int>(groups_.size());
    groups_.emplace_back().node = shared_node_[p];
  }
  for (TeamState& team : teams_) {
    const int guarantee[kPriorityCount] = {team.limits.online, team.limits.batch};
    for (int p = 0; p < kPriorityCount; ++p) {
      if (team.configured && guarantee[p] > 0) {
        team.leaf[p] = quota_tree_.Add(team.name, class_node_[p]);
        team.group[p] = static_cast<int>(groups_.size());
        groups_.emplace_back().node = team.leaf[p];
      } else {
        team.leaf[p] = quota_tree_.Add(team.name, shared_node_[p]);
        team.group[p] = shared_group[p];
      }
      quota_tree_.Charge(team.leaf[p], team.used[p]);
    }
  }
  for (TeamState& team : teams_) team.reserved_gpus = 0;
  for (auto& node : nodes_) {
    node->promised = 0;
    node->promised_cpus_milli = node->promised_memory_mb = 0;
  }
  for (const Reservation& r : reservations_) CountReservation(r, +1);
  RecomputeQuota();
  if (!config_.borrowing) return;
  // Every held task goes to its team's group, as it was (within or borrowing), in start order;
  // RecomputeQuota's rebalance already ran on empty groups, so run it again.
  for (Group& g : old_groups) {
    for (const auto* set : {&g.within, &g.borrowed}) {
      for (const auto& [order, id] : *set) {
        TaskRecord& t = *tasks_.Find(id);
        Group& ng = groups_[static_cast<size_t>(teams_[t.team].group[PrioIndex(t.spec.priority)])];
        if (t.borrowed) {
          ng.borrowed.insert({order, id});
        } else {
          ng.within.insert({order, id});
          ng.within_gpus += t.spec.gpu_count;
        }
      }
    }
  }
  RebalanceGroups();
}

void SchedulerCore::RecomputeQuota() {
  int online = static_cast<int>(std::lround(total_online_gpus_ * config_.online_percent));
  online = std::clamp(online, 0, total_online_gpus_);
  const int class_quota[kPriorityCount] = {online, total_online_gpus_ - online};
  const int borrow = config_.borrowing ? kUnbounded : 0;
  quota_tree_.SetLimits(QuotaTree::kRoot, {total_online_gpus_, 0, QuotaTree::kNoCap});
  for (int p = 0; p < kPriorityCount; ++p) {
    quota_tree_.SetLimits(class_node_[p], {class_quota[p], borrow, QuotaTree::kNoCap});
    // Team guarantees, scaled down (largest remainder, then team order) while they add up to
    // more than the class quota (GPUs lost since they were set).
    int64_t sum = 0;
    for (const TeamState& team : teams_) {
      if (team.group[p] >= kPriorityCount) sum += p == 0 ? team.limits.online : team.limits.batch;
    }
    std::vector<std::pair<int64_t, size_t>> remainders;
    int given = 0;
    std::vector<int> applied(teams_.size(), 0);
    for (size_t i = 0; i < teams_.size(); ++i) {
      const TeamState& team = teams_[i];
      if (team.group[p] < kPriorityCount) continue;
      const int64_t g = p == 0 ? team.limits.online : team.limits.batch;
      if (sum <= class_quota[p]) {
        applied[i] = static_cast<int>(g);
      } else {
        applied[i] = static_cast<int>(g * class_quota[p] / sum);
        remainders.emplace_back(-(g * class_quota[p] % sum), i);
      }
      given += applied[i];
    }
    std::sort(remainders.begin(), remainders.end());
    for (const auto& [rem, i] : remainders) {
      if (given >= class_quota[p] || rem == 0) break;
      applied[i]++;
      given++;
    }
    for (size_t i = 0; i < teams_.size(); ++i) {
      const TeamState& team = teams_[i];
      if (team.group[p] < kPriorityCount) {
        quota_tree_.SetLimits(team.leaf[p], {0, kUnbounded, QuotaTree::kNoCap});
      } else {
        quota_tree_.SetLimits(team.leaf[p], {applied[i], borrow, QuotaTree::kNoCap});
      }
    }
    quota_tree_.SetLimits(shared_node_[p], {class_quota[p] - given, borrow, QuotaTree::kNoCap});
  }
  if (config_.borrowing) RebalanceGroups();
}

void SchedulerCore::ChargeTask(TaskRecord& t, int sign) {
  const int p = PrioIndex(t.spec.priority);
  const int gpus = t.spec.gpu_count;
  TeamState& team = teams_[t.team];
  quota_tree_.Charge(team.leaf[p], sign * gpus);
  team.used[p] += sign * gpus;
  team.held_gpus += sign * gpus;
  if (!config_.borrowing) return;
  Group& g = groups_[static_cast<size_t>(team.group[p])];
  if (sign > 0) {
    t.start_order = next_start_order_++;
    // Within while the group's tasks within (this one included) and what is kept for its
    // tasks waiting for victims stay within its guarantee.
    const bool within = g.within_gpus + g.reserved - OwnReserved(t.id) + gpus <=
                        quota_tree_.node(g.node).limits.guarantee;
    t.borrowed = !within;
    if (within) {
      g.within.insert({t.start_order, t.id});
      g.within_gpus += gpus;
    } else {
      g.borrowed.insert({t.start_order, t.id});
      team.borrowed_gpus[p] += gpus;
    }
    return;
  }
  if (t.borrowed) {
    g.borrowed.erase({t.start_order, t.id});
    team.borrowed_gpus[p] -= gpus;
    t.borrowed = false;
  } else if (g.within.erase({t.start_order, t.id}) != 0) {
    g.within_gpus -= gpus;
  }
  // Room within the guarantee, or a new first borrower that may fit in it.
  RebalanceGroup(g);
}

void SchedulerCore::SetBorrowed(TaskRecord& t, bool borrowed) {
  if (t.borrowed == borrowed) return;
  const int p = PrioIndex(t.spec.priority);
  TeamState& team = teams_[t.team];
  Group& g = groups_[static_cast<size_t>(team.group[p])];
  const std::pair<uint64_t, TaskNumber> key{t.start_order, t.id};
  if (borrowed) {
    g.within.erase(key);
    g.within_gpus -= t.spec.gpu_count;
    g.borrowed.insert(key);
    team.borrowed_gpus[p] += t.spec.gpu_count;
  } else {
    g.borrowed.erase(key);
    team.borrowed_gpus[p] -= t.spec.gpu_count;
    g.within.insert(key);
    g.within_gpus += t.spec.gpu_count;
  }
  t.borrowed = borrowed;
  UpdateEligible(t);
}

void SchedulerCore::RebalanceGroup(Group& g) {
  const int guarantee = quota_tree_.node(g.node).limits.guarantee;
  while (g.within_gpus > guarantee && !g.within.empty()) {
    SetBorrowed(*tasks_.Find(std::prev(g.within.end())->second), true);
  }
  while (!g.borrowed.empty()) {
    TaskRecord& t = *tasks_.Find(g.borrowed.begin()->second);
    if (g.within_gpus + g.reserved + t.spec.gpu_count > guarantee) break;
    SetBorrowed(t, false);
  }
}

void SchedulerCore::RebalanceGroups() {
  for (Group& g : groups_) RebalanceGroup(g);
}

bool SchedulerCore::WithinGuarantee(int team, int prio, int gpus, int own_reserved) const {
  const Group& g = groups_[static_cast<size_t>(teams_[static_cast<size_t>(team)].group[prio])];
  // What borrows does not count: its GPUs are anyone's to take back.
  return g.within_gpus + g.reserved - own_reserved + gpus <=
         quota_tree_.node(g.node).limits.guarantee;
}

PendingReason SchedulerCore::TeamAdmits(int team, int gpus, int own_reserved) const {
  const TeamState& t = teams_[static_cast<size_t>(team)];
  if (t.configured && t.limits.max_gpus >= 0 &&
      t.held_gpus + t.reserved_gpus - own_reserved + gpus > t.limits.max_gpus) {
    return PendingReason::kTeamLimit;
  }
  return PendingReason::kNone;
}

int SchedulerCore::OwnReserved(TaskNumber id) const {
  if (reservations_.empty()) return 0;
  const Reservation* r = ReservationOf(id);
  return r != nullptr && r->preemption ? r->gpus : 0;
}

void SchedulerCore::CountReservation(const Reservation& r, int sign, bool rebalance) {
  if (!r.preemption) return;
  for (size_t i = 0; i < r.slots.size(); ++i) {
    NodeState& node = *nodes_[r.slots[i]];
    node.promised += sign * r.per_slot;
    node.promised_cpus_milli += sign * r.slot_cpus_milli[i];
    node.promised_memory_mb += sign * r.slot_memory_mb[i];
  }
  TeamState& team = teams_[static_cast<size_t>(r.team)];
  team.reserved_gpus += sign * r.gpus;
  Group& g = groups_[static_cast<size_t>(team.group[PrioIndex(r.priority)])];
  g.reserved += sign * r.gpus;
  // Room no longer kept may take a borrower back within.
  if (sign < 0 && rebalance && config_.borrowing) RebalanceGroup(g);
}

// Usage decays continuously: after d seconds, u * 2^(-d/h). Held GPUs accrue r per second, so
// over d seconds the usage becomes u * f + r * (h / ln 2) * (1 - f), with f = 2^(-d/h).
void SchedulerCore::AccrueUsage(TimeMicros now) {
  const double half_life = static_cast<double>(config_.fairshare_half_life) / kMicrosPerSecond;
  if (half_life <= 0) return;
  const double tau = half_life / std::log(2.0);
  // Teams accrued together share usage_at, so the decay factor is computed once per pass.
  bool have_f = false;
  TimeMicros f_since = 0;
  double f = 1;
  for (TeamState& team : teams_) {
    if (now <= team.usage_at) continue;
    if (team.usage_at == 0 || (team.usage == 0 && team.held_gpus == 0)) {
      team.usage_at = now;
      continue;
    }
    if (!have_f || team.usage_at != f_since) {
      have_f = true;
      f_since = team.usage_at;
      const double d = static_cast<double>(now - team.usage_at) / kMicrosPerSecond;
      f = std::exp2(-d / half_life);
    }
    team.usage = team.usage * f + team.held_gpus * tau * (1 - f);
    team.usage_at = now;
  }
}

// What a team has had and holds, over its weight: its decayed usage plus what its held GPUs
// will add if they keep running (r * h / ln 2), so that GPUs handed out in one pass count at once.
double SchedulerCore::FairShareKey(int team) const {
  const TeamState& t = teams_[static_cast<size_t>(team)];
  const double half_life = static_cast<double>(config_.fairshare_half_life) / kMicrosPerSecond;
  const double tau = half_life / std::log(2.0);
  const double weight = t.configured && t.limits.weight > 0 ? t.limits.weight : 1.0;
  return (t.usage + t.held_gpus * tau) / weight;
}

void SchedulerCore::EmitTeam(const TeamState& team) {
  if (!config_.record_changes) return;
  Change c;
  c.kind = Change::Kind::kTeamUpsert;
  c.team.name = team.name;
  c.team.set = team.api_set && !team.deleted;
  c.team.limits = team.limits;
  c.team.deleted = team.deleted;
  c.team.usage = team.usage;
  c.team.usage_at = team.usage_at;
  changes_.push_back(std::move(c));
}

// After a team's limits changed (set or deleted): the quota tree, the next pass, the durable
// record and the event.
void SchedulerCore::TeamChanged(const TeamState& team, TimeMicros now) {
  RebuildQuotaTree();
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;
  EmitTeam(team);
  if (config_.record_events) {
    Event& e = events_.emplace_back();
    e.kind = Event::Kind::kTeamChanged;
    e.time = now;
    e.detail = team.name;
  }
}

Status SchedulerCore::SetTeam(const std::string& name, const TeamLimits& limits, TimeMicros now) {
  if (!IsValidTeamName(name)) {
    return InvalidArgument("team name '" + name +
                           "' is not valid: 1 to 63 characters of a-z, 0-9, '_' and '-', "
                           "starting with a letter or digit");
  }
  if (limits.online < 0) return InvalidArgument("online must not be negative");
  if (limits.batch < 0) return InvalidArgument("batch must not be negative");
  if (limits.max_gpus < -1) return InvalidArgument("max_gpus must not be negative");
  if (limits.default_time_limit < 0 || limits.default_time_limit > kMaxTimeLimitSeconds) {
    return InvalidArgument("default_time_limit must be between 0 and " +
                           std::to_string(kMaxTimeLimitSeconds) + " seconds");
  }
  if (!(limits.weight > 0) || !std::isfinite(limits.weight)) {
    return InvalidArgument("weight must be a number above 0");
  }
  if (limits.max_gpus >= 0 && limits.online + limits.batch > limits.max_gpus) {
    return InvalidArgument("max_gpus (" + std::to_string(limits.max_gpus) +
                           ") is below the team's guarantees (online " +
                           std::to_string(limits.online) + " + batch " +
                           std::to_string(limits.batch) + ")");
  }
  if (teams_.size() >= kMaxTeams && TeamIdOf(name) < 0) {
    return TooManyTeams();
  }
  // The team gets its slot only once its limits are accepted: a refused request leaves no
  // trace of the name.
  const int existing = TeamIdOf(name);
  if (total_online_gpus_ > 0) {
    const QuotaView q = Quota();
    const int wanted[kPriorityCount] = {limits.online, limits.batch};
    const char* names[kPriorityCount] = {"online", "batch"};
    for (int p = 0; p < kPriorityCount; ++p) {
      int64_t sum = wanted[p];
      for (size_t i = 0; i < teams_.size(); ++i) {
        if (static_cast<int>(i) == existing || !teams_[i].configured) continue;
        sum += p == 0 ? teams_[i].limits.online : teams_[i].limits.batch;
      }
      if (sum > q.quota[p]) {
        return InvalidArgument(std::string(names[p]) + ": the " + names[p] +
                               " guarantees would add up to " + std::to_string(sum) +
                               " GPUs, more than the " + names[p] + " quota of " +
                               std::to_string(q.quota[p]));
      }
    }
  }
  TeamState& team = teams_[static_cast<size_t>(TeamId(name))];
  AccrueUsage(now);
  team.configured = true;
  team.api_set = true;
  team.deleted = false;
  team.limits = limits;
  TeamChanged(team, now);
  return OkStatus();
}

Status SchedulerCore::DeleteTeam(const std::string& name, TimeMicros now) {
  const int id = TeamIdOf(name);
  if (id < 0 || !teams_[static_cast<size_t>(id)].configured) {
    return NotFound("team " + name + " has no limits to delete");
  }
  TeamState& team = teams_[static_cast<size_t>(id)];
  if (team.pending > 0 || team.held_gpus > 0) {
    return FailedPrecondition("team " + name + " has " + std::to_string(team.pending) +
                              " pending task(s) and holds " + std::to_string(team.held_gpus) +
                              " GPU(s); delete it once they have ended");
  }
  AccrueUsage(now);
  team.configured = false;
  team.api_set = true;
  team.deleted = true;
  team.limits = TeamLimits();
  TeamChanged(team, now);
  return OkStatus();
}

Status SchedulerCore::RestoreTeam(const TeamRecord& record) {
  if (!IsValidTeamName(record.name)) {
    return InvalidArgument("team name '" + record.name + "' is not valid");
  }
  TeamState& team = teams_[static_cast<size_t>(TeamId(record.name))];
  team.usage = record.usage;
  team.usage_at = record.usage_at;
  team.stored_usage = record.usage;
  if (record.deleted) {
    team.configured = false;
    team.api_set = true;
    team.deleted = true;
    team.limits = TeamLimits();
  } else if (record.set) {
    team.configured = true;
    team.api_set = true;
    team.deleted = false;
    team.limits = record.limits;
  }
  RebuildQuotaTree();
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;
  return OkStatus();
}

TeamView SchedulerCore::ViewOf(const TeamState& team) const {
  TeamView v;
  v.name = team.name;
  v.configured = team.configured;
  v.limits = team.limits;
  for (int p = 0; p < kPriorityCount; ++p) {
    if (team.group[p] >= kPriorityCount) {
      v.classes[p].guaranteed = quota_tree_.node(team.leaf[p]).limits.guarantee;
    }
    v.classes[p].used = team.used[p];
    v.classes[p].borrowed = team.borrowed_gpus[p];
  }
  v.pending = team.pending;
  v.usage = team.usage;
  return v;
}

std::vector<TeamView> SchedulerCore::Teams() const {
  std::vector<TeamView> out;
  for (const TeamState& team : teams_) {
    if (!team.configured && team.pending == 0 && team.held_gpus == 0 && team.usage == 0) continue;
    out.push_back(ViewOf(team));
  }
  std::sort(out.begin(), out.end(),
            [](const TeamView& a, const TeamView& b) { return a.name < b.name; });
  return out;
}

std::optional<TeamView> SchedulerCore::FindTeam(const std::string& name) const {
  const int id = TeamIdOf(name);
  if (id < 0) return std::nullopt;
  return ViewOf(teams_[static_cast<size_t>(id)]);
}

}  // namespace dgpu::core
