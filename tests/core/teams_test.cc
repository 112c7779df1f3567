// Teams, guarantees, borrowing and preemption in the core: each rule with exact outcomes, and a
// randomized run that checks the promises (never more GPUs than exist, no task within its
// guarantee preempted, no preemption that does not let its preemptor start).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using Kind = Decision::Kind;

}  // namespace

std::string Describe(const Decision& d) {
  std::ostringstream out;
  std::ostream* os = &out;
  *os << (d.kind == Decision::Kind::kStart ? "start " : "stop ") << FormatTaskId(d.task) << " on "
      << d.node_id;
  if (d.kind == Decision::Kind::kStart) {
    *os << " [";
    for (size_t i = 0; i < d.gpu_indices.size(); ++i) *os << (i ? "," : "") << d.gpu_indices[i];
    *os << "]";
  } else {
    *os << " (" << ToString(d.reason) << ", grace " << d.grace_seconds << ", by " << d.preempted_by
        << ")";
  }
  return out.str();
}
std::string Describe(const std::vector<Decision>& ds) {
  std::string out;
  for (const Decision& d : ds) out += Describe(d) + "; ";
  return out;
}
std::string Describe(PendingReason r) { return std::string(ToString(r)); }

namespace {

TaskSpec TeamSpec(Priority p, int gpus, const std::string& team, bool preemptible = true) {
  TaskSpec s = testing::Spec(p, gpus);
  s.team = team;
  s.preemptible = preemptible;
  return s;
}

// A task of team "default" asking for CPUs (thousandths) per member.
TaskSpec CpuSpec(Priority p, int gpus, int64_t cpus_milli) {
  TaskSpec s = TeamSpec(p, gpus, "default");
  s.cpus_milli = cpus_milli;
  return s;
}

class TeamsTest : public ::testing::Test {
 protected:
  explicit TeamsTest(CoreConfig config = Borrowing()) : core_(config) {}
  static CoreConfig Borrowing() {
    CoreConfig c;
    c.borrowing = true;
    c.online_percent = 0.5;
    c.preemption_grace_seconds = 30;
    return c;
  }
  void Register(const std::string& node, int gpus, const std::string& model = "A100") {
    ASSERT_TRUE(
        core_.RegisterNode(node, node + ":50052", MakeGpus(gpus, model), {}, {}, now_).ok());
  }
  TaskNumber Submit(Priority p, int gpus, const std::string& team = "default",
                    bool preemptible = true) {
    auto r = core_.Submit(TeamSpec(p, gpus, team, preemptible), now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  std::vector<Decision> Pass() {
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return core_.TakeDecisions();
  }
  // The agent confirms that a stopped task ended.
  void Confirm(TaskNumber t) {
    const Task& task = T(t);
    ASSERT_FALSE(task.allocation.empty());
    ASSERT_TRUE(
        core_.TaskFinished(task.allocation[0].node_id, {t, false, 143, "", now_}, now_).ok());
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  }
  void Finish(TaskNumber t) {
    ASSERT_TRUE(core_.TaskFinished(T(t).allocation[0].node_id, {t, true, 0, "", now_}, now_).ok());
  }
  static Decision Start(TaskNumber t, const std::string& node, std::vector<int> gpus) {
    return {Kind::kStart, t, node, std::move(gpus)};
  }
  static Decision Preempt(TaskNumber t, const std::string& node, TaskNumber by, int grace = 30) {
    return {Kind::kStop, t, node, {}, StopReason::kPreempt, grace, by};
  }
  const Task& T(TaskNumber t) { return *core_.FindTask(t); }
  PendingReason Reason(TaskNumber t) { return core_.ReasonOf(T(t)); }

  SchedulerCore core_;
  TimeMicros now_ = 1000 * kSec;
};

// --- Without borrowing: guarantees and caps are hard limits --------------------------------------

class StrictTeamsTest : public TeamsTest {
 protected:
  StrictTeamsTest() : TeamsTest(Strict()) {}
  static CoreConfig Strict() {
    CoreConfig c;
    c.online_percent = 0.5;
    c.teams["vision"] = {.online = 2, .batch = 1, .max_gpus = -1, .weight = 1};
    c.teams["capped"] = {.online = 0, .batch = 0, .max_gpus = 1, .weight = 1};
    c.max_bypass = 2;  // The starvation guard acts soon.
    return c;
  }
};

TEST_F(StrictTeamsTest, ATeamGuaranteeIsItsShareAndTheRestIsShared) {
  Register("n1", 8);  // online 4 (vision 2, shared 2), batch 4 (vision 1, shared 3).
  TaskNumber v1 = Submit(Priority::kHigh, 2, "vision");
  TaskNumber v2 = Submit(Priority::kHigh, 1, "vision");
  TaskNumber o1 = Submit(Priority::kHigh, 2, "nlp");
  TaskNumber o2 = Submit(Priority::kHigh, 1, "nlp");
  auto d = Pass();
  EXPECT_EQ(Describe(d),
            Describe(std::vector<Decision>{Start(v1, "n1", {0, 1}), Start(o1, "n1", {2, 3})}));
  EXPECT_EQ(Describe(Reason(v2)), Describe(PendingReason::kQuotaExhausted)) << "vision holds its 2";
  EXPECT_EQ(Describe(Reason(o2)), Describe(PendingReason::kQuotaExhausted))
      << "the shared 2 are taken";
  EXPECT_FALSE(T(v1).borrowed);
  auto vision = core_.FindTeam("vision");
  ASSERT_TRUE(vision.has_value());
  EXPECT_TRUE(vision->configured);
  EXPECT_EQ(vision->classes[0].guaranteed, 2);
  EXPECT_EQ(vision->classes[0].used, 2);
  EXPECT_EQ(vision->classes[1].guaranteed, 1);
  EXPECT_EQ(vision->pending, 1u);
  auto nlp = core_.FindTeam("nlp");
  ASSERT_TRUE(nlp.has_value());
  EXPECT_FALSE(nlp->configured);
  EXPECT_EQ(nlp->classes[0].guaranteed, 0);
  EXPECT_EQ(nlp->classes[0].used, 2);
  EXPECT_EQ(core_.Quota().used[0], 4);
  EXPECT_EQ(core_.Quota().borrowed[0], 0);
}

TEST_F(StrictTeamsTest, MaxGpusCapsATeamAcrossClasses) {
  Register("n1", 8);
  TaskNumber a = Submit(Priority::kLow, 1, "capped");
  TaskNumber b = Submit(Priority::kHigh, 1, "capped");
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(b, "n1", {0})}))
      << "high goes first";
  EXPECT_EQ(Describe(Reason(a)), Describe(PendingReason::kTeamLimit));
  Finish(b);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(a, "n1", {0})}));
}

TEST_F(StrictTeamsTest, ATaskLargerThanItsTeamsGuaranteeDoesNotHoldItsClass) {
  Register("n1", 8);                                      // online 4: vision 2, shared 2.
  TaskNumber big = Submit(Priority::kHigh, 3, "vision");  // Never fits in vision's 2.
  std::vector<TaskNumber> small;
  for (int i = 0; i < 6; ++i) small.push_back(Submit(Priority::kHigh, 1, "vision"));
  auto d = Pass();
  EXPECT_EQ(Describe(d), Describe(std::vector<Decision>{Start(small[0], "n1", {0}),
                                                        Start(small[1], "n1", {1})}));
  EXPECT_EQ(Describe(Reason(big)), Describe(PendingReason::kTeamLimit));
  // However often it is overtaken, it keeps no node and holds nobody back.
  for (int i = 0; i < 4; ++i) {
    Finish(small[static_cast<size_t>(i)]);
    d = Pass();
    ASSERT_EQ(d.size(), 1u) << "round " << i;
    EXPECT_EQ(d[0].task, small[static_cast<size_t>(i) + 2]);
  }
  EXPECT_EQ(Describe(Reason(big)), Describe(PendingReason::kTeamLimit));
  // Its team's guarantee grows: it starts.
  for (int i = 4; i < 6; ++i) Finish(small[static_cast<size_t>(i)]);
  ASSERT_TRUE(core_.SetTeam("vision", {.online = 3, .batch = 1}, now_).ok());
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(big, "n1", {0, 1, 2})}));
}

TEST_F(StrictTeamsTest, ATaskLargerThanTheSharedPartDoesNotHoldItsClass) {
  Register("n1", 8);  // online 4: vision 2, shared 2 (for teams without a guarantee).
  TaskNumber big = Submit(Priority::kHigh, 3, "nlp");
  std::vector<TaskNumber> small;
  for (int i = 0; i < 5; ++i) small.push_back(Submit(Priority::kHigh, 1, "nlp"));
  EXPECT_EQ(Pass().size(), 2u);
  EXPECT_EQ(Describe(Reason(big)), Describe(PendingReason::kTeamLimit));
  for (int i = 0; i < 3; ++i) {
    Finish(small[static_cast<size_t>(i)]);
    auto d = Pass();
    ASSERT_EQ(d.size(), 1u) << "round " << i;
    EXPECT_EQ(d[0].task, small[static_cast<size_t>(i) + 2]);
  }
  TaskNumber huge = Submit(Priority::kHigh, 5, "vision");
  Pass();
  EXPECT_EQ(Describe(Reason(huge)), Describe(PendingReason::kTeamLimit)) << "vision's 2";
  TaskNumber huge_shared = Submit(Priority::kHigh, 5, "nlp");
  Pass();
  EXPECT_EQ(Describe(Reason(huge_shared)), Describe(PendingReason::kTeamLimit)) << "shared 2";
}

TEST_F(StrictTeamsTest, AVersionOneConfigurationBehavesAsBefore) {
  CoreConfig c;
  c.online_percent = 0.5;
  SchedulerCore core(c);
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {}, {}, now_).ok());
  auto a = core.Submit(testing::Spec(Priority::kLow, 2), now_);
  auto b = core.Submit(testing::Spec(Priority::kLow, 1), now_);
  core.Schedule(now_);
  EXPECT_EQ(core.TakeDecisions().size(), 1u);
  EXPECT_EQ(core.FindTask(*a)->spec.team, "default");
  EXPECT_EQ(core.ReasonOf(*core.FindTask(*b)), PendingReason::kQuotaExhausted);
  // Larger than its class quota: quota_exhausted too, as before teams.
  auto big = core.Submit(testing::Spec(Priority::kHigh, 3), now_);
  core.Schedule(now_);
  EXPECT_EQ(core.ReasonOf(*core.FindTask(*big)), PendingReason::kQuotaExhausted);
  ASSERT_EQ(core.Teams().size(), 1u);
  EXPECT_EQ(core.Teams()[0].name, "default");
}

// --- Teams through the API ---------------------------------------------------------------------

TEST_F(TeamsTest, SetTeamChecksItsFieldsAndTheClassQuota) {
  Register("n1", 8);  // online 4, batch 4.
  EXPECT_EQ(core_.SetTeam("Bad Name", {}, now_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.SetTeam("a", {.online = -1}, now_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.SetTeam("a", {.weight = 0}, now_).code(), StatusCode::kInvalidArgument);
  Status over_cap = core_.SetTeam("a", {.online = 2, .batch = 2, .max_gpus = 3}, now_);
  EXPECT_EQ(over_cap.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over_cap.message().find("max_gpus"), std::string::npos) << over_cap.ToString();
  ASSERT_TRUE(core_.SetTeam("a", {.online = 3}, now_).ok());
  Status sum = core_.SetTeam("b", {.online = 2}, now_);
  EXPECT_EQ(sum.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sum.message().find("online guarantees would add up to 5 GPUs, more than the online "
                               "quota of 4"),
            std::string::npos)
      << sum.ToString();
  EXPECT_FALSE(core_.FindTeam("b").has_value()) << "a refused team leaves no trace";
  ASSERT_TRUE(core_.SetTeam("a", {.online = 2}, now_).ok()) << "changing a team counts it once";
  ASSERT_TRUE(core_.SetTeam("b", {.online = 2, .batch = 4, .max_gpus = 6, .weight = 2}, now_).ok());
  auto changes = core_.TakeChanges();
  int team_changes = 0;
  for (const Change& ch : changes) {
    if (ch.kind != Change::Kind::kTeamUpsert) continue;
    team_changes++;
    EXPECT_TRUE(ch.team.set);
  }
  EXPECT_EQ(team_changes, 3);
  EXPECT_EQ(core_.FindTeam("b")->limits.weight, 2);
  EXPECT_EQ(core_.FindTeam("b")->classes[1].guaranteed, 4);
}

TEST_F(TeamsTest, ATeamWithLiveTasksCannotBeDeleted) {
  Register("n1", 4);
  ASSERT_TRUE(core_.SetTeam("a", {.batch = 1}, now_).ok());
  TaskNumber t = Submit(Priority::kLow, 1, "a");
  EXPECT_EQ(core_.DeleteTeam("a", now_).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.DeleteTeam("nope", now_).code(), StatusCode::kNotFound);
  Pass();
  Finish(t);
  ASSERT_TRUE(core_.DeleteTeam("a", now_).ok());
  EXPECT_FALSE(core_.FindTeam("a")->configured);
  auto changes = core_.TakeChanges();
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back().kind, Change::Kind::kTeamUpsert);
  EXPECT_TRUE(changes.back().team.deleted);
}

TEST_F(TeamsTest, RestoredRecordsWinOverTheConfiguration) {
  CoreConfig c = Borrowing();
  c.teams["vision"] = {.online = 4};
  c.teams["old"] = {.batch = 2};
  SchedulerCore core(c);
  ASSERT_TRUE(
      core.RestoreTeam({"vision", true, {.online = 1, .max_gpus = 3}, false, 50, now_}).ok());
  ASSERT_TRUE(core.RestoreTeam({"old", false, {}, true, 0, 0}).ok());
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(8), {}, {}, now_).ok());
  EXPECT_EQ(core.FindTeam("vision")->limits.max_gpus, 3);
  EXPECT_EQ(core.FindTeam("vision")->classes[0].guaranteed, 1);
  EXPECT_EQ(core.FindTeam("vision")->usage, 50);
  EXPECT_FALSE(core.FindTeam("old")->configured);
}

TEST_F(TeamsTest, GuaranteesShrinkWithTheClusterAndComeBack) {
  ASSERT_TRUE(core_.SetTeam("a", {.online = 0, .batch = 6}, now_).ok());  // No GPUs: no check.
  Register("n1", 8);  // batch quota 4 < 6: a gets 4.
  EXPECT_EQ(core_.FindTeam("a")->classes[1].guaranteed, 4);
  Register("n2", 8);  // batch quota 8: a gets 6, 2 are shared.
  EXPECT_EQ(core_.FindTeam("a")->classes[1].guaranteed, 6);
}

// --- Borrowing -----------------------------------------------------------------------------

TEST_F(TeamsTest, BatchFillsIdleOnlineGpusAsBorrowedTasks) {
  Register("n1", 4);  // online 2, batch 2.
  std::vector<TaskNumber> batch;
  for (int i = 0; i < 4; ++i) batch.push_back(Submit(Priority::kLow, 1));
  auto d = Pass();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_FALSE(T(batch[0]).borrowed);
  EXPECT_FALSE(T(batch[1]).borrowed);
  EXPECT_TRUE(T(batch[2]).borrowed);
  EXPECT_TRUE(T(batch[3]).borrowed);
  QuotaView q = core_.Quota();
  EXPECT_EQ(q.used[1], 4);
  EXPECT_EQ(q.borrowed[1], 2);
  EXPECT_EQ(q.lent[0], 2);
  EXPECT_EQ(core_.FindTeam("default")->classes[1].borrowed, 2);
  // A task within the guarantee ends: the oldest borrower is within from now on.
  Finish(batch[0]);
  EXPECT_FALSE(T(batch[2]).borrowed);
  EXPECT_TRUE(T(batch[3]).borrowed);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

TEST_F(TeamsTest, AnOnlineTaskPreemptsExactlyTheBorrowedTasksItNeeds) {
  Register("n1", 4);
  std::vector<TaskNumber> batch;
  for (int i = 0; i < 4; ++i) batch.push_back(Submit(Priority::kLow, 1));
  ASSERT_EQ(Pass().size(), 4u);
  now_ += 60 * kSec;
  TaskNumber online = Submit(Priority::kHigh, 2);
  // The youngest borrowers go first.
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Preempt(batch[3], "n1", online),
                                                             Preempt(batch[2], "n1", online)}));
  EXPECT_EQ(Describe(Reason(online)), Describe(PendingReason::kWaitingForPreemption));
  EXPECT_EQ(T(batch[3]).preempted_by, online);
  EXPECT_EQ(T(batch[3]).stop_reason, StopReason::kPreempt);
  EXPECT_EQ(core_.stats().preemptions, 2u);
  // Nothing else takes the GPUs they free, and no more victims are chosen meanwhile.
  TaskNumber other = Submit(Priority::kLow, 1);
  EXPECT_TRUE(Pass().empty());
  Confirm(batch[3]);
  EXPECT_TRUE(Pass().empty()) << "one GPU is free, the preemptor needs two";
  EXPECT_EQ(Describe(Reason(online)), Describe(PendingReason::kWaitingForPreemption));
  Confirm(batch[2]);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(online, "n1", {2, 3})}));
  EXPECT_FALSE(T(online).borrowed);
  // The victims wait at their old place, ahead of the later one, preempted once, no attempt lost.
  EXPECT_EQ(T(batch[2]).status, TaskStatus::kPending);
  EXPECT_EQ(T(batch[2]).error, "preempted");
  EXPECT_EQ(T(batch[2]).preemptions, 1);
  EXPECT_EQ(T(batch[2]).attempts, 0);
  EXPECT_EQ(T(batch[2]).preempted_by, 0u);
  EXPECT_EQ(core_.QueueOrder(Priority::kLow), (std::vector<TaskNumber>{batch[2], batch[3], other}));
}

TEST_F(TeamsTest, TheVictimsAreOnOneNodeOfTheRightModelAndFewestFirst) {
  Register("a1", 4, "A100");
  Register("h1", 4, "H100");
  Register("h2", 4, "H100");  // online 6, batch 6.
  // Borrowers: h1 holds one task of 4 GPUs, h2 four tasks of 1, a1 one of 4.
  TaskNumber filler = Submit(Priority::kLow, 4);  // Within batch's 6... then others borrow.
  ASSERT_EQ(Pass().size(), 1u);
  TaskNumber small[4];
  for (auto& s : small) s = Submit(Priority::kLow, 1);
  TaskNumber big = Submit(Priority::kLow, 4);
  auto d = Pass();
  ASSERT_EQ(d.size(), 5u);
  const std::string big_node = T(big).allocation[0].node_id;
  const std::string filler_node = T(filler).allocation[0].node_id;
  ASSERT_NE(big_node, filler_node);
  now_ += 10 * kSec;
  auto spec = TeamSpec(Priority::kHigh, 3, "default");
  spec.gpu_model = "H100";
  TaskNumber online = *core_.Submit(spec, now_);
  d = Pass();
  // Fewest victims on one H100 node: the 4-GPU borrower if it is on an H100 node.
  ASSERT_FALSE(d.empty());
  std::set<std::string> nodes;
  for (const Decision& x : d) {
    EXPECT_EQ(x.kind, Kind::kStop);
    EXPECT_EQ(x.reason, StopReason::kPreempt);
    EXPECT_EQ(x.preempted_by, online);
    nodes.insert(x.node_id);
    EXPECT_TRUE(T(x.task).borrowed) << "never a task within its guarantee";
  }
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ((*nodes.begin())[0], 'h') << "the right model";
  if (big_node[0] == 'h') {
    EXPECT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].task, big);
  } else {
    EXPECT_EQ(d.size(), 3u);
  }
}

TEST_F(TeamsTest, BetweenNodesWithAsManyVictimsTheOneThatLosesTheLeastWorkIsChosen) {
  Register("n1", 2);
  Register("n2", 2);
  Register("n3", 2);  // online 3, batch 3.
  TaskNumber w1 = Submit(Priority::kLow, 2);
  TaskNumber w2 = Submit(Priority::kLow, 1);
  TaskNumber old_one = Submit(Priority::kLow, 1);
  EXPECT_EQ(Describe(Pass()),
            Describe(std::vector<Decision>{Start(w1, "n1", {0, 1}), Start(w2, "n2", {0}),
                                           Start(old_one, "n2", {1})}));
  now_ += 1000 * kSec;
  TaskNumber young = Submit(Priority::kLow, 2);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(young, "n3", {0, 1})}));
  ASSERT_TRUE(T(old_one).borrowed);
  ASSERT_TRUE(T(young).borrowed);
  now_ += 60 * kSec;
  // One victim either way: 2 GPUs x 60 s of work lost on n3, 1 GPU x 1,060 s on n2.
  TaskNumber online = Submit(Priority::kHigh, 1);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Preempt(young, "n3", online)}));
}

TEST_F(TeamsTest, ABurstOfPreemptorsTakesBackRoomEveryPassNotOnce) {
  for (int i = 0; i < 20; ++i) Register("n" + std::to_string(i), 8);  // online 80, batch 80.
  for (int i = 0; i < 160; ++i) Submit(Priority::kLow, 1);
  ASSERT_EQ(Pass().size(), 160u);
  now_ += 60 * kSec;
  for (int i = 0; i < 80; ++i) Submit(Priority::kHigh, 1);
  // The head and at most 64 behind it search for victims in one pass; the next pass goes on
  // with the rest, passing over those already waiting.
  EXPECT_EQ(Pass().size(), 65u);
  EXPECT_EQ(Pass().size(), 15u);
  EXPECT_EQ(core_.stats().preemptions, 80u);
  EXPECT_TRUE(Pass().empty());
}

// The reclaim asks of a node what the pass asks (Feasible), for the node as it will be once
// the others are gone: a node whose borrowers would free the GPUs but that could never hold the
// preemptor's CPUs is left alone, instead of emptied for a task that would never start there.
// a: 4 GPUs, 8 CPUs; b: 4 GPUs, 32 CPUs; batch's guarantee is 4 GPUs.
TEST_F(TeamsTest, NoBorrowerIsStoppedOnANodeThatCouldNeverHoldThePreemptor) {
  for (const auto& [id, cpus] : {std::pair<std::string, int64_t>{"a", 8000}, {"b", 32000}}) {
    ASSERT_TRUE(
        core_.RegisterNode(id, id + ":50052", MakeGpus(4), {cpus, 0, "none"}, {}, {}, now_).ok());
  }
  // Within batch's guarantee on b (12 CPUs only b has, then best fit); borrowers on a.
  const TaskNumber g1 = *core_.Submit(CpuSpec(Priority::kLow, 2, 12000), now_);
  const TaskNumber g2 = *core_.Submit(CpuSpec(Priority::kLow, 2, 0), now_);
  ASSERT_EQ(Pass().size(), 2u);
  const TaskNumber b1 = *core_.Submit(CpuSpec(Priority::kLow, 2, 0), now_);
  const TaskNumber b2 = *core_.Submit(CpuSpec(Priority::kLow, 1, 0), now_);
  const TaskNumber b3 = *core_.Submit(CpuSpec(Priority::kLow, 1, 0), now_);
  ASSERT_EQ(Pass().size(), 3u);
  for (TaskNumber t : {g1, g2}) {
    EXPECT_EQ(T(t).allocation[0].node_id, "b");
    EXPECT_FALSE(T(t).borrowed);
  }
  for (TaskNumber t : {b1, b2, b3}) {
    EXPECT_EQ(T(t).allocation[0].node_id, "a");
    EXPECT_TRUE(T(t).borrowed);
  }
  now_ += 60 * kSec;
  // 2 GPUs and 16 CPUs, within online's guarantee: a's borrowers would free the GPUs (b1 alone),
  // but a has 8 CPUs.
  const TaskNumber online = *core_.Submit(CpuSpec(Priority::kHigh, 2, 16000), now_);
  EXPECT_EQ(Describe(Pass()), "");
  EXPECT_NE(Reason(online), PendingReason::kWaitingForPreemption);
  EXPECT_EQ(core_.stats().preemptions, 0u);
  // Room on b: it starts there.
  Finish(g2);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(online, "b", {2, 3})}));
}

// A preemptor whose GPUs fit but whose CPUs a borrower holds takes the CPUs back: victim plans
// count CPUs and memory as they count GPUs.
// a: 4 GPUs, 16 CPUs; each class's guarantee is 2 GPUs.
TEST_F(TeamsTest, APreemptorTakesBackTheCpusABorrowerHolds) {
  ASSERT_TRUE(
      core_.RegisterNode("a", "a:50052", MakeGpus(4), {16000, 0, "none"}, {}, {}, now_).ok());
  const TaskNumber within = *core_.Submit(CpuSpec(Priority::kLow, 2, 1000), now_);
  const TaskNumber borrower = *core_.Submit(CpuSpec(Priority::kLow, 1, 12000), now_);
  ASSERT_EQ(Pass().size(), 2u);
  EXPECT_FALSE(T(within).borrowed);
  EXPECT_TRUE(T(borrower).borrowed);
  now_ += 60 * kSec;
  // One GPU and 3 CPUs free: its GPU fits, its 8 CPUs do not.
  const TaskNumber online = *core_.Submit(CpuSpec(Priority::kHigh, 1, 8000), now_);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Preempt(borrower, "a", online)}));
  EXPECT_EQ(Reason(online), PendingReason::kWaitingForPreemption);
  EXPECT_FALSE(T(within).stopping) << "within its guarantee";
  Finish(borrower);
  const std::vector<Decision> started = Pass();
  ASSERT_EQ(started.size(), 1u) << Describe(started);
  EXPECT_EQ(started[0].task, online);
  EXPECT_EQ(T(online).allocation[0].cpus_milli, 8000);
}

// A node whose victims would free the GPUs but whose other tasks hold CPUs the preemptor needs
// is passed over for one where its victims leave room for all of it; else it would wait there
// after its victims stopped.
// a and b: 4 GPUs, 16 CPUs each; each class's guarantee is 4 GPUs.
TEST_F(TeamsTest, AVictimPlanLeavesRoomForThePreemptorsCpusToo) {
  for (const std::string id : {"a", "b"}) {
    ASSERT_TRUE(
        core_.RegisterNode(id, id + ":50052", MakeGpus(4), {16000, 0, "none"}, {}, {}, now_).ok());
  }
  // Within batch's guarantee: 14 CPUs on a, 3 on b.
  const TaskNumber wa = *core_.Submit(CpuSpec(Priority::kLow, 2, 14000), now_);
  const TaskNumber wb = *core_.Submit(CpuSpec(Priority::kLow, 2, 3000), now_);
  ASSERT_EQ(Pass().size(), 2u);
  EXPECT_EQ(T(wa).allocation[0].node_id, "a");
  EXPECT_EQ(T(wb).allocation[0].node_id, "b");
  // Borrowers: xb on b (a has 2 CPUs free), then a younger xa on a, which loses the least work.
  now_ += kSec;
  const TaskNumber xb = *core_.Submit(CpuSpec(Priority::kLow, 2, 4000), now_);
  ASSERT_EQ(Pass().size(), 1u);
  now_ += kSec;
  const TaskNumber xa = *core_.Submit(CpuSpec(Priority::kLow, 2, 1000), now_);
  ASSERT_EQ(Pass().size(), 1u);
  EXPECT_EQ(T(xb).allocation[0].node_id, "b");
  EXPECT_EQ(T(xa).allocation[0].node_id, "a");
  EXPECT_TRUE(T(xa).borrowed);
  EXPECT_TRUE(T(xb).borrowed);
  now_ += 60 * kSec;
  // 2 GPUs and 8 CPUs: without xa, a has 2 CPUs free; without xb, b has 13.
  const TaskNumber online = *core_.Submit(CpuSpec(Priority::kHigh, 2, 8000), now_);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Preempt(xb, "b", online)}));
  Finish(xb);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(online, "b", {2, 3})}));
  EXPECT_FALSE(T(xa).stopping);
}

TEST_F(TeamsTest, TheOtherClassIsPreemptedBeforeOnesOwn) {
  Register("n1", 4);
  Register("n2", 4);
  Register("n3", 4);  // online 6 (search 2, shared 4), batch 6.
  ASSERT_TRUE(core_.SetTeam("search", {.online = 2}, now_).ok());
  TaskNumber ads[5];
  for (auto& t : ads) t = Submit(Priority::kHigh, 1, "ads");
  TaskNumber batch[7];
  for (auto& t : batch) t = Submit(Priority::kLow, 1);
  ASSERT_EQ(Pass().size(), 12u);
  EXPECT_TRUE(T(ads[4]).borrowed) << "the shared online part is 4";
  EXPECT_FALSE(T(ads[3]).borrowed);
  EXPECT_TRUE(T(batch[6]).borrowed);
  now_ += kSec;
  TaskNumber s = Submit(Priority::kHigh, 1, "search");
  EXPECT_EQ(
      Describe(Pass()),
      Describe(std::vector<Decision>{Preempt(batch[6], T(batch[6]).allocation[0].node_id, s)}))
      << "the batch borrower, not the online one";
  // Another one: no batch borrower is left, so the online one goes.
  TaskNumber s2 = Submit(Priority::kHigh, 1, "search");
  EXPECT_EQ(Describe(Pass()),
            Describe(std::vector<Decision>{Preempt(ads[4], T(ads[4]).allocation[0].node_id, s2)}));
}

TEST_F(TeamsTest, ATeamReclaimsItsGuaranteeFromAnotherTeamOfItsClass) {
  Register("n1", 4);
  ASSERT_TRUE(core_.SetTeam("vision", {.batch = 2}, now_).ok());
  ASSERT_TRUE(core_.SetOnlinePercent(0, now_).ok());  // All 4 are batch: vision 2, shared 2.
  TaskNumber nlp[4];
  for (auto& t : nlp) t = Submit(Priority::kLow, 1, "nlp");
  ASSERT_EQ(Pass().size(), 4u);
  EXPECT_EQ(core_.FindTeam("nlp")->classes[1].borrowed, 2);
  now_ += kSec;
  TaskNumber v = Submit(Priority::kLow, 2, "vision");
  EXPECT_EQ(Describe(Pass()),
            Describe(std::vector<Decision>{Preempt(nlp[3], "n1", v), Preempt(nlp[2], "n1", v)}));
  Confirm(nlp[2]);
  Confirm(nlp[3]);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(v, "n1", {2, 3})}));
  EXPECT_EQ(Reason(nlp[2]), PendingReason::kQuotaExhausted)
      << "nothing idle to borrow, nothing to reclaim";
  // vision within its guarantee cannot be taken back by nlp.
  EXPECT_FALSE(T(v).borrowed);
}

TEST_F(TeamsTest, ANonPreemptibleTaskNeverBorrowsAndIsNeverAVictim) {
  Register("n1", 4);  // online 2, batch 2.
  TaskNumber a = Submit(Priority::kLow, 2, "default", false);
  TaskNumber b = Submit(Priority::kLow, 2, "default", false);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(a, "n1", {0, 1})}));
  EXPECT_EQ(Describe(Reason(b)), Describe(PendingReason::kQuotaExhausted))
      << "it would have to borrow";
  TaskNumber c = Submit(Priority::kLow, 2);  // Preemptible: borrows the idle online GPUs.
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(c, "n1", {2, 3})}));
  EXPECT_TRUE(T(c).borrowed);
  now_ += kSec;
  TaskNumber o = Submit(Priority::kHigh, 2);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Preempt(c, "n1", o)}));
  EXPECT_FALSE(T(a).stopping);
}

TEST_F(TeamsTest, NoTaskYoungerThanMinRuntimeIsPreempted) {
  CoreConfig c = Borrowing();
  c.min_runtime = 60 * kSec;
  SchedulerCore core(c);
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(2), {}, {}, now_).ok());
  auto b1 = core.Submit(TeamSpec(Priority::kLow, 1, "default"), now_);
  auto b2 = core.Submit(TeamSpec(Priority::kLow, 1, "default"), now_);
  core.Schedule(now_);
  ASSERT_EQ(core.TakeDecisions().size(), 2u);
  ASSERT_TRUE(core.FindTask(*b2)->borrowed);
  auto o = core.Submit(TeamSpec(Priority::kHigh, 1, "default"), now_ + 10 * kSec);
  core.Schedule(now_ + 10 * kSec);
  EXPECT_TRUE(core.TakeDecisions().empty());
  EXPECT_EQ(core.ReasonOf(*core.FindTask(*o)), PendingReason::kNoNodeFits);
  // Nothing else happens; the tick at which b2 reaches min_runtime brings a pass.
  ASSERT_TRUE(core.Heartbeat("n1", now_ + 61 * kSec).ok());
  core.Tick(now_ + 61 * kSec);
  core.Schedule(now_ + 61 * kSec);
  EXPECT_EQ(core.TakeDecisions(), (std::vector<Decision>{Preempt(*b2, "n1", *o)}));
  EXPECT_EQ(core.FindTask(*b1)->status, TaskStatus::kRunning);
}

TEST_F(TeamsTest, APerTaskGraceGoesIntoTheStopOrder) {
  Register("n1", 2);
  TaskSpec spec = TeamSpec(Priority::kLow, 2, "default");
  spec.preemption_grace_seconds = 5;
  TaskNumber b = *core_.Submit(spec, now_);
  ASSERT_EQ(Pass().size(), 1u);
  now_ += kSec;
  TaskNumber o = Submit(Priority::kHigh, 1);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Preempt(b, "n1", o, 5)}));
}

TEST_F(TeamsTest, AVictimWhoseAgentNeverConfirmsIsLostAfterGracePlusTimeout) {
  Register("n1", 2);
  TaskNumber b = Submit(Priority::kLow, 2);
  ASSERT_EQ(Pass().size(), 1u);
  now_ += kSec;
  TaskNumber o = Submit(Priority::kHigh, 1);
  ASSERT_EQ(Pass().size(), 1u);
  // The agent keeps its heartbeats up but never reports the end.
  for (int s = 0; s < 44; ++s) {
    now_ += kSec;
    ASSERT_TRUE(core_.Heartbeat("n1", now_).ok());
    core_.Tick(now_);
  }
  EXPECT_TRUE(T(b).stopping) << "30 s grace + 15 s timeout not over yet";
  now_ += 2 * kSec;
  ASSERT_TRUE(core_.Heartbeat("n1", now_).ok());
  core_.Tick(now_);
  EXPECT_EQ(T(b).status, TaskStatus::kPending);
  EXPECT_EQ(T(b).preemptions, 1);
  EXPECT_EQ(Describe(Pass()), Describe(std::vector<Decision>{Start(o, "n1", {0})}));
}

TEST_F(TeamsTest, ARestartWhileVictimsStopCompletesThePreemptionOnce) {
  Register("n1", 2);
  TaskNumber b = Submit(Priority::kLow, 2);
  ASSERT_EQ(Pass().size(), 1u);
  now_ += kSec;
  TaskNumber o = Submit(Priority::kHigh, 1);
  ASSERT_EQ(Pass().size(), 1u);
  // A new leader restores both from storage, then the agent registers still running b.
  SchedulerCore next(Borrowing());
  ASSERT_TRUE(next.Restore(T(b), now_).ok());
  ASSERT_TRUE(next.Restore(T(o), now_).ok());
  ASSERT_TRUE(next.RegisterNode("n1", "", MakeGpus(2), {{b, {0, 1}}}, {}, now_).ok());
  auto d = next.TakeDecisions();
  ASSERT_EQ(d.size(), 1u) << "the stop order is sent again";
  EXPECT_EQ(d[0], Preempt(b, "n1", o, -1));
  next.Schedule(now_);
  EXPECT_TRUE(next.TakeDecisions().empty()) << "no second victim, no start yet";
  EXPECT_EQ(next.ReasonOf(*next.FindTask(o)), PendingReason::kWaitingForPreemption);
  ASSERT_TRUE(next.TaskFinished("n1", {b, false, 143, "", now_}, now_).ok());
  next.Schedule(now_);
  EXPECT_EQ(Describe(next.TakeDecisions()), Describe(std::vector<Decision>{Start(o, "n1", {0})}));
  EXPECT_EQ(next.FindTask(b)->preemptions, 1);
  EXPECT_EQ(next.FindTask(b)->status, TaskStatus::kPending);
  EXPECT_TRUE(next.CheckInvariants().ok()) << next.CheckInvariants().ToString();
}

TEST_F(TeamsTest, IdleGpusGoFirstToTheBorrowerWithTheLeastUsageOverWeight) {
  Register("n1", 8);
  ASSERT_TRUE(core_.SetOnlinePercent(1, now_).ok());  // Every batch task borrows.
  ASSERT_TRUE(core_.SetTeam("heavy", {.weight = 3}, now_).ok());
  TaskNumber a[4];
  TaskNumber h[4];
  for (int i = 0; i < 4; ++i) a[i] = Submit(Priority::kLow, 1, "a");
  for (int i = 0; i < 4; ++i) h[i] = Submit(Priority::kLow, 1, "heavy");
  auto d = Pass();
  ASSERT_EQ(d.size(), 8u);
  // Turns by key (usage + held x tau) / weight: heavy's weight 3 lets it take three for each of
  // a's.
  std::vector<TaskNumber> order;
  for (const Decision& x : d) order.push_back(x.task);
  EXPECT_EQ(order[0], a[0]) << "both at zero: queue order";
  EXPECT_EQ(order[1], h[0]);
  EXPECT_EQ(order[2], h[1]);
  EXPECT_EQ(order[3], h[2]);
  EXPECT_EQ(order[4], a[1]);
}

TEST_F(TeamsTest, UsageDecaysWithTheHalfLife) {
  CoreConfig c = Borrowing();
  c.fairshare_half_life = 100 * kSec;
  SchedulerCore core(c);
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(2), {}, {}, now_).ok());
  auto t = core.Submit(TeamSpec(Priority::kLow, 2, "x"), now_);
  core.Schedule(now_);
  core.Schedule(now_ + 100 * kSec);
  // Two GPUs for one half-life: 2 * (100 / ln 2) * (1 - 1/2) = 144.27 GPU-seconds.
  EXPECT_NEAR(core.FindTeam("x")->usage, 144.27, 0.01);
  ASSERT_TRUE(
      core.TaskFinished("n1", {*t, true, 0, "", now_ + 100 * kSec}, now_ + 100 * kSec).ok());
  core.Schedule(now_ + 200 * kSec);
  EXPECT_NEAR(core.FindTeam("x")->usage, 72.13, 0.01);
}

TEST_F(TeamsTest, PendingReasonsSayWhatWouldHelp) {
  Register("n1", 2);
  ASSERT_TRUE(core_.SetTeam("capped", {.max_gpus = 1}, now_).ok());
  TaskNumber c1 = Submit(Priority::kLow, 1, "capped");
  TaskNumber c2 = Submit(Priority::kLow, 1, "capped");
  TaskNumber big = Submit(Priority::kLow, 4);
  ASSERT_EQ(Pass(), (std::vector<Decision>{Start(c1, "n1", {0})}));
  EXPECT_EQ(Describe(Reason(c2)), Describe(PendingReason::kTeamLimit));
  EXPECT_EQ(Describe(Reason(big)), Describe(PendingReason::kExceedsCluster));
  TaskNumber two = Submit(Priority::kLow, 2);
  Pass();
  EXPECT_EQ(Describe(Reason(two)), Describe(PendingReason::kQuotaExhausted))
      << "one GPU idle: nothing to borrow";
  Register("n2", 1);
  Pass();
  EXPECT_EQ(Describe(Reason(two)), Describe(PendingReason::kNoNodeFits))
      << "two GPUs idle, on two nodes";
}

// --- Randomized: the promises hold whatever happens -------------------------------------------

// What a failure shows: the tasks that wait or stop, the reservations and the nodes.
std::string Waiting(const SchedulerCore& core) {
  std::string out;
  core.ForEachTask([&](const Task& t) {
    if (t.status != TaskStatus::kPending && !t.stopping) return;
    out += "\n" + FormatTaskId(t.id) + " " + std::string(ToString(t.spec.priority)) + " " +
           t.spec.team + " " + std::to_string(t.spec.gpu_count) + " GPUs on " +
           std::to_string(t.spec.nodes) + " node(s) " + std::string(ToString(t.status)) + " " +
           Describe(core.ReasonOf(t));
  });
  for (const auto& r : core.Reservations()) {
    out += "\nreserved for " + FormatTaskId(r.task) + ":";
    for (const auto& n : r.nodes) out += " " + n;
  }
  for (const auto& n : core.Nodes()) {
    out += "\n" + n.id + " " + std::to_string(n.free_gpus) + "/" + std::to_string(n.gpu_count) +
           " free" + (n.online ? "" : " (offline)");
  }
  return out;
}

void RunBorrowingSequence(uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  CoreConfig cfg;
  cfg.borrowing = true;
  cfg.max_bypass = 1 + pick(5);
  cfg.online_percent = pick(11) / 10.0;
  cfg.min_runtime = pick(2) * pick(5) * kSec;
  cfg.preemption_grace_seconds = pick(3) * 10;
  cfg.teams["a"] = {.online = pick(4), .batch = pick(4), .max_gpus = -1, .weight = 1};
  cfg.teams["b"] = {
      .online = pick(3), .batch = pick(3), .max_gpus = pick(2) ? -1 : 12, .weight = 2};
  SchedulerCore core(cfg);
  SchedulerCore shadow(cfg);
  int step = 0;
  auto both = [&](auto&& command) {
    Status x = command(core);
    Status y = command(shadow);
    EXPECT_EQ(x.ToString(), y.ToString()) << "seed " << seed << " step " << step;
    return x;
  };
  const char* teams[] = {"a", "b", "c", "default"};
  const char* models[] = {"A100", "H100"};
  std::map<std::string, int> node_gpus;
  TimeMicros now = 0;
  std::vector<TaskNumber> ids;
  auto where = [&](const std::string& at) { return "seed " + std::to_string(seed) + " " + at; };
  for (; step < steps; ++step) {
    now += kSec;
    const int op = pick(100);
    const std::string node = "n" + std::to_string(pick(5));
    const std::string at = "step " + std::to_string(step);
    if (op < 35) {
      TaskSpec spec = TeamSpec(pick(2) ? Priority::kHigh : Priority::kLow, 1 << pick(3),
                               teams[pick(4)], pick(6) != 0);
      if (pick(4) == 0) spec.gpu_model = models[pick(2)];
      if (pick(5) == 0) {
        // A gang of 2 or 3 members of 1 or 2 GPUs.
        spec.nodes = 2 + pick(2);
        spec.gpu_count = spec.nodes * (1 + pick(2));
      }
      // CPUs and memory (per member), where nodes report them: victims must free those too.
      if (pick(3) == 0) spec.cpus_milli = (1 + pick(12)) * 1000;
      if (pick(4) == 0) spec.memory_mb = (1 + pick(16)) * 1024;
      auto r = both([&](SchedulerCore& c) { return c.Submit(spec, now).status(); });
      ASSERT_TRUE(r.ok());
      ids.push_back(core.next_task_number() - 1);
    } else if (op < 42) {
      auto gpus = MakeGpus(2 + pick(7), models[pick(2)]);
      NodeResources res;
      if (pick(2) == 0) res = {(8 + pick(25)) * 1000, (16 + pick(49)) * 1024, "none"};
      (void)both(
          [&](SchedulerCore& c) { return c.RegisterNode(node, "", gpus, res, {}, {}, now); });
    } else if (op < 44) {
      (void)both([&](SchedulerCore& c) { return c.NodeLost(node, now); });
    } else if (op < 62 && !ids.empty()) {
      // Ends: stopped tasks are confirmed more often than running ones finish.
      TaskNumber id = ids[pick(static_cast<int>(ids.size()))];
      const Task* t = core.FindTask(id);
      if (t == nullptr || t->allocation.empty()) continue;
      if (!t->stopping && pick(3) != 0) continue;
      FinishReport report{id, pick(2) == 0, 0, "", now};
      const std::string n = t->allocation[pick(static_cast<int>(t->allocation.size()))].node_id;
      (void)both([&](SchedulerCore& c) { return c.TaskFinished(n, report, now); });
    } else if (op < 66 && !ids.empty()) {
      TaskNumber id = ids[pick(static_cast<int>(ids.size()))];
      (void)both([&](SchedulerCore& c) { return c.Cancel(id, now); });
    } else if (op < 68) {
      TeamLimits l{.online = pick(4), .batch = pick(4), .max_gpus = -1, .weight = 1.0 + pick(3)};
      const std::string team = teams[pick(3)];
      (void)both([&](SchedulerCore& c) { return c.SetTeam(team, l, now); });
    } else if (op < 70) {
      const double percent = pick(11) / 10.0;
      (void)both([&](SchedulerCore& c) { return c.SetOnlinePercent(percent, now); });
    } else if (op < 76) {
      const TimeMicros later = now + pick(40) * kSec;
      for (auto* c : {&core, &shadow}) {
        for (const auto& n : std::vector<std::string>{"n0", "n1", "n2", "n3", "n4"}) {
          (void)c->Heartbeat(n, later);
        }
        c->Tick(later);
      }
      now = later;
    } else {
      // Before the pass: which tasks borrow, and what each node holds.
      std::set<TaskNumber> borrowed_before;
      core.ForEachTask([&](const Task& t) {
        if (t.status == TaskStatus::kRunning && !t.stopping && t.borrowed && t.spec.preemptible) {
          borrowed_before.insert(t.id);
        }
      });
      core.Schedule(now);
      shadow.ForgetNoRoom();
      shadow.Schedule(now);
      std::vector<Decision> d = core.TakeDecisions();
      ASSERT_EQ(Describe(d), Describe(shadow.TakeDecisions())) << where(at) << Waiting(core);
      // Victims by preemptor.
      std::map<TaskNumber, std::vector<TaskNumber>> victims;
      for (const Decision& x : d) {
        if (x.kind != Kind::kStop || x.reason != StopReason::kPreempt) continue;
        ASSERT_EQ(borrowed_before.count(x.task), 1u)
            << where(at) << ": " << FormatTaskId(x.task) << " was within its guarantee";
        const Task* v = core.FindTask(x.task);
        ASSERT_GE(now - v->started_at, cfg.min_runtime) << where(at);
        ASSERT_NE(x.preempted_by, 0u);
        victims[x.preempted_by].push_back(x.task);
      }
      // Each preemptor can start once the victims on its node are gone (it may share the
      // node with earlier preemptors): confirm every stopping victim at once and pass.
      if (!victims.empty()) {
        std::vector<std::pair<TaskNumber, std::string>> stopping;
        core.ForEachTask([&](const Task& t) {
          if (!t.stopping) return;  // Victims, and victims cancelled since: every member.
          for (const NodeAllocation& m : t.allocation) {
            if (!m.ended) stopping.emplace_back(t.id, m.node_id);
          }
        });
        for (const auto& victim : stopping) {
          const std::string& node = victim.second;
          FinishReport report{victim.first, false, 143, "", now};
          ASSERT_TRUE(
              both([&](SchedulerCore& c) { return c.TaskFinished(node, report, now); }).ok());
        }
        core.Schedule(now);
        shadow.ForgetNoRoom();
        shadow.Schedule(now);
        std::vector<Decision> next = core.TakeDecisions();
        ASSERT_EQ(Describe(next), Describe(shadow.TakeDecisions())) << where(at);
        for (const auto& [p, vs] : victims) {
          const Task* t = core.FindTask(p);
          ASSERT_TRUE(t != nullptr && t->status == TaskStatus::kRunning)
              << where(at) << ": " << FormatTaskId(p) << " preempted " << vs.size()
              << " task(s) and did not start: "
              << (t == nullptr
                      ? "gone"
                      : Describe(core.ReasonOf(*t)) + " " + std::string(ToString(t->status)));
          // Requeued (and maybe started again on GPUs idle elsewhere).
          for (TaskNumber v : vs) ASSERT_GE(core.FindTask(v)->preemptions, 1) << where(at);
        }
      }
    }
    Status s = core.CheckInvariants();
    ASSERT_TRUE(s.ok()) << where(at) << " op " << op << ": " << s.ToString();
    Status s2 = shadow.CheckInvariants();
    ASSERT_TRUE(s2.ok()) << where(at) << " (shadow): " << s2.ToString();
  }
}

TEST(BorrowingInvariantsTest, RandomSequences) {
  // DGPU_SEED=N replays one sequence.
  if (const char* one = std::getenv("DGPU_SEED")) {
    RunBorrowingSequence(static_cast<uint32_t>(std::atoi(one)), 200);
    return;
  }
  for (uint32_t seed = 1; seed <= testing::Sequences(1500); ++seed) {
    RunBorrowingSequence(seed, 200);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace dgpu::core

namespace dgpu::core {
namespace {

// A task submitted without a time limit gets its team's default, else the scheduler's; one it
// asks for wins; arrays' members get the same.
TEST(TimeLimitTest, ATaskWithoutALimitGetsItsTeamsDefaultElseTheSchedulers) {
  CoreConfig cfg;
  cfg.default_time_limit = 3600;
  cfg.teams["vision"] = {
      .online = 0, .batch = 0, .max_gpus = -1, .weight = 1, .default_time_limit = 600};
  SchedulerCore core(cfg);
  auto submit = [&](const std::string& team, int64_t limit) {
    TaskSpec spec = testing::Spec(Priority::kLow, 1);
    spec.team = team;
    spec.timeout_seconds = limit;
    StatusOr<TaskNumber> id = core.Submit(spec, kSec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return core.FindTask(*id)->spec.timeout_seconds;
  };
  EXPECT_EQ(submit("vision", 0), 600);
  EXPECT_EQ(submit("nlp", 0), 3600) << "a team without a default of its own";
  EXPECT_EQ(submit("vision", 7200), 7200) << "what the task asks for wins";
  TaskSpec spec = testing::Spec(Priority::kLow, 1);
  spec.team = "vision";
  const StatusOr<TaskNumber> first = core.SubmitArray(spec, 3, kSec);
  ASSERT_TRUE(first.ok());
  for (TaskNumber i = 0; i < 3; ++i)
    EXPECT_EQ(core.FindTask(*first + i)->spec.timeout_seconds, 600);
  // The API removes the team's default: the scheduler's applies; tasks already queued keep theirs.
  ASSERT_TRUE(core.SetTeam("vision", {.default_time_limit = 0}, kSec).ok());
  EXPECT_EQ(submit("vision", 0), 3600);
  EXPECT_EQ(core.FindTask(*first)->spec.timeout_seconds, 600);
  EXPECT_EQ(core.SetTeam("vision", {.default_time_limit = -5}, kSec).message(),
            "default_time_limit must be between 0 and 315360000 seconds");
  spec.timeout_seconds = kMaxTimeLimitSeconds + 1;
  EXPECT_EQ(core.Submit(spec, kSec).status().message(),
            "timeout_seconds must be between 0 and 315360000");
  // Without a default anywhere, none.
  SchedulerCore plain;
  spec.timeout_seconds = 0;
  EXPECT_EQ(plain.FindTask(*plain.Submit(spec, kSec))->spec.timeout_seconds, 0);
}

// A core tracks at most 10,000 teams, "default" among them: past that, a submission or an
// array naming a new team is refused with the limit, and nothing is queued; known teams go on.
TEST(TeamLimitTest, ANewTeamPastTheLimitIsRefusedWithTheLimit) {
  SchedulerCore core;
  TaskSpec spec = testing::Spec(Priority::kLow, 1);
  for (int i = 0; i < 9999; ++i) {
    spec.team = "team-" + std::to_string(i);
    ASSERT_TRUE(core.Submit(spec, kSec).ok()) << i;
  }
  spec.team = "one-too-many";
  const StatusOr<TaskNumber> single = core.Submit(spec, kSec);
  ASSERT_FALSE(single.ok());
  EXPECT_EQ(single.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(single.status().message(), "too many teams (at most 10000)");
  const StatusOr<TaskNumber> array = core.SubmitArray(spec, 5, kSec);
  EXPECT_EQ(array.status().message(), "too many teams (at most 10000)");
  EXPECT_EQ(core.SetTeam("one-too-many", TeamLimits{}, kSec).message(),
            "too many teams (at most 10000)");
  EXPECT_EQ(core.TaskCount(), 9999u);
  spec.team = "team-7";
  EXPECT_TRUE(core.SubmitArray(spec, 2, kSec).ok());
  spec.team = std::string(kDefaultTeam);
  EXPECT_TRUE(core.Submit(spec, kSec).ok());
  EXPECT_EQ(core.TaskCount(), 10002u);
}

}  // namespace
}  // namespace dgpu::core
