// CPUs and memory beside GPUs: nodes that report them, tasks that ask for them (or get their
// GPUs' share), placement that checks all three, why a task waits, and what is given back.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using Kind = Decision::Kind;

class ResourcesTest : public ::testing::Test {
 protected:
  ResourcesTest() : core_(AllBatch()) {}
  static CoreConfig AllBatch() {
    CoreConfig c;
    c.online_percent = 0.0;
    return c;
  }
  // A node of `gpus` GPUs, `cpus` CPUs and `memory_mb` MiB.
  void Node(const std::string& id, int gpus, double cpus, int64_t memory_mb,
            std::vector<RunningReport> running = {}) {
    NodeResources r{static_cast<int64_t>(cpus * 1000), memory_mb, "none"};
    ASSERT_TRUE(core_.RegisterNode(id, "", MakeGpus(gpus), r, running, {}, now_).ok());
  }
  TaskNumber Submit(int gpus, double cpus = 0, int64_t memory_mb = 0, int nodes = 1) {
    TaskSpec s = testing::Spec(Priority::kLow, gpus);
    s.nodes = nodes;
    s.cpus_milli = static_cast<int64_t>(cpus * 1000);
    s.memory_mb = memory_mb;
    auto id = core_.Submit(s, now_);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }
  std::vector<Decision> Pass() {
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return core_.TakeDecisions();
  }
  PendingReason Reason(TaskNumber id) { return core_.ReasonOf(*core_.FindTask(id)); }
  const Task& T(TaskNumber id) { return *core_.FindTask(id); }
  void Finish(TaskNumber id, const std::string& node) {
    ASSERT_TRUE(core_.TaskFinished(node, {id, true, 0, "", now_}, now_).ok());
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  }

  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_F(ResourcesTest, ATaskThatAsksForNothingGetsItsGpusShareAndPlacesAsBefore) {
  Node("n1", 4, 16, 64000);
  const TaskNumber a = Submit(1);
  const TaskNumber b = Submit(3);
  const auto d = Pass();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(std::make_pair(T(a).allocation[0].cpus_milli, T(a).allocation[0].memory_mb),
            std::make_pair(int64_t{4000}, int64_t{16000}));
  EXPECT_EQ(std::make_pair(T(b).allocation[0].cpus_milli, T(b).allocation[0].memory_mb),
            std::make_pair(int64_t{12000}, int64_t{48000}));
  // Released on their ends: the node holds all of it again.
  Finish(a, "n1");
  Finish(b, "n1");
  const TaskNumber c = Submit(4);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(c).allocation[0].cpus_milli, 16000);
}

TEST_F(ResourcesTest, ThreeTasksOfOneAndAHalfCpusOnTwoNodesOfTwo) {
  Node("n1", 2, 2, 8000);
  Node("n2", 2, 2, 8000);
  const TaskNumber a = Submit(1, 1.5);
  const TaskNumber b = Submit(1, 1.5);
  const TaskNumber c = Submit(1, 1.5);
  const auto d = Pass();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NE(d[0].node_id, d[1].node_id) << "one per node: 0.5 CPUs is left on each";
  EXPECT_EQ(T(c).status, TaskStatus::kPending);
  EXPECT_EQ(Reason(c), PendingReason::kInsufficientCpu);
  // A task of 0.5 CPUs fits beside either.
  const TaskNumber small = Submit(1, 0.5);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(small).status, TaskStatus::kRunning);
  // The first to end makes room for the waiting one (its GPUs were free all along).
  Finish(a, T(a).allocation[0].node_id);
  const auto started = Pass();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].task, c);
  EXPECT_EQ(started[0].node_id, T(a).allocation[0].node_id);
  (void)b;
}

TEST_F(ResourcesTest, MemoryIsCheckedToo) {
  Node("n1", 4, 32, 8000);
  const TaskNumber big = Submit(1, 0, 6000);
  const TaskNumber waits = Submit(1, 0, 4000);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(big).status, TaskStatus::kRunning);
  EXPECT_EQ(Reason(waits), PendingReason::kInsufficientMemory);
  // Its GPUs' share (2000 MiB) fits in what is left.
  const TaskNumber share = Submit(1);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(share).allocation[0].memory_mb, 2000);
}

TEST_F(ResourcesTest, ARequestNoNodeCouldEverHoldExceedsTheCluster) {
  Node("n1", 8, 16, 64000);
  Node("n2", 8, 32, 64000);
  const TaskNumber too_many = Submit(1, 33);
  const TaskNumber too_much = Submit(1, 0, 64001);
  const TaskNumber fits = Submit(1, 32);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(Reason(too_many), PendingReason::kExceedsCluster);
  EXPECT_EQ(Reason(too_much), PendingReason::kExceedsCluster);
  EXPECT_EQ(T(fits).allocation[0].node_id, "n2");
}

TEST_F(ResourcesTest, AGangNeedsItsCpusOnEveryMembersNode) {
  Node("n1", 2, 8, 16000);
  Node("n2", 2, 8, 16000);
  Node("n3", 2, 8, 16000);
  const TaskNumber hog = Submit(1, 6);
  ASSERT_EQ(Pass().size(), 1u);
  const std::string hogged = T(hog).allocation[0].node_id;
  // Three members of 1 GPU and 4 CPUs: the hog's node has a GPU free but 2 CPUs.
  const TaskNumber gang = Submit(3, 4, 0, 3);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(Reason(gang), PendingReason::kInsufficientCpu);
  EXPECT_TRUE(T(gang).allocation.empty());
  // Two members would fit: still nothing is held.
  Finish(hog, hogged);
  const auto d = Pass();
  ASSERT_EQ(d.size(), 3u);
  for (const NodeAllocation& m : T(gang).allocation) EXPECT_EQ(m.cpus_milli, 4000);
  EXPECT_EQ(core_.FindNode("n1")->free_gpus, 1);
}

// The starvation guard keeps for a starving task a node that could hold it once emptied
// (Feasible against an empty node): b, not a, whose 8 CPUs never hold its 16, though a has the
// most GPUs free (2, b none once a 1-GPU task overtook the starving one there).
TEST(ResourcesGuardTest, TheGuardKeepsANodeThatCouldHoldTheTasksCpus) {
  CoreConfig config;
  config.online_percent = 0.0;
  config.max_bypass = 1;
  SchedulerCore core(config);
  const TimeMicros now = 100 * kSec;
  for (const auto& [id, cpus] : {std::pair<std::string, int64_t>{"a", 8000}, {"b", 32000}}) {
    ASSERT_TRUE(core.RegisterNode(id, "", MakeGpus(4), {cpus, 0, "none"}, {}, {}, now).ok());
  }
  auto submit = [&](int gpus, int64_t cpus_milli) {
    TaskSpec s = testing::Spec(Priority::kLow, gpus);
    s.cpus_milli = cpus_milli;
    return *core.Submit(s, now);
  };
  submit(2, 0);  // On a (4 CPUs).
  submit(3, 0);  // On b (24 CPUs).
  core.Schedule(now);
  ASSERT_EQ(core.TakeDecisions().size(), 2u);
  const TaskNumber starving = submit(2, 16000);
  for (int i = 0; i < 3; ++i) {
    submit(1, 0);
    core.Schedule(now);
    core.TakeDecisions();
    ASSERT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
  }
  const auto reservations = core.Reservations();
  ASSERT_EQ(reservations.size(), 1u);
  EXPECT_EQ(reservations[0].task, starving);
  EXPECT_EQ(reservations[0].nodes, (std::vector<std::string>{"b"}));
}

TEST_F(ResourcesTest, NodesThatReportNothingCountNothing) {
  ASSERT_TRUE(core_.RegisterNode("old", "", MakeGpus(2), {}, {}, now_).ok());
  const TaskNumber a = Submit(1, 64, 1 << 20);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(a).allocation[0].node_id, "old");
  EXPECT_EQ(T(a).allocation[0].cpus_milli, 0);
  // A node that does report is checked, beside it.
  Node("new", 2, 4, 8000);
  const TaskNumber b = Submit(1, 64);
  const TaskNumber c = Submit(1, 2);
  ASSERT_EQ(Pass().size(), 2u);
  EXPECT_EQ(T(b).allocation[0].node_id, "old");
  EXPECT_EQ(T(c).allocation[0].node_id, "new");
  EXPECT_EQ(T(c).allocation[0].cpus_milli, 2000);
}

// Placement against a brute force over the nodes' views: the fullest node (fewest free GPUs that
// fit, then lowest id) where the task's CPUs and memory (its own, or its GPUs' share) fit too.
// Nodes of 2, 4 and 8 GPUs, uneven CPUs and memory, some reporting nothing or one of the two;
// tasks start and end, so the index's rooms go up and down.
TEST_F(ResourcesTest, PlacementMatchesABruteForceOverNodesOfUnevenRoom) {
  std::mt19937 rng(11);
  const int kNodes = 300;
  for (int i = 0; i < kNodes; ++i) {
    char id[16];
    std::snprintf(id, sizeof(id), "n%03d", i);
    const int gpus = 2 << (rng() % 3);
    NodeResources r{static_cast<int64_t>(1 + rng() % 64) * 1000,
                    static_cast<int64_t>(1 + rng() % 64) * 1024, "none"};
    if (rng() % 10 == 0) r.cpus_milli = 0;
    if (rng() % 10 == 0) r.memory_mb = 0;
    ASSERT_TRUE(core_.RegisterNode(id, "", MakeGpus(gpus), r, {}, {}, now_).ok());
  }
  std::map<TaskNumber, std::string> running;
  int placed = 0;
  int unplaced = 0;
  for (int step = 0; step < 1500; ++step) {
    const int k = 1 + static_cast<int>(rng() % 8);
    const double cpus = rng() % 2 ? static_cast<double>(rng() % 24) : 0;
    const int64_t memory = rng() % 2 ? static_cast<int64_t>(rng() % 24) * 1024 : 0;
    // Expected: over the views before the pass.
    std::string want;
    int want_free = 0;
    for (const NodeView& v : core_.Nodes()) {
      if (v.free_gpus < k) continue;
      auto given = [&](int64_t asked, int64_t offered) {
        return asked > 0 ? asked : offered * k / v.gpu_count;
      };
      const int64_t free_cpus = v.resources.cpus_milli - v.allocated_cpus_milli;
      const int64_t free_memory = v.resources.memory_mb - v.allocated_memory_mb;
      if (v.resources.cpus_milli > 0 &&
          given(static_cast<int64_t>(cpus * 1000), v.resources.cpus_milli) > free_cpus) {
        continue;
      }
      if (v.resources.memory_mb > 0 && given(memory, v.resources.memory_mb) > free_memory) {
        continue;
      }
      if (want.empty() || v.free_gpus < want_free || (v.free_gpus == want_free && v.id < want)) {
        want = v.id;
        want_free = v.free_gpus;
      }
    }
    const TaskNumber t = Submit(k, cpus, memory);
    const auto d = Pass();
    if (want.empty()) {
      ASSERT_TRUE(d.empty()) << "step " << step << ": placed on " << d[0].node_id;
      ASSERT_TRUE(core_.Cancel(t, now_).ok());
      ++unplaced;
    } else {
      ASSERT_EQ(d.size(), 1u) << "step " << step << ": expected " << want;
      ASSERT_EQ(d[0].node_id, want) << "step " << step;
      running[t] = want;
      ++placed;
    }
    // Some end, oldest first in one of two steps, a random one in the other.
    while (running.size() > 250 || (!running.empty() && rng() % 3 == 0)) {
      auto it = running.begin();
      if (rng() % 2) std::advance(it, rng() % running.size());
      Finish(it->first, it->second);
      running.erase(it);
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(placed, 500);
  EXPECT_GT(unplaced, 100);
}

TEST_F(ResourcesTest, AnAdoptedTaskHoldsWhatItWasGivenAndARegistrationWithLessGoesNegative) {
  Node("n1", 4, 8, 32000);
  const TaskNumber a = Submit(2, 6);
  ASSERT_EQ(Pass().size(), 1u);
  const int run = RunNumber(T(a));
  // The agent comes back reporting fewer CPUs: its task keeps its 6, nothing else fits.
  Node("n1", 4, 4, 32000, {{a, T(a).allocation[0].gpu_indices, run}});
  EXPECT_EQ(T(a).status, TaskStatus::kRunning);
  EXPECT_EQ(T(a).allocation[0].cpus_milli, 6000);
  const TaskNumber b = Submit(1, 1);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(Reason(b), PendingReason::kInsufficientCpu);
  Finish(a, "n1");
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(b).status, TaskStatus::kRunning);
}

TEST_F(ResourcesTest, NegativeRequestsAndNodeResourcesAreRefused) {
  TaskSpec s = testing::Spec(Priority::kLow, 1);
  s.cpus_milli = -1;
  EXPECT_EQ(core_.Submit(s, now_).status().code(), StatusCode::kInvalidArgument);
  s.cpus_milli = 0;
  s.memory_mb = -5;
  EXPECT_EQ(core_.Submit(s, now_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      core_.RegisterNode("n1", "", MakeGpus(1), NodeResources{-1000, 0, ""}, {}, {}, now_).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.FindNode("n1"), std::nullopt);
}

// What a run used: its agent's heartbeats update a running member's figure without recording a
// change, its finish brings the last one with the durable finish; a gang sums CPU time and
// keeps the highest peak; a report for another run or node changes nothing.
TEST_F(ResourcesTest, UsageFromHeartbeatsAndTheFinish) {
  Node("n1", 2, 8, 16000);
  Node("n2", 2, 8, 16000);
  const TaskNumber single = Submit(1);
  const TaskNumber gang = Submit(2, 0, 0, 2);
  Pass();
  ASSERT_EQ(T(gang).allocation.size(), 2u);
  const std::string on = T(single).allocation[0].node_id;
  const std::string off = on == "n1" ? "n2" : "n1";
  EXPECT_FALSE(UsageOf(T(single).allocation).has_value());
  EXPECT_TRUE(core_.RecordUsage(on, single, RunNumber(T(single)), {1'000'000, 64 << 20}).ok());
  EXPECT_EQ(UsageOf(T(single).allocation), (ResourceUsage{1'000'000, 64 << 20}));
  EXPECT_EQ(core_.RecordUsage(off, single, 0, {5, 5}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.RecordUsage(on, single, RunNumber(T(single)) + 1, {5, 5}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.RecordUsage(on, 999, 0, {5, 5}).code(), StatusCode::kNotFound);
  EXPECT_EQ(UsageOf(T(single).allocation), (ResourceUsage{1'000'000, 64 << 20}));

  FinishReport done{single, true, 0, "", now_};
  done.usage = ResourceUsage{2'500'000, 96 << 20};
  ASSERT_TRUE(core_.TaskFinished(on, done, now_).ok());
  EXPECT_EQ(T(single).status, TaskStatus::kSuccess);
  EXPECT_EQ(UsageOf(T(single).allocation), (ResourceUsage{2'500'000, 96 << 20}));

  for (const auto& [node, cpu, memory] : {std::tuple{"n1", int64_t{3'000'000}, int64_t{1} << 30},
                                          std::tuple{"n2", int64_t{4'000'000}, int64_t{3} << 29}}) {
    FinishReport member{gang, true, 0, "", now_};
    member.usage = ResourceUsage{cpu, memory};
    ASSERT_TRUE(core_.TaskFinished(node, member, now_).ok());
  }
  EXPECT_EQ(T(gang).status, TaskStatus::kSuccess);
  EXPECT_EQ(UsageOf(T(gang).allocation), (ResourceUsage{7'000'000, int64_t{3} << 29}));
}

// The CPUs each member's agent bound it to come with its start report, into that member's entry.
TEST_F(ResourcesTest, EachMembersCpuSetComesWithItsStart) {
  Node("n1", 2, 8, 16000);
  Node("n2", 2, 8, 16000);
  const TaskNumber gang = Submit(2, 0, 0, 2);
  Pass();
  ASSERT_EQ(T(gang).allocation.size(), 2u);
  ASSERT_TRUE(core_.TaskStarted(gang, "n2", now_ + 1, RunNumber(T(gang)), {2, 3}).ok());
  ASSERT_TRUE(core_.TaskStarted(gang, "n1", now_ + 2, RunNumber(T(gang))).ok());
  for (const NodeAllocation& a : T(gang).allocation) {
    const std::vector<int> want = a.node_id == "n2" ? std::vector<int>{2, 3} : std::vector<int>{};
    EXPECT_EQ(a.cpu_set, want) << a.node_id;
  }
  EXPECT_EQ(core_.TaskStarted(gang, "n3", now_ + 3, 0, {7}).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dgpu::core
