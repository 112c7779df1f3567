#include "sim/completion_queue.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

#include "../sanitizer_scale.h"

namespace dgpu::sim {
namespace {

// Drives the queue as the simulator does (times pushed never before the current one; every entry
// of the smallest time taken out at once) against a reference ordered set on (time, push order).
void CheckAgainstReference(uint32_t seed, TimeMicros max_duration) {
  std::mt19937_64 rng(seed);
  CompletionQueue<int> queue;
  std::set<std::pair<TimeMicros, int>> reference;  // (time, push order); payload = push order.
  int pushed = 0;
  TimeMicros now = 0;
  for (int step = 0; step < 4000; ++step) {
    // Bursts of pushes, some at equal times (durations 0 included).
    const int pushes = static_cast<int>(rng() % 4);
    for (int i = 0; i < pushes; ++i) {
      const TimeMicros t = now + static_cast<TimeMicros>(rng() % (max_duration + 1));
      queue.push(t, pushed);
      reference.emplace(t, pushed);
      ++pushed;
    }
    ASSERT_EQ(queue.empty(), reference.empty()) << "seed " << seed << " step " << step;
    if (reference.empty() || rng() % 3 == 0) continue;
    // The list shows the next entries in order.
    auto it = reference.begin();
    for (const auto& e : queue.ahead()) {
      ASSERT_NE(it, reference.end());
      ASSERT_EQ(e.time, it->first) << "seed " << seed << " step " << step;
      ASSERT_EQ(e.what, it->second) << "seed " << seed << " step " << step;
      ++it;
    }
    now = queue.min_time();
    ASSERT_EQ(now, reference.begin()->first);
    std::vector<int> got;
    queue.PopMin([&](int what) { got.push_back(what); });
    std::vector<int> want;
    while (!reference.empty() && reference.begin()->first == now) {
      want.push_back(reference.begin()->second);
      reference.erase(reference.begin());
    }
    ASSERT_EQ(got, want) << "seed " << seed << " step " << step;
  }
}

TEST(CompletionQueueTest, MatchesAnOrderedSet) {
  // A fifth of the seeds under a sanitizer (tests/sanitizer_scale.h).
  constexpr uint32_t kSeeds = dgpu::testing::Scaled(20);
  // Durations shorter than one radix key (2^20 us), spanning a few keys, and long ones.
  for (TimeMicros max_duration : {TimeMicros{0}, TimeMicros{5}, TimeMicros{1} << 20,
                                  TimeMicros{1} << 23, TimeMicros{1} << 40}) {
    for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
      CheckAgainstReference(seed, max_duration);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CompletionQueueTest, EqualTimesBehindAFullListComeOutTogether) {
  CompletionQueue<int> queue;
  // More entries of one time than the list holds, pushed around others.
  for (int i = 0; i < 20; ++i) queue.push(1000, i);
  queue.push(5, 100);
  queue.push(1000, 20);
  ASSERT_EQ(queue.min_time(), 5);
  std::vector<int> got;
  queue.PopMin([&](int what) { got.push_back(what); });
  EXPECT_EQ(got, std::vector<int>{100});
  got.clear();
  ASSERT_EQ(queue.min_time(), 1000);
  queue.PopMin([&](int what) { got.push_back(what); });
  std::vector<int> want;
  for (int i = 0; i <= 20; ++i) want.push_back(i);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(queue.empty());
}

}  // namespace
}  // namespace dgpu::sim
