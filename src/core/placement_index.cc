#include "core/placement_index.h"

#include <algorithm>
#include <cassert>

namespace dgpu::core {

PlacementIndex::ModelBuckets& PlacementIndex::Buckets(int model, int size) {
  if (model >= static_cast<int>(models_.size())) models_.resize(model + 1);
  auto& mb = models_[model];
  if (static_cast<int>(mb.by_free.size()) <= size) mb.by_free.resize(size + 1);
  return mb;
}

uint32_t PlacementIndex::PositionOf(Entry e) {
  if (e.slot >= pos_of_slot_.size()) {
    pos_of_slot_.resize(e.slot + 1, kNone);
    rank_of_slot_.resize(e.slot + 1, nullptr);
  }
  rank_of_slot_[e.slot] = e.rank;
  uint32_t& pos = pos_of_slot_[e.slot];
  if (pos != kNone) return pos;
  // A new node: the next position, in the ordered part if it sorts after every node there and
  // there are no extras, an extra otherwise.
  bool in_order = ordered_ == slot_of_pos_.size();
  if (in_order && !slot_of_pos_.empty()) {
    uint32_t last = slot_of_pos_.back();
    const uint64_t last_rank = *rank_of_slot_[last];
    in_order = *e.rank > last_rank || (*e.rank == last_rank && e.slot > last);
  }
  pos = static_cast<uint32_t>(slot_of_pos_.size());
  slot_of_pos_.push_back(e.slot);
  if (in_order) {
    ordered_ = pos + 1;
  } else if (slot_of_pos_.size() - ordered_ > 64 + slot_of_pos_.size() / 16) {
    Renumber();
    return pos_of_slot_[e.slot];
  }
  return pos;
}

void PlacementIndex::Renumber() {
  ordered_ = static_cast<uint32_t>(slot_of_pos_.size());
  std::vector<uint32_t> order(slot_of_pos_);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    uint64_t ra = *rank_of_slot_[a];
    uint64_t rb = *rank_of_slot_[b];
    return ra != rb ? ra < rb : a < b;
  });
  // Old position -> new position, then every bucket is rebuilt with the new positions.
  std::vector<uint32_t> moved(order.size());
  for (uint32_t p = 0; p < order.size(); ++p) {
    uint32_t slot = order[p];
    moved[pos_of_slot_[slot]] = p;
    pos_of_slot_[slot] = p;
  }
  slot_of_pos_ = std::move(order);
  for (auto& mb : models_) {
    for (auto& bucket : mb.by_free) {
      Bitset rebuilt;
      for (uint32_t p = bucket.FindFrom(0); p != kNone; p = bucket.FindFrom(p + 1)) {
        rebuilt.Set(moved[p]);
      }
      bucket = std::move(rebuilt);
    }
  }
}

void PlacementIndex::Insert(int model, Entry e, int free, int capacity) {
  uint32_t pos = PositionOf(e);
  auto& mb = Buckets(model, std::max(free, capacity));
  mb.by_free[free].Set(pos);
  mb.capacity_counts[capacity]++;
}

void PlacementIndex::Erase(int model, Entry e, int free, int capacity) {
  assert(e.slot < pos_of_slot_.size() && pos_of_slot_[e.slot] != kNone);
  uint32_t pos = pos_of_slot_[e.slot];
  auto& mb = Buckets(model, std::max(free, capacity));
  assert(mb.by_free[free].FindFrom(pos) == pos);
  mb.by_free[free].Clear(pos);
  auto it = mb.capacity_counts.find(capacity);
  assert(it != mb.capacity_counts.end());
  if (--it->second == 0) mb.capacity_counts.erase(it);
}

void PlacementIndex::Move(int model, Entry e, int old_free, int new_free) {
  if (old_free == new_free) return;
  assert(e.slot < pos_of_slot_.size() && pos_of_slot_[e.slot] != kNone);
  uint32_t pos = pos_of_slot_[e.slot];
  auto& mb = Buckets(model, std::max(old_free, new_free));
  assert(mb.by_free[old_free].FindFrom(pos) == pos);
  mb.by_free[old_free].Clear(pos);
  mb.by_free[new_free].Set(pos);
}

int PlacementIndex::MaxCapacity(int model) const {
  if (model < 0 || model >= static_cast<int>(models_.size())) return 0;
  const auto& counts = models_[model].capacity_counts;
  return counts.empty() ? 0 : counts.rbegin()->first;
}

int PlacementIndex::NodesWithCapacity(int model, int k) const {
  if (model < 0 || model >= static_cast<int>(models_.size())) return 0;
  const auto& counts = models_[model].capacity_counts;
  int n = 0;
  for (auto it = counts.lower_bound(k); it != counts.end(); ++it) n += it->second;
  return n;
}

}  // namespace dgpu::core
