// Randomized invariant test: thousands of seeded random command sequences (gangs among the
// tasks), with every invariant checked after every step. A failure prints the seed and step to
// replay it.
//
// Each sequence also drives a shadow core that forgets, before every pass, what the core keeps
// between passes to skip work (a shape found to have no room stays so until GPUs are released; a
// pass after which nothing relevant happened is not run again): both must decide exactly the
// same and give the same reasons.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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
  SchedulerCore shadow(cfg);
  // Every command goes to both cores, and both must answer alike.
  auto both = [&](auto&& command) {
    Status a = command(core);
    Status b = command(shadow);
    EXPECT_EQ(a.ToString(), b.ToString());
    return a;
  };
  const char* models[] = {"A100", "H100"};
  TimeMicros now = 0;
  std::vector<TaskNumber> ids;
  for (int step = 0; step < steps; ++step) {
    now += testing::kSec;
    int op = pick(100);
    std::string node = "n" + std::to_string(pick(6));
    if (op < 35) {
      TaskSpec spec = testing::Spec(pick(2) ? Priority::kHigh : Priority::kLow, 1 << pick(4),
                                    pick(3) == 0 ? models[pick(2)] : "");
      if (pick(4) == 0) {
        // A gang of 2 or 3 members of 1, 2 or 4 GPUs.
        spec.nodes = 2 + pick(2);
        spec.gpu_count = spec.nodes * (1 << pick(3));
      }
      // CPUs and memory asked for, sometimes (else the GPUs' share).
      if (pick(3) == 0) spec.cpus_milli = 500 * (1 + pick(12));
      if (pick(4) == 0) spec.memory_mb = 1000 * (1 + pick(24));
      auto r = core.Submit(spec, now);
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(shadow.Submit(spec, now).value(), *r);
      ids.push_back(*r);
      // The record may be a recycled one: nothing of its previous task shows.
      const Task* t = core.FindTask(*r);
      ASSERT_TRUE(t->allocation.empty() && t->error.empty() && t->attempts == 0 &&
                  t->exit_code == 0 && t->started_at == 0 && t->finished_at == 0 && !t->stopping &&
                  t->status == TaskStatus::kPending && t->created_at == now)
          << "seed " << seed << " step " << step;
    } else if (op < 45) {
      std::vector<RunningReport> running;
      // Sometimes report a task the core may or may not know on this node.
      if (!ids.empty() && pick(3) == 0) running.push_back({ids[pick(ids.size())], {0}});
      // Or what a gang's member there holds (it may have been requeued since).
      if (!ids.empty() && pick(3) == 0) {
        const Task* t = core.FindTask(ids[pick(ids.size())]);
        if (t != nullptr && t->spec.nodes > 1 && !t->allocation.empty()) {
          const NodeAllocation& m = t->allocation[pick(t->allocation.size())];
          if (m.node_id == node) running.push_back({t->id, m.gpu_indices});
        }
      }
      auto gpus = testing::MakeGpus(1 + pick(8), models[pick(2)]);
      // Most nodes report CPUs and memory; some (older agents) nothing.
      const NodeResources resources =
          pick(4) == 0 ? NodeResources{}
                       : NodeResources{1000 * (1 + pick(16)), 4000 * (1 + pick(8))};
      (void)both([&](SchedulerCore& c) {
        return c.RegisterNode(node, "", gpus, resources, running, {}, now);
      });
    } else if (op < 50) {
      (void)both([&](SchedulerCore& c) { return c.NodeLost(node, now); });
    } else if (op < 66 && !ids.empty()) {
      TaskNumber id = ids[pick(ids.size())];
      const Task* t = core.FindTask(id);
      if (t == nullptr) continue;
      // On one of its members' nodes, mostly.
      std::string where = t->allocation.empty() || pick(10) == 0
                              ? node
                              : t->allocation[pick(t->allocation.size())].node_id;
      FinishReport report{id, pick(2) == 0, pick(3), "", now};
      (void)both([&](SchedulerCore& c) { return c.TaskFinished(where, report, now); });
    } else if (op < 70 && !ids.empty()) {
      // Finished tasks leave memory (their records are reused).
      TaskNumber id = ids[pick(ids.size())];
      core.Forget(id);
      shadow.Forget(id);
      ASSERT_EQ(core.FindTask(id) == nullptr, shadow.FindTask(id) == nullptr);
    } else if (op < 78 && !ids.empty()) {
      TaskNumber id = ids[pick(ids.size())];
      (void)both([&](SchedulerCore& c) { return c.Cancel(id, now); });
    } else if (op < 80 && !ids.empty()) {
      // Stops for the reasons that requeue or fail a task when it ends.
      TaskNumber id = ids[pick(ids.size())];
      const StopReason reasons[] = {StopReason::kPreempt, StopReason::kDrain,
                                    StopReason::kMemberFailure, StopReason::kTimeout,
                                    StopReason::kGpuFailure};
      StopReason reason = reasons[pick(5)];
      int32_t grace = pick(3) - 1;
      (void)both([&](SchedulerCore& c) { return c.StopTask(id, reason, grace, now); });
    } else if (op < 82) {
      double percent = pick(11) / 10.0;
      ASSERT_TRUE(both([&](SchedulerCore& c) { return c.SetOnlinePercent(percent, 0); }).ok());
    } else if (op < 85) {
      TimeMicros at = now + pick(20) * testing::kSec;
      core.Tick(at);
      shadow.Tick(at);
    } else {
      QuotaView before = core.Quota();
      core.Schedule(now);
      shadow.ForgetNoRoom();
      shadow.Schedule(now);
      QuotaView after = core.Quota();
      for (int p = 0; p < kPriorityCount; ++p) {
        // A pass that started something of a class never takes it over its quota.
        if (after.used[p] > before.used[p]) {
          ASSERT_LE(after.used[p], after.quota[p]) << "seed " << seed << " step " << step;
        }
      }
      std::vector<Decision> decisions = core.TakeDecisions();
      ASSERT_EQ(decisions, shadow.TakeDecisions()) << "seed " << seed << " step " << step;
      // And both tell the same reasons for the tasks that wait.
      std::vector<SchedulerCore::QueueHead> heads;
      std::vector<SchedulerCore::QueueHead> shadow_heads;
      core.QueueHeads(heads);
      shadow.QueueHeads(shadow_heads);
      auto by_task = [](const auto& a, const auto& b) { return a.task < b.task; };
      std::sort(heads.begin(), heads.end(), by_task);
      std::sort(shadow_heads.begin(), shadow_heads.end(), by_task);
      ASSERT_EQ(heads.size(), shadow_heads.size()) << "seed " << seed << " step " << step;
      for (size_t i = 0; i < heads.size(); ++i) {
        ASSERT_EQ(heads[i].task, shadow_heads[i].task) << "seed " << seed << " step " << step;
        ASSERT_EQ(heads[i].reason, shadow_heads[i].reason)
            << "seed " << seed << " step " << step << " task " << heads[i].task;
      }
      // Never a partial gang: a started task has one start per member, in rank order, each
      // with its share of the GPUs.
      std::map<TaskNumber, int> starts;
      for (const auto& d : decisions) {
        if (d.kind != Decision::Kind::kStart) continue;
        const Task* t = core.FindTask(d.task);
        const int rank = starts[d.task]++;
        ASSERT_LT(rank, t->spec.nodes) << "seed " << seed << " step " << step;
        ASSERT_EQ(d.node_id, t->allocation[static_cast<size_t>(rank)].node_id);
        ASSERT_EQ(static_cast<int>(d.gpu_indices.size()), GpusPerNode(t->spec));
      }
      for (const auto& [id, count] : starts) {
        ASSERT_EQ(count, core.FindTask(id)->spec.nodes) << "seed " << seed << " step " << step;
      }
    }
    Status s = core.CheckInvariants();
    ASSERT_TRUE(s.ok()) << "seed " << seed << " step " << step << " op " << op << ": "
                        << s.ToString();
  }
}

TEST(InvariantsTest, RandomSequences) {
  for (uint32_t seed = 1; seed <= testing::Sequences(2000); ++seed) {
    RunSequence(seed, 150);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace dgpu::core
