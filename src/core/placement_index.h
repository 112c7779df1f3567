// PlacementIndex: online nodes bucketed by their free-GPU count, per GPU model.
//
// by_free[model][f] holds the nodes with exactly f free GPUs of that model, ordered by node id,
// so best fit for k GPUs is the first node of the first non-empty bucket f >= k: a lookup costs
// O(max GPUs per node) per model and an update O(log nodes), whatever the cluster size.
// Nodes are ordered by an integer rank that follows node id order (comparing ranks instead of
// id strings keeps updates cheap). Ranks are referenced by pointer: the caller keeps them alive
// and may renumber them only in a way that preserves their order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace dgpu::core {

class PlacementIndex {
 public:
  struct Entry {
    const uint64_t* rank;
    uint32_t slot;
  };
  struct Fit {
    uint32_t slot = 0;
    int model = 0;
    int free = 0;
    const uint64_t* rank = nullptr;
  };

  void Insert(int model, Entry e, int free, int capacity);
  void Erase(int model, Entry e, int free, int capacity);
  void Move(int model, Entry e, int old_free, int new_free);

  // Best fit for k GPUs among `models`: fewest free GPUs that still fit, then lowest node id.
  // Nodes whose slot is in `excluded` (reservations, a handful at most) are skipped.
  std::optional<Fit> FindBestFit(const std::vector<int>& models, int k,
                                 const std::vector<uint32_t>& excluded) const;

  // The node with the most free GPUs among those of capacity >= k (ties: lowest id), for a
  // reservation. capacity_of(slot, model) tells a node's capacity. O(nodes) in the worst case,
  // but called only when a starving task is first held.
  template <typename CapacityOf>
  std::optional<Fit> FindMostFree(const std::vector<int>& models, int k,
                                  CapacityOf&& capacity_of) const {
    std::optional<Fit> best;
    for (int m : models) {
      if (m >= static_cast<int>(models_.size())) continue;
      const auto& buckets = models_[m].by_free;
      for (int f = static_cast<int>(buckets.size()) - 1; f >= 0; --f) {
        if (best && f < best->free) break;
        for (const Entry& e : buckets[f]) {
          if (capacity_of(e.slot, m) < k) continue;
          if (!best || f > best->free || (f == best->free && *e.rank < *best->rank)) {
            best = Fit{e.slot, m, f, e.rank};
          }
          break;
        }
      }
    }
    return best;
  }

  // Largest GPU count of one model on one online node (0 if none).
  int MaxCapacity(int model) const;
  bool HasModel(int model) const { return MaxCapacity(model) > 0; }

 private:
  struct Less {
    bool operator()(const Entry& a, const Entry& b) const {
      return *a.rank != *b.rank ? *a.rank < *b.rank : a.slot < b.slot;
    }
  };
  struct ModelBuckets {
    std::vector<std::set<Entry, Less>> by_free;
    std::map<int, int> capacity_counts;  // capacity -> number of nodes.
  };
  ModelBuckets& Buckets(int model, int size);

  std::vector<ModelBuckets> models_;
};

}  // namespace dgpu::core
