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
// order. A node that sorts after every known node gets the next position. One that sorts in the
// middle is appended after them as an "extra": lookups compare the few extras by rank, and once
// there are too many (more than 64 + positions / 16), all positions are renumbered (bits carried
// over). Nodes registering in any order thus cost O(log nodes) amortized each, and a lookup scans
// at most that many extras.
#pragma once

#include <algorithm>
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
  };

  void Insert(int model, Entry e, int free, int capacity);
  void Erase(int model, Entry e, int free, int capacity);
  void Move(int model, Entry e, int old_free, int new_free);

  // Best fit for k GPUs among `models`: fewest free GPUs that still fit, then lowest node id.
  // Nodes whose slot is in `excluded` (reservations, a handful at most) are skipped.
  std::optional<Fit> FindBestFit(const std::vector<int>& models, int k,
                                 const std::vector<uint32_t>& excluded) const {
    return FindBestFitWhere(models, k, excluded, [](uint32_t) { return true; });
  }
  // The same among the nodes whose slot passes ok(slot), asked in best-fit order.
  template <typename Ok>
  std::optional<Fit> FindBestFitWhere(const std::vector<int>& models, int k,
                                      const std::vector<uint32_t>& excluded, Ok&& ok) const {
    std::optional<Fit> best;
    uint32_t best_pos = 0;
    for (int m : models) {
      if (m >= static_cast<int>(models_.size())) continue;
      const auto& buckets = models_[m].by_free;
      int limit = static_cast<int>(buckets.size());
      if (best) limit = std::min(limit, best->free + 1);
      for (int f = std::max(k, 1); f < limit; ++f) {
        uint32_t p = First(buckets[f], [&](uint32_t pos) {
          const uint32_t slot = slot_of_pos_[pos];
          return (excluded.empty() ||
                  std::find(excluded.begin(), excluded.end(), slot) == excluded.end()) &&
                 ok(slot);
        });
        if (p == kNone) continue;
        if (!best || f < best->free || Before(p, best_pos)) {
          best = Fit{slot_of_pos_[p], m, f};
          best_pos = p;
        }
        break;
      }
    }
    return best;
  }

  // Calls fn(slot, model, count) for the nodes with a count >= k of one of `models`, model by
  // model, lowest count first, then in position order (ids, then the extras), skipping
  // `excluded`, until fn returns false.
  template <typename Fn>
  void ForEachFit(const std::vector<int>& models, int k, const std::vector<uint32_t>& excluded,
                  Fn&& fn) const {
    for (int m : models) {
      if (!ForEachFitOf(m, k, excluded, fn)) return;
    }
  }
  // The same for one model; returns false when fn did.
  template <typename Fn>
  bool ForEachFitOf(int m, int k, const std::vector<uint32_t>& excluded, Fn&& fn) const {
    if (m >= static_cast<int>(models_.size())) return true;
    const auto& buckets = models_[m].by_free;
    for (int f = std::max(k, 1); f < static_cast<int>(buckets.size()); ++f) {
      for (uint32_t p = buckets[f].FindFrom(0); p != kNone; p = buckets[f].FindFrom(p + 1)) {
        const uint32_t slot = slot_of_pos_[p];
        if (!excluded.empty() &&
            std::find(excluded.begin(), excluded.end(), slot) != excluded.end()) {
          continue;
        }
        if (!fn(slot, m, f)) return false;
      }
    }
    return true;
  }

  // Calls fn(slot, free) for the nodes of model m, most free GPUs first, then in position order,
  // until fn returns false. O(nodes) in the worst case: for reservations, made rarely.
  template <typename Fn>
  void ForEachMostFree(int m, Fn&& fn) const {
    if (m < 0 || m >= static_cast<int>(models_.size())) return;
    const auto& buckets = models_[m].by_free;
    for (int f = static_cast<int>(buckets.size()) - 1; f >= 0; --f) {
      for (uint32_t p = buckets[f].FindFrom(0); p != kNone; p = buckets[f].FindFrom(p + 1)) {
        if (!fn(slot_of_pos_[p], f)) return;
      }
    }
  }

  // The node with the most free GPUs among those of capacity >= k (ties: lowest id), for a
  // reservation. capacity_of(slot, model) tells a node's capacity. O(nodes) in the worst case,
  // but called only when a starving task is first held.
  template <typename CapacityOf>
  std::optional<Fit> FindMostFree(const std::vector<int>& models, int k,
                                  CapacityOf&& capacity_of) const {
    std::optional<Fit> best;
    uint32_t best_pos = 0;
    for (int m : models) {
      if (m >= static_cast<int>(models_.size())) continue;
      const auto& buckets = models_[m].by_free;
      for (int f = static_cast<int>(buckets.size()) - 1; f >= 0; --f) {
        if (best && f < best->free) break;
        uint32_t p =
            First(buckets[f], [&](uint32_t pos) { return capacity_of(slot_of_pos_[pos], m) >= k; });
        if (p == kNone) continue;
        if (!best || f > best->free || Before(p, best_pos)) {
          best = Fit{slot_of_pos_[p], m, f};
          best_pos = p;
        }
      }
    }
    return best;
  }

  // Largest GPU count of one model on one online node (0 if none).
  int MaxCapacity(int model) const;
  // Online nodes with at least k GPUs of one model.
  int NodesWithCapacity(int model, int k) const;
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
  // Puts all positions in id order (extras included).
  void Renumber();

  // Node id order of two positions.
  bool Before(uint32_t a, uint32_t b) const {
    uint32_t sa = slot_of_pos_[a];
    uint32_t sb = slot_of_pos_[b];
    uint64_t ra = *rank_of_slot_[sa];
    uint64_t rb = *rank_of_slot_[sb];
    return ra != rb ? ra < rb : sa < sb;
  }

  // The lowest-id position of a bucket that satisfies ok(position), or kNone: the first one in the
  // ordered part, then the extras (after it, in no order) compared by rank.
  template <typename Ok>
  uint32_t First(const Bitset& bucket, Ok&& ok) const {
    uint32_t best = kNone;
    for (uint32_t p = bucket.FindFrom(0); p != kNone && p < ordered_; p = bucket.FindFrom(p + 1)) {
      if (ok(p)) {
        best = p;
        break;
      }
    }
    if (ordered_ == slot_of_pos_.size()) return best;
    for (uint32_t p = bucket.FindFrom(ordered_); p != kNone; p = bucket.FindFrom(p + 1)) {
      if (ok(p) && (best == kNone || Before(p, best))) best = p;
    }
    return best;
  }

  std::vector<ModelBuckets> models_;
  std::vector<uint32_t> pos_of_slot_;  // kNone: never inserted.
  std::vector<uint32_t> slot_of_pos_;
  std::vector<const uint64_t*> rank_of_slot_;
  // Positions [0, ordered_) follow id order; the rest are extras, appended out of order.
  uint32_t ordered_ = 0;
};

}  // namespace dgpu::core
