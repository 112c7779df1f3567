#include "core/placement_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

namespace dgpu::core {
namespace {

class PlacementIndexTest : public ::testing::Test {
 protected:
  void Add(int model, uint32_t slot, int free, int capacity) {
    index_.Insert(model, {&ranks_[slot], slot}, free, capacity);
  }
  std::vector<uint64_t> ranks_ = {10, 20, 30, 40};  // node-a .. node-d
  PlacementIndex index_;
};

struct FitCase {
  const char* name;
  int k;
  int want_slot;  // -1: no fit.
  int want_free;
};

TEST_F(PlacementIndexTest, BestFitTable) {
  // node-a: 8 free, node-b: 2 free, node-c: 3 free, node-d: 2 free (all model 0, capacity 8).
  Add(0, 0, 8, 8);
  Add(0, 1, 2, 8);
  Add(0, 2, 3, 8);
  Add(0, 3, 2, 8);
  const FitCase cases[] = {
      {"one GPU goes to the fullest node, lowest id", 1, 1, 2},
      {"two GPUs: exact fit, tie on id", 2, 1, 2},
      {"three GPUs: the 3-free node", 3, 2, 3},
      {"four GPUs: only the empty node", 4, 0, 8},
      {"eight GPUs: the empty node", 8, 0, 8},
      {"nine GPUs: nothing", 9, -1, 0},
  };
  for (const auto& c : cases) {
    auto fit = index_.FindBestFit({0}, c.k, {});
    if (c.want_slot < 0) {
      EXPECT_FALSE(fit.has_value()) << c.name;
      continue;
    }
    ASSERT_TRUE(fit.has_value()) << c.name;
    EXPECT_EQ(fit->slot, static_cast<uint32_t>(c.want_slot)) << c.name;
    EXPECT_EQ(fit->free, c.want_free) << c.name;
  }
}

TEST_F(PlacementIndexTest, MoveAndExclude) {
  Add(0, 0, 4, 4);
  Add(0, 1, 4, 4);
  index_.Move(0, {&ranks_[0], 0}, 4, 1);
  auto fit = index_.FindBestFit({0}, 1, {});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 0u);
  fit = index_.FindBestFit({0}, 1, {0});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
  EXPECT_FALSE(index_.FindBestFit({0}, 2, {1}).has_value());
}

TEST_F(PlacementIndexTest, ModelsAreSeparateAndCapacityTracked) {
  Add(0, 0, 8, 8);
  Add(1, 1, 4, 4);
  EXPECT_EQ(index_.MaxCapacity(0), 8);
  EXPECT_EQ(index_.MaxCapacity(1), 4);
  EXPECT_EQ(index_.MaxCapacity(2), 0);
  auto fit = index_.FindBestFit({0, 1}, 2, {});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->model, 1);  // 4 free beats 8 free.
  EXPECT_FALSE(index_.FindBestFit({1}, 5, {}).has_value());
  index_.Erase(0, {&ranks_[0], 0}, 8, 8);
  EXPECT_EQ(index_.MaxCapacity(0), 0);
}

TEST_F(PlacementIndexTest, MostFreeForReservation) {
  Add(0, 0, 1, 8);
  Add(0, 1, 5, 8);
  Add(0, 2, 5, 8);
  Add(0, 3, 7, 4);  // Too small for 8.
  auto fit = index_.FindMostFree({0}, 8, [](uint32_t slot, int) { return slot == 3 ? 4 : 8; });
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
  EXPECT_EQ(fit->free, 5);
}

TEST_F(PlacementIndexTest, NodesInsertedOutOfIdOrder) {
  // Slots registered in reverse id order: ties still go to the lowest id (rank).
  Add(0, 3, 2, 8);
  Add(0, 2, 2, 8);
  auto fit = index_.FindBestFit({0}, 1, {});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 2u);
  Add(0, 1, 2, 8);
  Add(0, 0, 5, 8);
  fit = index_.FindBestFit({0}, 2, {});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
  index_.Move(0, {&ranks_[1], 1}, 2, 6);
  fit = index_.FindBestFit({0}, 2, {2});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 3u);
  fit = index_.FindMostFree({0}, 1, [](uint32_t, int) { return 8; });
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
}

TEST_F(PlacementIndexTest, ANeedOfCpusOrMemoryPassesOverNodesShortOfThem) {
  using Room = PlacementIndex::Room;
  // node-a: 8 free GPUs, 64 CPUs; node-b: 1 free, 4 CPUs; node-c: 2 free, 12 CPUs and 1 GiB;
  // node-d: 1 free and reports nothing (unlimited).
  index_.Insert(0, {&ranks_[0], 0}, 8, 8, Room{64000, 65536});
  index_.Insert(0, {&ranks_[1], 1}, 1, 8, Room{4000, 65536});
  index_.Insert(0, {&ranks_[2], 2}, 2, 8, Room{12000, 1024});
  auto yes = [](uint32_t) { return true; };
  auto need = [](int32_t cpus, int32_t memory) { return Room{cpus, memory, 0, 0, 0}; };
  auto fit = index_.FindBestFitWhere({0}, 1, {}, need(8000, 0), yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 2u);  // The fullest node with 8 CPUs free.
  fit = index_.FindBestFitWhere({0}, 1, {}, need(8000, 2048), yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 0u);  // node-c has too little memory.
  EXPECT_FALSE(index_.FindBestFitWhere({0}, 1, {}, need(65000, 0), yes));
  // Rooms follow the node: node-b's task ends.
  index_.SetRoom({&ranks_[1], 1}, Room{36000, 65536});
  fit = index_.FindBestFitWhere({0}, 1, {}, need(8000, 0), yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
  // A node that reports nothing holds every need.
  index_.Insert(0, {&ranks_[3], 3}, 1, 8);
  fit = index_.FindBestFitWhere({0}, 1, {}, need(40000, 0), yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 3u);
  // No need: best fit on GPUs alone.
  fit = index_.FindBestFitWhere({0}, 1, {}, need(0, 0), yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
  // A need of GPU shares: node-a has room for 3 GPUs' share of CPUs, node-b and node-c for 1,
  // node-d for none.
  index_.SetRoom({&ranks_[0], 0}, Room{24000, 65536, 3, 8});
  index_.SetRoom({&ranks_[1], 1}, Room{8000, 65536, 1, 8});
  index_.SetRoom({&ranks_[2], 2}, Room{12000, 1024, 1, 1});
  index_.SetRoom({&ranks_[3], 3}, Room{0, 0, 0, 0});
  fit = index_.FindBestFitWhere({0}, 1, {}, Room{0, 0, 1, 1, 0}, yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 1u);
  fit = index_.FindBestFitWhere({0}, 1, {}, Room{0, 0, 2, 1, 0}, yes);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->slot, 0u);
}

// The index against a brute-force model: random nodes (inserted in random id order, some
// sharing a rank), models, moves, removals, sets of nodes (changed in and out of the index) and
// lookups.
TEST(PlacementIndexRandomTest, MatchesBruteForce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 22; ++round) {
    // The last rounds: thousands of nodes, all inserted first, so that lookups skip whole words
    // and groups of 64 words.
    const bool big = round >= 20;
    const int nodes =
        big ? 5000 + static_cast<int>(rng() % 4000) : 1 + static_cast<int>(rng() % 300);
    std::vector<uint64_t> ranks(nodes);
    for (auto& r : ranks) r = rng() % (nodes * 2);
    using Room = PlacementIndex::Room;
    struct State {
      bool in = false;
      int model = 0;
      int free = 0;
      int capacity = 0;
      Room room;  // Unlimited.
    };
    // Rooms: from the start in half the rounds, from a later step in the others; some nodes
    // report none (unlimited), some one of the two.
    const bool rooms_from_start = round % 2 == 0;
    auto random_room = [&]() {
      Room r{static_cast<int32_t>(rng() % 65) * 1000, static_cast<int32_t>(rng() % 9) * 1024,
             static_cast<int32_t>(rng() % 10) - 1, static_cast<int32_t>(rng() % 10) - 1,
             static_cast<int32_t>(rng() % 9)};
      if (rng() % 8 == 0) r.cpus = r.cpu_shares = PlacementIndex::kUnlimited;
      if (rng() % 8 == 0) r.memory = r.memory_shares = PlacementIndex::kUnlimited;
      if (rng() % 4 == 0) r.linked = PlacementIndex::kUnlimited;  // A node without NVLink groups.
      return r;
    };
    std::vector<State> state(nodes);
    PlacementIndex index;
    // Three sets: a node is in each with probability 1/2, 1/8 and 1/64, before it joins.
    constexpr int kSets = 3;
    std::vector<std::array<bool, kSets>> in_set(nodes);
    std::vector<PlacementIndex::SetId> set_ids;
    for (int i = 0; i < kSets; ++i) set_ids.push_back(index.NewSet());
    for (int n = 0; n < nodes; ++n) {
      for (int i = 0; i < kSets; ++i) {
        in_set[n][i] = rng() % (2u << (3 * i)) == 0;
        index.PutInSet(set_ids[i], static_cast<uint32_t>(n), in_set[n][i]);
      }
    }
    // Groups: none or one of five, before the node joins; changed later, in and out of the index.
    constexpr int kGroups = 5;
    std::vector<int> group(nodes);
    for (int n = 0; n < nodes; ++n) {
      group[n] = static_cast<int>(rng() % (kGroups + 1)) - 1;
      index.SetGroup(static_cast<uint32_t>(n), group[n]);
    }
    auto less = [&](int a, int b) { return ranks[a] != ranks[b] ? ranks[a] < ranks[b] : a < b; };
    if (big) {
      for (int n = 0; n < nodes; ++n) {
        State& s = state[n];
        s = State{true, static_cast<int>(rng() % 3), 0, 8, random_room()};
        s.free = static_cast<int>(rng() % 9);
        index.Insert(s.model, {&ranks[n], static_cast<uint32_t>(n)}, s.free, s.capacity, s.room);
      }
    }
    for (int step = 0; step < 3000; ++step) {
      int n = static_cast<int>(rng() % nodes);
      State& s = state[n];
      PlacementIndex::Entry e{&ranks[n], static_cast<uint32_t>(n)};
      const bool with_rooms = rooms_from_start || step > 1000;
      switch (rng() % 6) {
        case 5: {
          if (rng() % 2 == 0) {
            group[n] = static_cast<int>(rng() % (kGroups + 1)) - 1;
            index.SetGroup(static_cast<uint32_t>(n), group[n]);
            break;
          }
          const int i = static_cast<int>(rng() % kSets);
          in_set[n][i] = !in_set[n][i];
          index.PutInSet(set_ids[i], static_cast<uint32_t>(n), in_set[n][i]);
          for (int j = 0; j < kSets; ++j) {
            EXPECT_EQ(index.InSet(set_ids[j], static_cast<uint32_t>(n)), in_set[n][j]);
          }
          break;
        }
        case 0:
          if (s.in) {
            index.Erase(s.model, e, s.free, s.capacity);
            s.in = false;
          } else {
            s = State{true, static_cast<int>(rng() % 3), 0, 1 + static_cast<int>(rng() % 70)};
            s.free = static_cast<int>(rng() % (s.capacity + 1));
            if (with_rooms) {
              s.room = random_room();
              index.Insert(s.model, e, s.free, s.capacity, s.room);
            } else {
              index.Insert(s.model, e, s.free, s.capacity);
            }
          }
          break;
        case 4:
          if (s.in && with_rooms) {
            s.room = random_room();
            index.SetRoom(e, s.room);
          }
          break;
        case 1:
          if (s.in) {
            int f = static_cast<int>(rng() % (s.capacity + 1));
            index.Move(s.model, e, s.free, f);
            s.free = f;
          }
          break;
        case 2: {
          std::vector<int> models = {static_cast<int>(rng() % 3)};
          if (rng() % 2) models.push_back((models[0] + 1) % 3);
          int k = 1 + static_cast<int>(rng() % (big ? 8 : 70));
          std::vector<uint32_t> excluded;
          if (rng() % 2) excluded.push_back(static_cast<uint32_t>(rng() % nodes));
          // A need of CPUs, memory, both or none.
          Room need = PlacementIndex::kNoNeed;
          if (rng() % 2) {
            need.cpus = static_cast<int32_t>(rng() % 65) * 1000;
          } else {
            need.cpu_shares = static_cast<int32_t>(rng() % 9);
          }
          if (rng() % 2) {
            need.memory = static_cast<int32_t>(rng() % 9) * 1024;
          } else {
            need.memory_shares = static_cast<int32_t>(rng() % 9);
          }
          if (rng() % 3 == 0) need.linked = static_cast<int32_t>(rng() % 9);  // GPUs in a group.
          if (rng() % 4 == 0) need = PlacementIndex::kNoNeed;
          // In none, one or two of the sets.
          std::vector<int> chosen;
          for (int i = 0; i < kSets; ++i) {
            if (rng() % 3 == 0) chosen.push_back(i);
          }
          if (chosen.size() > 2) chosen.pop_back();
          std::vector<PlacementIndex::SetId> sets;
          for (int i : chosen) sets.push_back(set_ids[i]);
          auto in_sets = [&](int node) {
            return std::all_of(chosen.begin(), chosen.end(),
                               [&](int i) { return in_set[node][i]; });
          };
          int want = -1;
          std::vector<uint32_t> fits;  // In ForEachFitOf's order, for the first model.
          for (int i = 0; i < nodes; ++i) {
            const State& c = state[i];
            if (!c.in || c.free < k || c.free < 1) continue;
            if (!c.room.Holds(need) || !in_sets(i)) continue;
            if (std::find(models.begin(), models.end(), c.model) == models.end()) continue;
            if (std::find(excluded.begin(), excluded.end(), static_cast<uint32_t>(i)) !=
                excluded.end()) {
              continue;
            }
            if (want < 0 || c.free < state[want].free ||
                (c.free == state[want].free && less(i, want))) {
              want = i;
            }
          }
          auto fit = index.FindBestFitWhere(models, k, excluded, need, sets, [&](uint32_t slot) {
            return state[slot].room.Holds(need);
          });
          ASSERT_EQ(fit.has_value(), want >= 0) << "round " << round << " step " << step;
          if (fit) {
            EXPECT_EQ(fit->slot, static_cast<uint32_t>(want)) << "round " << round;
            EXPECT_EQ(fit->free, state[want].free);
            EXPECT_EQ(fit->model, state[want].model);
          }
          // Every node of the first model with the GPUs and the room, each once.
          std::vector<uint32_t> listed;
          index.ForEachFitOf(models[0], k, excluded, need, sets, [&](uint32_t slot, int m, int f) {
            EXPECT_EQ(m, models[0]);
            EXPECT_EQ(f, state[slot].free);
            listed.push_back(slot);
            return true;
          });
          for (int i = 0; i < nodes; ++i) {
            const State& c = state[i];
            // Without a need, every node with the GPUs (the caller checks the rest).
            if (c.in && c.model == models[0] && c.free >= k &&
                (!need.Any() || c.room.Holds(need)) && in_sets(i) &&
                std::find(excluded.begin(), excluded.end(), static_cast<uint32_t>(i)) ==
                    excluded.end()) {
              fits.push_back(static_cast<uint32_t>(i));
            }
          }
          std::sort(listed.begin(), listed.end());
          EXPECT_EQ(listed, fits) << "round " << round << " step " << step;
          // Each group's nodes in the index, by model and free GPUs.
          for (int m = 0; m < 3; ++m) {
            for (int g = 0; g < kGroups; ++g) {
              std::vector<int32_t> want_counts;
              for (int i = 0; i < nodes; ++i) {
                const State& c = state[i];
                if (!c.in || c.model != m || group[i] != g) continue;
                if (want_counts.size() <= static_cast<size_t>(c.free)) {
                  want_counts.resize(c.free + 1, 0);
                }
                ++want_counts[c.free];
              }
              const auto counts = index.GroupCounts(m, g);
              std::vector<int32_t> got(counts.begin(), counts.end());
              while (!got.empty() && got.back() == 0) got.pop_back();
              EXPECT_EQ(got, want_counts)
                  << "round " << round << " step " << step << " model " << m << " group " << g;
            }
          }
          break;
        }
        case 3: {
          std::vector<int> models = {static_cast<int>(rng() % 3)};
          int k = 1 + static_cast<int>(rng() % 70);
          int want = -1;
          for (int i = 0; i < nodes; ++i) {
            const State& c = state[i];
            if (!c.in || c.capacity < k || c.model != models[0]) continue;
            if (want < 0 || c.free > state[want].free ||
                (c.free == state[want].free && less(i, want))) {
              want = i;
            }
          }
          auto fit = index.FindMostFree(models, k,
                                        [&](uint32_t slot, int) { return state[slot].capacity; });
          ASSERT_EQ(fit.has_value(), want >= 0) << "round " << round << " step " << step;
          if (fit) {
            EXPECT_EQ(fit->slot, static_cast<uint32_t>(want));
          }
          int max_capacity = 0;
          for (const State& c : state) {
            if (c.in && c.model == models[0]) max_capacity = std::max(max_capacity, c.capacity);
          }
          EXPECT_EQ(index.MaxCapacity(models[0]), max_capacity);
          break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dgpu::core
