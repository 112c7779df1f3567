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
//
// Nodes may also report the CPUs and memory they have free, and the most free GPUs inside one of
// their NVLink groups (their Room). Once one does, every bucket keeps, per 64-position word and
// per 64 words, the most of each free on one of its nodes there (each on its own, maybe two
// nodes), so a lookup for a task that asks for CPUs or memory of its own, or for GPUs of one
// group, skips the words and groups of words where no node has them: the walk over a bucket's
// nodes short of CPUs becomes a scan of its summaries. An update recomputes
// one word's maxima (and its group's) only when the node that held one lost it.
//
// Sets of nodes (the nodes with one label, say) are kept by position too, one bit per position
// with a summary bit per non-zero word: a lookup for the nodes in some sets ANDs their words with
// the bucket's, so the words and groups of words where no such node is are skipped whole.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <span>
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
  static constexpr int32_t kUnlimited = std::numeric_limits<int32_t>::max();
  // What a node has free beside its GPUs: CPU millis and MiB of memory, and how many of its
  // GPUs' shares of each (the most GPUs a task taking its GPUs' share could ask for), kUnlimited
  // for what it does not report. As a need: what a task asks for of its own, or the GPUs it
  // takes the share of; 0 for nothing. 32 bits each (Clamp), to keep the index small: a value
  // beyond is one of the largest that fits, and the caller checks a node the index answers.
  // `linked`: the most free GPUs inside one NVLink group (unlimited for a node without groups);
  // as a need, the GPUs a task wants inside one group.
  struct Room {
    int32_t cpus = kUnlimited;
    int32_t memory = kUnlimited;
    int32_t cpu_shares = kUnlimited;
    int32_t memory_shares = kUnlimited;
    int32_t linked = kUnlimited;
    bool Holds(const Room& need) const {
      return cpus >= need.cpus && memory >= need.memory && cpu_shares >= need.cpu_shares &&
             memory_shares >= need.memory_shares && linked >= need.linked;
    }
    bool Any() const {
      return cpus > 0 || memory > 0 || cpu_shares > 0 || memory_shares > 0 || linked > 0;
    }
    bool operator==(const Room&) const = default;
  };
  // What a node reports when it reports nothing, and a need of nothing.
  static constexpr Room kUnlimitedRoom{kUnlimited, kUnlimited, kUnlimited, kUnlimited, kUnlimited};
  static constexpr Room kNoNeed{0, 0, 0, 0, 0};
  static int32_t Clamp(int64_t v) {
    return static_cast<int32_t>(
        std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min() + 1, kUnlimited - 1));
  }

  // A node's Room is the one last given to Insert or SetRoom, for all of its models.
  void Insert(int model, Entry e, int free, int capacity, Room room);
  void Insert(int model, Entry e, int free, int capacity) {
    Insert(model, e, free, capacity, kUnlimitedRoom);
  }
  void Erase(int model, Entry e, int free, int capacity);
  void Move(int model, Entry e, int old_free, int new_free);
  // The same, and the node has `room` free now (one update for both).
  void Move(int model, Entry e, int old_free, int new_free, const Room& room);
  // A node that is in the index has `room` free now.
  void SetRoom(Entry e, Room room);
  // The room last given for a node (unlimited for one never inserted).
  Room RoomOf(uint32_t slot) const {
    return slot < pos_of_slot_.size() && pos_of_slot_[slot] != kNone ? rooms_[pos_of_slot_[slot]]
                                                                     : kUnlimitedRoom;
  }

  // Sets of nodes, by slot, whether or not the node is in the index (one that joins later is in
  // its sets): made once, never removed. A lookup given set ids considers only the nodes in
  // every one of them.
  using SetId = uint32_t;
  using Sets = std::span<const SetId>;
  SetId NewSet();
  void PutInSet(SetId set, uint32_t slot, bool in);
  bool InSet(SetId set, uint32_t slot) const;
  bool InAllSets(Sets sets, uint32_t slot) const {
    return std::all_of(sets.begin(), sets.end(), [&](SetId s) { return InSet(s, slot); });
  }

  // Groups of nodes (the values of a topology label): a node is in at most one, by slot,
  // whether or not it is in the index. Per model and group the index counts the nodes it holds
  // by their free GPUs, so how many nodes of each group fit k GPUs is known without a walk.
  using GroupId = int32_t;
  static constexpr GroupId kNoGroup = -1;
  void SetGroup(uint32_t slot, GroupId group);
  // The nodes of `group` in the index with exactly f free GPUs of `model`, by f; shorter than
  // the model's buckets where the rest are 0 (empty for none).
  std::span<const int32_t> GroupCounts(int model, GroupId group) const {
    if (model < 0 || static_cast<size_t>(model) >= group_counts_.size()) return {};
    const GroupCountsOf& of = group_counts_[static_cast<size_t>(model)];
    const size_t at = static_cast<size_t>(group) * of.stride;
    if (group < 0 || at >= of.counts.size()) return {};
    return {of.counts.data() + at, of.stride};
  }

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
    return FindBestFitWhere(models, k, excluded, kNoNeed, ok);
  }
  // The same among the nodes with `need` free (their Room holds it) whose slot passes ok(slot).
  template <typename Ok>
  std::optional<Fit> FindBestFitWhere(const std::vector<int>& models, int k,
                                      const std::vector<uint32_t>& excluded, const Room& need,
                                      Ok&& ok) const {
    return FindBestFitWhere(models, k, excluded, need, Sets{}, ok);
  }
  // The same among the nodes in every one of `sets`.
  template <typename Ok>
  std::optional<Fit> FindBestFitWhere(const std::vector<int>& models, int k,
                                      const std::vector<uint32_t>& excluded, const Room& need,
                                      Sets sets, Ok&& ok) const {
    const Filter filter = FilterOf(need, sets);
    std::optional<Fit> best;
    uint32_t best_pos = 0;
    for (int m : models) {
      if (m >= static_cast<int>(models_.size())) continue;
      const auto& buckets = models_[m].by_free;
      int limit = static_cast<int>(buckets.size());
      if (best) limit = std::min(limit, best->free + 1);
      for (int f = std::max(k, 1); f < limit; ++f) {
        uint32_t p = First(
            buckets[f],
            [&](uint32_t pos) {
              const uint32_t slot = slot_of_pos_[pos];
              return (excluded.empty() ||
                      std::find(excluded.begin(), excluded.end(), slot) == excluded.end()) &&
                     ok(slot);
            },
            filter);
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
  // The same for one model; returns false when fn did. With a need, only the nodes whose Room
  // holds it; with sets, only the nodes in every one.
  template <typename Fn>
  bool ForEachFitOf(int m, int k, const std::vector<uint32_t>& excluded, Fn&& fn) const {
    return ForEachFitOf(m, k, excluded, kNoNeed, fn);
  }
  template <typename Fn>
  bool ForEachFitOf(int m, int k, const std::vector<uint32_t>& excluded, const Room& need,
                    Fn&& fn) const {
    return ForEachFitOf(m, k, excluded, need, Sets{}, fn);
  }
  template <typename Fn>
  bool ForEachFitOf(int m, int k, const std::vector<uint32_t>& excluded, const Room& need,
                    Sets sets, Fn&& fn) const {
    if (m >= static_cast<int>(models_.size())) return true;
    const Filter filter = FilterOf(need, sets);
    const auto& buckets = models_[m].by_free;
    for (int f = std::max(k, 1); f < static_cast<int>(buckets.size()); ++f) {
      const Bitset& b = buckets[f];
      for (uint32_t p = b.FindFrom(0, filter); p != kNone; p = b.FindFrom(p + 1, filter)) {
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
        uint32_t p = First(
            buckets[f], [&](uint32_t pos) { return capacity_of(slot_of_pos_[pos], m) >= k; },
            Filter{});
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

  static constexpr int32_t kLeast = std::numeric_limits<int32_t>::min();
  static constexpr Room kNoRoom{kLeast, kLeast, kLeast, kLeast, kLeast};
  static Room MaxOf(const Room& a, const Room& b) {
    return {std::max(a.cpus, b.cpus), std::max(a.memory, b.memory),
            std::max(a.cpu_shares, b.cpu_shares), std::max(a.memory_shares, b.memory_shares),
            std::max(a.linked, b.linked)};
  }
  static constexpr int32_t Room::*kDims[] = {&Room::cpus, &Room::memory, &Room::cpu_shares,
                                             &Room::memory_shares, &Room::linked};
  static constexpr size_t kDimCount = std::size(kDims);
  // Whether `now` has less than `old` of a value that `most` (a maximum that counted `old`) may
  // hold: the maximum must be computed again.
  static bool Lost(const Room& old, const Room& now, const Room& most) {
    for (auto d : kDims) {
      if (now.*d < old.*d && old.*d >= most.*d) return true;
    }
    return false;
  }
  // The most of each value over some rooms, with how many rooms have it: a room that leaves
  // with the most of a value that others have too leaves it as it was.
  struct Most {
    Room room = kNoRoom;
    std::array<uint8_t, kDimCount> ties{};
    void Add(const Room& r) {
      for (size_t i = 0; i < kDimCount; ++i) {
        const int32_t v = r.*kDims[i];
        if (v > room.*kDims[i]) {
          room.*kDims[i] = v;
          ties[i] = 1;
        } else if (v == room.*kDims[i]) {
          ++ties[i];
        }
      }
    }
    // Takes r out; false when it had the last of a most, which must be computed again.
    bool Remove(const Room& r) {
      bool exact = true;
      for (size_t i = 0; i < kDimCount; ++i) {
        if (r.*kDims[i] == room.*kDims[i] && --ties[i] == 0) exact = false;
      }
      return exact;
    }
  };

  // A set of nodes by position (see SetId): a bit per position, a summary bit per non-zero word.
  struct NodeSet {
    std::vector<uint64_t> words;
    std::vector<uint64_t> summary;
    uint64_t Word(size_t w) const { return w < words.size() ? words[w] : 0; }
    uint64_t Summary(size_t s) const { return s < summary.size() ? summary[s] : 0; }
    bool Has(uint32_t p) const { return (Word(p >> 6) >> (p & 63) & 1) != 0; }
    void Put(uint32_t p, bool in) {
      const size_t w = p >> 6;
      if (w >= words.size()) {
        if (!in) return;
        words.resize(w + 1, 0);
        summary.resize((words.size() + 63) >> 6, 0);
      }
      const uint64_t bit = uint64_t{1} << (p & 63);
      words[w] = in ? words[w] | bit : words[w] & ~bit;
      const uint64_t sbit = uint64_t{1} << (w & 63);
      summary[w >> 6] = words[w] != 0 ? summary[w >> 6] | sbit : summary[w >> 6] & ~sbit;
    }
  };
  // What a lookup asks of a position beside being in a bucket: a room that holds `need` (when
  // not null: rooms are tracked) and being in every set of `in`.
  struct Filter {
    const Room* need = nullptr;
    const std::vector<Room>* rooms = nullptr;
    const std::vector<NodeSet>* sets = nullptr;
    Sets in;
    bool Any() const { return need != nullptr || !in.empty(); }
    // `bits` (of word w) that are in every set, and summary bits (of entry s) likewise.
    uint64_t Word(size_t w, uint64_t bits) const {
      for (SetId id : in) bits &= (*sets)[id].Word(w);
      return bits;
    }
    uint64_t Summary(size_t s, uint64_t bits) const {
      for (SetId id : in) bits &= (*sets)[id].Summary(s);
      return bits;
    }
  };
  Filter FilterOf(const Room& need, Sets sets) const {
    return Filter{Prunes(need) ? &need : nullptr, &rooms_, &sets_, sets};
  }

  // Set of positions: one bit per position, plus one summary bit per non-zero word, so finding
  // the next set bit scans at most one word and then the summary (positions / 4096 words). With
  // rooms (`rooms` not null: the Room of each position), also the most CPUs and memory free per
  // word (with ties counted) and per group of 64 words (the words of one summary entry), exact
  // after every update.
  class Bitset {
   public:
    bool empty() const { return count_ == 0; }
    void Set(uint32_t p, const std::vector<Room>* rooms) {
      size_t w = p >> 6;
      if (w >= words_.size()) {
        words_.resize(w + 1, 0);
        summary_.resize((words_.size() + 63) >> 6, 0);
        word_room_.resize(words_.size());
        group_room_.resize(summary_.size(), kNoRoom);
      }
      words_[w] |= uint64_t{1} << (p & 63);
      summary_[w >> 6] |= uint64_t{1} << (w & 63);
      ++count_;
      if (rooms != nullptr) Add(w, (*rooms)[p]);
    }
    void Clear(uint32_t p, const std::vector<Room>* rooms) {
      size_t w = p >> 6;
      words_[w] &= ~(uint64_t{1} << (p & 63));
      if (words_[w] == 0) summary_[w >> 6] &= ~(uint64_t{1} << (w & 63));
      --count_;
      if (rooms != nullptr && !word_room_[w].Remove((*rooms)[p])) RecomputeWord(w, *rooms);
    }
    bool Has(uint32_t p) const {
      size_t w = p >> 6;
      return w < words_.size() && (words_[w] >> (p & 63) & 1) != 0;
    }
    // Position p (set) had `old` free and has rooms[p] now.
    void RoomChanged(uint32_t p, const Room& old, const std::vector<Room>& rooms) {
      const size_t w = p >> 6;
      if (word_room_[w].Remove(old)) {
        Add(w, rooms[p]);
      } else {
        RecomputeWord(w, rooms);
      }
    }
    // Every word's and group's maxima from scratch.
    void RecomputeRooms(const std::vector<Room>& rooms) {
      for (size_t w = 0; w < words_.size(); ++w) word_room_[w] = WordRoom(w, rooms);
      for (size_t g = 0; g < summary_.size(); ++g) group_room_[g] = GroupRoom(g);
    }
    // The first set position >= p, or kNone; with a filter, the first that passes it.
    uint32_t FindFrom(uint32_t p) const {
      if (count_ == 0) return kNone;
      size_t w = p >> 6;
      if (w >= words_.size()) return kNone;
      uint64_t bits = words_[w] & (~uint64_t{0} << (p & 63));
      if (bits != 0) return static_cast<uint32_t>((w << 6) + std::countr_zero(bits));
      size_t word = NextWord(w + 1, nullptr);
      if (word == kNoWord) return kNone;
      return static_cast<uint32_t>((word << 6) + std::countr_zero(words_[word]));
    }
    uint32_t FindFrom(uint32_t p, const Filter& f) const {
      if (!f.Any()) return FindFrom(p);
      if (count_ == 0) return kNone;
      size_t w = p >> 6;
      if (w >= words_.size()) return kNone;
      uint64_t bits = f.Word(w, words_[w] & (~uint64_t{0} << (p & 63)));
      for (;;) {
        if (bits != 0) {
          if (f.need == nullptr) return static_cast<uint32_t>((w << 6) + std::countr_zero(bits));
          if (word_room_[w].room.Holds(*f.need)) {
            for (; bits != 0; bits &= bits - 1) {
              const auto q = static_cast<uint32_t>((w << 6) + std::countr_zero(bits));
              if ((*f.rooms)[q].Holds(*f.need)) return q;
            }
          }
        }
        w = NextWord(w + 1, &f);
        if (w == kNoWord) return kNone;
        bits = f.Word(w, words_[w]);
      }
    }

   private:
    static constexpr size_t kNoWord = ~size_t{0};
    // The first non-empty word >= w (with a position that may pass the filter, if given), from
    // the summary.
    size_t NextWord(size_t w, const Filter* f) const {
      size_t s = w >> 6;
      if (s >= summary_.size()) return kNoWord;
      uint64_t sbits = summary_[s] & (~uint64_t{0} << (w & 63));
      for (;;) {
        if (f != nullptr) {
          sbits = f->need != nullptr && !group_room_[s].Holds(*f->need) ? 0 : f->Summary(s, sbits);
        }
        for (; sbits != 0; sbits &= sbits - 1) {
          const size_t word = (s << 6) + std::countr_zero(sbits);
          if (f == nullptr) return word;
          if ((f->need == nullptr || word_room_[word].room.Holds(*f->need)) &&
              f->Word(word, words_[word]) != 0) {
            return word;
          }
        }
        if (++s >= summary_.size()) return kNoWord;
        sbits = summary_[s];
      }
    }
    void Add(size_t w, const Room& r) {
      word_room_[w].Add(r);
      group_room_[w >> 6] = MaxOf(group_room_[w >> 6], r);
    }
    Most WordRoom(size_t w, const std::vector<Room>& rooms) const {
      Most most;
      for (uint64_t bits = words_[w]; bits != 0; bits &= bits - 1) {
        most.Add(rooms[(w << 6) + std::countr_zero(bits)]);
      }
      return most;
    }
    Room GroupRoom(size_t g) const {
      Room most = kNoRoom;
      for (uint64_t sbits = summary_[g]; sbits != 0; sbits &= sbits - 1) {
        most = MaxOf(most, word_room_[(g << 6) + std::countr_zero(sbits)].room);
      }
      return most;
    }
    // Word w's maxima after one of its positions lost what may have been one of them.
    void RecomputeWord(size_t w, const std::vector<Room>& rooms) {
      const Room old = word_room_[w].room;
      word_room_[w] = WordRoom(w, rooms);
      const Room& group = group_room_[w >> 6];
      if (Lost(old, word_room_[w].room, group)) {
        group_room_[w >> 6] = GroupRoom(w >> 6);
      } else {
        group_room_[w >> 6] = MaxOf(group, word_room_[w].room);
      }
    }

    std::vector<uint64_t> words_;
    std::vector<uint64_t> summary_;
    std::vector<Most> word_room_;
    std::vector<Room> group_room_;
    uint32_t count_ = 0;
  };

  struct ModelBuckets {
    std::vector<Bitset> by_free;
    std::map<int, int> capacity_counts;  // capacity -> number of nodes.
  };
  ModelBuckets& Buckets(int model, int size);
  uint32_t PositionOf(Entry e);
  // Rooms are kept (tracked) from the first node that reports one.
  bool Prunes(const Room& need) const { return tracking_rooms_ && need.Any(); }
  const std::vector<Room>* Tracked() const { return tracking_rooms_ ? &rooms_ : nullptr; }
  void UpdateRoom(uint32_t pos, const Room& room);
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
  // Only positions that pass the filter.
  template <typename Ok>
  uint32_t First(const Bitset& bucket, Ok&& ok, const Filter& filter) const {
    uint32_t best = kNone;
    for (uint32_t p = bucket.FindFrom(0, filter); p != kNone && p < ordered_;
         p = bucket.FindFrom(p + 1, filter)) {
      if (ok(p)) {
        best = p;
        break;
      }
    }
    if (ordered_ == slot_of_pos_.size()) return best;
    for (uint32_t p = bucket.FindFrom(ordered_, filter); p != kNone;
         p = bucket.FindFrom(p + 1, filter)) {
      if (ok(p) && (best == kNone || Before(p, best))) best = p;
    }
    return best;
  }

  std::vector<ModelBuckets> models_;
  std::vector<uint32_t> pos_of_slot_;  // kNone: never inserted.
  std::vector<uint32_t> slot_of_pos_;
  std::vector<const uint64_t*> rank_of_slot_;
  std::vector<Room> rooms_;  // By position.
  std::vector<NodeSet> sets_;
  std::vector<std::vector<SetId>> sets_of_slot_;  // The sets each slot is in.
  std::vector<GroupId> group_of_slot_;            // kNoGroup past its end.
  // By model: nodes in the index by group and free GPUs (see GroupCounts), one row of `stride`
  // counts per group, the rows together so that counting every group reads one array.
  struct GroupCountsOf {
    size_t stride = 0;
    std::vector<int32_t> counts;
  };
  std::vector<GroupCountsOf> group_counts_;
  // The node at `slot` enters (delta 1) or leaves (-1) the count of `free` of its group.
  void CountInGroup(int model, uint32_t slot, int free, int delta) {
    if (slot >= group_of_slot_.size() || group_of_slot_[slot] == kNoGroup) return;
    CountGroup(model, group_of_slot_[slot], free, delta);
  }
  void CountGroup(int model, GroupId group, int free, int delta);
  bool tracking_rooms_ = false;
  // Positions [0, ordered_) follow id order; the rest are extras, appended out of order.
  uint32_t ordered_ = 0;
};

}  // namespace dgpu::core
