#include "core/task_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace dgpu::core {
namespace {

// Checks the table against std::map under mixes of sequential numbers, erasures in random
// order, numbers behind the window, and jumps far ahead (a new epoch).
TEST(TaskTableTest, MatchesMap) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 40; ++round) {
    TaskTable<int> table;
    std::map<uint64_t, int*> model;
    std::vector<int> values(1);
    int* dummy = values.data();
    uint64_t next = 1 + rng() % 1000;
    std::vector<uint64_t> live;
    for (int step = 0; step < 20000; ++step) {
      int op = static_cast<int>(rng() % 100);
      if (op < 50) {
        uint64_t n = next++;
        if (rng() % 50 == 0) n = next += rng() % 10000;  // Skip ahead, sometimes past the gap.
        if (rng() % 500 == 0) n = next = (next | (uint64_t{1} << 40)) + rng() % 100;  // Epoch.
        if (rng() % 20 == 0) n = rng() % (next + 1);  // Anywhere, e.g. restored.
        if (model.count(n) != 0) continue;
        table.Insert(n, dummy);
        model[n] = dummy;
        live.push_back(n);
      } else if (op < 90 && !live.empty()) {
        // Mostly old numbers first, as tasks finish and are forgotten.
        size_t i = rng() % 4 == 0 ? rng() % live.size() : rng() % std::min<size_t>(live.size(), 8);
        uint64_t n = live[i];
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        EXPECT_TRUE(table.Erase(n));
        model.erase(n);
      } else {
        uint64_t n = rng() % (next + 10);
        EXPECT_EQ(table.Find(n), model.count(n) ? dummy : nullptr) << n;
        if (model.count(n) == 0) EXPECT_FALSE(table.Erase(n));
      }
      ASSERT_EQ(table.size(), model.size());
    }
    for (const auto& [n, v] : model) ASSERT_EQ(table.Find(n), v) << "round " << round;
    size_t seen = 0;
    table.ForEach([&](uint64_t n, int* v) {
      EXPECT_EQ(model.count(n), 1u);
      ++seen;
    });
    EXPECT_EQ(seen, model.size());
  }
}

}  // namespace
}  // namespace dgpu::core
