#include "core/scheduler_core.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;
using Kind = Decision::Kind;

class CoreTest : public ::testing::Test {
 protected:
  void AddNode(const std::string& id, int gpus, const std::string& model = "A100") {
    ASSERT_TRUE(core_.RegisterNode(id, id + ":0", MakeGpus(gpus, model), {}, {}, now_).ok());
  }
  TaskNumber Submit(Priority p, int gpus, std::string model = "") {
    auto r = core_.Submit(Spec(p, gpus, std::move(model)), now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  std::vector<Decision> Pass() {
    core_.Schedule(now_);
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    return core_.TakeDecisions();
  }
  PendingReason Reason(TaskNumber id) { return core_.ReasonOf(*core_.FindTask(id)); }
  TaskStatus StatusOf(TaskNumber id) { return core_.FindTask(id)->status; }
  void Finish(TaskNumber id, bool ok = true, int code = 0) {
    const Task* t = core_.FindTask(id);
    ASSERT_FALSE(t->allocation.empty());
    FinishReport r{id, ok, code, "", now_};
    ASSERT_TRUE(core_.TaskFinished(t->allocation[0].node_id, r, now_).ok());
  }

  CoreConfig config_;
  SchedulerCore core_{config_};
  TimeMicros now_ = 1000 * kSec;
};

TEST_F(CoreTest, SingleNodeTaskNeverSpansNodes) {
  AddNode("n1", 4);
  AddNode("n2", 4);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 3);
  auto b = Submit(Priority::kHigh, 3);
  auto c = Submit(Priority::kHigh, 2);  // 1 + 1 free GPUs left on two nodes: must wait.
  auto d = Pass();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, a, "n1", {0, 1, 2}}));
  EXPECT_EQ(d[1], (Decision{Kind::kStart, b, "n2", {0, 1, 2}}));
  EXPECT_EQ(StatusOf(c), TaskStatus::kPending);
  EXPECT_EQ(Reason(c), PendingReason::kNoNodeFits);
  Finish(a);
  d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, c, "n1", {0, 1}}));
}

TEST_F(CoreTest, AnArrayIsQueuedInIndexOrderWithOneChange) {
  AddNode("n1", 2);
  core_.TakeChanges();
  TaskSpec spec = Spec(Priority::kLow, 1);
  spec.array_index = 7;  // Set by SubmitArray.
  auto first = core_.SubmitArray(spec, 5, now_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::vector<Change> changes = core_.TakeChanges();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, Change::Kind::kTaskArray);
  EXPECT_EQ(changes[0].task, *core_.FindTask(*first));
  for (int i = 0; i < 5; ++i) {
    const Task* t = core_.FindTask(*first + i);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(*t, ArrayMember(changes[0].task, i)) << i;
    EXPECT_EQ(std::make_tuple(t->spec.array_index, t->spec.array_size), std::make_tuple(i, 5));
  }
  EXPECT_EQ(core_.FindTask(*first + 5), nullptr);
  auto d = Pass();  // Members start in index order, as far as the quota lets them.
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0].task, *first);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i].task, *first + i);
  auto next = core_.Submit(Spec(Priority::kLow, 1), now_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, *first + 5);

  EXPECT_EQ(core_.SubmitArray(spec, 0, now_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.SubmitArray(spec, kMaxArraySize + 1, now_).status().code(),
            StatusCode::kInvalidArgument);
  spec.gpu_count = 0;
  EXPECT_EQ(core_.SubmitArray(spec, 3, now_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.FindTask(*first + 6), nullptr) << "nothing is queued on an error";
}

TEST_F(CoreTest, BestFitPrefersFullestNodeThenNodeId) {
  AddNode("n2", 8);
  AddNode("n1", 8);
  AddNode("n3", 4);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 4);  // Exact fit on n3.
  auto b = Submit(Priority::kHigh, 6);  // n1 (tie with n2 on free count, lower id).
  auto c = Submit(Priority::kHigh, 2);  // n1 has 2 left: fullest that fits.
  auto d = Pass();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, a, "n3", {0, 1, 2, 3}}));
  EXPECT_EQ(d[1], (Decision{Kind::kStart, b, "n1", {0, 1, 2, 3, 4, 5}}));
  EXPECT_EQ(d[2], (Decision{Kind::kStart, c, "n1", {6, 7}}));
}

struct QuotaCase {
  double online_percent;
  int total;
  int want_online;
  int want_batch;
};

TEST(QuotaTableTest, RoundsOnlineAndGivesBatchTheRest) {
  const QuotaCase cases[] = {
      {0.7, 8, 6, 2}, {0.7, 10, 7, 3}, {0.7, 5, 4, 1},    {0.3, 8, 2, 6},
      {0.0, 8, 0, 8}, {1.0, 8, 8, 0},  {0.65, 20, 13, 7}, {0.7, 0, 0, 0},
  };
  for (const auto& c : cases) {
    SchedulerCore core;
    if (c.total > 0) {
      ASSERT_TRUE(core.RegisterNode("n", "", testing::MakeGpus(c.total), {}, {}, 0).ok());
    }
    ASSERT_TRUE(core.SetOnlinePercent(c.online_percent, 0).ok());
    auto q = core.Quota();
    EXPECT_EQ(q.total_gpus, c.total);
    EXPECT_EQ(q.quota[0], c.want_online) << c.online_percent << " of " << c.total;
    EXPECT_EQ(q.quota[1], c.want_batch) << c.online_percent << " of " << c.total;
  }
}

TEST_F(CoreTest, QuotaBoundary70_30) {
  AddNode("n1", 4);
  AddNode("n2", 4);  // 8 GPUs: online 6 (round 5.6), batch 2.
  std::vector<TaskNumber> low, high;
  for (int i = 0; i < 3; ++i) low.push_back(Submit(Priority::kLow, 1));
  for (int i = 0; i < 7; ++i) high.push_back(Submit(Priority::kHigh, 1));
  auto d = Pass();
  EXPECT_EQ(d.size(), 8u);
  auto q = core_.Quota();
  EXPECT_EQ(q.quota[0], 6);
  EXPECT_EQ(q.used[0], 6);
  EXPECT_EQ(q.quota[1], 2);
  EXPECT_EQ(q.used[1], 2);
  EXPECT_EQ(StatusOf(low[2]), TaskStatus::kPending);
  EXPECT_EQ(Reason(low[2]), PendingReason::kQuotaExhausted);
  EXPECT_EQ(StatusOf(high[6]), TaskStatus::kPending);
  EXPECT_EQ(Reason(high[6]), PendingReason::kQuotaExhausted);
}

TEST_F(CoreTest, QuotaChangeNeverStopsRunningTasks) {
  AddNode("n1", 8);
  std::vector<TaskNumber> high;
  for (int i = 0; i < 5; ++i) high.push_back(Submit(Priority::kHigh, 1));
  EXPECT_EQ(Pass().size(), 5u);
  ASSERT_TRUE(core_.SetOnlinePercent(0.25, 0).ok());  // Online quota 2 < 5 running.
  auto q = core_.Quota();
  EXPECT_EQ(q.quota[0], 2);
  EXPECT_EQ(q.used[0], 5);
  EXPECT_TRUE(Pass().empty());  // Nothing stopped, nothing started.
  for (auto id : high) EXPECT_EQ(StatusOf(id), TaskStatus::kRunning);
  auto extra = Submit(Priority::kHigh, 1);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(Reason(extra), PendingReason::kQuotaExhausted);
  auto batch = Submit(Priority::kLow, 3);  // Batch quota 6; 3 GPUs free.
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].task, batch);
  EXPECT_EQ(core_.SetOnlinePercent(1.5, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.SetOnlinePercent(-0.1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.online_percent(), 0.25);
}

TEST_F(CoreTest, HighBeforeLowAndFifoWithinPriority) {
  AddNode("n1", 1);
  ASSERT_TRUE(core_.SetOnlinePercent(0.5, 0).ok());  // 1 GPU: online round(0.5)=1, batch 0.
  auto l1 = Submit(Priority::kLow, 1);
  auto h1 = Submit(Priority::kHigh, 1);
  auto h2 = Submit(Priority::kHigh, 1);
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].task, h1);
  EXPECT_EQ(Reason(h2), PendingReason::kQuotaExhausted);
  EXPECT_EQ(Reason(l1), PendingReason::kQuotaExhausted);
  EXPECT_EQ(core_.QueueOrder(Priority::kHigh), (std::vector<TaskNumber>{h2}));
}

TEST_F(CoreTest, PendingReasons) {
  AddNode("n1", 4, "A100");
  AddNode("n2", 1, "A100");
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto no_model = Submit(Priority::kHigh, 1, "H100");
  auto too_big = Submit(Priority::kHigh, 5);
  auto fits = Submit(Priority::kHigh, 3);
  auto no_fit = Submit(Priority::kHigh, 2);
  auto behind = Submit(Priority::kHigh, 2);
  EXPECT_EQ(Reason(fits), PendingReason::kQueued);  // Not looked at yet.
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].task, fits);
  EXPECT_EQ(Reason(no_model), PendingReason::kNoGpuModel);
  EXPECT_EQ(Reason(too_big), PendingReason::kExceedsCluster);
  EXPECT_EQ(Reason(no_fit), PendingReason::kNoNodeFits);
  EXPECT_EQ(Reason(behind), PendingReason::kQueued);
  EXPECT_EQ(core_.ReasonOf(*core_.FindTask(fits)), PendingReason::kNone);

  // The same, per queue head.
  std::vector<SchedulerCore::QueueHead> heads;
  core_.QueueHeads(heads);
  std::sort(heads.begin(), heads.end(),
            [](const auto& a, const auto& b) { return a.task < b.task; });
  ASSERT_EQ(heads.size(), 3u);
  EXPECT_EQ(heads[0].task, no_model);
  EXPECT_EQ(*heads[0].gpu_model, "H100");
  EXPECT_EQ(heads[0].gpu_count, 1);
  EXPECT_EQ(heads[0].reason, PendingReason::kNoGpuModel);
  EXPECT_EQ(heads[1].task, too_big);
  EXPECT_EQ(*heads[1].gpu_model, "");
  EXPECT_EQ(heads[1].gpu_count, 5);
  EXPECT_EQ(heads[1].reason, PendingReason::kExceedsCluster);
  EXPECT_EQ(heads[2].task, no_fit);  // `behind` has the same shape.
  EXPECT_EQ(heads[2].gpu_count, 2);
  EXPECT_EQ(heads[2].priority, Priority::kHigh);
  EXPECT_EQ(heads[2].reason, PendingReason::kNoNodeFits);

  // A shape whose last task left has no head.
  ASSERT_TRUE(core_.Cancel(no_model, now_).ok());
  core_.QueueHeads(heads);
  EXPECT_EQ(heads.size(), 2u);
}

TEST_F(CoreTest, ModelMatchingExactThenSubstring) {
  AddNode("v", 2, "Tesla V100-SXM2-32GB");
  AddNode("a", 2, "A100");
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto t1 = Submit(Priority::kHigh, 1, "V100");
  auto t2 = Submit(Priority::kHigh, 1, "a100");
  auto d = Pass();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, t1, "v", {0}}));
  EXPECT_EQ(d[1], (Decision{Kind::kStart, t2, "a", {0}}));
}

TEST_F(CoreTest, MixedModelNodeKeepsOneModelPerTask) {
  std::vector<GpuInfo> gpus = {{0, "A100", 1, "", true, ""},
                               {1, "T4", 1, "", true, ""},
                               {2, "A100", 1, "", true, ""},
                               {3, "T4", 1, "", true, ""}};
  ASSERT_TRUE(core_.RegisterNode("mix", "", gpus, {}, {}, now_).ok());
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto t = Submit(Priority::kHigh, 2, "T4");
  auto u = Submit(Priority::kHigh, 2);
  auto d = Pass();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, t, "mix", {1, 3}}));
  EXPECT_EQ(d[1], (Decision{Kind::kStart, u, "mix", {0, 2}}));
}

TEST_F(CoreTest, NodeLossRequeuesAtHeadThenFailsAfterMaxAttempts) {
  AddNode("n1", 2);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 1);
  auto b = Submit(Priority::kHigh, 1);
  EXPECT_EQ(Pass().size(), 2u);
  auto waiting = Submit(Priority::kHigh, 1);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  EXPECT_TRUE(core_.CheckInvariants().ok());
  EXPECT_EQ(core_.QueueOrder(Priority::kHigh), (std::vector<TaskNumber>{a, b, waiting}));
  EXPECT_EQ(core_.FindTask(a)->attempts, 1);
  EXPECT_EQ(core_.Quota().total_gpus, 0);
  for (int attempt = 2; attempt <= 3; ++attempt) {
    AddNode("n1", 2);
    auto d = Pass();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].task, a);
    EXPECT_EQ(d[1].task, b);
    EXPECT_EQ(core_.FindTask(a)->attempts, attempt);
    ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  }
  EXPECT_EQ(StatusOf(a), TaskStatus::kFailed);
  EXPECT_EQ(core_.FindTask(a)->error, "agent_lost");
  EXPECT_EQ(StatusOf(b), TaskStatus::kFailed);
  EXPECT_EQ(StatusOf(waiting), TaskStatus::kPending);
  EXPECT_TRUE(core_.CheckInvariants().ok());
}

TEST_F(CoreTest, HeartbeatTimeoutMakesNodeLost) {
  AddNode("n1", 1);
  AddNode("n2", 1);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 1);
  ASSERT_EQ(Pass().size(), 1u);
  now_ += 10 * kSec;
  ASSERT_TRUE(core_.Heartbeat("n2", now_).ok());
  now_ += 6 * kSec;  // n1 silent for 16 s > 15 s; n2 for 6 s.
  core_.Tick(now_);
  EXPECT_FALSE(core_.FindNode("n1")->online);
  EXPECT_TRUE(core_.FindNode("n2")->online);
  EXPECT_EQ(StatusOf(a), TaskStatus::kPending);
  EXPECT_EQ(core_.Heartbeat("n1", now_).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.Heartbeat("zz", now_).code(), StatusCode::kNotFound);
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, a, "n2", {0}}));
}

TEST_F(CoreTest, CancelPendingAndRunning) {
  AddNode("n1", 1);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto run = Submit(Priority::kHigh, 1);
  auto wait = Submit(Priority::kHigh, 1);
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.Cancel(wait, now_).ok());
  EXPECT_EQ(StatusOf(wait), TaskStatus::kCancelled);
  EXPECT_TRUE(core_.QueueOrder(Priority::kHigh).empty());
  ASSERT_TRUE(core_.Cancel(run, now_).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, run, "n1", {}, StopReason::kCancel}}));
  // The GPU stays held until the agent confirms.
  auto next = Submit(Priority::kHigh, 1);
  EXPECT_TRUE(Pass().empty());
  EXPECT_EQ(core_.Quota().used[0], 1);
  FinishReport r{run, false, 143, "cancelled", now_};
  ASSERT_TRUE(core_.TaskFinished("n1", r, now_).ok());
  EXPECT_EQ(StatusOf(run), TaskStatus::kCancelled);
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].task, next);
  EXPECT_EQ(core_.Cancel(run, now_).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.Cancel(999, now_).code(), StatusCode::kNotFound);
}

TEST_F(CoreTest, CancelCarriesItsGraceToTheStopOrder) {
  AddNode("n1", 2);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 1);
  auto b = Submit(Priority::kHigh, 1);
  ASSERT_EQ(Pass().size(), 2u);
  EXPECT_EQ(core_.Cancel(a, now_, -2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusOf(a), TaskStatus::kRunning) << "a refused cancel changes nothing";
  EXPECT_TRUE(core_.TakeDecisions().empty());
  ASSERT_TRUE(core_.Cancel(a, now_, 0).ok());
  ASSERT_TRUE(core_.Cancel(b, now_, 7).ok());
  EXPECT_EQ(core_.TakeDecisions(),
            (std::vector<Decision>{{Kind::kStop, a, "n1", {}, StopReason::kCancel, 0},
                                   {Kind::kStop, b, "n1", {}, StopReason::kCancel, 7}}));
}

TEST_F(CoreTest, FinishValidation) {
  AddNode("n1", 1);
  AddNode("n2", 1);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 1);
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  std::string other = d[0].node_id == "n1" ? "n2" : "n1";
  FinishReport r{a, false, 3, "", now_};
  EXPECT_EQ(core_.TaskFinished(other, r, now_).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_.TaskFinished(d[0].node_id, FinishReport{77, true, 0, "", now_}, now_).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(StatusOf(a), TaskStatus::kRunning);
  ASSERT_TRUE(core_.TaskFinished(d[0].node_id, r, now_).ok());
  EXPECT_EQ(StatusOf(a), TaskStatus::kFailed);
  EXPECT_EQ(core_.FindTask(a)->exit_code, 3);
  auto before = core_.TakeChanges().size();
  EXPECT_GT(before, 0u);
  EXPECT_EQ(core_.TaskFinished(d[0].node_id, r, now_).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(core_.TakeChanges().empty());  // A duplicate changes nothing.
}

TEST_F(CoreTest, ReconcileOnReRegister) {
  AddNode("n1", 4);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto kept = Submit(Priority::kHigh, 1);
  auto vanished = Submit(Priority::kHigh, 1);
  auto done = Submit(Priority::kHigh, 1);
  ASSERT_EQ(Pass().size(), 3u);
  const auto kept_gpus = core_.FindTask(kept)->allocation[0].gpu_indices;
  std::vector<RunningReport> running = {{kept, kept_gpus}, {424242, {3}}};
  std::vector<FinishReport> finished = {{done, true, 0, "", now_ - kSec}};
  ASSERT_TRUE(core_.RegisterNode("n1", "x", MakeGpus(4), running, finished, now_).ok());
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  EXPECT_EQ(StatusOf(kept), TaskStatus::kRunning);
  EXPECT_EQ(StatusOf(done), TaskStatus::kSuccess);
  EXPECT_EQ(core_.FindTask(done)->finished_at, now_ - kSec);
  EXPECT_EQ(StatusOf(vanished), TaskStatus::kPending);
  EXPECT_EQ(core_.FindTask(vanished)->error, "agent_lost");
  auto d = core_.TakeDecisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStop, 424242, "n1", {}, StopReason::kReconcile}));
  EXPECT_EQ(core_.FindTask(kept)->attempts, 1);  // Adopted, not restarted.
}

TEST_F(CoreTest, NodeReturnsWithTaskThatWasPutBack) {
  AddNode("n1", 2);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  auto a = Submit(Priority::kHigh, 2);
  ASSERT_EQ(Pass().size(), 1u);
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  EXPECT_EQ(StatusOf(a), TaskStatus::kPending);
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2), {{a, {0, 1}}}, {}, now_).ok());
  EXPECT_EQ(StatusOf(a), TaskStatus::kRunning);
  EXPECT_TRUE(core_.TakeDecisions().empty());
  EXPECT_TRUE(core_.CheckInvariants().ok());
}

TEST_F(CoreTest, FinishOfAQueuedTaskReportedAtRegistrationIsRecorded) {
  // A previous leader started the task and failed before the start was replicated here: the task
  // is queued here, and its node registers with its finish.
  Task queued;
  queued.id = 5;
  queued.spec = Spec(Priority::kHigh, 1);
  queued.queue_seq = 1;
  ASSERT_TRUE(core_.Restore(queued, now_).ok());
  FinishReport done;
  done.task = 5;
  done.success = true;
  done.finished_at = now_ - kSec;
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(2), {}, {done}, now_).ok());
  EXPECT_EQ(StatusOf(5), TaskStatus::kSuccess);
  EXPECT_EQ(core_.FindTask(5)->attempts, 1);
  EXPECT_EQ(core_.FindTask(5)->finished_at, now_ - kSec);
  EXPECT_TRUE(Pass().empty()) << "a task that ran to its end must not start again";
  EXPECT_EQ(core_.PendingCount(Priority::kHigh), 0u);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

TEST_F(CoreTest, RestoreAdoptsRunningTasksWhenTheirNodeRegisters) {
  Task running;
  running.id = 7;
  running.spec = Spec(Priority::kHigh, 2);
  running.status = TaskStatus::kRunning;
  running.queue_seq = 3;
  running.attempts = 1;
  running.allocation = {{"n1", {1, 2}}};
  Task pending;
  pending.id = 9;
  pending.spec = Spec(Priority::kLow, 1);
  pending.queue_seq = 5;
  Task orphan = running;
  orphan.id = 8;
  orphan.allocation = {{"gone", {0, 1}}};
  ASSERT_TRUE(core_.Restore(running, now_).ok());
  ASSERT_TRUE(core_.Restore(pending, now_).ok());
  ASSERT_TRUE(core_.Restore(orphan, now_).ok());
  EXPECT_EQ(core_.Restore(pending, now_).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  ASSERT_TRUE(core_.RegisterNode("n1", "", MakeGpus(4), {{7, {1, 2}}}, {}, now_).ok());
  EXPECT_TRUE(core_.TakeDecisions().empty());
  EXPECT_EQ(StatusOf(7), TaskStatus::kRunning);
  EXPECT_EQ(core_.next_task_number(), 10u);
  auto d = Pass();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, 9, "n1", {0}}));
  now_ += 16 * kSec;
  ASSERT_TRUE(core_.Heartbeat("n1", now_).ok());
  core_.Tick(now_);  // "gone" never came back.
  EXPECT_EQ(StatusOf(8), TaskStatus::kPending);
  EXPECT_EQ(StatusOf(7), TaskStatus::kRunning);
  EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
}

TEST_F(CoreTest, StarvingHeadGetsAReservedNodeAndOthersBackfillAround) {
  CoreConfig cfg;
  cfg.max_bypass = 3;
  cfg.online_percent = 0.75;  // 16 GPUs: online 12, batch 4.
  SchedulerCore core(cfg);
  for (const char* n : {"n1", "n2", "n3", "n4"}) {
    ASSERT_TRUE(core.RegisterNode(n, "", MakeGpus(4), {}, {}, 0).ok());
  }
  auto finish = [&](TaskNumber id) {
    const Task* t = core.FindTask(id);
    ASSERT_TRUE(core.TaskFinished(t->allocation[0].node_id, {id, true, 0, "", 0}, 0).ok());
  };
  // High fillers of 3 GPUs leave one free GPU on each node.
  std::vector<TaskNumber> fillers;
  for (int i = 0; i < 4; ++i) fillers.push_back(*core.Submit(Spec(Priority::kHigh, 3), 0));
  core.Schedule(0);
  ASSERT_EQ(core.TakeDecisions().size(), 4u);
  // A 4-GPU batch task cannot fit; 1-GPU batch tasks behind it overtake it 3 times, then hold.
  auto big = *core.Submit(Spec(Priority::kLow, 4), 0);
  std::vector<TaskNumber> small;
  for (int i = 0; i < 5; ++i) small.push_back(*core.Submit(Spec(Priority::kLow, 1), 0));
  core.Schedule(0);
  auto d = core.TakeDecisions();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, small[0], "n1", {3}}));
  EXPECT_EQ(d[2], (Decision{Kind::kStart, small[2], "n3", {3}}));
  EXPECT_EQ(core.ReasonOf(*core.FindTask(big)), PendingReason::kNoNodeFits);
  // Younger tasks were still tried around the reservation, and found no room.
  EXPECT_EQ(core.ReasonOf(*core.FindTask(small[3])), PendingReason::kNoNodeFits);
  EXPECT_EQ(core.ReasonOf(*core.FindTask(small[4])), PendingReason::kQueued);
  EXPECT_EQ(core.ReservedNode(Priority::kLow), "n4");  // The only node with a free GPU.
  // Held: the remaining small task does not start although n4 has a free GPU.
  core.Schedule(0);
  EXPECT_TRUE(core.TakeDecisions().empty());
  // High work may not use the reserved node either: with n1's filler gone it goes to n1, not
  // to n4 which best fit would otherwise pick. The big task is now short of batch quota, so the
  // batch queue holds entirely: no younger batch task takes the quota it waits for.
  finish(fillers[0]);
  auto h = *core.Submit(Spec(Priority::kHigh, 1), 0);
  core.Schedule(0);
  d = core.TakeDecisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, h, "n1", {0}}));
  EXPECT_EQ(core.ReasonOf(*core.FindTask(big)), PendingReason::kQuotaExhausted);
  // Once n4 frees up (and batch quota is back), the big task starts there before any younger
  // batch task.
  finish(fillers[3]);
  for (int i = 0; i < 3; ++i) finish(small[i]);
  core.Schedule(0);
  d = core.TakeDecisions();
  ASSERT_GE(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, big, "n4", {0, 1, 2, 3}}));
  EXPECT_EQ(core.ReservedNode(Priority::kLow), std::nullopt);
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

TEST_F(CoreTest, YoungerTasksBackfillAroundTheReservation) {
  CoreConfig cfg;
  cfg.max_bypass = 1;
  cfg.online_percent = 0.0;  // All 16 GPUs are batch.
  SchedulerCore core(cfg);
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(8), {}, {}, 0).ok());
  ASSERT_TRUE(core.RegisterNode("n2", "", MakeGpus(8), {}, {}, 0).ok());
  auto f1 = *core.Submit(Spec(Priority::kLow, 5), 0);
  auto f2 = *core.Submit(Spec(Priority::kLow, 5), 0);
  core.Schedule(0);
  ASSERT_EQ(core.TakeDecisions().size(), 2u);
  auto big = *core.Submit(Spec(Priority::kLow, 4), 0);  // 3 free on each node: no fit.
  std::vector<TaskNumber> small;
  for (int i = 0; i < 3; ++i) small.push_back(*core.Submit(Spec(Priority::kLow, 1), 0));
  core.Schedule(0);
  auto d = core.TakeDecisions();
  // The first small task overtakes once: the big one gets n2 (most free, then id order is n1:
  // n1 has 2 free after it), and the other small tasks backfill on n1.
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, small[0], "n1", {5}}));
  EXPECT_EQ(core.ReservedNode(Priority::kLow), "n2");
  EXPECT_EQ(d[1], (Decision{Kind::kStart, small[1], "n1", {6}}));
  EXPECT_EQ(d[2], (Decision{Kind::kStart, small[2], "n1", {7}}));
  ASSERT_TRUE(core.TaskFinished("n2", {f2, true, 0, "", 0}, 0).ok());
  core.Schedule(0);
  d = core.TakeDecisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Decision{Kind::kStart, big, "n2", {0, 1, 2, 3}}));
  EXPECT_EQ(core.ReservedNode(Priority::kLow), std::nullopt);
  (void)f1;
  EXPECT_TRUE(core.CheckInvariants().ok());
}

TEST_F(CoreTest, SubmitValidation) {
  TaskSpec s = Spec(Priority::kHigh, 0);
  EXPECT_EQ(core_.Submit(s, now_).status().code(), StatusCode::kInvalidArgument);
  s.gpu_count = 1;
  s.command.clear();
  EXPECT_EQ(core_.Submit(s, now_).status().code(), StatusCode::kInvalidArgument);
  s.command = "x";
  s.timeout_seconds = -1;
  EXPECT_EQ(core_.Submit(s, now_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.TaskCount(), 0u);
  EXPECT_TRUE(core_.TakeChanges().empty());
}

TEST_F(CoreTest, ChangesComeInOrder) {
  AddNode("n1", 1);
  ASSERT_TRUE(core_.SetOnlinePercent(1.0, 0).ok());
  core_.TakeChanges();
  auto a = Submit(Priority::kHigh, 1);
  Pass();
  Finish(a);
  auto c = core_.TakeChanges();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].task.status, TaskStatus::kPending);
  EXPECT_EQ(c[1].task.status, TaskStatus::kRunning);
  EXPECT_EQ(c[2].task.status, TaskStatus::kSuccess);
}

// A core with max_bypass 1 (and the given online share), and a pass that checks invariants.
struct BypassOneCore {
  explicit BypassOneCore(double online_percent) : core(Config(online_percent)) {}
  static CoreConfig Config(double online_percent) {
    CoreConfig cfg;
    cfg.max_bypass = 1;
    cfg.online_percent = online_percent;
    return cfg;
  }
  std::vector<Decision> Pass() {
    core.Schedule(now);
    EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
    return core.TakeDecisions();
  }
  SchedulerCore core;
  TimeMicros now = 1000 * kSec;
};

// Both priorities starving for the same big node must not both reserve it: neither could start.
TEST(CoreRulesTest, TwoStarvingPrioritiesNeverReserveTheSameNode) {
  BypassOneCore c(0.5);
  SchedulerCore& core = c.core;
  const TimeMicros now = c.now;
  auto pass = [&] { return c.Pass(); };
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {}, {}, now).ok());
  TaskNumber first = *core.Submit(Spec(Priority::kHigh, 1), now);
  ASSERT_EQ(pass().size(), 1u);
  for (const char* n : {"n2", "n3", "n4"}) {
    ASSERT_TRUE(core.RegisterNode(n, "", MakeGpus(2), {}, {}, now).ok());
  }
  TaskNumber big_high = *core.Submit(Spec(Priority::kHigh, 4), now);
  ASSERT_TRUE(core.Submit(Spec(Priority::kHigh, 1), now).ok());
  pass();
  EXPECT_EQ(core.ReservedNode(Priority::kHigh), "n1");
  ASSERT_TRUE(core.Submit(Spec(Priority::kLow, 4), now).ok());
  ASSERT_TRUE(core.Submit(Spec(Priority::kLow, 1), now).ok());
  pass();
  EXPECT_NE(core.ReservedNode(Priority::kLow), std::optional<std::string>("n1"));
  ASSERT_TRUE(core.TaskFinished("n1", {first, true, 0, "", now}, now).ok());
  auto d = pass();
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0], (Decision{Kind::kStart, big_high, "n1", {0, 1, 2, 3}}));
}

// A held head that can no longer start at all ends its hold: when it can start again, the
// bypass bound counts from zero and holds again.
TEST(CoreRulesTest, AHoldEndsWhenItsHeadCanNoLongerStart) {
  BypassOneCore c(0.7);
  SchedulerCore& core = c.core;
  const TimeMicros now = c.now;
  auto pass = [&] { return c.Pass(); };
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {}, {}, now).ok());
  TaskNumber low = *core.Submit(Spec(Priority::kLow, 1), now);
  ASSERT_EQ(pass().size(), 1u);
  ASSERT_TRUE(core.SetOnlinePercent(1.0, now).ok());
  ASSERT_TRUE(core.RegisterNode("n2", "", MakeGpus(2), {}, {}, now).ok());
  ASSERT_TRUE(core.Submit(Spec(Priority::kHigh, 4), now).ok());
  ASSERT_TRUE(core.Submit(Spec(Priority::kHigh, 1), now).ok());
  pass();
  EXPECT_EQ(core.ReservedNode(Priority::kHigh), "n1");
  ASSERT_TRUE(core.NodeLost("n1", now).ok());
  pass();  // The 4-GPU task exceeds what is online: it holds nothing.
  EXPECT_EQ(core.ReservedNode(Priority::kHigh), std::nullopt);
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {{low, {0}}}, {}, now).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core.Submit(Spec(Priority::kHigh, 1), now).ok());
  // One younger task may overtake it (max_bypass 1); then n1 is kept for it.
  EXPECT_EQ(pass().size(), 1u);
  EXPECT_EQ(core.ReservedNode(Priority::kHigh), "n1");
}

// An agent that lists a task twice at registration does not leave GPUs held by nobody.
TEST(CoreRulesTest, ATaskReportedTwiceAtRegistrationCountsOnce) {
  SchedulerCore core;
  TimeMicros now = 1000 * kSec;
  ASSERT_TRUE(core.SetOnlinePercent(1.0, now).ok());
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {}, {}, now).ok());
  TaskNumber t = *core.Submit(Spec(Priority::kHigh, 2), now);
  core.Schedule(now);
  (void)core.TakeDecisions();
  ASSERT_TRUE(core.Cancel(t, now).ok());
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(4), {{t, {0, 1}}, {t, {0}}}, {}, now).ok());
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
  EXPECT_EQ(core.FindNode("n1")->free_gpus, 2);
  ASSERT_TRUE(core.TaskFinished("n1", {t, false, 143, "cancelled", now}, now).ok());
  EXPECT_EQ(core.FindNode("n1")->free_gpus, 4);
  EXPECT_TRUE(core.CheckInvariants().ok()) << core.CheckInvariants().ToString();
}

}  // namespace
}  // namespace dgpu::core
