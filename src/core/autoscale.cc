#include "core/autoscale.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <utility>

#include "core/gpu_model.h"

namespace dgpu::core {
namespace {

constexpr TimeMicros kMaxBackoff = 600 * kMicrosPerSecond;

// Reasons that more nodes would take away: no node (of the model, of the size) has room, the
// class quota is used up (it grows with the cluster), or a guaranteed task waits for borrowed
// GPUs to be taken back.
bool WaitsForRoom(PendingReason r) {
  return r == PendingReason::kNoNodeFits || r == PendingReason::kExceedsCluster ||
         r == PendingReason::kInsufficientCpu || r == PendingReason::kInsufficientMemory ||
         r == PendingReason::kNoGpuModel || r == PendingReason::kQuotaExhausted ||
         r == PendingReason::kWaitingForPreemption;
}

// The class's quota of `total` GPUs (the core's rounding: online takes lround, batch the rest).
int QuotaOf(Priority p, int total, double online_percent) {
  const int online = static_cast<int>(std::lround(total * online_percent));
  return p == Priority::kHigh ? online : total - online;
}

}  // namespace

void ScaleInputs::Read(const SchedulerCore& core) {
  core.QueueHeads(heads_);
  demand_.clear();
  for (const auto& h : heads_) {
    demand_.push_back({h.priority, *h.gpu_model, h.gpu_count, h.tasks, h.reason});
  }
  const QuotaView quota = core.Quota();
  quota_.total_gpus = quota.total_gpus;
  for (int p = 0; p < kPriorityCount; ++p) quota_.used[p] = quota.used[p];
}

Autoscaler::Autoscaler(AutoscaleSettings settings) : settings_(std::move(settings)) {
  groups_.resize(settings_.groups.size());
  for (size_t g = 0; g < settings_.groups.size(); ++g) {
    models_.push_back(settings_.groups[g].model);
    groups_[g].view.spec = settings_.groups[g];
  }
}

int Autoscaler::GroupIndex(std::string_view name) const {
  for (size_t g = 0; g < settings_.groups.size(); ++g) {
    if (settings_.groups[g].name == name) return static_cast<int>(g);
  }
  return -1;
}

bool Autoscaler::HeldBack(int group, TimeMicros now) const { return now < groups_[group].retry_at; }

void Autoscaler::Fail(int group, const std::string& error, TimeMicros now, AutoscalePlan* plan) {
  GroupState& g = groups_[group];
  if (plan != nullptr) plan->errors.push_back(settings_.groups[group].name + ": " + error);
  g.backoff = g.backoff == 0 ? settings_.retry_delay : std::min(g.backoff * 2, kMaxBackoff);
  g.retry_at = now + g.backoff;
  g.view.last_error = error;
  g.view.last_error_at = now;
  ++g.view.failures;
}

void Autoscaler::Succeeded(int group) {
  GroupState& g = groups_[group];
  g.backoff = 0;
  g.retry_at = 0;
  g.view.last_error.clear();
}

void Autoscaler::ExpireBoots(int group, TimeMicros now, AutoscalePlan& plan) {
  GroupState& g = groups_[group];
  while (!g.booting.empty() && g.booting.front().deadline <= now) {
    const Boot boot = g.booting.front();
    g.booting.pop_front();
    g.booting_total -= boot.count;
    Fail(group,
         std::to_string(boot.count) + " node(s) asked for did not register within boot_timeout (" +
             std::to_string(settings_.boot_timeout / kMicrosPerSecond) + " s)",
         now, &plan);
  }
}

AutoscalePlan Autoscaler::Plan(std::span<const ScaleDemand> demand,
                               std::span<const ScaleNode> nodes, const ScaleQuota& quota,
                               TimeMicros now) {
  AutoscalePlan plan;
  const int group_count = static_cast<int>(groups_.size());
  std::vector<int> active(group_count, 0);  // Online, not releasing.
  std::vector<std::vector<std::pair<TimeMicros, std::string_view>>> idle(group_count);
  for (auto& g : groups_) {
    g.view.online = g.view.idle = g.view.releasing = 0;
    g.view.waiting_tasks = 0;
    g.view.nodes.clear();
  }

  // Nodes: joins, idleness, releases to finish.
  std::unordered_set<std::string_view> present;
  for (const ScaleNode& n : nodes) {
    if (n.group < 0 || n.group >= group_count) continue;
    present.insert(n.id);
    auto [it, added] = nodes_.try_emplace(std::string(n.id));
    NodeTrack& t = it->second;
    t.group = n.group;
    GroupState& g = groups_[n.group];
    const bool releasing = n.mode == NodeMode::kReleasing;
    // Counted as releasing from the plan that releases it (the caller marks it then).
    const bool leaving = releasing || t.program;
    if (n.online && !t.member) {
      t.member = true;
      if (!g.booting.empty()) {  // A node asked for has come.
        if (--g.booting.front().count == 0) g.booting.pop_front();
        --g.booting_total;
      } else if (g.requesting > 0) {
        ++g.early;  // Before its program has ended.
      }
    }
    std::string state = "offline";
    if (n.online) {
      ++g.view.online;
      if (leaving) {
        ++g.view.releasing;
        state = "releasing";
      } else {
        ++active[n.group];
        state = n.tasks > 0 ? "busy" : "idle";
      }
    } else if (releasing) {
      state = "releasing";
    }
    if (n.online && n.mode == NodeMode::kSchedulable && n.tasks == 0 && !leaving) {
      if (t.idle_since < 0) t.idle_since = now;
      ++g.view.idle;
      idle[n.group].emplace_back(t.idle_since, n.id);
    } else {
      t.idle_since = -1;
    }
    g.view.nodes.push_back({std::string(n.id), state, state == "idle" ? t.idle_since : 0});
    if (!releasing) {
      t.released_at = -1;
      continue;
    }
    if (t.program) continue;
    if (!n.online) {
      plan.forget.emplace_back(n.id);  // Released and gone.
      continue;
    }
    if (t.released_at >= 0 && now - t.released_at < settings_.boot_timeout) continue;
    if (HeldBack(n.group, now)) continue;
    if (t.released_at >= 0) {
      Fail(n.group,
           "node " + std::string(n.id) + " is still online " +
               std::to_string(settings_.boot_timeout / kMicrosPerSecond) +
               " s after scale_down_program succeeded; releasing it again",
           now, &plan);
    }
    t.program = true;
    t.released_at = -1;
    plan.down.push_back({n.group, std::string(n.id)});
  }
  for (const std::string& id : plan.forget) nodes_.erase(id);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (!it->second.program && !present.contains(it->first)) {
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
  for (int g = 0; g < group_count; ++g) ExpireBoots(g, now, plan);

  // Demand that has waited scale_up_delay, largest tasks first, online before batch.
  std::map<std::tuple<int, std::string, int>, TimeMicros, std::less<>> blocked;
  std::vector<const ScaleDemand*> due;
  for (const ScaleDemand& d : demand) {
    if (!WaitsForRoom(d.reason) || d.tasks == 0) continue;
    auto key = std::make_tuple(static_cast<int>(d.priority), std::string(d.model), d.gpu_count);
    auto old = blocked_since_.find(key);
    const TimeMicros since = old != blocked_since_.end() ? old->second : now;
    auto [it, added] = blocked.emplace(std::move(key), since);
    if (!added) it->second = std::min(it->second, since);
    if (now - since >= settings_.scale_up_delay) due.push_back(&d);
  }
  blocked_since_ = std::move(blocked);
  std::sort(due.begin(), due.end(), [](const ScaleDemand* a, const ScaleDemand* b) {
    return std::make_tuple(-a->gpu_count, a->priority) <
           std::make_tuple(-b->gpu_count, b->priority);
  });

  // Bins: the nodes asked for (free as they come), then new ones.
  std::vector<std::vector<int>> bins(group_count);
  std::vector<int> added(group_count, 0);
  int planned_gpus = 0;  // GPUs of the nodes asked for or to be asked for.
  for (int g = 0; g < group_count; ++g) {
    const int asked = groups_[g].requesting + groups_[g].booting_total;
    bins[g].assign(asked, settings_.groups[g].gpus_per_node);
    planned_gpus += asked * settings_.groups[g].gpus_per_node;
  }
  int added_gpus[kPriorityCount] = {0, 0};
  const auto room_in_quota = [&](Priority p, int extra_gpus) {
    if (settings_.borrowing) return std::numeric_limits<int>::max();
    const int total = quota.total_gpus + planned_gpus + extra_gpus;
    const int p_index = static_cast<int>(p);
    return QuotaOf(p, total, settings_.online_percent) - quota.used[p_index] - added_gpus[p_index];
  };
  const auto headroom = [&](int g) {
    const GroupState& s = groups_[g];
    if (s.requesting > 0 || HeldBack(g, now)) return 0;
    return settings_.groups[g].max_nodes - active[g] - s.view.releasing - s.booting_total -
           added[g];
  };
  for (const ScaleDemand* d : due) {
    std::vector<int> eligible;
    for (int m : MatchGpuModels(d->model, models_)) {
      if (settings_.groups[m].gpus_per_node >= d->gpu_count) eligible.push_back(m);
    }
    size_t left = d->tasks;
    const int p = static_cast<int>(d->priority);
    const auto take = [&](int g, int& free_gpus) {
      const int by_quota = room_in_quota(d->priority, 0) / d->gpu_count;
      const size_t k = std::min<size_t>({left, static_cast<size_t>(free_gpus / d->gpu_count),
                                         static_cast<size_t>(std::max(by_quota, 0))});
      free_gpus -= static_cast<int>(k) * d->gpu_count;
      added_gpus[p] += static_cast<int>(k) * d->gpu_count;
      groups_[g].view.waiting_tasks += k;
      left -= k;
    };
    for (int g : eligible) {
      for (int& free_gpus : bins[g]) {
        if (left == 0) break;
        take(g, free_gpus);
      }
    }
    for (int g : eligible) {
      const int size = settings_.groups[g].gpus_per_node;
      while (left > 0 && headroom(g) > 0) {
        // As many new nodes as the class's quota needs to grow by a task (one with borrowing).
        int k = 1;
        while (k <= headroom(g) && room_in_quota(d->priority, k * size) < d->gpu_count) ++k;
        if (k > headroom(g)) break;
        planned_gpus += k * size;
        added[g] += k;
        for (int i = 0; i < k; ++i) bins[g].push_back(size);
        for (size_t i = bins[g].size() - k; i < bins[g].size() && left > 0; ++i) {
          take(g, bins[g][i]);
        }
      }
    }
  }
  for (int g = 0; g < group_count; ++g) {
    const GroupState& s = groups_[g];
    if (s.requesting == 0 && !HeldBack(g, now)) {
      const int have = active[g] + s.view.releasing + s.booting_total + added[g];
      added[g] += std::max(0, settings_.groups[g].min_nodes - have);
    }
    if (added[g] == 0) continue;
    plan.up.push_back({g, added[g], groups_[g].view.waiting_tasks});
    groups_[g].requesting = added[g];
    groups_[g].view.last_scale_up = now;
  }

  // Releases: longest idle first, the group kept at min_nodes, none while it grows. Without
  // borrowing, a class whose tasks wait for its quota keeps the GPUs its quota stands on (else
  // each release would shrink the quota and the next look ask for the node again).
  bool quota_waits[kPriorityCount] = {false, false};
  for (const ScaleDemand& d : demand) {
    if (!settings_.borrowing && d.reason == PendingReason::kQuotaExhausted && d.tasks > 0) {
      quota_waits[static_cast<int>(d.priority)] = true;
    }
  }
  int released_gpus = 0;
  const auto shrinks_a_waiting_quota = [&](int gpus) {
    const int before = quota.total_gpus - released_gpus;
    for (int p = 0; p < kPriorityCount; ++p) {
      const auto prio = static_cast<Priority>(p);
      if (quota_waits[p] && QuotaOf(prio, before - gpus, settings_.online_percent) <
                                QuotaOf(prio, before, settings_.online_percent)) {
        return true;
      }
    }
    return false;
  };
  for (int g = 0; g < group_count; ++g) {
    GroupState& s = groups_[g];
    if (added[g] > 0 || s.requesting > 0 || s.booting_total > 0 || HeldBack(g, now)) continue;
    std::sort(idle[g].begin(), idle[g].end());
    int spare = active[g] - settings_.groups[g].min_nodes;
    for (const auto& [since, id] : idle[g]) {
      if (spare <= 0 || now - since < settings_.idle_timeout) break;
      if (shrinks_a_waiting_quota(settings_.groups[g].gpus_per_node)) break;
      released_gpus += settings_.groups[g].gpus_per_node;
      NodeTrack& t = nodes_[std::string(id)];
      t.program = true;
      t.idle_since = -1;
      plan.down.push_back({g, std::string(id)});
      s.view.last_scale_down = now;
      --spare;
    }
  }
  for (auto& s : groups_) {
    std::sort(s.view.nodes.begin(), s.view.nodes.end(),
              [](const NodeView& a, const NodeView& b) { return a.id < b.id; });
  }
  return plan;
}

void Autoscaler::UpDone(int group, int count, const Status& result, TimeMicros now) {
  if (group < 0 || group >= static_cast<int>(groups_.size())) return;
  GroupState& g = groups_[group];
  g.requesting = std::max(0, g.requesting - count);
  const int arrived = std::min(g.early, count);
  g.early = 0;
  if (!result.ok()) {
    Fail(group, result.message(), now);
    return;
  }
  Succeeded(group);
  g.view.nodes_requested += static_cast<uint64_t>(count);
  if (count > arrived) {
    g.booting.push_back({count - arrived, now + settings_.boot_timeout});
    g.booting_total += count - arrived;
  }
}

void Autoscaler::DownDone(const std::string& node, const Status& result, TimeMicros now) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeTrack& t = it->second;
  t.program = false;
  if (!result.ok()) {
    Fail(t.group, result.message(), now);
    return;
  }
  Succeeded(t.group);
  t.released_at = now;
  ++groups_[t.group].view.nodes_released;
}

std::vector<Autoscaler::GroupView> Autoscaler::View() const {
  std::vector<GroupView> out;
  out.reserve(groups_.size());
  for (const GroupState& g : groups_) {
    GroupView v = g.view;
    v.requested = g.requesting;
    v.booting = g.booting_total;
    v.retry_at = g.retry_at;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace dgpu::core
