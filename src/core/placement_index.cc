#include "core/placement_index.h"

#include <algorithm>
#include <cassert>

namespace dgpu::core {

namespace {

// A node's room changed: the one bucket of a model's that holds it (if any) follows.
template <typename Buckets, typename Room, typename Rooms>
void RoomChangedWhereHeld(Buckets& by_free, uint32_t pos, const Room& old, const Rooms& rooms) {
  for (auto& bucket : by_free) {
    if (bucket.Has(pos)) {
      bucket.RoomChanged(pos, old, rooms);
      return;
    }
  }
}

}  // namespace

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
  rooms_.emplace_back();
  if (e.slot < sets_of_slot_.size()) {
    for (SetId set : sets_of_slot_[e.slot]) sets_[set].Put(pos, true);
  }
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
  std::vector<Room> rooms(rooms_.size());
  for (uint32_t p = 0; p < moved.size(); ++p) rooms[moved[p]] = rooms_[p];
  rooms_ = std::move(rooms);
  for (auto& mb : models_) {
    for (auto& bucket : mb.by_free) {
      Bitset rebuilt;
      for (uint32_t p = bucket.FindFrom(0); p != kNone; p = bucket.FindFrom(p + 1)) {
        rebuilt.Set(moved[p], Tracked());
      }
      bucket = std::move(rebuilt);
    }
  }
  for (NodeSet& set : sets_) set = NodeSet{};
  for (uint32_t slot = 0; slot < sets_of_slot_.size(); ++slot) {
    if (slot >= pos_of_slot_.size() || pos_of_slot_[slot] == kNone) continue;
    for (SetId set : sets_of_slot_[slot]) sets_[set].Put(pos_of_slot_[slot], true);
  }
}

PlacementIndex::SetId PlacementIndex::NewSet() {
  sets_.emplace_back();
  return static_cast<SetId>(sets_.size() - 1);
}

void PlacementIndex::PutInSet(SetId set, uint32_t slot, bool in) {
  assert(set < sets_.size());
  if (slot >= sets_of_slot_.size()) sets_of_slot_.resize(slot + 1);
  auto& of_slot = sets_of_slot_[slot];
  auto it = std::find(of_slot.begin(), of_slot.end(), set);
  if ((it != of_slot.end()) == in) return;
  if (in) {
    of_slot.push_back(set);
  } else {
    of_slot.erase(it);
  }
  if (slot < pos_of_slot_.size() && pos_of_slot_[slot] != kNone) {
    sets_[set].Put(pos_of_slot_[slot], in);
  }
}

bool PlacementIndex::InSet(SetId set, uint32_t slot) const {
  if (slot < pos_of_slot_.size() && pos_of_slot_[slot] != kNone) {
    return sets_[set].Has(pos_of_slot_[slot]);
  }
  if (slot >= sets_of_slot_.size()) return false;
  const auto& of_slot = sets_of_slot_[slot];
  return std::find(of_slot.begin(), of_slot.end(), set) != of_slot.end();
}

void PlacementIndex::UpdateRoom(uint32_t pos, const Room& room) {
  const Room old = rooms_[pos];
  if (old == room) return;
  rooms_[pos] = room;
  if (!tracking_rooms_) {
    if (room == kUnlimitedRoom) return;
    // The first node with a room of its own: from now on every bucket keeps rooms.
    tracking_rooms_ = true;
    for (auto& mb : models_) {
      for (auto& bucket : mb.by_free) bucket.RecomputeRooms(rooms_);
    }
    return;
  }
  for (auto& mb : models_) RoomChangedWhereHeld(mb.by_free, pos, old, rooms_);
}

void PlacementIndex::Move(int model, Entry e, int old_free, int new_free, const Room& room) {
  assert(e.slot < pos_of_slot_.size() && pos_of_slot_[e.slot] != kNone);
  const uint32_t pos = pos_of_slot_[e.slot];
  const Room old = rooms_[pos];
  if (!tracking_rooms_ || old_free == new_free || old == room) {
    UpdateRoom(pos, room);
    Move(model, e, old_free, new_free);
    return;
  }
  // Out of the old bucket with the old room, into the new one with the new room: no bucket sees
  // a change of room. The node's other models' buckets (if any) do.
  auto& mb = Buckets(model, std::max(old_free, new_free));
  assert(mb.by_free[old_free].Has(pos));
  mb.by_free[old_free].Clear(pos, &rooms_);
  rooms_[pos] = room;
  mb.by_free[new_free].Set(pos, &rooms_);
  CountInGroup(model, e.slot, old_free, -1);
  CountInGroup(model, e.slot, new_free, 1);
  for (size_t m = 0; m < models_.size(); ++m) {
    if (static_cast<int>(m) != model) RoomChangedWhereHeld(models_[m].by_free, pos, old, rooms_);
  }
}

void PlacementIndex::SetRoom(Entry e, Room room) {
  assert(e.slot < pos_of_slot_.size() && pos_of_slot_[e.slot] != kNone);
  UpdateRoom(pos_of_slot_[e.slot], room);
}

void PlacementIndex::Insert(int model, Entry e, int free, int capacity, Room room) {
  uint32_t pos = PositionOf(e);
  UpdateRoom(pos, room);
  auto& mb = Buckets(model, std::max(free, capacity));
  mb.by_free[free].Set(pos, Tracked());
  mb.capacity_counts[capacity]++;
  CountInGroup(model, e.slot, free, 1);
}

void PlacementIndex::Erase(int model, Entry e, int free, int capacity) {
  assert(e.slot < pos_of_slot_.size() && pos_of_slot_[e.slot] != kNone);
  uint32_t pos = pos_of_slot_[e.slot];
  auto& mb = Buckets(model, std::max(free, capacity));
  assert(mb.by_free[free].Has(pos));
  mb.by_free[free].Clear(pos, Tracked());
  CountInGroup(model, e.slot, free, -1);
  auto it = mb.capacity_counts.find(capacity);
  assert(it != mb.capacity_counts.end());
  if (--it->second == 0) mb.capacity_counts.erase(it);
}

void PlacementIndex::Move(int model, Entry e, int old_free, int new_free) {
  if (old_free == new_free) return;
  assert(e.slot < pos_of_slot_.size() && pos_of_slot_[e.slot] != kNone);
  uint32_t pos = pos_of_slot_[e.slot];
  auto& mb = Buckets(model, std::max(old_free, new_free));
  assert(mb.by_free[old_free].Has(pos));
  mb.by_free[old_free].Clear(pos, Tracked());
  mb.by_free[new_free].Set(pos, Tracked());
  CountInGroup(model, e.slot, old_free, -1);
  CountInGroup(model, e.slot, new_free, 1);
}

void PlacementIndex::CountGroup(int model, GroupId group, int free, int delta) {
  if (group_counts_.size() <= static_cast<size_t>(model)) group_counts_.resize(model + 1);
  GroupCountsOf& of = group_counts_[static_cast<size_t>(model)];
  if (of.stride <= static_cast<size_t>(free)) {
    // Wider rows: each row's counts move to their place in the new ones.
    const size_t stride = static_cast<size_t>(free) + 1;
    const size_t rows = of.stride == 0 ? 0 : of.counts.size() / of.stride;
    std::vector<int32_t> wider(rows * stride, 0);
    for (size_t r = 0; r < rows; ++r) {
      std::copy_n(of.counts.begin() + static_cast<std::ptrdiff_t>(r * of.stride), of.stride,
                  wider.begin() + static_cast<std::ptrdiff_t>(r * stride));
    }
    of.counts = std::move(wider);
    of.stride = stride;
  }
  const size_t at = static_cast<size_t>(group) * of.stride;
  if (of.counts.size() <= at) of.counts.resize(at + of.stride, 0);
  of.counts[at + static_cast<size_t>(free)] += delta;
  assert(of.counts[at + static_cast<size_t>(free)] >= 0);
}

void PlacementIndex::SetGroup(uint32_t slot, GroupId group) {
  const GroupId old = slot < group_of_slot_.size() ? group_of_slot_[slot] : kNoGroup;
  if (old == group) return;
  if (slot >= group_of_slot_.size()) group_of_slot_.resize(slot + 1, kNoGroup);
  // A node in the index moves its counts (one bucket per model holds it).
  if (slot < pos_of_slot_.size() && pos_of_slot_[slot] != kNone) {
    const uint32_t pos = pos_of_slot_[slot];
    for (size_t m = 0; m < models_.size(); ++m) {
      const auto& by_free = models_[m].by_free;
      for (size_t f = 0; f < by_free.size(); ++f) {
        if (!by_free[f].Has(pos)) continue;
        const int model = static_cast<int>(m);
        if (old != kNoGroup) CountGroup(model, old, static_cast<int>(f), -1);
        if (group != kNoGroup) CountGroup(model, group, static_cast<int>(f), 1);
        break;
      }
    }
  }
  group_of_slot_[slot] = group;
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
