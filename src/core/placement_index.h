// PlacementIndex: online nodes bucketed by their free-GPU count, per GPU model.
//
// by_free[model][f] holds the nodes with exactly f free GPUs of that model, so best fit for k
// GPUs is the lowest-id node of the first non-empty bucket f >= k: a lookup costs
// O(max GPUs per node) word scans per model and an update two bit flips, whatever the cluster
// size.
//
// A bucket is a two-level bitset over dense node positions: position = index of the node in node
// id order, so the first set bit is the lowest node id. Node ids are ordered by an integer rank
// (comparing ranks instead of id strings keeps renumbering cheap). Ranks are referenced by
// pointer: the caller keeps them alive and may renumber them only in a way that preserves their
// order. A node that sorts after every known node gets the next position; one that sorts in the
// middle is appended too, and all positions are renumbered (bits carried over) before the next
// lookup, so a burst of registrations costs one renumbering, not one each.
#pragma once

#include <bit>
#include <cstdint>
#include <map>
#include <optional>
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
                                 const std::vector<uint32_t>& excluded);

  // The node with the most free GPUs among those of capacity >= k (ties: lowest id), for a
  // reservation. capacity_of(slot, model) tells a node's capacity. O(nodes) in the worst case,
  // but called only when a starving task is first held.
  template <typename CapacityOf>
  std::optional<Fit> FindMostFree(const std::vector<int>& models, int k, CapacityOf&& capacity_of) {
    Renumber();
    std::optional<Fit> best;
    uint32_t best_pos = 0;
    for (int m : models) {
      if (m >= static_cast<int>(models_.size())) continue;
      const auto& buckets = models_[m].by_free;
      for (int f = static_cast<int>(buckets.size()) - 1; f >= 0; --f) {
        if (best && f < best->free) break;
        const Bitset& bucket = buckets[f];
        for (uint32_t p = bucket.FindFrom(0); p != kNone; p = bucket.FindFrom(p + 1)) {
          uint32_t slot = slot_of_pos_[p];
          if (capacity_of(slot, m) < k) continue;
          if (!best || f > best->free || (f == best->free && p < best_pos)) {
            best = Fit{slot, m, f, rank_of_slot_[slot]};
            best_pos = p;
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
  static constexpr uint32_t kNone = ~uint32_t{0};

  // Set of positions: one bit per position, plus one summary bit per non-zero word, so finding
  // the next set bit scans at most one word and then the summary (positions / 4096 words).
  class Bitset {
   public:
    bool empty() const { return count_ == 0; }
    void Set(uint32_t p) {
      size_t w = p >> 6;
      if (w >= words_.size()) {
        words_.resize(w + 1, 0);
        summary_.resize((words_.size() + 63) >> 6, 0);
      }
      words_[w] |= uint64_t{1} << (p & 63);
      summary_[w >> 6] |= uint64_t{1} << (w & 63);
      ++count_;
    }
    void Clear(uint32_t p) {
      size_t w = p >> 6;
      words_[w] &= ~(uint64_t{1} << (p & 63));
      if (words_[w] == 0) summary_[w >> 6] &= ~(uint64_t{1} << (w & 63));
      --count_;
    }
    // The first set position >= p, or kNone.
    uint32_t FindFrom(uint32_t p) const {
      if (count_ == 0) return kNone;
      size_t w = p >> 6;
      if (w >= words_.size()) return kNone;
      uint64_t bits = words_[w] & (~uint64_t{0} << (p & 63));
      if (bits != 0) return static_cast<uint32_t>((w << 6) + std::countr_zero(bits));
      // The next non-empty word, from the summary.
      size_t next = w + 1;
      size_t s = next >> 6;
      if (s >= summary_.size()) return kNone;
      uint64_t sbits = summary_[s] & (~uint64_t{0} << (next & 63));
      while (sbits == 0) {
        if (++s >= summary_.size()) return kNone;
        sbits = summary_[s];
      }
      size_t word = (s << 6) + std::countr_zero(sbits);
      return static_cast<uint32_t>((word << 6) + std::countr_zero(words_[word]));
    }

   private:
    std::vector<uint64_t> words_;
    std::vector<uint64_t> summary_;
    uint32_t count_ = 0;
  };

  struct ModelBuckets {
    std::vector<Bitset> by_free;
    std::map<int, int> capacity_counts;  // capacity -> number of nodes.
  };
  ModelBuckets& Buckets(int model, int size);
  uint32_t PositionOf(Entry e);
  // Restores id order of positions after out-of-order insertions (no-op when in order).
  void Renumber();

  std::vector<ModelBuckets> models_;
  std::vector<uint32_t> pos_of_slot_;  // kNone: never inserted.
  std::vector<uint32_t> slot_of_pos_;
  std::vector<const uint64_t*> rank_of_slot_;
  bool out_of_order_ = false;  // Some position does not follow id order yet.
};

}  // namespace dgpu::core
