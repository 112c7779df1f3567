// Gangs in the pass: one member per node, all placed in the same pass or none, in rank order;
// why a gang waits; the starvation guard's reservation of several nodes; quotas and teams
// counting every member; a gang's life once started (multinode_test.cc has more of it).
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {

// How failures print a decision, a reason and a member.
std::string Describe(const Decision& d);  // teams_test.cc
void PrintTo(const Decision& d, std::ostream* os) { *os << Describe(d); }
void PrintTo(PendingReason r, std::ostream* os) { *os << ToString(r); }
void PrintTo(const NodeAllocation& a, std::ostream* os) {
  *os << a.node_id << "[";
  for (int i : a.gpu_indices) *os << i << ",";
  *os << "]" << (a.ended ? " ended" : "");
}

namespace {

using testing::kSec;
using testing::MakeGpus;
using Kind = Decision::Kind;

TaskSpec GangSpec(Priority p, int nodes, int per_node, std::string model = "") {
  TaskSpec s = testing::Spec(p, nodes * per_node, std::move(model));
  s.nodes = nodes;
  return s;
}

class GangTest : public ::testing::Test {
 protected:
  explicit GangTest(CoreConfig config = AllBatch()) : core_(config) {}
  static CoreConfig AllBatch() {
    CoreConfig c;
    c.online_percent = 0.0;
    return c;
  }
  void Nodes(int count, int gpus) {
    for (int i = 1; i <= count; ++i) {
      ASSERT_TRUE(
          core_.RegisterNode("n" + std::to_string(i), "", MakeGpus(gpus), {}, {}, now_).ok());
    }
  }
  TaskNumber Submit(const TaskSpec& s) {
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
  int Free(const std::string& node) { return core_.FindNode(node)->free_gpus; }
  const Task& T(TaskNumber id) { return *core_.FindTask(id); }
  Status Finish(TaskNumber id, const std::string& node, bool ok = true, int code = 0) {
    Status s = core_.TaskFinished(node, {id, ok, code, "", now_}, now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return s;
  }
  static Decision Start(TaskNumber id, const std::string& node, std::vector<int> gpus) {
    return {Kind::kStart, id, node, std::move(gpus)};
  }

  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_F(GangTest, AllMembersStartTogetherInRankOrderOnTheBestFittingNodes) {
  // n1 has 1 GPU, n2 2, n3 3, n4 4: a 2 x 2 gang best fits n2, then n3.
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(core_.RegisterNode("n" + std::to_string(i), "", MakeGpus(i), {}, {}, now_).ok());
  }
  const TaskNumber gang = Submit(GangSpec(Priority::kLow, 2, 2));
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(gang, "n2", {0, 1}), Start(gang, "n3", {0, 1})}));
  EXPECT_EQ(T(gang).status, TaskStatus::kRunning);
  EXPECT_EQ(T(gang).allocation, (Allocation{{"n2", {0, 1}}, {"n3", {0, 1}}}));
  EXPECT_EQ(T(gang).attempts, 1);
  EXPECT_EQ(core_.Quota().used[1], 4);
  EXPECT_EQ(core_.stats().gang_starts, 1u);
  EXPECT_EQ(core_.stats().decisions, 1u) << "one decision per gang";
  EXPECT_EQ(Free("n2"), 0);
  EXPECT_EQ(Free("n3"), 1);
  // Each member confirms its start; it started when the last did.
  ASSERT_TRUE(core_.TaskStarted(gang, "n3", now_ + 1).ok());
  ASSERT_TRUE(core_.TaskStarted(gang, "n2", now_ + 2).ok());
  EXPECT_EQ(T(gang).started_at, now_ + 2);
  // Success once every member has succeeded.
  ASSERT_TRUE(Finish(gang, "n2").ok());
  EXPECT_EQ(T(gang).status, TaskStatus::kRunning);
  EXPECT_EQ(Free("n2"), 2) << "an ended member's GPUs are free at once";
  ASSERT_TRUE(Finish(gang, "n3").ok());
  EXPECT_EQ(T(gang).status, TaskStatus::kSuccess);
  EXPECT_EQ(core_.Quota().used[1], 0);
}

TEST_F(GangTest, AGangThatDoesNotFitWholeHoldsNothingAndStartsOnceItDoes) {
  Nodes(3, 4);
  const TaskNumber a = Submit(testing::Spec(Priority::kLow, 2));
  const TaskNumber b = Submit(testing::Spec(Priority::kLow, 2));
  const TaskNumber c = Submit(testing::Spec(Priority::kLow, 2));
  // Best fit: a and b fill n1, c takes half of n2.
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(a, "n1", {0, 1}), Start(b, "n1", {2, 3}),
                                           Start(c, "n2", {0, 1})}));
  const TaskNumber gang = Submit(GangSpec(Priority::kLow, 2, 3));
  EXPECT_TRUE(Pass().empty()) << "one of two members has room: none starts";
  EXPECT_EQ(Reason(gang), PendingReason::kNoNodeFits);
  EXPECT_EQ(Free("n3"), 4) << "nothing held for it";
  EXPECT_EQ(core_.Quota().used[1], 6);
  // Smaller tasks use the rest meanwhile.
  const TaskNumber small = Submit(testing::Spec(Priority::kLow, 3));
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(small, "n3", {0, 1, 2})}));
  ASSERT_TRUE(Finish(small, "n3").ok());
  EXPECT_TRUE(Pass().empty()) << "n2 still has c";
  ASSERT_TRUE(Finish(c, "n2").ok());
  EXPECT_EQ(Pass(),
            (std::vector<Decision>{Start(gang, "n2", {0, 1, 2}), Start(gang, "n3", {0, 1, 2})}));
}

TEST_F(GangTest, ExceedsClusterOnlyWhenTooFewNodesOfThatSizeExist) {
  Nodes(2, 4);
  ASSERT_TRUE(core_.RegisterNode("big", "", MakeGpus(8), {}, {}, now_).ok());
  const TaskNumber three = Submit(GangSpec(Priority::kLow, 3, 4));
  const TaskNumber two_by_eight = Submit(GangSpec(Priority::kLow, 2, 8));
  const TaskNumber nine = Submit(GangSpec(Priority::kLow, 2, 9));
  const TaskNumber four = Submit(GangSpec(Priority::kLow, 4, 1));
  const TaskNumber model = Submit(GangSpec(Priority::kLow, 2, 1, "H100"));
  auto d = Pass();
  EXPECT_EQ(Reason(two_by_eight), PendingReason::kExceedsCluster) << "one node has 8";
  EXPECT_EQ(Reason(nine), PendingReason::kExceedsCluster);
  EXPECT_EQ(Reason(four), PendingReason::kExceedsCluster) << "three nodes";
  EXPECT_EQ(Reason(model), PendingReason::kNoGpuModel);
  // The 3 x 4 gang fits (n1, n2 and big): it started.
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(T(three).status, TaskStatus::kRunning);
  EXPECT_EQ(T(three).allocation[0].node_id, "n1");
  EXPECT_EQ(T(three).allocation[2].node_id, "big") << "the node with the most room comes last";
  // Another one waits for room (one node has 4 free, it needs two): no_node_fits.
  const TaskNumber again = Submit(GangSpec(Priority::kLow, 2, 2));
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(Reason(again), PendingReason::kNoNodeFits);
}

TEST_F(GangTest, TwoGangsThatWouldDeadlockNeverHoldPartOfTheCluster) {
  // Each gang wants 3 of 4 nodes. Placed one member at a time, each could take two nodes and
  // wait forever for a third; all or nothing, the first runs and the second holds nothing.
  Nodes(4, 2);
  const TaskNumber g1 = Submit(GangSpec(Priority::kLow, 3, 2));
  const TaskNumber g2 = Submit(GangSpec(Priority::kLow, 3, 2));
  EXPECT_EQ(Pass().size(), 3u);
  EXPECT_EQ(T(g1).status, TaskStatus::kRunning);
  EXPECT_EQ(T(g2).status, TaskStatus::kPending);
  EXPECT_EQ(Free("n4"), 2);
  const TaskNumber single = Submit(testing::Spec(Priority::kLow, 2));
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(single, "n4", {0, 1})}));
  for (const char* n : {"n1", "n2", "n3"}) ASSERT_TRUE(Finish(g1, n).ok());
  EXPECT_EQ(T(g1).status, TaskStatus::kSuccess);
  auto d = Pass();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(T(g2).status, TaskStatus::kRunning);
}

TEST_F(GangTest, QuotaAndTeamCapCountEveryMember) {
  CoreConfig cfg;
  cfg.online_percent = 0.5;  // 16 GPUs: 8 online, 8 batch.
  cfg.teams["capped"] = TeamLimits{0, 0, 6, 1};
  SchedulerCore core(cfg);
  for (const char* n : {"n1", "n2", "n3", "n4"}) {
    ASSERT_TRUE(core.RegisterNode(n, "", MakeGpus(4), {}, {}, 0).ok());
  }
  TaskSpec over = GangSpec(Priority::kHigh, 3, 4);  // 12 > 8 online.
  TaskSpec capped = GangSpec(Priority::kLow, 2, 4);
  capped.team = "capped";  // 8 > its cap of 6.
  TaskSpec fits = GangSpec(Priority::kLow, 2, 4);
  const TaskNumber a = *core.Submit(over, 0);
  const TaskNumber b = *core.Submit(capped, 0);
  const TaskNumber c = *core.Submit(fits, 0);
  core.Schedule(0);
  EXPECT_EQ(core.TakeDecisions().size(), 2u);
  EXPECT_EQ(core.ReasonOf(*core.FindTask(a)), PendingReason::kQuotaExhausted);
  EXPECT_EQ(core.ReasonOf(*core.FindTask(b)), PendingReason::kTeamLimit);
  EXPECT_EQ(core.FindTask(c)->status, TaskStatus::kRunning);
  EXPECT_EQ(core.Quota().used[1], 8);
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

class GangGuardTest : public GangTest {
 protected:
  GangGuardTest() : GangTest(BypassedOnce()) {}
  static CoreConfig BypassedOnce() {
    CoreConfig c = AllBatch();
    c.max_bypass = 1;
    return c;
  }
};

TEST_F(GangGuardTest, AStarvingGangGetsNodesReservedAsTheyDrainAndSmallerTasksUseTheRest) {
  Nodes(4, 8);
  // Five GPUs busy on each node: a 2 x 4 gang has no room (3 free on each).
  std::vector<TaskNumber> fillers;
  for (int i = 0; i < 4; ++i) fillers.push_back(Submit(testing::Spec(Priority::kLow, 5)));
  ASSERT_EQ(Pass().size(), 4u);
  const TaskNumber gang = Submit(GangSpec(Priority::kLow, 2, 4));
  std::vector<TaskNumber> small;
  for (int i = 0; i < 4; ++i) small.push_back(Submit(testing::Spec(Priority::kLow, 1)));
  // The first small task overtakes it once; then two nodes are kept for it (the most free: n2
  // and n3, since the small task went to n1), and the others go around them: n1, then n4.
  EXPECT_EQ(Pass(),
            (std::vector<Decision>{Start(small[0], "n1", {5}), Start(small[1], "n1", {6}),
                                   Start(small[2], "n1", {7}), Start(small[3], "n4", {5})}));
  auto reservations = core_.Reservations();
  ASSERT_EQ(reservations.size(), 1u);
  EXPECT_EQ(reservations[0].task, gang);
  EXPECT_EQ(reservations[0].nodes, (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(Reason(gang), PendingReason::kNoNodeFits);
  ASSERT_TRUE(Finish(fillers[1], "n2").ok());
  const TaskNumber late = Submit(testing::Spec(Priority::kLow, 4));
  EXPECT_TRUE(Pass().empty()) << "n2 has room but is kept; the queue holds for the gang";
  ASSERT_TRUE(Finish(fillers[2], "n3").ok());
  EXPECT_EQ(Pass(),
            (std::vector<Decision>{Start(gang, "n2", {0, 1, 2, 3}), Start(gang, "n3", {0, 1, 2, 3}),
                                   Start(late, "n2", {4, 5, 6, 7})}));
  EXPECT_TRUE(core_.Reservations().empty());
}

TEST_F(GangTest, TheFirstFailingMemberStopsTheOthersAndANodeLostRequeuesTheWhole) {
  Nodes(3, 2);
  TaskSpec s = GangSpec(Priority::kLow, 2, 2);
  s.max_retries = 0;
  const TaskNumber lost = Submit(s);
  ASSERT_EQ(Pass().size(), 2u);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, lost, "n2", {}, StopReason::kMemberLost}}));
  ASSERT_TRUE(Finish(lost, "n2", false, 143).ok());
  EXPECT_EQ(T(lost).status, TaskStatus::kPending);
  EXPECT_EQ(T(lost).error, "agent_lost");
  // Started again, whole, on the nodes that are left (attempt 2).
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(lost, "n2", {0, 1}), Start(lost, "n3", {0, 1})}));
  EXPECT_EQ(T(lost).attempts, 2);
  ASSERT_TRUE(Finish(lost, "n3", false, 7).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, lost, "n2", {}, StopReason::kMemberFailure}}));
  ASSERT_TRUE(Finish(lost, "n2", false, 143).ok());
  EXPECT_EQ(T(lost).status, TaskStatus::kFailed);
  EXPECT_EQ(T(lost).error, "member_failed:n3");
  EXPECT_EQ(T(lost).exit_code, 7);
  EXPECT_EQ(core_.Quota().used[1], 0);
}

TEST_F(GangTest, AGangWhoseMemberFailedIsRetriedWholeAfterItsBackoff) {
  Nodes(3, 2);
  TaskSpec s = GangSpec(Priority::kLow, 2, 2);
  s.max_retries = 1;
  s.retry_backoff_seconds = 5;
  const TaskNumber g = Submit(s);
  ASSERT_EQ(Pass(), (std::vector<Decision>{Start(g, "n1", {0, 1}), Start(g, "n2", {0, 1})}));
  ASSERT_TRUE(Finish(g, "n2", false, 7).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, g, "n1", {}, StopReason::kMemberFailure}}));
  EXPECT_EQ(T(g).status, TaskStatus::kRunning) << "until every member has ended";
  ASSERT_TRUE(Finish(g, "n1", false, 143).ok());
  // Back in its queue, whole, once the backoff is over; nothing of it holds GPUs meanwhile.
  EXPECT_EQ(T(g).status, TaskStatus::kPending);
  EXPECT_EQ(std::make_tuple(T(g).retries, T(g).exit_code, T(g).error),
            std::make_tuple(1, 7, std::string("member_failed:n2")));
  EXPECT_EQ(T(g).retry_at, now_ + 5 * kSec);
  EXPECT_TRUE(T(g).allocation.empty());
  EXPECT_EQ(core_.Quota().used[1], 0);
  EXPECT_EQ(Reason(g), PendingReason::kRetryBackoff);
  EXPECT_TRUE(Pass().empty());
  now_ += 5 * kSec;
  core_.Tick(now_);
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(g, "n1", {0, 1}), Start(g, "n2", {0, 1})}));
  EXPECT_EQ(T(g).attempts, 2);
  // Its retries used up, the next failure is final.
  ASSERT_TRUE(Finish(g, "n1", false, 9).ok());
  (void)core_.TakeDecisions();
  ASSERT_TRUE(Finish(g, "n2", false, 143).ok());
  EXPECT_EQ(T(g).status, TaskStatus::kFailed);
  EXPECT_EQ(std::make_tuple(T(g).retries, T(g).exit_code, T(g).error),
            std::make_tuple(1, 9, std::string("member_failed:n1")));
}

TEST_F(GangTest, DrainingAMembersNodeStopsTheWholeGangAndItRunsAgainElsewhere) {
  Nodes(3, 2);
  const TaskNumber g = Submit(GangSpec(Priority::kLow, 2, 2));
  ASSERT_EQ(Pass(), (std::vector<Decision>{Start(g, "n1", {0, 1}), Start(g, "n2", {0, 1})}));
  auto stopped = core_.DrainNode("n2", /*evict=*/true, 30, now_);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_EQ(*stopped, 1);
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, g, "n1", {}, StopReason::kDrain, 30},
                                   {Kind::kStop, g, "n2", {}, StopReason::kDrain, 30}}));
  ASSERT_TRUE(Finish(g, "n2", false, 143).ok());
  EXPECT_TRUE(Pass().empty()) << "a member still runs on n1";
  EXPECT_EQ(T(g).status, TaskStatus::kRunning);
  ASSERT_TRUE(Finish(g, "n1", false, 143).ok());
  EXPECT_EQ(T(g).status, TaskStatus::kPending);
  EXPECT_EQ(std::make_tuple(T(g).preemptions, T(g).attempts, T(g).error),
            std::make_tuple(1, 0, std::string("drained")));
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(g, "n1", {0, 1}), Start(g, "n3", {0, 1})}))
      << "never on the draining node";
}

TEST_F(GangTest, AMemberStoppedForTheTimeLimitEndsTheGangAsTimeout) {
  Nodes(2, 2);
  TaskSpec s = GangSpec(Priority::kLow, 2, 2);
  s.timeout_seconds = 60;
  const TaskNumber g = Submit(s);
  ASSERT_EQ(Pass().size(), 2u);
  // Each member's agent enforces the limit; the first to report stops the other.
  ASSERT_TRUE(core_.TaskFinished("n2", {g, false, 143, "timeout", now_}, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, g, "n1", {}, StopReason::kTimeout}}));
  ASSERT_TRUE(core_.TaskFinished("n1", {g, false, 143, "timeout", now_}, now_).ok());
  EXPECT_EQ(T(g).status, TaskStatus::kFailed);
  EXPECT_EQ(T(g).error, "timeout");
  EXPECT_EQ(T(g).exit_code, 143);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

TEST_F(GangTest, AReturningAgentsMemberOfARequeuedGangIsStopped) {
  Nodes(3, 2);
  const TaskNumber g = Submit(GangSpec(Priority::kLow, 2, 2));
  ASSERT_EQ(Pass().size(), 2u);
  const int run = RunNumber(T(g));
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  (void)core_.TakeDecisions();
  ASSERT_TRUE(Finish(g, "n2", false, 143).ok());
  ASSERT_EQ(T(g).status, TaskStatus::kPending);
  // Its member on n1 kept running while the node was cut off; the gang was put back whole.
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2), {{g, {0, 1}, run}}, {}, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, g, "n1", {}, StopReason::kReconcile}}));
  EXPECT_EQ(T(g).status, TaskStatus::kPending);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

TEST_F(GangTest, CancelStopsEveryMember) {
  Nodes(2, 2);
  const TaskNumber g = Submit(GangSpec(Priority::kLow, 2, 2));
  ASSERT_EQ(Pass().size(), 2u);
  ASSERT_TRUE(core_.Cancel(g, now_, 5).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, g, "n1", {}, StopReason::kCancel, 5},
                                   {Kind::kStop, g, "n2", {}, StopReason::kCancel, 5}}));
}

// With borrowing: a gang preempted whole, and a gang taking GPUs back on each member's node.
class GangBorrowingTest : public GangTest {
 protected:
  GangBorrowingTest() : GangTest(Borrowing()) {}
  static CoreConfig Borrowing() {
    CoreConfig c;
    c.borrowing = true;
    c.online_percent = 0.5;
    c.preemption_grace_seconds = 30;
    c.teams["web"] = {.online = 6, .batch = 0, .max_gpus = -1, .weight = 1};
    return c;
  }
  static TaskSpec Web(TaskSpec s) {
    s.team = "web";
    return s;
  }
  static Decision Preempted(TaskNumber id, const std::string& node, TaskNumber by) {
    return {Kind::kStop, id, node, {}, StopReason::kPreempt, 30, by};
  }
};

TEST_F(GangBorrowingTest, ABorrowingGangIsPreemptedWholeAndGoesBackToItsPlace) {
  Nodes(2, 4);  // 8 GPUs: 4 online (web's guarantee), 4 batch.
  const TaskNumber gang = Submit(GangSpec(Priority::kLow, 2, 4));
  ASSERT_EQ(Pass().size(), 2u);
  EXPECT_TRUE(T(gang).borrowed) << "8 GPUs, 4 of them beyond the batch class's";
  const TaskNumber web = Submit(Web(testing::Spec(Priority::kHigh, 4)));
  EXPECT_EQ(Pass(),
            (std::vector<Decision>{Preempted(gang, "n1", web), Preempted(gang, "n2", web)}));
  EXPECT_EQ(Reason(web), PendingReason::kWaitingForPreemption);
  // The first member to end frees its node: the web task takes it at once.
  ASSERT_TRUE(Finish(gang, "n2", false, 143).ok());
  EXPECT_EQ(T(gang).status, TaskStatus::kRunning) << "until its last member has stopped";
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(web, "n2", {0, 1, 2, 3})}));
  ASSERT_TRUE(Finish(gang, "n1", false, 143).ok());
  EXPECT_EQ(T(gang).status, TaskStatus::kPending);
  EXPECT_EQ(T(gang).preemptions, 1);
  EXPECT_EQ(T(gang).error, "preempted");
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(Reason(gang), PendingReason::kQuotaExhausted) << "4 idle GPUs, it needs 8";
  EXPECT_EQ(core_.Quota().used[1], 0);
}

TEST_F(GangBorrowingTest, AGangWithinItsGuaranteeTakesGpusBackOnAsManyNodesAsItHasMembers) {
  Nodes(3, 4);  // 12 GPUs: 6 online (web's guarantee), 6 batch.
  std::vector<TaskNumber> fillers;
  for (int i = 0; i < 6; ++i) fillers.push_back(Submit(testing::Spec(Priority::kLow, 2)));
  ASSERT_EQ(Pass().size(), 6u);
  // The three youngest borrow: one on n2, two on n3.
  for (int i = 0; i < 6; ++i) ASSERT_EQ(T(fillers[i]).borrowed, i >= 3) << i;
  ASSERT_EQ(T(fillers[3]).allocation[0].node_id, "n2");
  const TaskNumber gang = Submit(Web(GangSpec(Priority::kHigh, 2, 2)));
  // One victim on each of two nodes (on n3 the youngest), none on n1.
  EXPECT_EQ(Pass(), (std::vector<Decision>{Preempted(fillers[3], "n2", gang),
                                           Preempted(fillers[5], "n3", gang)}));
  EXPECT_EQ(Reason(gang), PendingReason::kWaitingForPreemption);
  auto reservations = core_.Reservations();
  ASSERT_EQ(reservations.size(), 1u);
  EXPECT_EQ(reservations[0].nodes, (std::vector<std::string>{"n2", "n3"}));
  ASSERT_TRUE(Finish(fillers[3], "n2", false, 143).ok());
  EXPECT_TRUE(Pass().empty()) << "n3's victim still stops";
  ASSERT_TRUE(Finish(fillers[5], "n3", false, 143).ok());
  EXPECT_EQ(Pass(), (std::vector<Decision>{Start(gang, "n2", {2, 3}), Start(gang, "n3", {2, 3})}));
  EXPECT_FALSE(T(gang).borrowed);
  EXPECT_TRUE(core_.Reservations().empty());
}

TEST_F(GangTest, SubmissionsNameWhatIsWrong) {
  TaskSpec s = GangSpec(Priority::kLow, 2, 2);
  s.nodes = 0;
  EXPECT_EQ(core_.Submit(s, now_).status().message(), "nodes must be between 1 and 1024");
  s.nodes = 3;
  EXPECT_EQ(core_.Submit(s, now_).status().message(),
            "gpu_count 4 is not split evenly over 3 nodes");
  s.nodes = 1025;
  EXPECT_EQ(core_.Submit(s, now_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.next_task_number(), 1u);
}

// scheduler.topology_key: a gang goes to the fewest values of the label that can hold it, ties
// broken by best fit; without it, best fit alone (which may spread it). Nodes of 4 GPUs and of 8:
// racks r1 {a1:4, a2:8}, r2 {b1:4, b2:8}, r3 {c1:4, c2:4, c3:4}, and u1:4 without a rack.
class TopologyTest : public ::testing::TestWithParam<bool> {
 protected:
  using Nodes = std::vector<std::string>;
  TopologyTest() : core_(Config(GetParam())) {
    const std::vector<std::tuple<std::string, int, std::string>> nodes = {
        {"a1", 4, "r1"}, {"a2", 8, "r1"}, {"b1", 4, "r2"}, {"b2", 8, "r2"},
        {"c1", 4, "r3"}, {"c2", 4, "r3"}, {"c3", 4, "r3"}, {"u1", 4, ""}};
    for (const auto& [id, gpus, rack] : nodes) {
      EXPECT_TRUE(core_.RegisterNode(id, "", MakeGpus(gpus), {}, {}, now_).ok());
      if (!rack.empty()) EXPECT_TRUE(core_.SetNodeLabels(id, {{"rack", rack}}).ok());
    }
  }
  static CoreConfig Config(bool topology) {
    CoreConfig c;
    c.online_percent = 0.0;
    if (topology) c.topology_key = "rack";
    return c;
  }
  // The nodes a gang of `members` x `per_node` GPUs started on, sorted.
  std::vector<std::string> Place(int members, int per_node) {
    const TaskNumber id = *core_.Submit(GangSpec(Priority::kLow, members, per_node), now_);
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    core_.TakeDecisions();
    std::vector<std::string> out;
    for (const NodeAllocation& a : core_.FindTask(id)->allocation) out.push_back(a.node_id);
    std::sort(out.begin(), out.end());
    return out;
  }
  SchedulerCore core_;
  TimeMicros now_ = 100 * kSec;
};

TEST_P(TopologyTest, TwoMembersGoToOneRackWhenOneHoldsThem) {
  // Best fit: the first two nodes with exactly 4 free, a1 and b1, two racks. With the key: the
  // first rack to have two nodes in best-fit order, r3 (c1 and c2, exact fits), not r1 (a1 and
  // the 8-GPU a2).
  const Nodes want = GetParam() ? Nodes{"c1", "c2"} : Nodes{"a1", "b1"};
  EXPECT_EQ(Place(2, 4), want);
}

TEST_P(TopologyTest, FourMembersTakeTheFewestRacksAndTheSmallestThatCompletesThem) {
  // No rack has four nodes: r3's three, then for the last member the smallest group that holds
  // it: u1 alone (r1 and r2 have two each). Best fit: the first four exact fits, three racks.
  const Nodes want = GetParam() ? Nodes{"c1", "c2", "c3", "u1"} : Nodes{"a1", "b1", "c1", "c2"};
  EXPECT_EQ(Place(4, 4), want);
}

TEST_P(TopologyTest, AGangLargerThanEveryRackStillStartsOnTheFewest) {
  // Seven members of 4: the key takes r3 (3), r1 (2), then r2 (2) that holds the rest, leaving
  // u1; best fit takes the six exact fits and a2.
  const Nodes want = GetParam() ? Nodes{"a1", "a2", "b1", "b2", "c1", "c2", "c3"}
                                : Nodes{"a1", "a2", "b1", "c1", "c2", "c3", "u1"};
  EXPECT_EQ(Place(7, 4), want);
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutTheKey, TopologyTest, ::testing::Bool());

// The tightest rack is judged on the nodes the gang would take: r1's two exact fits leave
// nothing free (its 8-GPU node is not taken), r2's nodes of 4 and 5 GPUs leave one. Counting
// every fitting node of r1 would make r2 look tighter.
TEST(TopologyTightTest, OnlyTheNodesTakenCountTowardsTheTightest) {
  CoreConfig config;
  config.online_percent = 0.0;
  config.topology_key = "rack";
  SchedulerCore core(config);
  const std::vector<std::tuple<std::string, int, std::string>> nodes = {
      {"x1", 4, "r1"}, {"x2", 4, "r1"}, {"x3", 8, "r1"}, {"y1", 4, "r2"}, {"y2", 5, "r2"}};
  for (const auto& [id, gpus, rack] : nodes) {
    ASSERT_TRUE(core.RegisterNode(id, "", MakeGpus(gpus), {}, {}, kSec).ok());
    ASSERT_TRUE(core.SetNodeLabels(id, {{"rack", rack}}).ok());
  }
  const TaskNumber id = *core.Submit(GangSpec(Priority::kLow, 2, 4), kSec);
  core.Schedule(kSec);
  std::vector<std::string> placed;
  for (const NodeAllocation& a : core.FindTask(id)->allocation) placed.push_back(a.node_id);
  EXPECT_EQ(placed, (std::vector<std::string>{"x1", "x2"}));
}

// The starvation guard and the reclaim keep a gang's nodes in one value of the topology key
// when one has enough; without the key, the same cases spread it. Racks are given by node.
class TopologyKeptTest : public GangTest, public ::testing::WithParamInterface<bool> {
 protected:
  TopologyKeptTest() : GangTest(Config()) {}
  static CoreConfig Config() {
    CoreConfig c = AllBatch();
    c.max_bypass = 1;
    if (GetParam()) c.topology_key = "rack";
    return c;
  }
  void Racks(const std::vector<std::string>& racks) {
    for (size_t i = 0; i < racks.size(); ++i) {
      ASSERT_TRUE(core_.SetNodeLabels("n" + std::to_string(i + 1), {{"rack", racks[i]}}).ok());
    }
  }
};

TEST_P(TopologyKeptTest, TheGuardKeepsAStarvingGangsNodesInOneRack) {
  Nodes(4, 8);
  Racks({"r1", "r1", "r2", "r2"});
  for (int i = 0; i < 4; ++i) Submit(testing::Spec(Priority::kLow, 5));
  ASSERT_EQ(Pass().size(), 4u);
  const TaskNumber gang = Submit(GangSpec(Priority::kLow, 2, 4));
  Submit(testing::Spec(Priority::kLow, 1));
  Pass();
  // The small task took one of n1's GPUs: the most free are n2, n3, n4 (3 each), then n1. The
  // first two span both racks; r2 is the first rack to have two of them.
  auto reservations = core_.Reservations();
  ASSERT_EQ(reservations.size(), 1u);
  EXPECT_EQ(reservations[0].task, gang);
  using Nodes = std::vector<std::string>;
  const Nodes want = GetParam() ? Nodes{"n3", "n4"} : Nodes{"n2", "n3"};
  EXPECT_EQ(reservations[0].nodes, want);
}

TEST_P(TopologyKeptTest, AGangTakingGpusBackStopsTasksInOneRack) {
  CoreConfig c = Config();
  c.borrowing = true;
  c.online_percent = 0.5;
  c.preemption_grace_seconds = 30;
  c.teams["web"] = {.online = 6, .batch = 0, .max_gpus = -1, .weight = 1};
  SchedulerCore core(c);
  // Six nodes of 2 GPUs, one 2-GPU batch task on each; the three youngest (on n4, n5, n6)
  // borrow the online class's GPUs.
  std::vector<TaskNumber> fillers;
  for (int i = 1; i <= 6; ++i) {
    const std::string id = "n" + std::to_string(i);
    ASSERT_TRUE(core.RegisterNode(id, "", MakeGpus(2), {}, {}, now_).ok());
    ASSERT_TRUE(core.SetNodeLabels(id, {{"rack", i <= 4 ? "r1" : "r2"}}).ok());
  }
  for (int i = 0; i < 6; ++i) {
    fillers.push_back(*core.Submit(testing::Spec(Priority::kLow, 2), now_));
  }
  core.Schedule(now_);
  ASSERT_EQ(core.TakeDecisions().size(), 6u);
  TaskSpec gang = GangSpec(Priority::kHigh, 2, 2);
  gang.team = "web";
  const TaskNumber web = *core.Submit(gang, now_);
  core.Schedule(now_);
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
  // One victim per node either way; best first is n4 then n5 (two racks), while r2 has two.
  std::vector<std::string> stopped;
  for (const Decision& d : core.TakeDecisions()) {
    EXPECT_EQ(d.kind, Kind::kStop);
    EXPECT_EQ(d.preempted_by, web);
    stopped.push_back(d.node_id);
  }
  std::sort(stopped.begin(), stopped.end());
  using Nodes = std::vector<std::string>;
  const Nodes want = GetParam() ? Nodes{"n5", "n6"} : Nodes{"n4", "n5"};
  EXPECT_EQ(stopped, want);
  auto reservations = core.Reservations();
  ASSERT_EQ(reservations.size(), 1u);
  EXPECT_EQ(reservations[0].nodes, stopped);
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutTheKey, TopologyKeptTest, ::testing::Bool());

// With a topology key the core chooses a gang's values from the index's counts when only free
// GPUs decide, and from a walk over the nodes that fit otherwise (a selector, a filter, CPUs or
// memory). Both must place every task alike: two cores see the same random cluster (racks of
// different sizes, nodes without a rack, nodes of 4 and 8 GPUs) and the same random submissions
// and ends; one core's tasks select a label every node has. A small max_bypass makes the guard
// keep nodes for waiting gangs, which the counts must leave out.
TEST(TopologyPathsTest, CountsAndWalkPlaceAlike) {
  for (uint32_t seed = 1; seed <= testing::Sequences(12); ++seed) {
    std::mt19937 rng(seed);
    CoreConfig config;
    config.online_percent = 0.0;
    config.topology_key = "rack";
    config.max_bypass = 2;
    SchedulerCore counted(config);
    SchedulerCore walked(config);
    TimeMicros now = kSec;
    const int nodes = 20 + static_cast<int>(rng() % 20);
    for (int i = 0; i < nodes; ++i) {
      const std::string id = "n" + std::to_string(100 + i);
      const int gpus = rng() % 3 == 0 ? 4 : 8;
      Labels labels = {{"all", "yes"}};
      if (rng() % 8 != 0) labels["rack"] = "r" + std::to_string(rng() % 6);
      for (SchedulerCore* core : {&counted, &walked}) {
        ASSERT_TRUE(core->RegisterNode(id, "", MakeGpus(gpus), {}, {}, now).ok());
        ASSERT_TRUE(core->SetNodeLabels(id, labels).ok());
      }
    }
    std::vector<TaskNumber> live;
    int gangs_started = 0;
    for (int step = 0; step < 150; ++step) {
      now += kSec;
      if (!live.empty() && rng() % 3 == 0) {
        // One task ends on every node it holds, in both cores.
        const size_t pick = rng() % live.size();
        const Task* t = counted.FindTask(live[pick]);
        ASSERT_NE(t, nullptr);
        if (t->status == TaskStatus::kRunning) {
          for (const NodeAllocation& a : t->allocation) {
            for (SchedulerCore* core : {&counted, &walked}) {
              ASSERT_TRUE(core->TaskFinished(a.node_id, {live[pick], true, 0, "", now}, now).ok());
            }
          }
        } else {
          for (SchedulerCore* core : {&counted, &walked}) {
            ASSERT_TRUE(core->Cancel(live[pick], now).ok());
          }
        }
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
      } else {
        const bool gang = rng() % 2 == 0;
        TaskSpec spec = gang ? GangSpec(Priority::kLow, 2 + static_cast<int>(rng() % 5),
                                        1 + static_cast<int>(rng() % 8))
                             : testing::Spec(Priority::kLow, 1 + static_cast<int>(rng() % 8));
        const auto a = counted.Submit(spec, now);
        spec.node_selector = {{"all", "yes"}};
        const auto b = walked.Submit(spec, now);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(*a, *b);
        live.push_back(*a);
      }
      for (SchedulerCore* core : {&counted, &walked}) {
        core->Schedule(now);
        ASSERT_TRUE(core->CheckInvariants().ok()) << core->CheckInvariants().ToString();
      }
      const auto d = counted.TakeDecisions();
      ASSERT_EQ(d, walked.TakeDecisions()) << "seed " << seed << " step " << step;
      for (const Decision& decision : d) {
        const Task* t = counted.FindTask(decision.task);
        if (t != nullptr && t->spec.nodes > 1 && decision.kind == Kind::kStart) ++gangs_started;
      }
    }
    EXPECT_GT(gangs_started, 0) << "seed " << seed;
  }
}

}  // namespace
}  // namespace dgpu::core
