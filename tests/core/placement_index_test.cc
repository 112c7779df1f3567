#include "core/placement_index.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dgpu::core
