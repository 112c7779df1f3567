#include "core/placement_index.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The index against a brute-force model: random nodes (inserted in random id order, some
// sharing a rank), models, moves, removals and lookups.
TEST(PlacementIndexRandomTest, MatchesBruteForce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    const int nodes = 1 + static_cast<int>(rng() % 300);
    std::vector<uint64_t> ranks(nodes);
    for (auto& r : ranks) r = rng() % (nodes * 2);
    struct State {
      bool in = false;
      int model = 0;
      int free = 0;
      int capacity = 0;
    };
    std::vector<State> state(nodes);
    PlacementIndex index;
    auto less = [&](int a, int b) { return ranks[a] != ranks[b] ? ranks[a] < ranks[b] : a < b; };
    for (int step = 0; step < 3000; ++step) {
      int n = static_cast<int>(rng() % nodes);
      State& s = state[n];
      PlacementIndex::Entry e{&ranks[n], static_cast<uint32_t>(n)};
      switch (rng() % 4) {
        case 0:
          if (s.in) {
            index.Erase(s.model, e, s.free, s.capacity);
            s.in = false;
          } else {
            s = State{true, static_cast<int>(rng() % 3), 0, 1 + static_cast<int>(rng() % 70)};
            s.free = static_cast<int>(rng() % (s.capacity + 1));
            index.Insert(s.model, e, s.free, s.capacity);
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
          int k = 1 + static_cast<int>(rng() % 70);
          std::vector<uint32_t> excluded;
          if (rng() % 2) excluded.push_back(static_cast<uint32_t>(rng() % nodes));
          int want = -1;
          for (int i = 0; i < nodes; ++i) {
            const State& c = state[i];
            if (!c.in || c.free < k || c.free < 1) continue;
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
          auto fit = index.FindBestFit(models, k, excluded);
          ASSERT_EQ(fit.has_value(), want >= 0) << "round " << round << " step " << step;
          if (fit) {
            EXPECT_EQ(fit->slot, static_cast<uint32_t>(want)) << "round " << round;
            EXPECT_EQ(fit->free, state[want].free);
            EXPECT_EQ(fit->model, state[want].model);
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
