// The scheduling core's private data structures, shared by the files that implement
// SchedulerCore (see scheduler_core.h for the design). Not part of the core's interface: only
// src/core/*.cc include it.
//
//   scheduler_core.cc  commands and the task life cycle (submit, cancel, finish, node loss)
//   task_pool.cc       task records: the pool, recycling and the cache tuning (prefetching)
//   queues.cc          shape queues, the bypass bound's reservations, queue queries
//   cluster_state.cc   nodes, GPU models, quotas, releasing GPUs, cluster queries
//   pass.cc            the scheduling pass: admission, filtering, best fit, starts
//   reconcile.cc       node registration with reconciliation, restoring saved state
//   invariants.cc      CheckInvariants
//   explain.cc         ExplainPending: why a pending task waits, node by node
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "core/scheduler_core.h"

namespace dgpu::core {

inline constexpr int kMaxGpuCount = 1024;
inline constexpr size_t kMaxTeams = 10000;  // Teams a core tracks, named by limits or by tasks.
// The refusal of a team past kMaxTeams (a submission, or limits for a new team).
Status TooManyTeams();

// Hints: fetch the cache lines of [p, p + bytes) (for writing when `write`).
template <bool write = false>
void PrefetchLines(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, write ? 1 : 0);
}

// The part of a task a start or a finish touches: the end of its spec onwards, up to the end of
// the core's record (see Task).
inline const void* HotPart(const Task* t) { return &t->spec.priority; }
inline constexpr size_t kTaskHotBytes = 192;

inline int PrioIndex(Priority p) { return static_cast<int>(p); }

// A reason that a bypass may be counted against: the task could start once GPUs free up.
inline bool IsTransient(PendingReason r) {
  return r == PendingReason::kNoNodeFits || r == PendingReason::kQuotaExhausted ||
         r == PendingReason::kInsufficientCpu || r == PendingReason::kInsufficientMemory;
}
// A wait for room on some node (GPUs, CPUs or memory), which the starvation guard's reservation
// can end as the node drains.
// Whether every dependency of t is satisfied (none: true).
inline bool AllDependenciesSatisfied(const Task& t) {
  return std::all_of(t.spec.depends_on.begin(), t.spec.depends_on.end(),
                     [](const Dependency& d) { return d.state == DependencyState::kSatisfied; });
}
inline bool WaitsForNodeRoom(PendingReason r) {
  return r == PendingReason::kNoNodeFits || r == PendingReason::kInsufficientCpu ||
         r == PendingReason::kInsufficientMemory;
}

// Pending tasks ordered by (queue_seq, task). Submissions arrive at the back and tasks put back
// arrive at the front, and the head is what leaves, so a sorted deque does nearly all the work
// at its ends with no allocation per task. A task leaving from the middle (cancelled, adopted)
// is marked dead in place, found by binary search, and dropped once it reaches an end; an
// insertion in the middle (restore) moves the shorter side.
class TaskQueue {
 public:
  using Key = std::pair<int64_t, TaskNumber>;  // (queue_seq, task)

  bool empty() const { return live_ == 0; }
  size_t size() const { return live_; }
  // The first live entry and its task; the queue must not be empty.
  Key front() const { return items_.front().key; }
  Task& front_task() const { return *items_.front().task; }

  void Insert(int64_t seq, Task* task) {
    const Key key{seq, task->id};
    if (items_.empty() || items_.back().key < key) {
      items_.push_back({key, task, true});
    } else if (key < items_.front().key) {
      items_.push_front({key, task, true});
    } else {
      auto it = LowerBound(key);
      if (it != items_.end() && it->key == key) {
        if (it->live) return;
        it->task = task;
        it->live = true;
      } else {
        items_.insert(it, {key, task, true});
      }
    }
    ++live_;
  }

  // Returns whether the entry was there.
  bool Erase(int64_t seq, TaskNumber id) {
    const Key key{seq, id};
    if (live_ == 0) return false;
    if (items_.front().key == key) {
      items_.pop_front();
    } else {
      auto it = LowerBound(key);
      if (it == items_.end() || it->key != key || !it->live) return false;
      it->live = false;
    }
    --live_;
    // Keep both ends live, so that front() and the back insertion check stay O(1).
    while (!items_.empty() && !items_.front().live) items_.pop_front();
    while (!items_.empty() && !items_.back().live) items_.pop_back();
    return true;
  }

  // The task k places behind the head (dead entries count), or nullptr.
  const Task* Peek(size_t k) const { return k < items_.size() ? items_[k].task : nullptr; }
  // The live tasks behind the head, in order, until fn(Task&) returns false.
  template <typename Fn>
  void ForEachBehindHead(Fn&& fn) const {
    for (size_t i = 1; i < items_.size(); ++i) {
      if (items_[i].live && !fn(*items_[i].task)) return;
    }
  }
  // A hint: fetches the entry k places behind the head (written long ago, at submission).
  void PrefetchEntry(size_t k) const {
    if (k < items_.size()) __builtin_prefetch(&items_[k]);
  }

  // Calls fn(Key) for every entry in queue order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Item& i : items_) {
      if (i.live) fn(i.key);
    }
  }

 private:
  struct Item {
    Key key;
    Task* task;  // Pending tasks stay in the core's pool, so the pointer stays valid.
    bool live;
  };
  std::deque<Item>::iterator LowerBound(const Key& key) {
    return std::lower_bound(items_.begin(), items_.end(), key,
                            [](const Item& i, const Key& k) { return i.key < k; });
  }

  std::deque<Item> items_;  // Sorted by key; the first and last are live.
  size_t live_ = 0;
};

// What makes a shape: tasks of one priority with equal keys are admitted by the same quota nodes
// and fit the same nodes, so one test of the head answers for all. The fields are listed here
// only (a field a new filter reads joins them): Fields (what hashing and equality use), Of (from
// a task) and the owning copy's constructor. The key of the shapes map is a view (strings by
// reference) into the shape itself; a lookup's, into the task's spec.
template <typename Model, typename Selector>
struct ShapeKeyOf {
  int team = 0;  // Index in SchedulerCore::teams_.
  bool preemptible = true;
  Model model{};
  int gpu_count = 0;       // In all (a gang's members together).
  int nodes = 1;           // A gang's members (TaskSpec::nodes).
  int64_t cpus_milli = 0;  // TaskSpec::cpus_milli and memory_mb: as asked (0: the GPUs' share).
  int64_t memory_mb = 0;
  Selector node_selector{};  // TaskSpec::node_selector (in a view: its address).

  using NodeSelector = std::vector<std::pair<std::string, std::string>>;
  static const NodeSelector& Deref(const NodeSelector& s) { return s; }
  static const NodeSelector& Deref(const NodeSelector* s) { return *s; }
  auto Fields() const {
    return std::tuple<int, bool, std::string_view, int, int, int64_t, int64_t, const NodeSelector&>(
        team, preemptible, model, gpu_count, nodes, cpus_milli, memory_mb, Deref(node_selector));
  }
};
using ShapeKeyView =
    ShapeKeyOf<std::string_view, const std::vector<std::pair<std::string, std::string>>*>;
using ShapeKey = ShapeKeyOf<std::string, std::vector<std::pair<std::string, std::string>>>;

inline ShapeKeyView ShapeKeyFor(int team, const TaskSpec& spec) {
  return {team,       spec.preemptible, spec.gpu_model, spec.gpu_count,
          spec.nodes, spec.cpus_milli,  spec.memory_mb, &spec.node_selector};
}
inline ShapeKeyView KeyViewOf(const ShapeKey& k) {
  return {k.team,  k.preemptible, k.model,     k.gpu_count,
          k.nodes, k.cpus_milli,  k.memory_mb, &k.node_selector};
}
inline ShapeKey Owned(const ShapeKeyView& k) {
  return {k.team,  k.preemptible, std::string(k.model), k.gpu_count,
          k.nodes, k.cpus_milli,  k.memory_mb,          *k.node_selector};
}
struct ShapeKeyHash {
  size_t operator()(const ShapeKeyView& k) const { return absl::HashOf(k.Fields()); }
};
struct ShapeKeyEq {
  bool operator()(const ShapeKeyView& a, const ShapeKeyView& b) const {
    return a.Fields() == b.Fields();
  }
};

// Pending tasks of one priority with the same key, in queue order. A shape stays (empty) when
// its last task leaves, since the same shape usually comes back soon; empty shapes are dropped
// once they outnumber the others.
struct SchedulerCore::Shape : ShapeKey {
  explicit Shape(const ShapeKeyView& key) : ShapeKey(Owned(key)), per_node(gpu_count / nodes) {}
  int per_node = 0;  // GPUs per member: gpu_count / nodes.
  TaskQueue tasks;
  PendingReason reason = PendingReason::kQueued;  // Why its head did not start last pass.
  TaskNumber reserved_for = 0;  // reason kReservedFor: whose planned start holds it back.
  // ModelsFor(model), kept while no new model appears (model_generation_ unchanged).
  const std::vector<int>* models = nullptr;
  uint64_t models_generation = 0;
  // The index's sets of node_selector's labels (SchedulerCore::ShapeSets), kept while no new
  // label appears (label_generation_ unchanged); sets_found: every label is on some node.
  mutable SelectorSets sets;
  mutable uint64_t sets_generation = 0;
  mutable bool sets_found = false;
  int active_at = -1;  // Position in PriorityQueue::active while it has tasks; -1 when empty.
  // With borrowing: the pass in which its head was tried by the guaranteed phase (the borrowing
  // phase skips it then).
  uint64_t tried_in_pass = 0;
  // The last time no node had room for this shape: the core's change counter then, the reason
  // Diagnose gave and the nodes that were excluded. See SchedulerCore::StillNoRoom.
  uint64_t no_room_seq = 0;  // 0: not known.
  PendingReason no_room_reason = PendingReason::kNoNodeFits;
  uint8_t no_room_excluded_count = 0;
  uint32_t no_room_excluded[2] = {0, 0};

  void RememberNoRoom(uint64_t seq, const std::vector<uint32_t>& excluded, PendingReason r) {
    if (excluded.size() > 2) return;
    no_room_seq = seq;
    no_room_reason = r;
    no_room_excluded_count = static_cast<uint8_t>(excluded.size());
    std::copy(excluded.begin(), excluded.end(), no_room_excluded);
  }
};

struct SchedulerCore::PriorityQueue {
  // Every shape, by key (a view into the shape); a pending task also points at its own
  // (TaskRecord::shape).
  absl::flat_hash_map<ShapeKeyView, std::unique_ptr<Shape>, ShapeKeyHash, ShapeKeyEq> shapes;
  // The shapes that have tasks, in no particular order: what a pass iterates over.
  std::vector<Shape*> active;
  Shape* last_used = nullptr;  // The shape of the last submission: most are like the one before.
  // Scratch for a pass (merge of shape heads, reserved nodes to skip), kept to avoid
  // allocations per pass.
  std::vector<std::pair<TaskQueue::Key, Shape*>> heads;
  std::vector<std::tuple<double, TaskQueue::Key, Shape*>> fair_heads;  // Borrowing phase.
  std::vector<uint32_t> excluded;
  // Starvation guard: how often the oldest pending task was overtaken.
  TaskNumber oldest = 0;
  int bypassed = 0;
  bool holding = false;

  bool empty() const { return active.empty(); }

  Shape& ShapeFor(int team, const TaskSpec& spec) {
    const ShapeKeyView key = ShapeKeyFor(team, spec);
    if (last_used != nullptr && ShapeKeyEq{}(KeyViewOf(*last_used), key)) return *last_used;
    auto it = shapes.find(key);
    Shape* s = it == shapes.end() ? nullptr : it->second.get();
    if (s == nullptr) {
      if (shapes.size() >= 2 * active.size() + 64) DropEmptyShapes();
      auto shape = std::make_unique<Shape>(key);
      s = shape.get();
      shapes.emplace(KeyViewOf(*s), std::move(shape));
    }
    last_used = s;
    return *s;
  }
  Shape* FindShape(int team, const TaskSpec& spec) const {
    auto it = shapes.find(ShapeKeyFor(team, spec));
    return it == shapes.end() ? nullptr : it->second.get();
  }
  void Insert(Shape& shape, int64_t seq, Task* task) {
    shape.tasks.Insert(seq, task);
    if (shape.active_at < 0 && !shape.tasks.empty()) {
      shape.active_at = static_cast<int>(active.size());
      active.push_back(&shape);
    }
  }
  // Returns whether the entry was there.
  bool Erase(Shape& shape, int64_t seq, TaskNumber id) {
    if (!shape.tasks.Erase(seq, id)) return false;
    if (shape.tasks.empty() && shape.active_at >= 0) {
      Shape* last = active.back();
      last->active_at = shape.active_at;
      active[static_cast<size_t>(shape.active_at)] = last;
      active.pop_back();
      shape.active_at = -1;
    }
    return true;
  }

 private:
  // No task points at an empty shape, so they can go.
  void DropEmptyShapes() {
    for (auto it = shapes.begin(); it != shapes.end();) {
      if (it->second->tasks.empty()) {
        shapes.erase(it++);
      } else {
        ++it;
      }
    }
    last_used = nullptr;
  }
};

struct alignas(64) SchedulerCore::NodeState {
  struct ModelSlice {
    int model = 0;
    int capacity = 0;
    int free = 0;
    // With borrowing: GPUs of this model held by tasks that may be preempted (borrowed,
    // preemptible, running, not stopping, on this node only), per priority class, and the keys
    // the node has in the reclaim indexes (free + those of class 0, of class 1, of both).
    int eligible[kPriorityCount] = {0, 0};
    int reclaim_key[3] = {0, 0, 0};
  };
  // What a start or a release reads comes first, with the per-GPU arrays inline for nodes of up
  // to 8 GPUs: three adjacent cache lines of the node (it is line-aligned) instead of several
  // separate heap blocks.
  uint32_t slot = 0;
  bool online = false;
  bool indices_are_positions = true;  // gpus[i].index == i for every i.
  bool any_unclaimed = false;         // !unclaimed.empty(), without reading it.
  bool any_unhealthy = false;         // Some gpus[i].healthy is false, without reading them.
  bool reports_resources = false;     // ReportsResources(), without reading the counts.
  // Highest NVLink group number of its GPUs plus 1 (0: none, and gpu_link is empty).
  int16_t link_groups = 0;
  // In the placement index: online and schedulable (see Placeable). Only such nodes get tasks.
  bool in_index = false;
  NodeMode mode = NodeMode::kSchedulable;
  uint64_t rank = 0;  // Follows id order; see AddNodeState.
  std::string id;
  absl::InlinedVector<ModelSlice, 1> slices;    // Per model present on the node.
  absl::InlinedVector<TaskNumber, 8> gpu_task;  // Task holding each GPU position; 0 = free.
  absl::InlinedVector<int, 8> gpu_model;        // Model id per GPU position.
  // NVLink group per GPU position (GpuInfo::link_group; kNoLinkGroup: none); empty when the node
  // has no group.
  absl::InlinedVector<int16_t, 8> gpu_link;
  // CPUs (thousandths) and memory (MiB) it offers (NodeResources; 0: not reported, nothing
  // counted) and what its tasks have not been given (negative when it registered again with
  // less than its tasks hold).
  int64_t cpus_milli = 0;
  int64_t memory_mb = 0;
  int64_t free_cpus_milli = 0;
  int64_t free_memory_mb = 0;
  std::string address;
  TimeMicros last_heartbeat = 0;
  // Sorted by index. Slices count only healthy GPUs: an unhealthy one is neither capacity nor
  // free, and does not count in the quota totals (HealthyGpus).
  std::vector<GpuInfo> gpus;
  Labels labels;
  // Its value of CoreConfig::topology_key, as an index in topology_values_; -1: no such label.
  int32_t topology = -1;
  std::string isolation;  // NodeResources::isolation.
  // Preemptions under way here: GPUs, CPUs and memory kept for tasks waiting for victims, and
  // those of victims that are stopping (they will be free once their agents confirm).
  int promised = 0;
  int incoming = 0;
  int64_t promised_cpus_milli = 0;
  int64_t promised_memory_mb = 0;
  int64_t incoming_cpus_milli = 0;
  int64_t incoming_memory_mb = 0;
  // Restored running tasks waiting for this node to register again: they hold no GPU position
  // yet. Every other task held here (running or stopping) holds positions in gpu_task.
  std::vector<TaskNumber> unclaimed;

  void AddUnclaimed(TaskNumber id) {
    unclaimed.push_back(id);
    any_unclaimed = true;
  }
  void DropUnclaimed(TaskNumber id) {
    if (!any_unclaimed) return;
    auto it = std::find(unclaimed.begin(), unclaimed.end(), id);
    if (it != unclaimed.end()) unclaimed.erase(it);
    any_unclaimed = !unclaimed.empty();
  }
  void ClearUnclaimed() {
    unclaimed.clear();
    any_unclaimed = false;
  }
  // Tasks held here, each once, in no particular order.
  std::vector<TaskNumber> HeldTasks() const {
    std::vector<TaskNumber> held(unclaimed.begin(), unclaimed.end());
    for (TaskNumber t : gpu_task) {
      if (t != 0 && std::find(held.begin(), held.end(), t) == held.end()) held.push_back(t);
    }
    return held;
  }
  bool HoldsAny() const {
    return any_unclaimed ||
           std::any_of(gpu_task.begin(), gpu_task.end(), [](TaskNumber t) { return t != 0; });
  }
  bool HasTask(TaskNumber id) const {
    return std::find(gpu_task.begin(), gpu_task.end(), id) != gpu_task.end() ||
           std::find(unclaimed.begin(), unclaimed.end(), id) != unclaimed.end();
  }

  int Position(int gpu_index) const {
    // Agents report their GPUs as 0..n-1, so the position is usually the index itself: answer
    // without touching the GPU records.
    if (indices_are_positions) {
      return gpu_index >= 0 && gpu_index < static_cast<int>(gpu_task.size()) ? gpu_index : -1;
    }
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (gpus[i].index == gpu_index) return static_cast<int>(i);
    }
    return -1;
  }
  bool Placeable() const { return online && mode == NodeMode::kSchedulable; }
  bool ReportsResources() const { return cpus_milli > 0 || memory_mb > 0; }
  // What a member of `spec` is given here of a resource the node offers `offered` of: its request,
  // or its GPUs' share of the node; 0 where the node does not report it.
  int64_t Given(int64_t asked, int64_t offered, const TaskSpec& spec) const {
    if (offered <= 0) return 0;
    if (asked > 0) return asked;
    return gpus.empty() ? 0 : offered * GpusPerNode(spec) / static_cast<int64_t>(gpus.size());
  }
  int64_t GivenCpus(const TaskSpec& s) const { return Given(s.cpus_milli, cpus_milli, s); }
  int64_t GivenMemory(const TaskSpec& s) const { return Given(s.memory_mb, memory_mb, s); }
  // Why a member of `spec` whose GPUs fit here does not fit for its CPUs or memory (kNone: it
  // fits). `empty`: as if nothing ran here.
  PendingReason ResourceShortage(const TaskSpec& s, bool empty = false) const {
    if (cpus_milli > 0 && GivenCpus(s) > (empty ? cpus_milli : free_cpus_milli)) {
      return PendingReason::kInsufficientCpu;
    }
    if (memory_mb > 0 && GivenMemory(s) > (empty ? memory_mb : free_memory_mb)) {
      return PendingReason::kInsufficientMemory;
    }
    return PendingReason::kNone;
  }
  // What it has free for the placement index (what it does not report is unlimited): its free
  // CPUs and memory, and the most GPUs whose share of them fits in what is free (Given).
  PlacementIndex::Room Room() const {
    using I = PlacementIndex;
    return {cpus_milli > 0 ? I::Clamp(free_cpus_milli) : I::kUnlimited,
            memory_mb > 0 ? I::Clamp(free_memory_mb) : I::kUnlimited,
            SharesFree(cpus_milli, free_cpus_milli), SharesFree(memory_mb, free_memory_mb),
            Linked() ? MostFreeLinked() : I::kUnlimited};
  }
  bool Linked() const { return link_groups > 0; }
  // The most free usable GPUs inside one NVLink group (a GPU in none is a group of its own).
  int32_t MostFreeLinked() const {
    std::array<int16_t, kMaxLinkGroups> free{};
    int32_t most = 0;
    for (size_t pos = 0; pos < gpu_task.size(); ++pos) {
      if (gpu_task[pos] != 0 || !Usable(pos)) continue;
      const int g = gpu_link[pos];
      most = std::max<int32_t>(most, g < 0 ? 1 : ++free[static_cast<size_t>(g)]);
    }
    return most;
  }
  // The largest k with offered * k / gpus <= free (integer division, as Given): k < (free + 1) *
  // gpus / offered. -1 where not even nothing fits.
  int32_t SharesFree(int64_t offered, int64_t free) const {
    if (offered <= 0) return PlacementIndex::kUnlimited;
    if (free < 0) return -1;
    if (gpus.empty()) return PlacementIndex::kUnlimited;
    const auto n = static_cast<int64_t>(gpus.size());
    return PlacementIndex::Clamp(((free + 1) * n + offered - 1) / offered - 1);
  }
  // What a member of `spec` needs of a node's Room: its own requests, or its GPUs' share.
  static PlacementIndex::Room Need(const TaskSpec& s) {
    using I = PlacementIndex;
    const int32_t k = I::Clamp(GpusPerNode(s));
    return {I::Clamp(std::max<int64_t>(s.cpus_milli, 0)),
            I::Clamp(std::max<int64_t>(s.memory_mb, 0)), s.cpus_milli > 0 ? 0 : k,
            s.memory_mb > 0 ? 0 : k, 0};
  }
  // Whether the GPU at position pos may be given to a task (whatever it holds now).
  bool Usable(size_t pos) const { return !any_unhealthy || gpus[pos].healthy; }
  int HealthyGpus() const {
    int n = 0;
    for (const auto& s : slices) n += s.capacity;
    return n;
  }
  ModelSlice* Slice(int model) {
    for (auto& s : slices) {
      if (s.model == model) return &s;
    }
    return nullptr;
  }
  const ModelSlice* Slice(int model) const { return const_cast<NodeState*>(this)->Slice(model); }
  int FreeGpus() const {
    int n = 0;
    for (const auto& s : slices) n += s.free;
    return n;
  }
  PlacementIndex::Entry Entry() const { return {&rank, slot}; }
};

template <typename Ok>
bool SchedulerCore::EnoughNodesWhere(const Task& t, const std::vector<int>& models, Ok&& ok) const {
  const int per_node = GpusPerNode(t.spec);
  int found = 0;
  for (const auto& ptr : nodes_) {
    NodeState& n = *ptr;
    if (!n.in_index || !ok(static_cast<const NodeState&>(n))) continue;
    for (int m : models) {
      const NodeState::ModelSlice* s = n.Slice(m);
      if (s != nullptr && s->capacity >= per_node) {
        if (++found >= t.spec.nodes) return true;
        break;
      }
    }
  }
  return false;
}

}  // namespace dgpu::core
