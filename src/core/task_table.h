// TaskTable: task number -> T*, tuned for numbers handed out in increasing order.
//
// The core numbers tasks 1, 2, 3, ... (after a failover the numbers continue from a higher
// base), and forgets most of them some time later, so the live numbers cluster in a window
// [base, end). Inside the window a task is found with one array access, and a new number lands
// next to the previous one (no random probe into a large hash table). Numbers that do not fit
// the window (restored out of order, from an older epoch, or a long-lived task the window has
// moved away from) live in a hash map.
//
// The window stays dense: when holes outnumber live entries, the oldest entries move to the map.
// Every number enters the window at most once and leaves it at most once, so all operations are
// amortized O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace dgpu::core {

template <typename T>
class TaskTable {
 public:
  using Number = uint64_t;

  T* Find(Number n) const {
    if (n - base_ < Width()) {
      if (T* value = window_[head_ + (n - base_)]) return value;
    }
    // A hole may stand for a number kept in the map (the window can grow over it).
    if (others_.empty()) return nullptr;
    auto it = others_.find(n);
    return it == others_.end() ? nullptr : it->second;
  }

  // A hint: fetches the window entry of n into cache.
  void Prefetch(Number n) const {
    if (n - base_ < Width()) __builtin_prefetch(&window_[head_ + (n - base_)]);
  }

  // n must not be present.
  void Insert(Number n, T* value) {
    ++size_;
    if (in_window_ == 0) {
      // Empty window: start it here.
      window_.clear();
      head_ = 0;
      base_ = n;
      window_.push_back(value);
      in_window_ = 1;
      return;
    }
    const Number end = base_ + Width();
    if (n == end) {
      // The usual case: the next number.
      window_.push_back(value);
      ++in_window_;
      if (Width() > 2 * in_window_ + kSlack) Compact();
      return;
    }
    if (n - base_ < Width()) {
      window_[head_ + (n - base_)] = value;
      ++in_window_;
      return;
    }
    if (n >= end && n - end <= kMaxGap) {
      window_.insert(window_.end(), n - end, nullptr);
      window_.push_back(value);
      ++in_window_;
      Compact();
      return;
    }
    if (n > end) {
      // Far ahead (a new epoch): new numbers follow this one, so the window moves here.
      MoveWindowToMap();
      --size_;
      Insert(n, value);
      return;
    }
    others_.emplace(n, value);
  }

  // Returns whether n was present.
  bool Erase(Number n) {
    if (n - base_ < Width()) {
      T*& slot = window_[head_ + (n - base_)];
      if (slot != nullptr) {
        slot = nullptr;
        --in_window_;
        --size_;
        Trim();
        return true;
      }
    }
    if (others_.erase(n) == 0) return false;
    --size_;
    return true;
  }

  size_t size() const { return size_; }

  // Calls fn(number, T*) for every entry, in no particular order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t i = head_; i < window_.size(); ++i) {
      if (window_[i] != nullptr) fn(base_ + (i - head_), window_[i]);
    }
    for (const auto& [n, value] : others_) fn(n, value);
  }

 private:
  static constexpr Number kMaxGap = 4096;  // Holes allowed when a number skips ahead.
  static constexpr size_t kSlack = 4096;   // Holes tolerated before the window is compacted.

  size_t Width() const { return window_.size() - head_; }

  // Drops holes at both ends of the window.
  void Trim() {
    while (head_ < window_.size() && window_[head_] == nullptr) {
      ++head_;
      ++base_;
    }
    while (window_.size() > head_ && window_.back() == nullptr) window_.pop_back();
    if (head_ == window_.size()) {
      window_.clear();
      head_ = 0;
    } else if (head_ > window_.size() / 2 && head_ > kSlack) {
      window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

  // Keeps at least half of the window live: the oldest entries move to the map.
  void Compact() {
    while (Width() > 2 * in_window_ + kSlack) {
      T* oldest = window_[head_];
      if (oldest != nullptr) {
        others_.emplace(base_, oldest);
        window_[head_] = nullptr;
        --in_window_;
      }
      Trim();
    }
  }

  void MoveWindowToMap() {
    for (size_t i = head_; i < window_.size(); ++i) {
      if (window_[i] != nullptr) others_.emplace(base_ + (i - head_), window_[i]);
    }
    window_.clear();
    head_ = 0;
    in_window_ = 0;
  }

  Number base_ = 0;         // Number of window_[head_].
  std::vector<T*> window_;  // [head_, size()): numbers base_, base_ + 1, ...; nullptr: none.
  size_t head_ = 0;
  size_t in_window_ = 0;  // Non-null entries in the window.
  size_t size_ = 0;
  absl::flat_hash_map<Number, T*> others_;
};

}  // namespace dgpu::core
