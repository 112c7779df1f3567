// The pass's extension points and the cluster state they read: node modes (cordoned,
// draining), GPU health, labels with a node filter, the post-filter hook, reservations.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;
using Kind = Decision::Kind;

class FrameworkTest : public ::testing::Test {
 protected:
  explicit FrameworkTest(CoreConfig config = {}) : core_(WithAllOnline(config)) {}
  static CoreConfig WithAllOnline(CoreConfig c) {
    c.online_percent = 1.0;
    return c;
  }
  void Register(const std::string& node, std::vector<GpuInfo> gpus) {
    ASSERT_TRUE(core_.RegisterNode(node, node + ":50052", gpus, {}, {}, now_).ok());
  }
  TaskNumber Submit(int gpus) {
    auto r = core_.Submit(Spec(Priority::kHigh, gpus, ""), now_);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : 0;
  }
  std::vector<Decision> Pass() {
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return core_.TakeDecisions();
  }
  static Decision Start(TaskNumber t, const std::string& node, std::vector<int> gpus) {
    return {Kind::kStart, t, node, std::move(gpus)};
  }
  const Task& T(TaskNumber t) { return *core_.FindTask(t); }

  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_F(FrameworkTest, ACordonedNodeTakesNoNewTaskButKeepsItsRunningOnes) {
  Register("n1", MakeGpus(2));
  Register("n2", MakeGpus(4));
  TaskNumber a = Submit(2);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n1", {0, 1})}));
  ASSERT_TRUE(core_.SetNodeMode("n2", NodeMode::kCordoned, now_).ok());
  TaskNumber b = Submit(1);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.ReasonOf(T(b)), PendingReason::kNoNodeFits) << "n1 is full";
  EXPECT_EQ(core_.FindNode("n2")->mode, NodeMode::kCordoned);
  EXPECT_EQ(NodeStateName(core_.FindNode("n2")->online, core_.FindNode("n2")->mode), "cordoned");
  EXPECT_EQ(core_.Quota().total_gpus, 6) << "a cordoned node's GPUs still count in quotas";

  ASSERT_TRUE(core_.SetNodeMode("n1", NodeMode::kCordoned, now_).ok());
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.ReasonOf(T(b)), PendingReason::kNoGpuModel) << "no schedulable node has one";

  ASSERT_TRUE(core_.SetNodeMode("n2", NodeMode::kSchedulable, now_).ok());
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(b, "n2", {0})}));
  EXPECT_EQ(T(a).status, TaskStatus::kRunning);
}

TEST_F(FrameworkTest, ANodeKeepsItsModeWhileOfflineAndWhenItRegistersAgain) {
  Register("n1", MakeGpus(2));
  ASSERT_TRUE(core_.SetNodeMode("n1", NodeMode::kDraining, now_).ok());
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  EXPECT_EQ(NodeStateName(core_.FindNode("n1")->online, core_.FindNode("n1")->mode), "offline");
  Register("n1", MakeGpus(2));
  EXPECT_EQ(core_.FindNode("n1")->mode, NodeMode::kDraining);
  EXPECT_EQ(NodeStateName(true, NodeMode::kDraining), "draining");
  Submit(1);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.SetNodeMode("nope", NodeMode::kCordoned, now_).code(), StatusCode::kNotFound);
}

TEST_F(FrameworkTest, AModeChangeIsDurableAndRestoredBeforeTheNodeRegisters) {
  Register("n1", MakeGpus(2));
  core_.TakeChanges();
  ASSERT_TRUE(core_.SetNodeMode("n1", NodeMode::kCordoned, now_).ok());
  ASSERT_TRUE(core_.SetNodeMode("n1", NodeMode::kCordoned, now_).ok());  // No change: no record.
  ASSERT_TRUE(core_.SetNodeMode("n1", NodeMode::kSchedulable, now_).ok());
  std::vector<Change> changes = core_.TakeChanges();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].kind, Change::Kind::kNodeUpsert);
  EXPECT_EQ(changes[0].node, (NodeRecord{"n1", NodeMode::kCordoned}));
  EXPECT_EQ(changes[1].node, (NodeRecord{"n1", NodeMode::kSchedulable}));

  // A restarted scheduler: the stored mode comes before the node registers, and stays.
  SchedulerCore restarted(WithAllOnline({}));
  ASSERT_TRUE(restarted.RestoreNodeMode({"n2", NodeMode::kDraining}).ok());
  ASSERT_TRUE(restarted.RestoreNodeMode({"n3", NodeMode::kSchedulable}).ok());
  EXPECT_EQ(restarted.RestoreNodeMode({"", NodeMode::kCordoned}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(restarted.Nodes().empty()) << "a placeholder is not an agent";
  EXPECT_TRUE(restarted.TakeChanges().empty()) << "restoring writes nothing";
  ASSERT_TRUE(restarted.RegisterNode("n2", "n2:1", MakeGpus(2), {}, {}, now_).ok());
  ASSERT_TRUE(restarted.RegisterNode("n3", "n3:1", MakeGpus(1), {}, {}, now_).ok());
  EXPECT_EQ(restarted.FindNode("n2")->mode, NodeMode::kDraining);
  TaskNumber t = *restarted.Submit(Spec(Priority::kHigh, 2, ""), now_);
  restarted.Schedule(now_);
  EXPECT_TRUE(restarted.TakeDecisions().empty());
  EXPECT_EQ(restarted.ReasonOf(*restarted.FindTask(t)), PendingReason::kExceedsCluster)
      << "only n3 (1 GPU) takes tasks";
  EXPECT_TRUE(restarted.CheckInvariants().ok()) << restarted.CheckInvariants().ToString();
}

TEST_F(FrameworkTest, ADrainThatEvictsRequeuesTheNodesTasksWithoutCountingAnAttempt) {
  Register("n1", MakeGpus(4));
  Register("n2", MakeGpus(4));
  TaskNumber a = Submit(2);
  TaskNumber b = *core_.Submit(
      [] {
        TaskSpec s = Spec(Priority::kHigh, 2, "");
        s.preemption_grace_seconds = 7;
        return s;
      }(),
      now_);
  TaskNumber c = Submit(4);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n1", {0, 1}), Start(b, "n1", {2, 3}),
                                           Start(c, "n2", {0, 1, 2, 3})}));
  ASSERT_TRUE(core_.TaskStarted(a, "n1", now_).ok());
  EXPECT_EQ(core_.DrainNode("n1", true, -2, now_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.DrainNode("nope", false, -1, now_).status().code(), StatusCode::kNotFound);

  StatusOr<int> evicted = core_.DrainNode("n1", true, -1, now_);
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(*evicted, 2);
  std::vector<Decision> stops = core_.TakeDecisions();
  ASSERT_EQ(stops.size(), 2u);
  EXPECT_EQ(stops[0].kind, Kind::kStop);
  EXPECT_EQ(stops[0].reason, StopReason::kDrain);
  EXPECT_EQ(stops[0].grace_seconds, 30) << "preemption_grace_seconds";
  EXPECT_EQ(stops[1].grace_seconds, 7) << "the task's own grace";
  EXPECT_EQ(core_.FindNode("n1")->tasks, 2) << "held until their agent confirms";
  EXPECT_EQ(*core_.DrainNode("n1", true, 5, now_), 0) << "already stopping";

  ASSERT_TRUE(core_.TaskFinished("n1", {a, false, 143, "signal:15", now_}, now_).ok());
  ASSERT_TRUE(core_.TaskFinished("n1", {b, false, 143, "signal:15", now_}, now_).ok());
  EXPECT_EQ(core_.FindNode("n1")->tasks, 0);
  EXPECT_EQ(T(a).status, TaskStatus::kPending);
  EXPECT_EQ(T(a).error, "drained");
  EXPECT_EQ(T(a).attempts, 0) << "an eviction is not a lost attempt";
  EXPECT_EQ(T(a).preemptions, 1);
  // n1 is draining and n2 is full: they wait; n2 frees up and takes them.
  EXPECT_TRUE(Pass().empty());
  ASSERT_TRUE(core_.TaskFinished("n2", {c, true, 0, "", now_}, now_).ok());
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n2", {0, 1}), Start(b, "n2", {2, 3})}));
  EXPECT_EQ(T(a).attempts, 1);
  EXPECT_EQ(core_.FindNode("n1")->mode, NodeMode::kDraining);
}

TEST_F(FrameworkTest, CordoningTheReservedNodeDropsTheReservation) {
  CoreConfig c;
  c.max_bypass = 1;
  SchedulerCore core(WithAllOnline(c));
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(2), {}, {}, now_).ok());
  ASSERT_TRUE(core.RegisterNode("n2", "", MakeGpus(2), {}, {}, now_).ok());
  auto submit = [&](int gpus) { return *core.Submit(Spec(Priority::kHigh, gpus, ""), now_); };
  submit(1);
  TaskNumber b = submit(1);
  submit(1);
  core.Schedule(now_);  // Best fit: two on n1, one on n2.
  ASSERT_TRUE(core.TaskFinished("n1", {b, true, 0, "", now_}, now_).ok());
  TaskNumber big = submit(2);  // One GPU free on each node: no node fits.
  submit(1);                   // Overtakes it: the bypass bound (1) is reached.
  submit(1);
  core.Schedule(now_);
  ASSERT_TRUE(core.ReservedNode(Priority::kHigh).has_value());
  const std::string reserved = *core.ReservedNode(Priority::kHigh);
  ASSERT_EQ(core.Reservations().size(), 1u);
  EXPECT_EQ(core.Reservations()[0].task, big);
  EXPECT_EQ(core.Reservations()[0].nodes, std::vector<std::string>{reserved});
  ASSERT_TRUE(core.SetNodeMode(reserved, NodeMode::kCordoned, now_).ok());
  EXPECT_EQ(core.ReservedNode(Priority::kHigh), std::nullopt);
  EXPECT_TRUE(core.Reservations().empty());
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

TEST_F(FrameworkTest, AnUnhealthyGpuLeavesPlacementAndQuotaTotals) {
  Register("n1", MakeGpus(4));
  ASSERT_TRUE(core_.SetGpuHealth("n1", 1, false, "xid 79", now_).ok());
  EXPECT_EQ(core_.Quota().total_gpus, 3);
  EXPECT_EQ(core_.FindNode("n1")->free_gpus, 3);
  TaskNumber four = Submit(4);
  TaskNumber three = Submit(3);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(three, "n1", {0, 2, 3})}));
  EXPECT_EQ(core_.ReasonOf(T(four)), PendingReason::kExceedsCluster);
  const auto gpus = core_.Gpus();
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(gpus[1].status, GpuStatus::kUnhealthy);
  EXPECT_EQ(gpus[1].health_reason, "xid 79");
  EXPECT_EQ(gpus[2].status, GpuStatus::kBusy);

  ASSERT_TRUE(core_.SetGpuHealth("n1", 1, true, "", now_).ok());
  EXPECT_EQ(core_.Quota().total_gpus, 4);
  EXPECT_EQ(core_.FindNode("n1")->free_gpus, 1);
  EXPECT_EQ(core_.Gpus()[1].status, GpuStatus::kIdle);
  EXPECT_EQ(core_.Gpus()[1].health_reason, "");
  EXPECT_EQ(core_.SetGpuHealth("n1", 9, false, "x", now_).code(), StatusCode::kNotFound);
}

TEST_F(FrameworkTest, ATaskOnAGpuThatTurnsUnhealthyIsStoppedAndRequeued) {
  Register("n1", MakeGpus(2));
  Register("n2", MakeGpus(2));
  TaskNumber t = Submit(2);
  ASSERT_EQ(Pass(), (std::vector<Decision>{Start(t, "n1", {0, 1})}));
  ASSERT_TRUE(core_.SetGpuHealth("n1", 0, false, "ecc", now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, t, "n1", {}, StopReason::kGpuFailure, -1}}));
  EXPECT_TRUE(T(t).stopping);
  EXPECT_TRUE(Pass().empty()) << "its GPUs are held until its agent confirms";
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 143, "", now_}, now_).ok());
  EXPECT_EQ(T(t).status, TaskStatus::kPending);
  EXPECT_EQ(T(t).error, "gpu_unhealthy");
  EXPECT_EQ(core_.FindNode("n1")->free_gpus, 1) << "the unhealthy GPU is not freed";
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(t, "n2", {0, 1})}));
}

TEST_F(FrameworkTest, AGpuReportedUnhealthyAtRegistrationStopsTheTaskFoundOnIt) {
  Register("n1", MakeGpus(2));
  TaskNumber t = Submit(1);
  ASSERT_EQ(Pass(), (std::vector<Decision>{Start(t, "n1", {0})}));
  auto gpus = MakeGpus(2);
  gpus[0].healthy = false;
  gpus[0].health_reason = "fell off the bus";
  ASSERT_TRUE(core_.RegisterNode("n1", "", gpus, {{t, {0}}}, {}, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, t, "n1", {}, StopReason::kGpuFailure, -1}}));
  EXPECT_EQ(core_.Quota().total_gpus, 1);
  EXPECT_EQ(core_.Gpus()[0].health_reason, "fell off the bus");
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

class RackFilter : public NodeFilter {
 public:
  explicit RackFilter(std::string rack) : rack_(std::move(rack)) {}
  std::string_view name() const override { return "rack"; }
  bool Feasible(const Task&, const NodeFacts& node) const override {
    auto it = node.labels.find("rack");
    return it != node.labels.end() && it->second == rack_;
  }

 private:
  std::string rack_;
};

CoreConfig WithFilter() {
  CoreConfig c;
  c.policies.filters.push_back(std::make_shared<RackFilter>("r2"));
  return c;
}

class FilterTest : public FrameworkTest {
 protected:
  FilterTest() : FrameworkTest(WithFilter()) {}
};

TEST_F(FilterTest, AConfiguredFilterRestrictsPlacementToTheNodesItAccepts) {
  Register("n1", MakeGpus(1));  // The best fit, but in the wrong rack.
  Register("n2", MakeGpus(4));
  Register("n3", MakeGpus(2));
  ASSERT_TRUE(core_.SetNodeLabels("n1", {{"rack", "r1"}}).ok());
  ASSERT_TRUE(core_.SetNodeLabels("n2", {{"rack", "r2"}}).ok());
  TaskNumber a = Submit(1);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n2", {0})}));
  EXPECT_EQ(core_.FindNode("n2")->labels, (Labels{{"rack", "r2"}}));
  TaskNumber b = Submit(4);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.ReasonOf(T(b)), PendingReason::kNoNodeFits);
  ASSERT_TRUE(core_.SetNodeLabels("n3", {{"rack", "r2"}}).ok());
  TaskNumber c = Submit(2);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(c, "n3", {0, 1})}));
  EXPECT_EQ(core_.SetNodeLabels("nope", {}).code(), StatusCode::kNotFound);
}

// node_selector: only nodes with every label of it take the task; a selector no node of its
// model matches waits no_node_matches, one whose nodes are full no_node_fits; tasks of two
// selectors queue apart (the shape holds the selector), so one that waits does not hold back
// the other; labels that change bring the waiting one on.
class SelectorTest : public FrameworkTest {
 protected:
  TaskNumber SubmitSelecting(int gpus, std::vector<std::pair<std::string, std::string>> selector,
                             int nodes = 1) {
    TaskSpec spec = Spec(Priority::kHigh, gpus, "");
    spec.node_selector = std::move(selector);
    spec.nodes = nodes;
    auto r = core_.Submit(spec, now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
};

TEST_F(SelectorTest, OnlyNodesWithEveryLabelTakeTheTask) {
  Register("n1", MakeGpus(1));  // The best fit, without the labels.
  Register("n2", MakeGpus(4));
  Register("n3", MakeGpus(2));
  ASSERT_TRUE(core_.SetNodeLabels("n1", {{"rack", "r1"}}).ok());
  ASSERT_TRUE(core_.SetNodeLabels("n2", {{"rack", "r2"}, {"zone", "a"}}).ok());
  ASSERT_TRUE(core_.SetNodeLabels("n3", {{"rack", "r2"}}).ok());
  // Both labels: n2 alone.
  TaskNumber a = SubmitSelecting(1, {{"rack", "r2"}, {"zone", "a"}});
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n2", {0})}));
  // rack r2: the best fit of n2 (3 free) and n3 (2 free).
  TaskNumber b = SubmitSelecting(1, {{"rack", "r2"}});
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(b, "n3", {0})}));
  EXPECT_EQ(T(b).spec.node_selector,
            (std::vector<std::pair<std::string, std::string>>{{"rack", "r2"}}));
  // No node has rack r3: no_node_matches, and the task without a selector behind it starts.
  TaskNumber c = SubmitSelecting(1, {{"rack", "r3"}});
  TaskNumber d = Submit(1);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(d, "n1", {0})}));
  EXPECT_EQ(core_.ReasonOf(T(c)), PendingReason::kNoNodeMatches);
  // A value differs: no match either.
  TaskNumber e = SubmitSelecting(1, {{"zone", "b"}});
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.ReasonOf(T(e)), PendingReason::kNoNodeMatches);
  // Matching nodes that are full: no_node_fits.
  TaskNumber f = SubmitSelecting(4, {{"rack", "r2"}});
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.ReasonOf(T(f)), PendingReason::kNoNodeFits);
  // A node that gains the label takes the waiting task.
  ASSERT_TRUE(core_.SetNodeLabels("n1", {{"rack", "r3"}}).ok());
  EXPECT_TRUE(core_.TaskFinished("n1", {d, true, 0, "", now_}, now_).ok());
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(c, "n1", {0})}));
  EXPECT_EQ(core_.ReasonOf(T(e)), PendingReason::kNoNodeMatches);
}

TEST_F(SelectorTest, AGangTakesOnlyNodesThatMatchAndWaitsWhenTooFewDo) {
  for (const char* n : {"n1", "n2", "n3"}) Register(n, MakeGpus(2));
  ASSERT_TRUE(core_.SetNodeLabels("n1", {{"ib", "yes"}}).ok());
  ASSERT_TRUE(core_.SetNodeLabels("n3", {{"ib", "yes"}}).ok());
  TaskNumber three = SubmitSelecting(6, {{"ib", "yes"}}, 3);
  TaskNumber two = SubmitSelecting(4, {{"ib", "yes"}}, 2);
  const std::vector<Decision> started = Pass();  // One start per member.
  ASSERT_EQ(started.size(), 2u);
  std::set<std::string> nodes;
  for (const Decision& d : started) {
    EXPECT_EQ(d.task, two);
    nodes.insert(d.node_id);
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n3"}));
  EXPECT_EQ(core_.ReasonOf(T(three)), PendingReason::kNoNodeMatches) << "2 of 3 nodes match";
}

// The starvation guard keeps for a starving task only a node its selector accepts: the node with
// the most free GPUs is in another rack, and kept for it, it would stay idle.
TEST(SelectorGuardTest, TheGuardReservesANodeTheSelectorAccepts) {
  CoreConfig c;
  c.max_bypass = 1;
  c.online_percent = 1.0;
  SchedulerCore core(c);
  const TimeMicros now = 100 * kSec;
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {}, {}, now).ok());
  ASSERT_TRUE(core.RegisterNode("n2", "", MakeGpus(2), {}, {}, now).ok());
  ASSERT_TRUE(core.SetNodeLabels("n1", {{"rack", "r1"}}).ok());
  ASSERT_TRUE(core.SetNodeLabels("n2", {{"rack", "r2"}}).ok());
  auto submit = [&](int gpus, std::vector<std::pair<std::string, std::string>> selector) {
    TaskSpec spec = Spec(Priority::kHigh, gpus, "");
    spec.node_selector = std::move(selector);
    return *core.Submit(spec, now);
  };
  const TaskNumber busy = submit(2, {{"rack", "r2"}});
  core.Schedule(now);
  ASSERT_EQ(core.FindTask(busy)->allocation.at(0).node_id, "n2");
  const TaskNumber starving = submit(1, {{"rack", "r2"}});  // n2 is full.
  submit(1, {});  // Overtakes it on n1: the bypass bound (1) is reached.
  submit(1, {});
  core.Schedule(now);
  ASSERT_EQ(core.Reservations().size(), 1u);
  EXPECT_EQ(core.Reservations()[0].task, starving);
  EXPECT_EQ(core.Reservations()[0].nodes, std::vector<std::string>{"n2"});
  // Another task of the rack: the node is kept for the starving one.
  const TaskNumber later = submit(1, {{"rack", "r2"}});
  EXPECT_EQ(
      core.ExplainPending(later)->Text(),
      "0 of 2 nodes can take it; 1 without label rack=r2, 1 kept for " + FormatTaskId(starving));
  ASSERT_TRUE(core.TaskFinished("n2", {busy, true, 0, "", now}, now).ok());
  core.Schedule(now);
  EXPECT_EQ(core.FindTask(starving)->status, TaskStatus::kRunning)
      << ToString(core.ReasonOf(*core.FindTask(starving)));
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

// A core (every GPU online) with two nodes of 2 GPUs: "small" (8 CPUs, 64,000 MiB) and "big"
// (64 CPUs, 512,000 MiB).
std::unique_ptr<SchedulerCore> SmallAndBig(TimeMicros now) {
  CoreConfig c;
  c.online_percent = 1.0;
  auto core = std::make_unique<SchedulerCore>(c);
  EXPECT_TRUE(
      core->RegisterNode("small", "", MakeGpus(2), {8000, 64000, "none"}, {}, {}, now).ok());
  EXPECT_TRUE(
      core->RegisterNode("big", "", MakeGpus(2), {64000, 512000, "none"}, {}, {}, now).ok());
  return core;
}

// A request larger than every node the selector accepts can never start (exceeds_cluster), even
// when a node it does not select could hold it.
TEST(SelectorGuardTest, ARequestNoSelectedNodeCouldHoldExceedsTheCluster) {
  const TimeMicros now = 100 * kSec;
  auto owned = SmallAndBig(now);
  SchedulerCore& core = *owned;
  ASSERT_TRUE(core.SetNodeLabels("small", {{"ib", "yes"}}).ok());
  TaskSpec spec = Spec(Priority::kHigh, 1, "");
  spec.cpus_milli = 16000;
  spec.node_selector = {{"ib", "yes"}};
  const TaskNumber t = *core.Submit(spec, now);
  core.Schedule(now);
  EXPECT_EQ(core.ReasonOf(*core.FindTask(t)), PendingReason::kExceedsCluster);
}

// ExplainPending counts every node by the first rule that turns the task away, in the pass's
// order, and says it in one line.
TEST_F(SelectorTest, APendingTaskIsExplainedNodeByNodeByTheFirstRuleEachFails) {
  Register("off", MakeGpus(2));
  Register("cordoned", MakeGpus(2));
  Register("draining", MakeGpus(2));
  Register("v100", MakeGpus(2, "V100"));
  Register("small", MakeGpus(1));
  Register("sick", MakeGpus(2));
  Register("r1", MakeGpus(2));
  Register("busy", MakeGpus(2));
  Register("free-a", MakeGpus(2));
  Register("free-b", MakeGpus(4));
  ASSERT_TRUE(core_.NodeLost("off", now_).ok());
  ASSERT_TRUE(core_.SetNodeMode("cordoned", NodeMode::kCordoned, now_).ok());
  ASSERT_TRUE(core_.SetNodeMode("draining", NodeMode::kDraining, now_).ok());
  ASSERT_TRUE(core_.SetGpuHealth("sick", 1, false, "xid 79", now_).ok());
  for (const char* n :
       {"off", "cordoned", "draining", "v100", "small", "sick", "busy", "free-a", "free-b"}) {
    ASSERT_TRUE(core_.SetNodeLabels(n, {{"rack", "r2"}}).ok());
  }
  ASSERT_TRUE(core_.SetNodeLabels("r1", {{"rack", "r1"}}).ok());
  ASSERT_TRUE(core_.SetNodeLabels("busy", {{"rack", "r2"}, {"x", "busy"}}).ok());
  const TaskNumber big = SubmitSelecting(4, {{"rack", "r2"}});  // free-b, the only 4-GPU node.
  const TaskNumber one = SubmitSelecting(1, {{"x", "busy"}});   // Half of busy.
  ASSERT_EQ(Pass().size(), 2u);
  ASSERT_EQ(T(big).allocation.at(0).node_id, "free-b");
  ASSERT_EQ(T(one).allocation.at(0).node_id, "busy");

  TaskSpec spec = Spec(Priority::kHigh, 2, "A100");
  spec.node_selector = {{"rack", "r2"}};
  const TaskNumber t = *core_.Submit(spec, now_);
  const auto detail = core_.ExplainPending(t);
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->nodes, 10);
  EXPECT_EQ(detail->available, 1);  // free-a
  EXPECT_EQ(detail->needed, 1);
  EXPECT_EQ(detail->Text(),
            "1 of 10 nodes can take it; 1 offline, 1 cordoned, 1 draining, 1 without A100 GPUs, "
            "1 with fewer than 2 A100 GPUs, 1 with fewer than 2 healthy A100 GPUs, 1 without "
            "label rack=r2, 2 with fewer than 2 free A100 GPUs");
  // Started: no longer pending, nothing to explain; an unknown task neither.
  EXPECT_EQ(Pass().size(), 1u);
  EXPECT_FALSE(core_.ExplainPending(t).has_value());
  EXPECT_FALSE(core_.ExplainPending(987654).has_value());
  // A gang of three 2-GPU members: one node can take a member.
  const TaskNumber gang = SubmitSelecting(6, {{"rack", "r1"}}, 3);
  EXPECT_EQ(core_.ExplainPending(gang)->Text().substr(0, 46),
            "1 of 10 nodes can take a member (it needs 3); ");
}

TEST_F(FilterTest, AnExplanationNamesTheConfiguredFilterThatTurnsANodeAway) {
  Register("n1", MakeGpus(2));
  Register("n2", MakeGpus(2));
  ASSERT_TRUE(core_.SetNodeLabels("n2", {{"rack", "r2"}}).ok());
  const TaskNumber a = Submit(2);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n2", {0, 1})}));
  const TaskNumber b = Submit(2);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.ExplainPending(b)->Text(),
            "0 of 2 nodes can take it; 1 rejected by filter rack, 1 with fewer than 2 free GPUs");
}

// CPUs and memory: what a node could never give, then what it has free.
TEST(ExplainTest, NodesShortOfCpusAreCountedApartFromNodesShortOfFreeCpus) {
  const TimeMicros now = 100 * kSec;
  auto owned = SmallAndBig(now);
  SchedulerCore& core = *owned;
  TaskSpec spec = Spec(Priority::kHigh, 1, "");
  spec.cpus_milli = 60000;
  const TaskNumber x = *core.Submit(spec, now);
  core.Schedule(now);
  ASSERT_EQ(core.FindTask(x)->allocation.at(0).node_id, "big");
  spec.cpus_milli = 16000;
  const TaskNumber t = *core.Submit(spec, now);
  core.Schedule(now);
  EXPECT_EQ(core.FindTask(t)->status, TaskStatus::kPending);
  EXPECT_EQ(core.ExplainPending(t)->Text(),
            "0 of 2 nodes can take it; 1 with too little CPU, 1 with too little free CPU");
  spec.cpus_milli = 0;
  spec.memory_mb = 100000;
  const TaskNumber m = *core.Submit(spec, now);
  // Without CPUs of its own it takes its GPU's share (half of big's 64), which big lacks.
  EXPECT_EQ(core.ExplainPending(m)->Text(),
            "0 of 2 nodes can take it; 1 with too little memory, 1 with too little free CPU");
}

TEST_F(SelectorTest, ABadSelectorIsRefusedNamingWhy) {
  Register("n1", MakeGpus(1));
  TaskSpec spec = Spec(Priority::kHigh, 1, "");
  spec.node_selector = {{"rack", "r 1"}};
  auto r = core_.Submit(spec, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().substr(0, 38), "node_selector: value \"r 1\" of rack: a ");
  spec.node_selector = {{"zone", "a"}, {"rack", "r1"}};
  EXPECT_EQ(core_.Submit(spec, now_).status().message(),
            "node_selector: keys not sorted, or one given twice");
  spec.node_selector = {{"-rack", "r1"}};
  EXPECT_EQ(core_.Submit(spec, now_).status().code(), StatusCode::kInvalidArgument);
}

// Names the first running task of `may_stop` as the victim, and keeps its node for the waiting
// task (with `keep_node` false: names no node, which the core refuses).
class TakeFirstRunning : public PostFilterHook {
 public:
  std::string_view name() const override { return "take-first-running"; }
  PreemptionPlan Plan(const SchedulerCore& core, const Task& waiting, PendingReason why) override {
    calls.push_back({waiting.id, why});
    PreemptionPlan plan;
    core.ForEachTask([&](const Task& t) {
      if (plan.victims.empty() && t.status == TaskStatus::kRunning && !t.stopping &&
          may_stop.contains(t.id)) {
        plan.victims.push_back({t.id, 7});
        if (keep_node) plan.nodes.push_back(t.allocation[0].node_id);
      }
    });
    return plan;
  }
  std::vector<std::pair<TaskNumber, PendingReason>> calls;
  std::set<TaskNumber> may_stop;
  bool keep_node = true;
};

// Constructed before the core that is given the hook.
struct HookHolder {
  std::shared_ptr<TakeFirstRunning> hook_ = std::make_shared<TakeFirstRunning>();
};

class PostFilterTest : public HookHolder, public FrameworkTest {
 protected:
  PostFilterTest() : FrameworkTest(WithHook(hook_)) {}
  static CoreConfig WithHook(std::shared_ptr<TakeFirstRunning> hook) {
    CoreConfig c;
    c.policies.post_filter = std::move(hook);
    return c;
  }
};

TEST_F(PostFilterTest, TheHooksVictimsArePreemptedAndTheirNodeIsKeptForTheWaitingTask) {
  Register("n1", MakeGpus(2));
  TaskNumber victim = Submit(2);
  hook_->may_stop = {victim};
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_TRUE(hook_->calls.empty()) << "nothing waited";
  TaskNumber waiting = Submit(2);
  EXPECT_EQ(
      Pass(),
      (std::vector<Decision>{{Kind::kStop, victim, "n1", {}, StopReason::kPreempt, 7, waiting}}));
  ASSERT_EQ(hook_->calls.size(), 1u);
  EXPECT_EQ(hook_->calls[0], std::make_pair(waiting, PendingReason::kQuotaExhausted));
  EXPECT_TRUE(T(victim).stopping);
  EXPECT_EQ(T(victim).preempted_by, waiting);
  EXPECT_EQ(core_.ReasonOf(T(waiting)), PendingReason::kWaitingForPreemption);
  now_ += kMicrosPerSecond;
  core_.ForgetNoRoom();
  EXPECT_TRUE(Pass().empty()) << "the victim holds its GPUs until its agent confirms";
  EXPECT_EQ(hook_->calls.size(), 1u) << "not asked again while its victim stops";
  ASSERT_TRUE(core_.TaskFinished("n1", {victim, false, 143, "", now_}, now_).ok());
  EXPECT_EQ(T(victim).status, TaskStatus::kPending);
  EXPECT_EQ(T(victim).error, "preempted");
  // Back at its old place, ahead of the task it made room for; the node is kept for that one.
  EXPECT_EQ(core_.QueueOrder(Priority::kHigh), (std::vector<TaskNumber>{victim, waiting}));
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(waiting, "n1", {0, 1})}));
  EXPECT_EQ(core_.ReasonOf(T(victim)), PendingReason::kQuotaExhausted);
  EXPECT_EQ(hook_->calls.size(), 2u) << "asked about the victim, which may stop nothing";
  ASSERT_TRUE(core_.TaskFinished("n1", {waiting, true, 0, "", now_}, now_).ok());
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(victim, "n1", {0, 1})}));
  EXPECT_EQ(T(victim).attempts, 1) << "a preempted run is not a lost attempt";
  EXPECT_EQ(T(victim).preemptions, 1);
}

TEST_F(PostFilterTest, APlanWithoutItsNodesStopsNothing) {
  hook_->keep_node = false;
  Register("n1", MakeGpus(2));
  TaskNumber running = Submit(2);
  hook_->may_stop = {running};
  ASSERT_EQ(Pass().size(), 1u);
  TaskNumber waiting = Submit(2);
  EXPECT_TRUE(Pass().empty());
  ASSERT_EQ(hook_->calls.size(), 1u);
  EXPECT_EQ(hook_->calls[0].first, waiting);
  EXPECT_FALSE(T(running).stopping);
  EXPECT_EQ(core_.ReasonOf(T(waiting)), PendingReason::kQuotaExhausted);
}

TEST_F(PostFilterTest, NoHookCallForAHeadThatCanNeverStart) {
  Register("n1", MakeGpus(2));
  Submit(4);
  EXPECT_TRUE(Pass().empty());
  EXPECT_TRUE(hook_->calls.empty()) << "exceeds_cluster: no victim could help";
}

}  // namespace
}  // namespace dgpu::core
