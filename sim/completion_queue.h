// The simulator's completion events: a radix heap under a short sorted list of the next ones.
// Not thread-safe; header-only, so that tests can drive it directly.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace dgpu::sim {

using core::TimeMicros;

// A radix heap (Ahuja, Mehlhorn, Orlin, Tarjan 1990) of events keyed on their time
// in units of 2^20 us (about a second). Keys pushed never go below floor(), the last key taken
// out, which is all a radix heap needs. An entry sits in bucket b = the highest bit in which its
// key differs from floor() (bucket 0: equal). Taking out a new smallest key moves the entries of
// the lowest non-empty bucket to lower buckets; an entry moves at most once per key bit, and
// every move is a sequential read and append, where a comparison heap of 100,000-200,000
// running tasks walks about 9 levels of mostly uncached memory per completion. The coarse key
// saves the moves through the low 20 bits; entries of one key come out unordered, and
// CompletionQueue orders them.
template <typename T>
class RadixHeap {
 public:
  static constexpr int kShift = 20;
  struct Entry {
    TimeMicros time;
    uint64_t seq;  // Push order: breaks ties between equal times.
    T what;
  };
  static uint64_t KeyOf(TimeMicros time) { return static_cast<uint64_t>(time) >> kShift; }

  bool empty() const { return occupied_ == 0; }
  uint64_t floor() const { return last_; }

  // KeyOf(e.time) >= floor().
  void push(const Entry& e) { Put(Bucket(KeyOf(e.time)), e); }

  // Takes out every entry of the smallest key, appending them to out; must not be empty.
  void PopMin(std::vector<Entry>& out) {
    if ((occupied_ & 1) == 0) Redistribute(std::countr_zero(occupied_));
    std::vector<Entry>& zero = buckets_[0].entries;
    out.insert(out.end(), zero.begin(), zero.end());
    zero.clear();
    occupied_ &= ~uint64_t{1};
  }

 private:
  struct Level {
    std::vector<Entry> entries;
    uint64_t min = 0;  // Smallest key in entries.
  };

  int Bucket(uint64_t key) const { return key == last_ ? 0 : 64 - std::countl_zero(key ^ last_); }

  void Put(int b, const Entry& e) {
    Level& level = buckets_[b];
    const uint64_t key = KeyOf(e.time);
    if (level.entries.empty() || key < level.min) level.min = key;
    level.entries.push_back(e);
    occupied_ |= uint64_t{1} << b;
  }

  // Makes the smallest key of bucket b the floor and spreads b over the lower buckets (all
  // empty): every entry of b now differs from it only in bits below b - 1.
  void Redistribute(int b) {
    last_ = buckets_[b].min;
    scratch_.swap(buckets_[b].entries);
    occupied_ &= ~(uint64_t{1} << b);
    for (const Entry& e : scratch_) Put(Bucket(KeyOf(e.time)), e);
    scratch_.clear();
  }

  Level buckets_[64];
  uint64_t occupied_ = 0;  // Bit b: bucket b is not empty.
  uint64_t last_ = 0;      // Times are not negative (they start at the first arrival).
  std::vector<Entry> scratch_;
};

// Completion events in time order, with the next few of them known in order (ahead()), so that
// the loop can fetch what their finishes will read well before it needs it. The next
// completions are kept out of the heap in a short list sorted on (time, push order); every entry
// of the list comes before every entry of the heap. Completions of equal time come out in the
// order they were pushed (start order), as from a heap ordered on (time, start order): policy
// original's random GPU picks depend on the order in which GPUs went idle.
template <typename T>
class CompletionQueue {
 public:
  using Entry = typename RadixHeap<T>::Entry;
  static constexpr size_t kAhead = 8;

  bool empty() const { return ahead_.empty(); }  // ahead_ is refilled after every change.
  TimeMicros min_time() const { return ahead_.front().time; }
  // The next completions, in order (more while many share a key).
  const std::vector<Entry>& ahead() const { return ahead_; }

  void push(TimeMicros time, const T& what) {
    const Entry e{time, next_seq_++, what};
    if (RadixHeap<T>::KeyOf(time) < heap_.floor() ||
        (!ahead_.empty() && time < ahead_.back().time) ||
        (ahead_.size() < kAhead && heap_.empty())) {
      // After the entries of equal time already listed (they were pushed earlier).
      auto at = std::upper_bound(ahead_.begin(), ahead_.end(), time,
                                 [](TimeMicros t, const Entry& x) { return t < x.time; });
      ahead_.insert(at, e);
      // Overflow goes back to the heap, where allowed (not below its floor).
      while (ahead_.size() > kAhead && RadixHeap<T>::KeyOf(ahead_.back().time) >= heap_.floor()) {
        heap_.push(ahead_.back());
        ahead_.pop_back();
      }
    } else {
      heap_.push(e);
    }
    Refill();
  }

  // Takes out every entry of time min_time() and calls fn(completion) for each, in push order;
  // must not be empty.
  template <typename Fn>
  void PopMin(Fn&& fn) {
    const TimeMicros t = ahead_.front().time;
    group_.clear();
    // More entries of time t may wait in the heap behind a full list: take them all.
    while (!ahead_.empty() && ahead_.front().time == t) {
      size_t n = 0;
      while (n < ahead_.size() && ahead_[n].time == t) ++n;
      group_.insert(group_.end(), ahead_.begin(), ahead_.begin() + static_cast<std::ptrdiff_t>(n));
      ahead_.erase(ahead_.begin(), ahead_.begin() + static_cast<std::ptrdiff_t>(n));
      Refill();
    }
    for (const Entry& e : group_) fn(e.what);
  }

 private:
  static bool Before(const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time < b.time : a.seq < b.seq;
  }

  // Takes whole keys from the heap until the list is long enough. Each key's entries come after
  // everything listed, and are sorted among themselves.
  void Refill() {
    while (ahead_.size() < kAhead && !heap_.empty()) {
      const size_t from = ahead_.size();
      heap_.PopMin(ahead_);
      std::sort(ahead_.begin() + static_cast<std::ptrdiff_t>(from), ahead_.end(), Before);
    }
  }

  std::vector<Entry> ahead_;  // Sorted on (time, push order).
  RadixHeap<T> heap_;
  uint64_t next_seq_ = 0;
  std::vector<Entry> group_;  // Scratch for PopMin.
};

}  // namespace dgpu::sim
