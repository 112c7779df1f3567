// The autoscaler's planner: demand after scale_up_delay, packing onto node sizes, min/max,
// one program per group, boots, releases of idle nodes and failures.
#include "core/autoscale.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dgpu::core {
namespace {

constexpr TimeMicros kSec = kMicrosPerSecond;

AutoscaleSettings Settings(std::vector<NodeGroupSpec> groups) {
  AutoscaleSettings s;
  s.scale_up_delay = 30 * kSec;
  s.idle_timeout = 600 * kSec;
  s.boot_timeout = 300 * kSec;
  s.retry_delay = 10 * kSec;
  s.borrowing = true;
  s.groups = std::move(groups);
  return s;
}

NodeGroupSpec Group(std::string name, std::string model, int gpus, int min, int max) {
  return {std::move(name), std::move(model), gpus, min, max};
}

ScaleDemand Waiting(int gpus, size_t tasks, std::string_view model = "",
                    Priority p = Priority::kLow, PendingReason r = PendingReason::kNoNodeFits) {
  return {p, model, gpus, tasks, r};
}

struct Nodes {
  std::vector<std::string> ids;
  std::vector<ScaleNode> list;
  void Add(std::string id, int group, bool online, int tasks,
           NodeMode mode = NodeMode::kSchedulable) {
    ids.push_back(std::move(id));
    list.push_back({"", group, online, mode, tasks});
  }
  std::vector<ScaleNode> Get() const {
    std::vector<ScaleNode> out = list;
    for (size_t i = 0; i < out.size(); ++i) out[i].id = ids[i];
    return out;
  }
};

std::vector<std::tuple<int, int>> Ups(const AutoscalePlan& p) {
  std::vector<std::tuple<int, int>> out;
  for (const auto& u : p.up) out.emplace_back(u.group, u.count);
  return out;
}

std::vector<std::string> Downs(const AutoscalePlan& p) {
  std::vector<std::string> out;
  for (const auto& d : p.down) out.push_back(d.node);
  return out;
}

TEST(AutoscaleTest, DemandWaitsScaleUpDelayThenPacksOntoNodes) {
  Autoscaler a(Settings({Group("a100", "A100", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {Waiting(4, 3, "A100")};
  EXPECT_TRUE(a.Plan(demand, {}, {}, 0).empty());
  EXPECT_TRUE(a.Plan(demand, {}, {}, 29 * kSec).empty());
  AutoscalePlan p = a.Plan(demand, {}, {}, 30 * kSec);
  // Three 4-GPU tasks on 8-GPU nodes: two nodes.
  EXPECT_EQ(Ups(p), (std::vector<std::tuple<int, int>>{std::make_tuple(0, 2)}));
  EXPECT_EQ(a.View()[0].requested, 2);
  EXPECT_EQ(a.View()[0].waiting_tasks, 3u);
}

TEST(AutoscaleTest, DemandThatGoesAwayStartsItsDelayAgain) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {Waiting(8, 1)};
  a.Plan(demand, {}, {}, 0);
  a.Plan({}, {}, {}, 20 * kSec);  // It started.
  EXPECT_TRUE(a.Plan(demand, {}, {}, 40 * kSec).empty());
  EXPECT_EQ(Ups(a.Plan(demand, {}, {}, 70 * kSec)),
            (std::vector<std::tuple<int, int>>{std::make_tuple(0, 1)}));
}

TEST(AutoscaleTest, OnlyWaitingForRoomIsDemand) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {
      Waiting(8, 5, "", Priority::kLow, PendingReason::kRetryBackoff),
      Waiting(8, 5, "", Priority::kLow, PendingReason::kTeamLimit),
      Waiting(8, 5, "", Priority::kLow, PendingReason::kQueued)};
  a.Plan(demand, {}, {}, 0);
  EXPECT_TRUE(a.Plan(demand, {}, {}, 100 * kSec).empty());
  for (PendingReason r : {PendingReason::kNoGpuModel, PendingReason::kExceedsCluster,
                          PendingReason::kQuotaExhausted, PendingReason::kWaitingForPreemption}) {
    Autoscaler b(Settings({Group("g", "", 8, 0, 10)}));
    std::vector<ScaleDemand> d = {Waiting(8, 1, "", Priority::kHigh, r)};
    b.Plan(d, {}, {}, 0);
    EXPECT_EQ(b.Plan(d, {}, {}, 30 * kSec).up.size(), 1u) << ToString(r);
  }
}

TEST(AutoscaleTest, GroupsByModelAndNodeSizeFirstFitInConfigurationOrder) {
  Autoscaler a(Settings({Group("small", "A100", 4, 0, 10), Group("big", "A100", 8, 0, 10),
                         Group("v100", "Tesla V100-SXM2-32GB", 8, 0, 10)}));
  // Eight-GPU tasks do not fit "small"; "v100" matches V100 by substring; H100 matches nothing.
  std::vector<ScaleDemand> demand = {Waiting(8, 2, "a100"), Waiting(2, 3, "A100"),
                                     Waiting(1, 1, "V100"), Waiting(1, 4, "H100")};
  a.Plan(demand, {}, {}, 0);
  AutoscalePlan p = a.Plan(demand, {}, {}, 30 * kSec);
  EXPECT_EQ(Ups(p), (std::vector<std::tuple<int, int>>{std::make_tuple(0, 2), std::make_tuple(1, 2),
                                                       std::make_tuple(2, 1)}));
}

TEST(AutoscaleTest, MaxNodesCountsOnlineReleasingAndBootingNodes) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 4)}));
  Nodes n;
  n.Add("g-1", 0, true, 1);
  n.Add("g-2", 0, true, 0, NodeMode::kReleasing);
  n.Add("other", -1, true, 0);
  std::vector<ScaleDemand> demand = {Waiting(8, 10)};
  a.Plan(demand, n.Get(), {}, 0);
  AutoscalePlan p = a.Plan(demand, n.Get(), {}, 30 * kSec);
  EXPECT_EQ(Ups(p), (std::vector<std::tuple<int, int>>{std::make_tuple(0, 2)}));
  a.UpDone(0, 2, OkStatus(), 31 * kSec);
  EXPECT_EQ(a.View()[0].booting, 2);
  EXPECT_TRUE(a.Plan(demand, n.Get(), {}, 40 * kSec).up.empty());  // At max.
}

TEST(AutoscaleTest, OneProgramAtATimeAndBootingNodesServeTheDemand) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {Waiting(8, 2)};
  a.Plan(demand, {}, {}, 0);
  ASSERT_EQ(Ups(a.Plan(demand, {}, {}, 30 * kSec)),
            (std::vector<std::tuple<int, int>>{std::make_tuple(0, 2)}));
  // More demand while the program runs: nothing until it ends.
  std::vector<ScaleDemand> more = {Waiting(8, 3)};
  EXPECT_TRUE(a.Plan(more, {}, {}, 31 * kSec).up.empty());
  a.UpDone(0, 2, OkStatus(), 32 * kSec);
  // Two booting nodes serve two of the three tasks: one node more.
  EXPECT_EQ(Ups(a.Plan(more, {}, {}, 33 * kSec)),
            (std::vector<std::tuple<int, int>>{std::make_tuple(0, 1)}));
  a.UpDone(0, 1, OkStatus(), 34 * kSec);
  EXPECT_EQ(a.View()[0].booting, 3);
  // Nodes register: each takes one boot away.
  Nodes n;
  n.Add("g-1", 0, true, 1);
  n.Add("g-2", 0, true, 1);
  EXPECT_TRUE(a.Plan({}, n.Get(), {}, 40 * kSec).empty());
  EXPECT_EQ(a.View()[0].booting, 1);
  EXPECT_EQ(a.View()[0].nodes_requested, 3u);
  // A node that comes back after going offline is no new boot.
  n.list[0].online = false;
  a.Plan({}, n.Get(), {}, 41 * kSec);
  n.list[0].online = true;
  a.Plan({}, n.Get(), {}, 42 * kSec);
  EXPECT_EQ(a.View()[0].booting, 1);
}

TEST(AutoscaleTest, NodesThatRegisterWhileTheProgramRunsNeedNoBoot) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {Waiting(8, 1)};
  a.Plan(demand, {}, {}, 0);
  ASSERT_EQ(a.Plan(demand, {}, {}, 30 * kSec).up.size(), 1u);
  Nodes n;
  n.Add("g-1", 0, true, 0);
  a.Plan({}, n.Get(), {}, 31 * kSec);
  a.UpDone(0, 1, OkStatus(), 32 * kSec);
  EXPECT_EQ(a.View()[0].booting, 0);
  // No boot timeout later.
  AutoscalePlan p = a.Plan({}, n.Get(), {}, 1000 * kSec);
  EXPECT_TRUE(p.errors.empty());
}

TEST(AutoscaleTest, BootTimeoutGivesNodesUpAndHoldsTheGroupBack) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {Waiting(8, 1)};
  a.Plan(demand, {}, {}, 0);
  a.Plan(demand, {}, {}, 30 * kSec);
  a.UpDone(0, 1, OkStatus(), 30 * kSec);
  EXPECT_TRUE(a.Plan(demand, {}, {}, 329 * kSec).empty());
  AutoscalePlan p = a.Plan(demand, {}, {}, 330 * kSec);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0], "g: 1 node(s) asked for did not register within boot_timeout (300 s)");
  EXPECT_TRUE(p.up.empty());  // Held back for retry_delay.
  EXPECT_EQ(a.View()[0].failures, 1u);
  EXPECT_EQ(a.View()[0].retry_at, 340 * kSec);
  EXPECT_EQ(Ups(a.Plan(demand, {}, {}, 340 * kSec)),
            (std::vector<std::tuple<int, int>>{std::make_tuple(0, 1)}));
}

TEST(AutoscaleTest, FailedProgramsAreRetriedWithADoublingDelay) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  std::vector<ScaleDemand> demand = {Waiting(8, 1)};
  a.Plan(demand, {}, {}, 0);
  TimeMicros t = 30 * kSec;
  ASSERT_EQ(a.Plan(demand, {}, {}, t).up.size(), 1u);
  a.UpDone(0, 1, Status(StatusCode::kUnavailable, "up failed (exit code 1): no quota"), t);
  EXPECT_EQ(a.View()[0].last_error, "up failed (exit code 1): no quota");
  EXPECT_TRUE(a.Plan(demand, {}, {}, t + 9 * kSec).up.empty());
  ASSERT_EQ(a.Plan(demand, {}, {}, t + 10 * kSec).up.size(), 1u);
  a.UpDone(0, 1, Status(StatusCode::kUnavailable, "again"), t + 10 * kSec);
  EXPECT_TRUE(a.Plan(demand, {}, {}, t + 29 * kSec).up.empty());  // 20 s now.
  ASSERT_EQ(a.Plan(demand, {}, {}, t + 30 * kSec).up.size(), 1u);
  a.UpDone(0, 1, OkStatus(), t + 30 * kSec);
  EXPECT_EQ(a.View()[0].last_error, "");
  EXPECT_EQ(a.View()[0].failures, 2u);
  EXPECT_EQ(a.View()[0].retry_at, 0);
}

TEST(AutoscaleTest, MinNodesWithoutWaitingAndNeverReleasedBelow) {
  Autoscaler a(Settings({Group("g", "", 8, 2, 10)}));
  EXPECT_EQ(Ups(a.Plan({}, {}, {}, 0)), (std::vector<std::tuple<int, int>>{std::make_tuple(0, 2)}));
  a.UpDone(0, 2, OkStatus(), 1 * kSec);
  Nodes n;
  n.Add("g-1", 0, true, 0);
  n.Add("g-2", 0, true, 0);
  n.Add("g-3", 0, true, 0);
  a.Plan({}, n.Get(), {}, 2 * kSec);
  // Three idle nodes, min 2: one released, the longest idle, after idle_timeout.
  n.list[2].online = true;
  EXPECT_TRUE(a.Plan({}, n.Get(), {}, 601 * kSec).down.empty());
  AutoscalePlan p = a.Plan({}, n.Get(), {}, 602 * kSec);
  EXPECT_EQ(Downs(p), (std::vector<std::string>{"g-1"}));
  EXPECT_TRUE(a.Plan({}, n.Get(), {}, 700 * kSec).down.empty());  // Its program runs.
}

TEST(AutoscaleTest, IdleMeansNoTaskOnASchedulableOnlineNode) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  Nodes n;
  n.Add("busy", 0, true, 1);
  n.Add("cordoned", 0, true, 0, NodeMode::kCordoned);
  n.Add("offline", 0, false, 0);
  n.Add("idle", 0, true, 0);
  a.Plan({}, n.Get(), {}, 0);
  n.list[0].tasks = 0;  // Idle from now on.
  a.Plan({}, n.Get(), {}, 300 * kSec);
  EXPECT_EQ(Downs(a.Plan({}, n.Get(), {}, 600 * kSec)), (std::vector<std::string>{"idle"}));
  EXPECT_EQ(Downs(a.Plan({}, n.Get(), {}, 900 * kSec)), (std::vector<std::string>{"busy"}));
}

TEST(AutoscaleTest, WithoutBorrowingNodesAWaitingQuotaStandsOnAreKept) {
  AutoscaleSettings s = Settings({Group("g", "", 8, 0, 10)});
  s.borrowing = false;
  s.scale_up_delay = 10000 * kSec;  // The waiting task asks for nothing during the test.
  Nodes n;
  n.Add("g-1", 0, true, 1);
  n.Add("g-2", 0, true, 0);
  ScaleQuota q;
  q.total_gpus = 16;
  q.used[1] = 4;  // Batch: quota 16 - lround(11.2) = 5, a 2-GPU task waits for it.
  std::vector<ScaleDemand> waiting = {
      Waiting(2, 1, "", Priority::kLow, PendingReason::kQuotaExhausted)};
  Autoscaler a(s);
  a.Plan(waiting, n.Get(), q, 0);
  EXPECT_TRUE(a.Plan(waiting, n.Get(), q, 600 * kSec).down.empty());
  // Once nothing waits for the quota, the idle node goes.
  EXPECT_EQ(Downs(a.Plan({}, n.Get(), q, 601 * kSec)), (std::vector<std::string>{"g-2"}));
  // With borrowing the quota is no cap: released at once.
  s.borrowing = true;
  Autoscaler b(s);
  b.Plan(waiting, n.Get(), q, 0);
  EXPECT_EQ(Downs(b.Plan(waiting, n.Get(), q, 600 * kSec)), (std::vector<std::string>{"g-2"}));
}

TEST(AutoscaleTest, NoReleaseWhileTheGroupGrows) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  Nodes n;
  n.Add("g-1", 0, true, 0);
  std::vector<ScaleDemand> demand = {
      Waiting(8, 1, "", Priority::kLow, PendingReason::kExceedsCluster)};
  a.Plan(demand, n.Get(), {}, 0);
  AutoscalePlan p = a.Plan(demand, n.Get(), {}, 600 * kSec);
  EXPECT_EQ(p.up.size(), 1u);
  EXPECT_TRUE(p.down.empty());
}

TEST(AutoscaleTest, ReleasedNodesAreForgottenOnceGoneAndFailuresKeepThem) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  Nodes n;
  n.Add("g-1", 0, true, 0);
  n.Add("g-2", 0, true, 0);
  a.Plan({}, n.Get(), {}, 0);
  AutoscalePlan p = a.Plan({}, n.Get(), {}, 600 * kSec);
  ASSERT_EQ(Downs(p), (std::vector<std::string>{"g-1", "g-2"}));
  // The caller marked them releasing.
  n.list[0].mode = n.list[1].mode = NodeMode::kReleasing;
  EXPECT_TRUE(a.Plan({}, n.Get(), {}, 601 * kSec).empty());
  a.DownDone("g-1", OkStatus(), 602 * kSec);
  a.DownDone("g-2", Status(StatusCode::kUnavailable, "down failed"), 602 * kSec);
  n.list[1].mode = NodeMode::kSchedulable;  // The caller undoes a failed release.
  n.list[0].online = false;                 // g-1 has gone.
  p = a.Plan({}, n.Get(), {}, 603 * kSec);
  EXPECT_EQ(p.forget, (std::vector<std::string>{"g-1"}));
  EXPECT_TRUE(p.down.empty());  // g-2 waits out the retry delay (10 s) and its idle time again.
  EXPECT_EQ(a.View()[0].nodes_released, 1u);
  EXPECT_EQ(a.View()[0].failures, 1u);
  EXPECT_EQ(a.View()[0].last_error, "down failed");
  EXPECT_EQ(Downs(a.Plan({}, n.Get(), {}, 1203 * kSec)), (std::vector<std::string>{"g-2"}));
}

TEST(AutoscaleTest, AReleasingNodeFoundOnlineIsReleasedAgain) {
  Autoscaler a(Settings({Group("g", "", 8, 0, 10)}));
  Nodes n;
  n.Add("g-1", 0, true, 0, NodeMode::kReleasing);  // A new leader finds it so.
  AutoscalePlan p = a.Plan({}, n.Get(), {}, 0);
  EXPECT_EQ(Downs(p), (std::vector<std::string>{"g-1"}));
  a.DownDone("g-1", OkStatus(), 1 * kSec);
  EXPECT_TRUE(a.Plan({}, n.Get(), {}, 300 * kSec).empty());
  p = a.Plan({}, n.Get(), {}, 301 * kSec);  // Still online boot_timeout later.
  EXPECT_EQ(Downs(p), (std::vector<std::string>{"g-1"}));
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0],
            "g: node g-1 is still online 300 s after scale_down_program succeeded; releasing it "
            "again");
}

TEST(AutoscaleTest, WithoutBorrowingAClassGetsNodesOnlyWithinItsQuota) {
  AutoscaleSettings s = Settings({Group("g", "", 8, 0, 10)});
  s.borrowing = false;
  s.online_percent = 0.7;
  Autoscaler a(s);
  // One batch task of 8 GPUs on an empty cluster: batch's 30% holds 8 GPUs at 32 (32 - 22 = 10).
  std::vector<ScaleDemand> demand = {Waiting(8, 1)};
  a.Plan(demand, {}, {}, 0);
  EXPECT_EQ(Ups(a.Plan(demand, {}, {}, 30 * kSec)),
            (std::vector<std::tuple<int, int>>{std::make_tuple(0, 4)}));

  // Online work on 16 GPUs, 8 of them used: two more 8-GPU online tasks need a quota of 24,
  // which 40 GPUs give (28) and 32 do not (22): three nodes.
  Autoscaler b(s);
  ScaleQuota q;
  q.total_gpus = 16;
  q.used[0] = 8;
  std::vector<ScaleDemand> online = {Waiting(8, 2, "", Priority::kHigh)};
  b.Plan(online, {}, q, 0);
  EXPECT_EQ(Ups(b.Plan(online, {}, q, 30 * kSec)),
            (std::vector<std::tuple<int, int>>{std::make_tuple(0, 3)}));
}

}  // namespace
}  // namespace dgpu::core
