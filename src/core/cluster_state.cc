// Cluster state: nodes and their GPUs, GPU models, quotas, GPUs given back, and the views of
// them the daemon serves.
#include "core/core_internal.h"
#include "core/gpu_model.h"

namespace dgpu::core {

int SchedulerCore::InternModel(const std::string& model) {
  auto [it, inserted] = model_ids_.try_emplace(model, static_cast<int>(models_.size()));
  if (inserted) {
    models_.push_back(model);
    model_match_cache_.clear();
    model_generation_++;
    room_seq_.resize(models_.size());
    structure_seq_ = ++change_seq_;
  }
  return it->second;
}

const std::vector<int>& SchedulerCore::ShapeModels(Shape& shape) {
  if (shape.models_generation != model_generation_) {
    shape.models = &ModelsFor(shape.model);
    shape.models_generation = model_generation_;
  }
  return *shape.models;
}

const std::vector<int>& SchedulerCore::ModelsFor(const std::string& wanted) {
  auto it = model_match_cache_.find(wanted);
  if (it == model_match_cache_.end()) {
    it = model_match_cache_.emplace(wanted, MatchGpuModels(wanted, models_)).first;
  }
  return it->second;
}

SchedulerCore::NodeState& SchedulerCore::AddNodeState(const std::string& id) {
  auto ns = std::make_unique<NodeState>();
  ns->slot = static_cast<uint32_t>(nodes_.size());
  ns->id = id;
  NodeState& node = *ns;
  node_slots_.emplace(id, ns->slot);
  nodes_.push_back(std::move(ns));
  if (!config_.topology_key.empty()) index_.PutInSet(unlabelled_set_, node.slot, true);
  // Rank: midway between its neighbours in id order; renumber all (order kept) when no gap.
  constexpr uint64_t kGap = uint64_t{1} << 32;
  auto it = nodes_by_id_.emplace(id, node.slot).first;
  uint64_t lo = it == nodes_by_id_.begin() ? 0 : nodes_[std::prev(it)->second]->rank;
  auto next = std::next(it);
  uint64_t hi = next == nodes_by_id_.end() ? lo + 2 * kGap : nodes_[next->second]->rank;
  if (hi - lo >= 2) {
    node.rank = lo + (hi - lo) / 2;
  } else {
    uint64_t r = kGap;
    for (const auto& [name, slot] : nodes_by_id_) {
      nodes_[slot]->rank = r;
      r += kGap;
    }
  }
  return node;
}

SchedulerCore::NodeState* SchedulerCore::FindNodeState(const std::string& id) {
  auto it = node_slots_.find(id);
  return it == node_slots_.end() ? nullptr : nodes_[it->second].get();
}

const SchedulerCore::NodeState* SchedulerCore::FindNodeState(const std::string& id) const {
  auto it = node_slots_.find(id);
  return it == node_slots_.end() ? nullptr : nodes_[it->second].get();
}

void SchedulerCore::IndexInsert(NodeState& node) {
  if (node.in_index || !node.Placeable()) return;
  for (const auto& s : node.slices) {
    if (s.capacity > 0) index_.Insert(s.model, node.Entry(), s.free, s.capacity, node.Room());
  }
  node.in_index = true;
  ReclaimInsert(node);
}

void SchedulerCore::IndexErase(NodeState& node) {
  if (!node.in_index) return;
  for (const auto& s : node.slices) {
    if (s.capacity > 0) index_.Erase(s.model, node.Entry(), s.free, s.capacity);
  }
  ReclaimErase(node);
  node.in_index = false;
}

void SchedulerCore::ReleaseGpus(Task& t) {
  pass_needed_ = true;
  auto& record = static_cast<TaskRecord&>(t);
  CountEligible(record, false);
  CountIncoming(record, false);
  const uint32_t slot = record.node_slot;
  if (t.allocation.size() == 1 && slot < nodes_.size()) {
    // node_slot is set with the allocation and names its node (CheckInvariants): no need to read
    // the allocation, the node knows which GPUs the task holds.
    ReleaseOnNode(*nodes_[slot], t.id, t.allocation[0]);
  } else {
    for (const auto& na : t.allocation) {
      if (NodeState* node = FindNodeState(na.node_id)) ReleaseOnNode(*node, t.id, na);
    }
  }
  ChargeTask(record, -1);
  t.stopping = false;
  t.stop_reason = StopReason::kNone;
}

void SchedulerCore::ReleaseOnNode(NodeState& node, TaskNumber id, const NodeAllocation& member) {
  if (node.any_unclaimed) {
    const size_t before = node.unclaimed.size();
    node.DropUnclaimed(id);
    unclaimed_tasks_ -= before - node.unclaimed.size();
  }
  // A task's GPUs on one node share one model: one index update per node.
  NodeState::ModelSlice* slice = nullptr;
  int freed = 0;
  bool held = false;
  for (size_t pos = 0; pos < node.gpu_task.size(); ++pos) {
    if (node.gpu_task[pos] != id) continue;
    node.gpu_task[pos] = 0;
    held = true;
    if (!node.Usable(pos)) continue;  // An unhealthy GPU is not free when its task ends.
    slice = node.Slice(node.gpu_model[pos]);
    slice->free++;
    freed++;
  }
  // Its CPUs and memory, where it held GPU positions (a restored task still unclaimed holds
  // none of them yet).
  const bool gives_room =
      held && !member.ended && (member.cpus_milli != 0 || member.memory_mb != 0);
  if (gives_room) {
    node.free_cpus_milli += member.cpus_milli;
    node.free_memory_mb += member.memory_mb;
    resource_seq_ = ++change_seq_;
  }
  if (slice != nullptr && node.in_index) {
    index_.Move(slice->model, node.Entry(), slice->free - freed, slice->free, node.Room());
    // Shapes of this model asking for more than the node had free, and at most what it has now,
    // may have room again.
    auto& seqs = room_seq_[static_cast<size_t>(slice->model)];
    if (seqs.size() <= static_cast<size_t>(slice->free)) seqs.resize(slice->free + 1, 0);
    const uint64_t seq = ++change_seq_;
    for (int k = slice->free - freed + 1; k <= slice->free; ++k) seqs[k] = seq;
    ReclaimSync(node);
  }
  if (gives_room && slice == nullptr && node.in_index) index_.SetRoom(node.Entry(), node.Room());
}

void SchedulerCore::TakeNodeOffline(NodeState& node, TimeMicros now, std::string_view why) {
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;  // Fewer nodes can change why a task waits.
  if (node.online) {
    IndexErase(node);
    total_online_gpus_ -= node.HealthyGpus();
    node.online = false;
    RecomputeQuota();
    DropReservationsOn(node.slot);
    if (config_.record_events) EmitNodeEvent(Event::Kind::kNodeLost, node.id, now).detail = why;
  }
  // Put back in their original relative order: the task that ran first ends up first.
  std::vector<Task*> held;
  for (TaskNumber id : node.HeldTasks()) held.push_back(tasks_.Find(id));
  std::sort(held.begin(), held.end(),
            [](const Task* a, const Task* b) { return a->queue_seq > b->queue_seq; });
  for (Task* t : held) LoseHeld(*t, now, node.id);
}

Status SchedulerCore::SetNodeMode(const std::string& node_id, NodeMode mode, TimeMicros now) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  if (node->mode == mode) return OkStatus();
  ApplyNodeMode(*node, mode);
  if (config_.record_changes) {
    Change c;
    c.kind = Change::Kind::kNodeUpsert;
    c.node = {node_id, mode};
    changes_.push_back(std::move(c));
  }
  if (config_.record_events) {
    EmitNodeEvent(Event::Kind::kNodeStateChanged, node_id, now).detail =
        std::string(ToString(mode));
  }
  return OkStatus();
}

StatusOr<int> SchedulerCore::DrainNode(const std::string& node_id, bool evict,
                                       int32_t grace_seconds, TimeMicros now) {
  if (grace_seconds < -1) return InvalidArgument("grace_seconds must be -1 or more");
  if (Status s = SetNodeMode(node_id, NodeMode::kDraining, now); !s.ok()) return s;
  if (!evict) return 0;
  const NodeState& node = *FindNodeState(node_id);
  std::vector<TaskNumber> held = node.HeldTasks();
  std::sort(held.begin(), held.end());
  int stopped = 0;
  for (TaskNumber id : held) {
    const Task* t = tasks_.Find(id);
    if (t == nullptr || t->status != TaskStatus::kRunning || t->stopping) continue;
    const int32_t grace = grace_seconds >= 0 ? grace_seconds
                          : t->spec.preemption_grace_seconds >= 0
                              ? t->spec.preemption_grace_seconds
                              : config_.preemption_grace_seconds;
    if (StopTask(id, StopReason::kDrain, grace, now).ok()) stopped++;
  }
  return stopped;
}

Status SchedulerCore::RestoreNodeMode(const NodeRecord& record) {
  if (record.id.empty()) return InvalidArgument("node id must not be empty");
  NodeState* node = FindNodeState(record.id);
  if (node == nullptr) {
    if (record.mode == NodeMode::kSchedulable) return OkStatus();
    node = &AddNodeState(record.id);  // A placeholder until it registers.
  }
  if (node->mode != record.mode) ApplyNodeMode(*node, record.mode);
  return OkStatus();
}

void SchedulerCore::ApplyNodeMode(NodeState& node, NodeMode mode) {
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;  // Fewer (or more) nodes can change why a task waits.
  IndexErase(node);
  node.mode = mode;
  IndexInsert(node);
  if (mode != NodeMode::kSchedulable) DropReservationsOn(node.slot);
}

void SchedulerCore::SetUsable(NodeState& node, size_t pos, bool healthy) {
  NodeState::ModelSlice& slice = *node.Slice(node.gpu_model[pos]);
  const int delta = healthy ? 1 : -1;
  slice.capacity += delta;
  if (node.gpu_task[pos] == 0) slice.free += delta;
  if (node.online) total_online_gpus_ += delta;
  node.gpus[pos].healthy = healthy;
  node.any_unhealthy =
      std::any_of(node.gpus.begin(), node.gpus.end(), [](const GpuInfo& g) { return !g.healthy; });
}

Status SchedulerCore::SetGpuHealth(const std::string& node_id, int gpu_index, bool healthy,
                                   const std::string& reason, TimeMicros now) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  const int pos = node->Position(gpu_index);
  if (pos < 0) {
    return NotFound("node " + node_id + " has no GPU " + std::to_string(gpu_index));
  }
  GpuInfo& gpu = node->gpus[static_cast<size_t>(pos)];
  gpu.health_reason = healthy ? std::string() : reason;
  if (gpu.healthy == healthy) return OkStatus();
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;
  IndexErase(*node);
  SetUsable(*node, static_cast<size_t>(pos), healthy);
  IndexInsert(*node);
  RecomputeQuota();
  if (config_.record_events) {
    EmitNodeEvent(Event::Kind::kNodeStateChanged, node_id, now).detail =
        "gpu " + std::to_string(gpu_index) + (healthy ? " healthy" : " unhealthy: " + reason);
  }
  const TaskNumber holder = node->gpu_task[static_cast<size_t>(pos)];
  const Task* t = holder == 0 ? nullptr : tasks_.Find(holder);
  if (!healthy && t != nullptr && t->status == TaskStatus::kRunning && !t->stopping) {
    return StopTask(holder, StopReason::kGpuFailure, -1, now);
  }
  return OkStatus();
}

bool SchedulerCore::AnyUnhealthyGpu(const std::string& node_id) const {
  const NodeState* node = FindNodeState(node_id);
  return node != nullptr && node->any_unhealthy;
}

Status SchedulerCore::SetNodeLabels(const std::string& node_id, Labels labels) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  if (node->labels == labels) return OkStatus();
  auto put = [&](const std::string& key, const std::string& value, bool in) {
    std::string name = key;
    name.push_back('\0');
    name += value;
    auto [it, added] = label_sets_.try_emplace(std::move(name), 0);
    if (added) {
      it->second = index_.NewSet();
      ++label_generation_;
    }
    index_.PutInSet(it->second, node->slot, in);
  };
  for (const auto& [key, value] : node->labels) put(key, value, false);
  for (const auto& [key, value] : labels) put(key, value, true);
  node->labels = std::move(labels);
  node->topology = -1;
  if (!config_.topology_key.empty()) {
    if (auto it = node->labels.find(config_.topology_key); it != node->labels.end()) {
      auto [value, added] =
          topology_values_.try_emplace(it->second, static_cast<int32_t>(topology_values_.size()));
      if (added) {
        topology_.push_back({it->second, *LabelSet(config_.topology_key, it->second), 0});
        topology_ranked_ = false;
        by_topology_.emplace_back();
      }
      node->topology = value->second;
    }
    index_.SetGroup(node->slot, node->topology);
    index_.PutInSet(unlabelled_set_, node->slot, node->topology < 0);
  }
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;  // Filters may answer differently.
  return OkStatus();
}

bool SchedulerCore::SetsOf(const std::vector<std::pair<std::string, std::string>>& selector,
                           SelectorSets* sets) const {
  sets->clear();
  for (const auto& [key, value] : selector) {
    const auto set = LabelSet(key, value);
    if (!set) return false;
    sets->push_back(*set);
  }
  return true;
}

std::optional<PlacementIndex::SetId> SchedulerCore::LabelSet(const std::string& key,
                                                             const std::string& value) const {
  std::string name = key;
  name.push_back('\0');
  name += value;
  auto it = label_sets_.find(name);
  return it == label_sets_.end() ? std::nullopt : std::optional(it->second);
}

const SchedulerCore::SelectorSets* SchedulerCore::ShapeSets(const Shape& shape) const {
  if (shape.sets_generation != label_generation_) {
    shape.sets_found = SetsOf(shape.node_selector, &shape.sets);
    shape.sets_generation = label_generation_;
  }
  return shape.sets_found ? &shape.sets : nullptr;
}

QuotaView SchedulerCore::Quota() const {
  QuotaView v;
  v.total_gpus = total_online_gpus_;
  for (int p = 0; p < kPriorityCount; ++p) {
    v.quota[p] = quota_tree_.node(class_node_[p]).limits.guarantee;
    v.used[p] = quota_tree_.node(class_node_[p]).used;
    v.borrowed[p] = std::max(0, v.used[p] - v.quota[p]);
  }
  for (int p = 0; p < kPriorityCount; ++p) {
    v.lent[p] = std::min(std::max(0, v.quota[p] - v.used[p]), v.borrowed[1 - p]);
  }
  return v;
}

std::vector<GpuView> SchedulerCore::Gpus() const {
  std::vector<const NodeState*> sorted;
  for (const auto& n : nodes_) sorted.push_back(n.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const NodeState* a, const NodeState* b) { return a->id < b->id; });
  std::vector<GpuView> out;
  for (const NodeState* n : sorted) {
    for (size_t i = 0; i < n->gpus.size(); ++i) {
      GpuView g;
      g.node_id = n->id;
      g.index = n->gpus[i].index;
      g.model = n->gpus[i].model;
      g.memory_mb = n->gpus[i].memory_mb;
      g.current_task = n->gpu_task[i];
      g.health_reason = n->gpus[i].health_reason;
      g.status = !n->online            ? GpuStatus::kOffline
                 : !n->gpus[i].healthy ? GpuStatus::kUnhealthy
                 : n->gpu_task[i] != 0 ? GpuStatus::kBusy
                                       : GpuStatus::kIdle;
      out.push_back(std::move(g));
    }
  }
  return out;
}

std::vector<NodeView> SchedulerCore::Nodes() const {
  std::vector<NodeView> out;
  for (const auto& n : nodes_) {
    if (n->gpus.empty() && !n->online && n->address.empty()) continue;  // Placeholder.
    out.push_back(*FindNode(n->id));
  }
  std::sort(out.begin(), out.end(),
            [](const NodeView& a, const NodeView& b) { return a.id < b.id; });
  return out;
}

std::optional<NodeView> SchedulerCore::FindNode(const std::string& node_id) const {
  const NodeState* n = FindNodeState(node_id);
  if (n == nullptr) return std::nullopt;
  NodeView v;
  v.id = n->id;
  v.address = n->address;
  v.online = n->online;
  v.gpu_count = static_cast<int>(n->gpus.size());
  v.free_gpus = n->FreeGpus();
  v.last_heartbeat = n->last_heartbeat;
  v.mode = n->mode;
  v.labels = n->labels;
  v.tasks = static_cast<int>(n->HeldTasks().size());
  v.resources = {n->cpus_milli, n->memory_mb, n->isolation};
  v.allocated_cpus_milli = n->cpus_milli - n->free_cpus_milli;
  v.allocated_memory_mb = n->memory_mb - n->free_memory_mb;
  for (const GpuInfo& g : n->gpus) {
    if (g.link_group < 0 || g.link_group >= kMaxLinkGroups) continue;
    if (v.nvlink_groups.size() <= static_cast<size_t>(g.link_group)) {
      v.nvlink_groups.resize(static_cast<size_t>(g.link_group) + 1);
    }
    v.nvlink_groups[static_cast<size_t>(g.link_group)].push_back(g.index);
  }
  std::erase_if(v.nvlink_groups, [](const std::vector<int>& g) { return g.empty(); });
  return v;
}

}  // namespace dgpu::core
