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

void PlacementIndex::Insert(int model, Entry e, int free, int capacity) {
  auto& mb = Buckets(model, std::max(free, capacity));
  mb.by_free[free].insert(e);
  mb.capacity_counts[capacity]++;
}

void PlacementIndex::Erase(int model, Entry e, int free, int capacity) {
  auto& mb = Buckets(model, std::max(free, capacity));
  size_t erased = mb.by_free[free].erase(e);
  assert(erased == 1);
  (void)erased;
  auto it = mb.capacity_counts.find(capacity);
  assert(it != mb.capacity_counts.end());
  if (--it->second == 0) mb.capacity_counts.erase(it);
}

void PlacementIndex::Move(int model, Entry e, int old_free, int new_free) {
  if (old_free == new_free) return;
  auto& mb = Buckets(model, std::max(old_free, new_free));
  auto node = mb.by_free[old_free].extract(e);
  assert(!node.empty());
  mb.by_free[new_free].insert(std::move(node));
}

std::optional<PlacementIndex::Fit> PlacementIndex::FindBestFit(
    const std::vector<int>& models, int k, const std::vector<uint32_t>& excluded) const {
  std::optional<Fit> best;
  for (int m : models) {
    if (m >= static_cast<int>(models_.size())) continue;
    const auto& buckets = models_[m].by_free;
    int limit = static_cast<int>(buckets.size());
    if (best) limit = std::min(limit, best->free + 1);
    for (int f = std::max(k, 1); f < limit; ++f) {
      const auto& bucket = buckets[f];
      const Entry* found = nullptr;
      for (const Entry& e : bucket) {
        if (std::find(excluded.begin(), excluded.end(), e.slot) != excluded.end()) continue;
        found = &e;
        break;
      }
      if (found == nullptr) continue;
      if (!best || f < best->free || *found->rank < *best->rank) {
        best = Fit{found->slot, m, f, found->rank};
      }
      break;
    }
  }
  return best;
}

int PlacementIndex::MaxCapacity(int model) const {
  if (model < 0 || model >= static_cast<int>(models_.size())) return 0;
  const auto& counts = models_[model].capacity_counts;
  return counts.empty() ? 0 : counts.rbegin()->first;
}

}  // namespace dgpu::core
