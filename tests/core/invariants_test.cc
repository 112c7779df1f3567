// Randomized invariant test: thousands of seeded random command sequences, with every invariant
// checked after every step. A failure prints the seed and step to replay it.
#include <gtest/gtest.h>

#include <random>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

void RunSequence(uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  CoreConfig cfg;
  cfg.max_bypass = 1 + pick(5);
  cfg.max_attempts = 1 + pick(3);
  SchedulerCore core(cfg);
  const char* models[] = {"A100", "H100"};
  TimeMicros now = 0;
  std::vector<TaskNumber> ids;
  for (int step = 0; step < steps; ++step) {
    now += testing::kSec;
    int op = pick(100);
    std::string node = "n" + std::to_string(pick(6));
    if (op < 35) {
      auto r = core.Submit(testing::Spec(pick(2) ? Priority::kHigh : Priority::kLow, 1 << pick(4),
                                         pick(3) == 0 ? models[pick(2)] : ""),
                           now);
      ASSERT_TRUE(r.ok());
      ids.push_back(*r);
    } else if (op < 45) {
      std::vector<RunningReport> running;
      // Sometimes report a task the core may or may not know on this node.
      if (!ids.empty() && pick(3) == 0) running.push_back({ids[pick(ids.size())], {0}});
      (void)core.RegisterNode(node, "", testing::MakeGpus(1 + pick(8), models[pick(2)]), running,
                              {}, now);
    } else if (op < 50) {
      (void)core.NodeLost(node, now);
    } else if (op < 70 && !ids.empty()) {
      TaskNumber id = ids[pick(ids.size())];
      const Task* t = core.FindTask(id);
      std::string where = t->allocation.empty() || pick(10) == 0 ? node : t->allocation[0].node_id;
      (void)core.TaskFinished(where, {id, pick(2) == 0, pick(3), "", now}, now);
    } else if (op < 78 && !ids.empty()) {
      (void)core.Cancel(ids[pick(ids.size())], now);
    } else if (op < 82) {
      ASSERT_TRUE(core.SetOnlinePercent(pick(11) / 10.0).ok());
    } else if (op < 85) {
      core.Tick(now + pick(20) * testing::kSec);
    } else {
      QuotaView before = core.Quota();
      core.Schedule(now);
      QuotaView after = core.Quota();
      for (int p = 0; p < kPriorityCount; ++p) {
        // A pass that started something of a class never takes it over its quota.
        if (after.used[p] > before.used[p]) {
          ASSERT_LE(after.used[p], after.quota[p]) << "seed " << seed << " step " << step;
        }
      }
      for (const auto& d : core.TakeDecisions()) {
        if (d.kind != Decision::Kind::kStart) continue;
        const Task* t = core.FindTask(d.task);
        ASSERT_EQ(static_cast<int>(d.gpu_indices.size()), t->spec.gpu_count);
      }
    }
    Status s = core.CheckInvariants();
    ASSERT_TRUE(s.ok()) << "seed " << seed << " step " << step << " op " << op << ": "
                        << s.ToString();
  }
}

TEST(InvariantsTest, RandomSequences) {
  for (uint32_t seed = 1; seed <= 2000; ++seed) {
    RunSequence(seed, 150);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace dgpu::core
