// The simulator's completion events: a radix heap under a short sorted list of the next ones.
// Not thread-safe; header-only, so that tests can drive it directly.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/types.h"

namespace dgpu::sim {

using core::TimeMicros;

// A radix heap (Ahuja, Mehlhorn, Orlin, Tarjan 1990) with byte-wide digits, of events keyed on
// their time in units of 2^20 us (about a second). Keys pushed never go below floor(), the last
// key taken out, which is all a radix heap needs. An entry with the floor's key waits in `exact_`;
// any other sits at level l = the highest byte in which its key differs from the floor, in the
// bucket of its own value of that byte. The lowest non-empty bucket of the lowest non-empty level
// holds the smallest keys; taking them out makes its smallest key the floor and moves its entries
// to lower levels. So an entry moves at most once per byte of its key (three for a replay of a
// few months), every move a sequential read and append, where a comparison heap of
// 100,000-200,000 running tasks walks about 9 levels of mostly uncached memory per completion.
// The coarse key saves the moves through the microseconds; entries of one key come out
// unordered, and CompletionQueue orders them.
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

  bool empty() const { return size_ == 0; }
  uint64_t floor() const { return last_; }

  // KeyOf(e.time) >= floor().
  void push(const Entry& e) {
    Put(KeyOf(e.time), e);
    ++size_;
  }

  // Takes out every entry of the smallest key, appending them to out; must not be empty.
  void PopMin(std::vector<Entry>& out) {
    if (exact_.empty()) Advance();
    out.insert(out.end(), exact_.begin(), exact_.end());
    size_ -= exact_.size();
    exact_.clear();
  }

 private:
  static constexpr int kLevels = 8;  // Bytes of a key.
  struct Bucket {
    std::vector<Entry> entries;
    uint64_t min = 0;  // Smallest key in entries.
  };

  void Put(uint64_t key, const Entry& e) {
    if (key == last_) {
      exact_.push_back(e);
      return;
    }
    const int level = (63 - std::countl_zero(key ^ last_)) / 8;
    const auto byte = static_cast<unsigned>(key >> (8 * level)) & 0xffu;
    Bucket& b = buckets_[level][byte];
    if (b.entries.empty()) {
      b.min = key;
      occupied_[level][byte / 64] |= uint64_t{1} << (byte % 64);
      levels_ |= 1u << level;
    } else if (key < b.min) {
      b.min = key;
    }
    b.entries.push_back(e);
  }

  // Makes the smallest key the floor and spreads its bucket over the lower levels (and exact_).
  void Advance() {
    const int level = std::countr_zero(levels_);
    uint64_t* words = occupied_[level];
    int word = 0;
    while (words[word] == 0) ++word;
    const int byte = word * 64 + std::countr_zero(words[word]);
    Bucket& b = buckets_[level][byte];
    last_ = b.min;
    words[word] &= words[word] - 1;  // Clears the lowest set bit: this bucket's.
    if ((words[0] | words[1] | words[2] | words[3]) == 0) levels_ &= ~(1u << level);
    // Every entry goes to a lower level (or exact_), never back here; the bucket keeps its
    // buffer for the next time it fills.
    for (const Entry& e : b.entries) Put(KeyOf(e.time), e);
    b.entries.clear();
  }

  Bucket buckets_[kLevels][256];
  uint64_t occupied_[kLevels][4] = {};  // Bit per non-empty bucket.
  unsigned levels_ = 0;                 // Bit per level with a non-empty bucket.
  std::vector<Entry> exact_;            // Entries whose key is the floor.
  size_t size_ = 0;
  uint64_t last_ = 0;  // Times are not negative (they start at the first arrival).
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

  bool empty() const { return size() == 0; }  // The list is refilled after every change.
  TimeMicros min_time() const { return list_[head_].time; }
  // The next completions, in order (more while many share a key).
  std::span<const Entry> ahead() const { return {list_.data() + head_, size()}; }

  void push(TimeMicros time, const T& what) {
    const Entry e{time, next_seq_++, what};
    if (RadixHeap<T>::KeyOf(time) < heap_.floor() || (size() > 0 && time < list_.back().time) ||
        (size() < kAhead && heap_.empty())) {
      // After the entries of equal time already listed (they were pushed earlier).
      auto at = std::upper_bound(list_.begin() + static_cast<std::ptrdiff_t>(head_), list_.end(),
                                 time, [](TimeMicros t, const Entry& x) { return t < x.time; });
      list_.insert(at, e);
      // Overflow goes back to the heap, where allowed (not below its floor).
      while (size() > kAhead && RadixHeap<T>::KeyOf(list_.back().time) >= heap_.floor()) {
        heap_.push(list_.back());
        list_.pop_back();
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
    const TimeMicros t = min_time();
    group_.clear();
    // More entries of time t may wait in the heap behind a full list: take them all.
    while (size() > 0 && list_[head_].time == t) {
      while (head_ < list_.size() && list_[head_].time == t) group_.push_back(list_[head_++]);
      if (head_ == list_.size()) {
        list_.clear();
        head_ = 0;
      } else if (head_ >= 64) {
        list_.erase(list_.begin(), list_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
      }
      Refill();
    }
    for (const Entry& e : group_) fn(e.what);
  }

 private:
  static bool Before(const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time < b.time : a.seq < b.seq;
  }

  size_t size() const { return list_.size() - head_; }

  // Takes whole keys from the heap until the list is long enough. Each key's entries come after
  // everything listed, and are sorted among themselves.
  void Refill() {
    while (size() < kAhead && !heap_.empty()) {
      const size_t from = list_.size();
      heap_.PopMin(list_);
      if (list_.size() - from > 1) {
        std::sort(list_.begin() + static_cast<std::ptrdiff_t>(from), list_.end(), Before);
      }
    }
  }

  // The next completions: list_[head_, end), sorted on (time, push order). Entries before head_
  // are taken out; they are dropped in bulk.
  std::vector<Entry> list_;
  size_t head_ = 0;
  RadixHeap<T> heap_;
  uint64_t next_seq_ = 0;
  std::vector<Entry> group_;  // Scratch for PopMin.
};

}  // namespace dgpu::sim
