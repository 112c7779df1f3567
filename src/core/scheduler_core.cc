#include "core/scheduler_core.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <memory>
#include <new>
#include <string_view>

#include "absl/container/inlined_vector.h"

namespace dgpu::core {
namespace {

constexpr int kMaxGpuCount = 1024;

// Hints: fetch the cache lines of [p, p + bytes) (for writing when `write`).
template <bool write = false>
void PrefetchLines(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, write ? 1 : 0);
}

// The part of a task a start or a finish touches: the end of its spec onwards, up to the end of
// the core's record (see Task).
const void* HotPart(const Task* t) { return &t->spec.priority; }
constexpr size_t kTaskHotBytes = 192;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool ContainsIgnoreCase(std::string_view hay, std::string_view needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
  return it != hay.end();
}

int PrioIndex(Priority p) { return static_cast<int>(p); }

// A reason that a bypass may be counted against: the task could start once GPUs free up.
bool IsTransient(PendingReason r) {
  return r == PendingReason::kNoNodeFits || r == PendingReason::kQuotaExhausted;
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

}  // namespace

// Pending tasks of one priority with the same (model, GPU count), in queue order. A shape
// stays (empty) when its last task leaves, since the same shape usually comes back soon; empty
// shapes are dropped once they outnumber the others.
struct SchedulerCore::Shape {
  std::string model;
  int gpu_count = 0;
  TaskQueue tasks;
  PendingReason reason = PendingReason::kQueued;  // Why its head did not start last pass.
  // ModelsFor(model), kept while no new model appears (model_generation_ unchanged).
  const std::vector<int>* models = nullptr;
  uint64_t models_generation = 0;
  int active_at = -1;  // Position in PriorityQueue::active while it has tasks; -1 when empty.
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

// Orders shape keys, and finds them from a task's spec without building a key string.
struct ShapeKeyLess {
  using is_transparent = void;
  using Key = std::pair<std::string, int>;
  using View = std::pair<std::string_view, int>;
  static View AsView(const Key& k) { return {k.first, k.second}; }
  bool operator()(const Key& a, const Key& b) const { return a < b; }
  bool operator()(const Key& a, const View& b) const { return AsView(a) < b; }
  bool operator()(const View& a, const Key& b) const { return a < AsView(b); }
};

struct SchedulerCore::PriorityQueue {
  // Every shape, by key; a pending task also points at its own (TaskRecord::shape).
  std::map<std::pair<std::string, int>, std::unique_ptr<Shape>, ShapeKeyLess> shapes;
  // The shapes that have tasks, in no particular order: what a pass iterates over.
  std::vector<Shape*> active;
  Shape* last_used = nullptr;  // The shape of the last submission: most are like the one before.
  // Scratch for a pass (merge of shape heads, reserved nodes to skip), kept to avoid
  // allocations per pass.
  std::vector<std::pair<TaskQueue::Key, Shape*>> heads;
  std::vector<uint32_t> excluded;
  // Starvation guard: how often the oldest pending task was overtaken.
  TaskNumber oldest = 0;
  int bypassed = 0;
  bool holding = false;
  int reserved_slot = -1;  // Node kept for the held task; the other priority may not use it.

  bool empty() const { return active.empty(); }

  Shape& ShapeFor(const TaskSpec& spec) {
    if (last_used != nullptr && last_used->gpu_count == spec.gpu_count &&
        last_used->model == spec.gpu_model) {
      return *last_used;
    }
    Shape* s = FindShape(spec);
    if (s == nullptr) {
      if (shapes.size() >= 2 * active.size() + 64) DropEmptyShapes();
      auto& slot = shapes[{spec.gpu_model, spec.gpu_count}];
      slot = std::make_unique<Shape>();
      slot->model = spec.gpu_model;
      slot->gpu_count = spec.gpu_count;
      s = slot.get();
    }
    last_used = s;
    return *s;
  }
  Shape* FindShape(const TaskSpec& spec) const {
    auto it = shapes.find(ShapeKeyLess::View{spec.gpu_model, spec.gpu_count});
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
      it = it->second->tasks.empty() ? shapes.erase(it) : std::next(it);
    }
    last_used = nullptr;
  }
};

struct alignas(64) SchedulerCore::NodeState {
  struct ModelSlice {
    int model = 0;
    int capacity = 0;
    int free = 0;
  };
  // What a start or a release reads comes first, with the per-GPU arrays inline for nodes of up
  // to 8 GPUs: three adjacent cache lines of the node (it is line-aligned) instead of several
  // separate heap blocks.
  uint32_t slot = 0;
  bool online = false;
  bool indices_are_positions = true;  // gpus[i].index == i for every i.
  bool any_unclaimed = false;         // !unclaimed.empty(), without reading it.
  uint64_t rank = 0;                  // Follows id order; see AddNodeState.
  std::string id;
  absl::InlinedVector<ModelSlice, 1> slices;    // Per model present on the node.
  absl::InlinedVector<TaskNumber, 8> gpu_task;  // Task holding each GPU position; 0 = free.
  absl::InlinedVector<int, 8> gpu_model;        // Model id per GPU position.
  std::string address;
  TimeMicros last_heartbeat = 0;
  std::vector<GpuInfo> gpus;
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
  ModelSlice* Slice(int model) {
    for (auto& s : slices) {
      if (s.model == model) return &s;
    }
    return nullptr;
  }
  int FreeGpus() const {
    int n = 0;
    for (const auto& s : slices) n += s.free;
    return n;
  }
  PlacementIndex::Entry Entry() const { return {&rank, slot}; }
};

SchedulerCore::SchedulerCore(CoreConfig config) : config_(config) {
  for (auto& q : queues_) q = std::make_unique<PriorityQueue>();
  RecomputeQuota();
}

SchedulerCore::~SchedulerCore() = default;

SchedulerCore::TaskRecord* SchedulerCore::TaskPool::New() {
  if (!free_.empty()) {
    TaskRecord* t = free_.back();
    free_.pop_back();
    return t;
  }
  if (used_in_last_ == kChunk) {
    void* memory = std::aligned_alloc(kChunkBytes, kChunkBytes);
    if (memory == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    (void)madvise(memory, kChunkBytes, MADV_HUGEPAGE);  // A hint; without huge pages, 4 KiB ones.
#endif
    auto* records = static_cast<TaskRecord*>(memory);
    std::uninitialized_default_construct_n(records, kChunk);
    chunks_.push_back(records);
    used_in_last_ = 0;
  }
  return &chunks_.back()[used_in_last_++];
}

SchedulerCore::TaskPool::~TaskPool() {
  for (TaskRecord* chunk : chunks_) {
    std::destroy_n(chunk, kChunk);
    std::free(chunk);
  }
}

void SchedulerCore::TaskPool::Delete(TaskRecord* t) {
  // The allocation's block (and the GPU list inside it) stays with the slot for its next start,
  // moved aside without reading it: it was last touched when the task started.
  if (!t->allocation.empty()) t->spare_allocation = std::move(t->allocation);
  t->allocation.clear();
  // Every member but the spec back to its default (keep in step with Task). The spec is left as
  // it is: Submit and Restore assign all of it. It lies on cache lines that a start and a finish
  // do not touch, so they are fetched now, for writing, instead of being read and destroyed:
  // the next submission most likely reuses this record and then finds them in cache.
  t->error.clear();
  t->created_at = 0;
  t->id = 0;
  t->queue_seq = 0;
  t->started_at = 0;
  t->finished_at = 0;
  t->attempts = 0;
  t->exit_code = 0;
  t->status = TaskStatus::kPending;
  t->stopping = false;
  t->stop_reason = StopReason::kNone;
  t->node_slot = kNoSlot;
  t->shape = nullptr;
  PrefetchLines<true>(&t->spec, sizeof(TaskSpec));
  free_.push_back(t);
}

SchedulerCore::TaskRecord* SchedulerCore::NewTask(TaskNumber id) {
  TaskRecord* t = task_pool_.New();
  t->id = id;
  tasks_.Insert(id, t);
  return t;
}

// ------------------------------------------------------------------------------------------
// Helpers

void SchedulerCore::Emit(const Task& t) {
  if (!config_.record_changes) return;
  Change c;
  c.kind = Change::Kind::kTaskUpsert;
  c.task = t;
  changes_.push_back(std::move(c));
}

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

std::vector<int> SchedulerCore::MatchModels(const std::string& wanted) const {
  std::vector<int> out;
  for (size_t m = 0; m < models_.size(); ++m) {
    if (wanted.empty() || EqualsIgnoreCase(models_[m], wanted)) out.push_back(static_cast<int>(m));
  }
  if (out.empty() && !wanted.empty()) {
    // "V100" matches "Tesla V100-SXM2-32GB" when no model is named exactly so.
    for (size_t m = 0; m < models_.size(); ++m) {
      if (ContainsIgnoreCase(models_[m], wanted)) out.push_back(static_cast<int>(m));
    }
  }
  return out;
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
    it = model_match_cache_.emplace(wanted, MatchModels(wanted)).first;
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

void SchedulerCore::RecomputeQuota() {
  int online = static_cast<int>(std::lround(total_online_gpus_ * config_.online_percent));
  online = std::clamp(online, 0, total_online_gpus_);
  quota_[PrioIndex(Priority::kHigh)] = online;
  quota_[PrioIndex(Priority::kLow)] = total_online_gpus_ - online;
}

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
  if (q.oldest == t.id) {
    q.oldest = 0;
    q.bypassed = 0;
    q.holding = false;
    SetReservation(q, -1);
  }
}

void SchedulerCore::SetReservation(PriorityQueue& q, int slot) {
  // The other priority sees a different set of nodes: another pass may find more.
  if (q.reserved_slot != slot) pass_needed_ = true;
  q.reserved_slot = slot;
}

void SchedulerCore::StartTask(Task& t, uint32_t slot, int model, TimeMicros now) {
  // The node was chosen just now and is likely not in cache: fetch it first and do what does not
  // need it (the task's record, the allocation's buffers, the decision) while it comes.
  NodeState& node = *nodes_[slot];
  PrefetchLines<true>(&node, kNodeHotBytes);
  Dequeue(t);
  auto& record = static_cast<TaskRecord&>(t);
  const int count = t.spec.gpu_count;
  t.status = TaskStatus::kRunning;
  record.node_slot = slot;
  t.attempts++;
  t.started_at = now;
  t.error.clear();
  used_[PrioIndex(t.spec.priority)] += count;
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
  const size_t positions = node.gpu_task.size();
  for (size_t pos = 0; pos < positions && std::ssize(na.gpu_indices) < count; ++pos) {
    if (node.gpu_task[pos] == 0 && node.gpu_model[pos] == model) {
      node.gpu_task[pos] = t.id;
      na.gpu_indices.push_back(node.indices_are_positions ? static_cast<int>(pos)
                                                          : node.gpus[pos].index);
    }
  }
  auto* slice = node.Slice(model);
  const int old_free = slice->free;
  slice->free -= count;
  if (node.online) index_.Move(model, node.Entry(), old_free, slice->free);
  d.node_id = node.id;
  d.gpu_indices.assign(na.gpu_indices.begin(), na.gpu_indices.end());
  Emit(t);
}

void SchedulerCore::ReleaseGpus(Task& t) {
  pass_needed_ = true;
  const uint32_t slot = static_cast<TaskRecord&>(t).node_slot;
  if (t.allocation.size() == 1 && slot < nodes_.size()) {
    // node_slot is set with the allocation and names its node (CheckInvariants): no need to read
    // the allocation, the node knows which GPUs the task holds.
    ReleaseOnNode(*nodes_[slot], t.id);
  } else {
    for (const auto& na : t.allocation) {
      if (NodeState* node = FindNodeState(na.node_id)) ReleaseOnNode(*node, t.id);
    }
  }
  used_[PrioIndex(t.spec.priority)] -= t.spec.gpu_count;
  t.stopping = false;
  t.stop_reason = StopReason::kNone;
}

void SchedulerCore::ReleaseOnNode(NodeState& node, TaskNumber id) {
  node.DropUnclaimed(id);
  // A task's GPUs on one node share one model: one index update per node.
  NodeState::ModelSlice* slice = nullptr;
  int freed = 0;
  for (size_t pos = 0; pos < node.gpu_task.size(); ++pos) {
    if (node.gpu_task[pos] != id) continue;
    node.gpu_task[pos] = 0;
    slice = node.Slice(node.gpu_model[pos]);
    slice->free++;
    freed++;
  }
  if (slice != nullptr && node.online) {
    index_.Move(slice->model, node.Entry(), slice->free - freed, slice->free);
    // Shapes of this model asking for more than the node had free, and at most what it has now,
    // may have room again.
    auto& seqs = room_seq_[static_cast<size_t>(slice->model)];
    if (seqs.size() <= static_cast<size_t>(slice->free)) seqs.resize(slice->free + 1, 0);
    const uint64_t seq = ++change_seq_;
    for (int k = slice->free - freed + 1; k <= slice->free; ++k) seqs[k] = seq;
  }
}

bool SchedulerCore::StillNoRoom(const Shape& shape, const std::vector<int>& models,
                                const std::vector<uint32_t>& excluded) const {
  const uint64_t seen = shape.no_room_seq;
  if (seen == 0 || structure_seq_ > seen) return false;
  // Nodes excluded then may not be now: only a superset of them is as restrictive.
  for (uint8_t i = 0; i < shape.no_room_excluded_count; ++i) {
    if (std::find(excluded.begin(), excluded.end(), shape.no_room_excluded[i]) == excluded.end()) {
      return false;
    }
  }
  const auto k = static_cast<size_t>(shape.gpu_count);
  for (int m : models) {
    const auto& seqs = room_seq_[static_cast<size_t>(m)];
    if (k < seqs.size() && seqs[k] > seen) return false;
  }
  return true;
}

void SchedulerCore::RequeueOrFail(Task& t, TimeMicros now, std::string_view error) {
  ReleaseGpus(t);
  running_count_[PrioIndex(t.spec.priority)]--;
  if (t.attempts >= config_.max_attempts) {
    t.status = TaskStatus::kFailed;
    t.error = std::string(error);
    t.exit_code = -1;
    t.finished_at = now;
  } else {
    t.status = TaskStatus::kPending;
    t.allocation.clear();
    static_cast<TaskRecord&>(t).node_slot = kNoSlot;
    t.error = std::string(error);  // Why it was put back; cleared when it starts again.
    t.queue_seq = next_front_seq_--;
    Enqueue(t);
  }
  Emit(t);
}

// ------------------------------------------------------------------------------------------
// Commands

StatusOr<TaskNumber> SchedulerCore::Submit(const TaskSpec& spec, TimeMicros now) {
  if (spec.gpu_count < 1 || spec.gpu_count > kMaxGpuCount) {
    return InvalidArgument("gpu_count must be between 1 and " + std::to_string(kMaxGpuCount));
  }
  if (spec.command.empty()) return InvalidArgument("command must not be empty");
  if (spec.priority != Priority::kHigh && spec.priority != Priority::kLow) {
    return InvalidArgument("priority must be high or low");
  }
  if (spec.timeout_seconds < 0) return InvalidArgument("timeout_seconds must not be negative");

  TaskRecord& t = *NewTask(next_number_++);
  // The allocation buffers its start will reuse were last touched when the record's previous
  // task started; a task that starts soon after it is submitted finds them in cache (queue
  // heads fetch them for the others, see PrefetchQueued).
  if (!t.spare_allocation.empty()) __builtin_prefetch(t.spare_allocation.data(), 1);
  t.spec = spec;
  t.status = TaskStatus::kPending;
  t.queue_seq = next_back_seq_++;
  t.created_at = now;
  Enqueue(t);
  Emit(t);
  return t.id;
}

Status SchedulerCore::Cancel(TaskNumber id, TimeMicros now) {
  pass_needed_ = true;
  TaskRecord* found = tasks_.Find(id);
  if (found == nullptr) return NotFound(FormatTaskId(id) + " not found");
  Task& t = *found;
  if (IsFinished(t.status)) {
    return FailedPrecondition(FormatTaskId(id) + " already finished with status " +
                              std::string(ToString(t.status)));
  }
  if (t.status == TaskStatus::kPending) {
    Dequeue(t);
  } else {
    // Running: keep its GPUs until the agent confirms the stop.
    running_count_[PrioIndex(t.spec.priority)]--;
    t.stopping = true;
    t.stop_reason = StopReason::kCancel;
    for (const auto& na : t.allocation) {
      decisions_.push_back(
          Decision{Decision::Kind::kStop, t.id, na.node_id, {}, StopReason::kCancel});
    }
  }
  t.status = TaskStatus::kCancelled;
  t.error = "cancelled";
  t.finished_at = now;
  Emit(t);
  return OkStatus();
}

Status SchedulerCore::RegisterNode(const std::string& node_id, const std::string& address,
                                   const std::vector<GpuInfo>& gpus,
                                   const std::vector<RunningReport>& running,
                                   const std::vector<FinishReport>& finished, TimeMicros now) {
  if (node_id.empty()) return InvalidArgument("node id must not be empty");
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].index < 0) return InvalidArgument("gpu index must not be negative");
    if (gpus[i].model.empty()) return InvalidArgument("gpu model must not be empty");
    for (size_t j = 0; j < i; ++j) {
      if (gpus[j].index == gpus[i].index) {
        return InvalidArgument("gpu index " + std::to_string(gpus[i].index) + " is listed twice");
      }
    }
  }

  pass_needed_ = true;
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) node = &AddNodeState(node_id);

  // 1. Record finishes first, so that a task that ended while the agent was away is not lost.
  for (const auto& f : finished) {
    TaskRecord* found = tasks_.Find(f.task);
    if (found == nullptr) continue;
    Task& t = *found;
    bool held_here = (t.status == TaskStatus::kRunning || t.stopping) && !t.allocation.empty() &&
                     t.allocation[0].node_id == node_id;
    if (held_here) {
      (void)ApplyFinish(t, f, now);
    } else if (t.status == TaskStatus::kPending) {
      // It ran to its end there although it is queued here: it was put back when this node
      // vanished, or a previous leader started it and failed before that start reached this
      // scheduler. Agents run only what a leader ordered, so this was a real run: starting it
      // again would run it twice.
      Dequeue(t);
      t.attempts = std::max(t.attempts, 1);
      t.status = f.success ? TaskStatus::kSuccess : TaskStatus::kFailed;
      t.exit_code = f.exit_code;
      t.error = f.error;
      t.finished_at = f.finished_at != 0 ? f.finished_at : now;
      Emit(t);
    }
  }

  // 2. Take the node out of the pool while its GPUs are rebuilt.
  if (node->online) {
    for (const auto& s : node->slices) index_.Erase(s.model, node->Entry(), s.free, s.capacity);
    total_online_gpus_ -= static_cast<int>(node->gpus.size());
    node->online = false;
  }
  std::vector<TaskNumber> held = node->HeldTasks();
  node->address = address;
  node->gpus = gpus;
  std::sort(node->gpus.begin(), node->gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  node->gpu_model.assign(node->gpus.size(), 0);
  node->gpu_task.assign(node->gpus.size(), 0);
  node->slices.clear();
  node->ClearUnclaimed();
  node->indices_are_positions = true;
  for (size_t i = 0; i < node->gpus.size(); ++i) {
    if (node->gpus[i].index != static_cast<int>(i)) node->indices_are_positions = false;
    int m = InternModel(node->gpus[i].model);
    node->gpu_model[i] = m;
    auto* s = node->Slice(m);
    if (s == nullptr) {
      node->slices.push_back({m, 0, 0});
      s = &node->slices.back();
    }
    s->capacity++;
    s->free++;
  }

  // Claims GPU positions for a task if they all exist, share one model and are free.
  auto claim = [&](const std::vector<int>& indices, TaskNumber task) -> bool {
    std::vector<int> pos;
    for (int idx : indices) {
      int p = node->Position(idx);
      if (p < 0 || node->gpu_task[p] != 0) return false;
      if (!pos.empty() && node->gpu_model[p] != node->gpu_model[pos[0]]) return false;
      if (std::find(pos.begin(), pos.end(), p) != pos.end()) return false;
      pos.push_back(p);
    }
    for (int p : pos) {
      node->gpu_task[p] = task;
      node->Slice(node->gpu_model[p])->free--;
    }
    return true;
  };

  // 3. Adopt what runs there, take back what had been put back in the queue, stop the rest.
  std::set<TaskNumber> reported;
  for (const auto& r : running) {
    reported.insert(r.task);
    Task* t = tasks_.Find(r.task);
    bool held_here = t != nullptr && (t->status == TaskStatus::kRunning || t->stopping) &&
                     !t->allocation.empty() && t->allocation[0].node_id == node_id;
    if (held_here && claim(t->allocation[0].gpu_indices, t->id)) {
      if (t->stopping) {
        decisions_.push_back({Decision::Kind::kStop, t->id, node_id, {}, t->stop_reason});
      }
      continue;
    }
    if (t != nullptr && t->status == TaskStatus::kPending &&
        static_cast<int>(r.gpu_indices.size()) == t->spec.gpu_count &&
        claim(r.gpu_indices, t->id)) {
      Dequeue(*t);
      t->status = TaskStatus::kRunning;
      std::vector<int> idx = r.gpu_indices;
      std::sort(idx.begin(), idx.end());
      t->allocation = {NodeAllocation{node_id, idx}};
      static_cast<TaskRecord*>(t)->node_slot = node->slot;
      t->error.clear();
      used_[PrioIndex(t->spec.priority)] += t->spec.gpu_count;
      running_count_[PrioIndex(t->spec.priority)]++;
      Emit(*t);
      continue;
    }
    if (held_here) {
      // Known here but its GPUs are unusable (gone, or clash): treat as lost below.
      reported.erase(r.task);
    }
    decisions_.push_back({Decision::Kind::kStop, r.task, node_id, {}, StopReason::kReconcile});
  }

  // 4. Tasks believed to run here but not reported are lost.
  std::sort(held.begin(), held.end(), [&](TaskNumber a, TaskNumber b) {
    return tasks_.Find(a)->queue_seq > tasks_.Find(b)->queue_seq;
  });
  for (TaskNumber id : held) {
    if (reported.count(id) != 0) continue;
    Task& t = *tasks_.Find(id);
    if (!(t.status == TaskStatus::kRunning || t.stopping)) continue;
    // Its GPU claims were reset above; ReleaseGpus must only fix the quota use.
    if (t.stopping) {
      used_[PrioIndex(t.spec.priority)] -= t.spec.gpu_count;
      t.stopping = false;
      t.stop_reason = StopReason::kNone;
      Emit(t);
    } else {
      RequeueOrFail(t, now, "agent_lost");
    }
  }

  // 5. Back in the pool.
  structure_seq_ = ++change_seq_;
  node->online = true;
  node->last_heartbeat = now;
  for (const auto& s : node->slices) index_.Insert(s.model, node->Entry(), s.free, s.capacity);
  total_online_gpus_ += static_cast<int>(node->gpus.size());
  RecomputeQuota();
  return OkStatus();
}

Status SchedulerCore::Heartbeat(const std::string& node_id, TimeMicros now) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  if (!node->online) return FailedPrecondition("node " + node_id + " is offline; register again");
  node->last_heartbeat = now;
  return OkStatus();
}

void SchedulerCore::TakeNodeOffline(NodeState& node, TimeMicros now) {
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;  // Fewer nodes can change why a task waits.
  if (node.online) {
    for (const auto& s : node.slices) index_.Erase(s.model, node.Entry(), s.free, s.capacity);
    total_online_gpus_ -= static_cast<int>(node.gpus.size());
    node.online = false;
    RecomputeQuota();
    for (auto& q : queues_) {
      if (q->reserved_slot == static_cast<int>(node.slot)) SetReservation(*q, -1);
    }
  }
  // Put back in their original relative order: the task that ran first ends up first.
  std::vector<Task*> held;
  for (TaskNumber id : node.HeldTasks()) held.push_back(tasks_.Find(id));
  std::sort(held.begin(), held.end(),
            [](const Task* a, const Task* b) { return a->queue_seq > b->queue_seq; });
  for (Task* t : held) {
    if (t->stopping) {
      ReleaseGpus(*t);
      Emit(*t);
    } else {
      RequeueOrFail(*t, now, "agent_lost");
    }
  }
}

Status SchedulerCore::NodeLost(const std::string& node_id, TimeMicros now) {
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) return NotFound("node " + node_id + " is not registered");
  TakeNodeOffline(*node, now);
  return OkStatus();
}

Status SchedulerCore::TaskStarted(TaskNumber id, const std::string& node_id, TimeMicros now) {
  TaskRecord* found = tasks_.Find(id);
  if (found == nullptr) return NotFound(FormatTaskId(id) + " not found");
  Task& t = *found;
  if (t.status != TaskStatus::kRunning || t.allocation.empty() ||
      t.allocation[0].node_id != node_id) {
    return FailedPrecondition(FormatTaskId(id) + " is not running on node " + node_id);
  }
  t.started_at = now;
  Emit(t);
  return OkStatus();
}

Status SchedulerCore::ApplyFinish(Task& t, const FinishReport& report, TimeMicros now) {
  ReleaseGpus(t);
  if (t.status == TaskStatus::kRunning) {
    running_count_[PrioIndex(t.spec.priority)]--;
    t.status = report.success ? TaskStatus::kSuccess : TaskStatus::kFailed;
    t.exit_code = report.exit_code;
    t.error = report.error;
    t.finished_at = report.finished_at != 0 ? report.finished_at : now;
  } else {
    t.exit_code = report.exit_code;  // A cancelled task stays cancelled.
  }
  Emit(t);
  return OkStatus();
}

Status SchedulerCore::TaskFinished(const std::string& node_id, const FinishReport& report,
                                   TimeMicros now) {
  TaskRecord* found = tasks_.Find(report.task);
  if (found == nullptr) return NotFound(FormatTaskId(report.task) + " not found");
  Task& t = *found;
  bool held = t.status == TaskStatus::kRunning || t.stopping;
  // The node's own id, when the record knows its slot, saves reading the allocation.
  const std::string* held_on = nullptr;
  if (found->node_slot < nodes_.size()) {
    held_on = &nodes_[found->node_slot]->id;
  } else if (!t.allocation.empty()) {
    held_on = &t.allocation[0].node_id;
  }
  if (!held || t.allocation.empty() || held_on == nullptr || *held_on != node_id) {
    return FailedPrecondition(FormatTaskId(report.task) + " is not running on node " + node_id +
                              " (status " + std::string(ToString(t.status)) + ")");
  }
  return ApplyFinish(t, report, now);
}

Status SchedulerCore::SetOnlinePercent(double online_percent) {
  if (!(online_percent >= 0.0 && online_percent <= 1.0)) {
    return InvalidArgument("online_percent must be a number between 0 and 1");
  }
  config_.online_percent = online_percent;
  RecomputeQuota();
  pass_needed_ = true;
  if (config_.record_changes) {
    Change c;
    c.kind = Change::Kind::kQuotaPercent;
    c.online_percent = online_percent;
    changes_.push_back(std::move(c));
  }
  return OkStatus();
}

void SchedulerCore::Tick(TimeMicros now) {
  for (auto& node : nodes_) {
    bool expired = now - node->last_heartbeat > config_.heartbeat_timeout;
    if (!expired) continue;
    // Online nodes that went silent, and restored tasks whose node never came back.
    if (node->online || node->HoldsAny()) TakeNodeOffline(*node, now);
  }
}

// ------------------------------------------------------------------------------------------
// Scheduling pass

PendingReason SchedulerCore::Diagnose(const Task& t, const std::vector<int>& models) const {
  int max_capacity = 0;
  for (int m : models) max_capacity = std::max(max_capacity, index_.MaxCapacity(m));
  if (max_capacity == 0) return PendingReason::kNoGpuModel;
  if (t.spec.gpu_count > max_capacity) return PendingReason::kExceedsCluster;
  int p = PrioIndex(t.spec.priority);
  if (used_[p] + t.spec.gpu_count > quota_[p]) return PendingReason::kQuotaExhausted;
  return PendingReason::kNoNodeFits;
}

void SchedulerCore::Schedule(TimeMicros now) {
  stats_.passes++;
  // A pass leaves every queue head unable to start (or held back), and only the commands that
  // flag pass_needed_ can change that: another pass would decide nothing.
  if (!pass_needed_) {
    stats_.passes_skipped++;
    return;
  }
  pass_needed_ = false;
  in_pass_ = true;
  for (int p = 0; p < kPriorityCount; ++p) SchedulePriority(p, now);
  in_pass_ = false;
}

void SchedulerCore::SchedulePriority(int prio, TimeMicros now) {
  PriorityQueue& q = *queues_[prio];
  if (q.empty()) return;
  const int other = 1 - prio;
  std::vector<uint32_t>& excluded = q.excluded;
  excluded.clear();
  if (queues_[other]->reserved_slot >= 0) {
    excluded.push_back(static_cast<uint32_t>(queues_[other]->reserved_slot));
  }

  // Tries to start the head of a shape. Returns kNone when it started.
  auto try_start = [&](Shape& shape) -> PendingReason {
    stats_.shape_checks++;
    Task& t = shape.tasks.front_task();
    const auto& models = ShapeModels(shape);
    if (used_[prio] + shape.gpu_count > quota_[prio]) return Diagnose(t, models);
    // Within quota, so Diagnose would answer from the nodes alone, which have not changed.
    if (StillNoRoom(shape, models, excluded)) return shape.no_room_reason;
    auto fit = index_.FindBestFit(models, shape.gpu_count, excluded);
    if (!fit) {
      PendingReason r = Diagnose(t, models);
      shape.RememberNoRoom(change_seq_, excluded, r);
      return r;
    }
    StartTask(t, fit->slot, fit->model, now);
    return PendingReason::kNone;
  };

  // The oldest pending task of this priority.
  Shape* oldest_shape = nullptr;
  for (Shape* s : q.active) {
    if (oldest_shape == nullptr || s->tasks.front() < oldest_shape->tasks.front()) {
      oldest_shape = s;
    }
  }
  TaskNumber oldest = oldest_shape->tasks.front().second;
  if (q.oldest != oldest) {
    q.oldest = oldest;
    q.bypassed = 0;
    q.holding = false;
    SetReservation(q, -1);
  }

  // The oldest task has been overtaken too often. Blocked by quota: nothing younger of this
  // priority starts (returns true). Blocked by fragmentation: a node is reserved for it, and
  // younger tasks may still start on other nodes (backfill; returns false).
  auto hold = [&](Shape& head_shape, PendingReason reason) -> bool {
    q.holding = true;
    head_shape.reason = reason;
    if (reason == PendingReason::kNoNodeFits && q.reserved_slot < 0) {
      Task& t = *tasks_.Find(oldest);
      auto fit = index_.FindMostFree(
          ModelsFor(head_shape.model), t.spec.gpu_count,
          [&](uint32_t slot, int model) { return nodes_[slot]->Slice(model)->capacity; });
      if (fit) SetReservation(q, static_cast<int>(fit->slot));
    }
    if (reason != PendingReason::kNoNodeFits || q.reserved_slot < 0) {
      for (Shape* s : q.active) {
        if (s != &head_shape) s->reason = PendingReason::kQueued;
      }
      return true;
    }
    excluded.push_back(static_cast<uint32_t>(q.reserved_slot));
    return false;
  };

  Shape* held_shape = nullptr;  // Its head was tried first and waits; skip it below.
  if (q.bypassed >= config_.max_bypass) {
    PendingReason r = try_start(*oldest_shape);
    if (r == PendingReason::kNone) {
      // Started: the queue flows again (Dequeue reset the guard).
    } else if (IsTransient(r)) {
      if (hold(*oldest_shape, r)) return;
      held_shape = oldest_shape;
    } else {
      oldest_shape->reason = r;  // Can never start as things are: it must not hold others.
      q.bypassed = 0;
    }
    if (q.empty()) return;
  }

  // Merge the shape heads by queue position (a min-heap; keys are unique).
  auto& heads = q.heads;
  heads.clear();
  for (Shape* s : q.active) {
    if (s != held_shape) heads.emplace_back(s->tasks.front(), s);
  }
  std::make_heap(heads.begin(), heads.end(), std::greater<>());

  PendingReason oldest_reason = PendingReason::kNone;
  bool oldest_waiting = false;
  while (!heads.empty()) {
    std::pop_heap(heads.begin(), heads.end(), std::greater<>());
    auto [pos, shape] = heads.back();
    heads.pop_back();
    TaskNumber id = pos.second;
    PendingReason r = try_start(*shape);
    if (r != PendingReason::kNone) {
      shape->reason = r;
      if (id == q.oldest) {
        oldest_waiting = true;
        oldest_reason = r;
      }
      continue;
    }
    if (!q.holding && oldest_waiting && IsTransient(oldest_reason) &&
        ++q.bypassed >= config_.max_bypass) {
      Shape* os = tasks_.Find(q.oldest)->shape;
      if (os != nullptr && hold(*os, oldest_reason)) return;
    }
    // Shapes stay during a pass, even when starting their head empties them.
    if (!shape->tasks.empty()) {
      heads.emplace_back(shape->tasks.front(), shape);
      std::push_heap(heads.begin(), heads.end(), std::greater<>());
    }
  }
}

// ------------------------------------------------------------------------------------------
// Restore

Status SchedulerCore::Restore(const Task& task, TimeMicros now) {
  pass_needed_ = true;
  structure_seq_ = ++change_seq_;
  if (task.id == 0) return InvalidArgument("task number must not be 0");
  if (tasks_.Find(task.id) != nullptr)
    return AlreadyExists(FormatTaskId(task.id) + " already exists");
  TaskRecord& t = *NewTask(task.id);
  static_cast<Task&>(t) = task;
  next_number_ = std::max(next_number_, t.id + 1);
  if (t.status == TaskStatus::kPending) {
    t.allocation.clear();
    next_back_seq_ = std::max(next_back_seq_, t.queue_seq + 1);
    next_front_seq_ = std::min(next_front_seq_, t.queue_seq - 1);
    Enqueue(t);
    return OkStatus();
  }
  // A stop recorded before stop orders carried a reason was a cancellation.
  if (t.stopping && t.stop_reason == StopReason::kNone) t.stop_reason = StopReason::kCancel;
  bool held = t.status == TaskStatus::kRunning || t.stopping;
  if (!held) return OkStatus();
  if (t.allocation.empty()) {
    return InvalidArgument(FormatTaskId(t.id) + " is running but has no allocation");
  }
  // Its node is not known yet: hold the task on a placeholder until the node registers again or
  // heartbeat_timeout passes.
  const std::string& node_id = t.allocation[0].node_id;
  NodeState* node = FindNodeState(node_id);
  if (node == nullptr) {
    node = &AddNodeState(node_id);
    node->last_heartbeat = now;
  }
  if (node->online) {
    return FailedPrecondition("restore running tasks before their nodes register");
  }
  node->last_heartbeat = std::max(node->last_heartbeat, now);
  node->AddUnclaimed(t.id);
  t.node_slot = node->slot;
  used_[PrioIndex(t.spec.priority)] += t.spec.gpu_count;
  if (t.status == TaskStatus::kRunning) running_count_[PrioIndex(t.spec.priority)]++;
  return OkStatus();
}

void SchedulerCore::SetNextTaskNumber(TaskNumber next) {
  next_number_ = std::max(next_number_, next);
  if (config_.record_changes) {
    Change c;
    c.kind = Change::Kind::kNextTaskNumber;
    c.next_number = next_number_;
    changes_.push_back(std::move(c));
  }
}

void SchedulerCore::Forget(TaskNumber id) {
  TaskRecord* t = tasks_.Find(id);
  if (t != nullptr && IsFinished(t->status) && !t->stopping) {
    tasks_.Erase(id);
    task_pool_.Delete(t);
  }
}

// ------------------------------------------------------------------------------------------
// Outputs and queries

std::vector<Decision> SchedulerCore::TakeDecisions() { return std::exchange(decisions_, {}); }
void SchedulerCore::TakeDecisions(std::vector<Decision>& out) {
  // Their GPU lists are kept for the next starts.
  for (Decision& d : out) {
    if (d.gpu_indices.capacity() == 0 || spare_gpu_lists_.size() >= kMaxSpareGpuLists) continue;
    d.gpu_indices.clear();
    spare_gpu_lists_.push_back(std::move(d.gpu_indices));
  }
  out.clear();
  out.swap(decisions_);
}
std::vector<Change> SchedulerCore::TakeChanges() { return std::exchange(changes_, {}); }

const Task* SchedulerCore::FindTask(TaskNumber id) const { return LookupTask(id); }

// The tasks behind a queue head are started soon after it, several in a pass when a large task
// ends, and their queue entries and records were written long ago, at submission: fetch what a
// start touches some places ahead, in three steps, each reading what the previous one fetched
// (the queue entry, the record, then the allocation buffers it points to).
void SchedulerCore::PrefetchQueued(const Shape& shape) const {
  const TaskQueue& queue = shape.tasks;
  queue.PrefetchEntry(2 * kStartPrefetchDistance);  // Read by the steps below, later.
  if (const Task* later = queue.Peek(kStartPrefetchDistance)) {
    PrefetchLines(HotPart(later), kTaskHotBytes);
  }
  if (const Task* soon = queue.Peek(kStartPrefetchDistance / 2)) {
    const auto* record = static_cast<const TaskRecord*>(soon);
    if (!record->spare_allocation.empty()) __builtin_prefetch(record->spare_allocation.data(), 1);
  }
}

void SchedulerCore::PrefetchTask(TaskNumber n, const Task* t) const {
  tasks_.Prefetch(n);
  PrefetchLines(HotPart(t), kTaskHotBytes);
}

void SchedulerCore::PrefetchTaskNode(const Task* t) const {
  const uint32_t slot = static_cast<const TaskRecord*>(t)->node_slot;
  if (slot >= nodes_.size()) return;
  PrefetchLines(nodes_[slot].get(), kNodeHotBytes);
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

QuotaView SchedulerCore::Quota() const {
  QuotaView v;
  v.total_gpus = total_online_gpus_;
  for (int p = 0; p < kPriorityCount; ++p) {
    v.quota[p] = quota_[p];
    v.used[p] = used_[p];
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
      g.status = !n->online ? GpuStatus::kOffline
                            : (n->gpu_task[i] != 0 ? GpuStatus::kBusy : GpuStatus::kIdle);
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
  return v;
}

std::optional<std::string> SchedulerCore::ReservedNode(Priority p) const {
  int slot = queues_[PrioIndex(p)]->reserved_slot;
  if (slot < 0) return std::nullopt;
  return nodes_[slot]->id;
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

Status SchedulerCore::CheckInvariants() const {
  std::vector<std::pair<TaskNumber, const TaskRecord*>> all_tasks;
  tasks_.ForEach([&](TaskNumber id, const TaskRecord* t) { all_tasks.emplace_back(id, t); });
  int used[kPriorityCount] = {0, 0};
  size_t running[kPriorityCount] = {0, 0};
  size_t pending[kPriorityCount] = {0, 0};
  for (const auto& [id, tp] : all_tasks) {
    const Task& t = *tp;
    int p = PrioIndex(t.spec.priority);
    bool held = t.status == TaskStatus::kRunning || t.stopping;
    const Shape* shape = tp->shape;
    if (t.status == TaskStatus::kPending) {
      if (shape == nullptr || shape->model != t.spec.gpu_model ||
          shape->gpu_count != t.spec.gpu_count || queues_[p]->FindShape(t.spec) != shape) {
        return Internal(FormatTaskId(id) + " does not point at its queue");
      }
    } else if (shape != nullptr) {
      return Internal(FormatTaskId(id) + " is not pending but points at a queue");
    }
    if (t.status == TaskStatus::kRunning) running[p]++;
    if (t.status == TaskStatus::kPending) pending[p]++;
    if (t.stopping && t.status != TaskStatus::kCancelled) {
      return Internal(FormatTaskId(id) + " is stopping but not cancelled");
    }
    if (!held) continue;
    used[p] += t.spec.gpu_count;
    if (t.allocation.size() != 1) return Internal(FormatTaskId(id) + " has no single allocation");
    const auto& na = t.allocation[0];
    if (static_cast<int>(na.gpu_indices.size()) != t.spec.gpu_count) {
      return Internal(FormatTaskId(id) + " holds the wrong number of GPUs");
    }
    const NodeState* n = FindNodeState(na.node_id);
    if (n == nullptr || !n->HasTask(id)) {
      return Internal(FormatTaskId(id) + " is not listed on node " + na.node_id);
    }
    if (tp->node_slot != n->slot) {
      return Internal(FormatTaskId(id) + " has the wrong node slot for node " + na.node_id);
    }
    if (!n->gpus.empty()) {
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
    if (used[p] != used_[p]) return Internal("quota use out of step with running tasks");
    if (running[p] != running_count_[p]) return Internal("running count out of step");
    if (pending[p] != pending_count_[p]) return Internal("pending count out of step");
  }
  int total = 0;
  int busy_tasks = 0;
  for (const auto& n : nodes_) {
    int free = 0;
    for (size_t i = 0; i < n->gpus.size(); ++i) {
      TaskNumber tid = n->gpu_task[i];
      if (tid == 0) {
        free++;
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
    if (n->online) total += static_cast<int>(n->gpus.size());
  }
  int allocated = 0;
  for (const auto& [id, tp] : all_tasks) {
    const Task& t = *tp;
    if (!(t.status == TaskStatus::kRunning || t.stopping)) continue;
    const NodeState* n = FindNodeState(t.allocation[0].node_id);
    if (!n->gpus.empty()) allocated += t.spec.gpu_count;
  }
  if (allocated != busy_tasks) return Internal("allocated GPUs differ from busy GPUs");
  if (total != total_online_gpus_) return Internal("online GPU total out of step");
  if (quota_[0] + quota_[1] != total_online_gpus_) return Internal("quotas do not add up");
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

}  // namespace dgpu::core
