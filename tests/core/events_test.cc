// The core's typed events: one per thing that happened, in order, with what consumers need.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using testing::MakeGpus;
using testing::Spec;
using K = Event::Kind;

// "kind task node detail" per event, so that a whole sequence reads as one expectation.
std::vector<std::string> Describe(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events) {
    std::string s(ToString(e.kind));
    if (e.task != 0) s += " " + FormatTaskId(e.task);
    if (!e.node_id.empty()) s += " @" + e.node_id;
    if (e.reason != StopReason::kNone) s += " reason=" + std::string(ToString(e.reason));
    if (!e.detail.empty()) s += " (" + e.detail + ")";
    out.push_back(s);
  }
  return out;
}

class EventsTest : public ::testing::Test {
 protected:
  void AddNode(const std::string& id, int gpus) {
    ASSERT_TRUE(core_.RegisterNode(id, id + ":7000", MakeGpus(gpus, "A100"), {}, {}, now_).ok());
  }
  TaskNumber Submit(Priority p, int gpus) {
    auto r = core_.Submit(Spec(p, gpus, ""), now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  std::vector<std::string> Take() { return Describe(core_.TakeEvents()); }

  CoreConfig config_ = [] {
    CoreConfig c;
    c.online_percent = 1.0;
    return c;
  }();
  SchedulerCore core_{config_};
  TimeMicros now_ = 1000 * kSec;
};

TEST_F(EventsTest, ALifeFromSubmissionToSuccess) {
  AddNode("n1", 2);
  EXPECT_EQ(Take(), (std::vector<std::string>{"node_joined @n1 (n1:7000)"}));
  TaskNumber t = Submit(Priority::kHigh, 2);
  core_.Schedule(now_);
  ASSERT_TRUE(core_.TaskStarted(t, "n1", now_ + kSec).ok());
  ASSERT_TRUE(core_.TaskFinished("n1", {t, true, 0, "", now_ + 5 * kSec}, now_ + 5 * kSec).ok());
  std::vector<Event> events = core_.TakeEvents();
  EXPECT_EQ(Describe(events),
            (std::vector<std::string>{"task_submitted task-1", "task_scheduled task-1 @n1",
                                      "task_started task-1 @n1", "task_finished task-1 @n1"}));
  EXPECT_EQ(events[0].time, now_);
  EXPECT_EQ(events[2].time, now_ + kSec);
  EXPECT_EQ(events[3].status, TaskStatus::kSuccess);
  EXPECT_EQ(events[3].priority, Priority::kHigh);
  EXPECT_EQ(events[3].gpus, 2);
  EXPECT_EQ(events[3].created_at, now_);
  EXPECT_TRUE(core_.TakeEvents().empty());
}

TEST_F(EventsTest, AFailureCarriesItsExitCodeAndError) {
  AddNode("n1", 1);
  TaskNumber t = Submit(Priority::kHigh, 1);
  core_.Schedule(now_);
  (void)core_.TakeEvents();
  ASSERT_TRUE(core_.TaskFinished("n1", {t, false, 3, "", now_}, now_).ok());
  std::vector<Event> events = core_.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, K::kTaskFinished);
  EXPECT_EQ(events[0].status, TaskStatus::kFailed);
  EXPECT_EQ(events[0].exit_code, 3);
}

TEST_F(EventsTest, CancellingARunningTaskFinishesItOnceAndStopsItOnItsNode) {
  AddNode("n1", 1);
  TaskNumber running = Submit(Priority::kHigh, 1);
  TaskNumber waiting = Submit(Priority::kHigh, 1);
  core_.Schedule(now_);
  (void)core_.TakeEvents();
  ASSERT_TRUE(core_.Cancel(waiting, now_).ok());
  ASSERT_TRUE(core_.Cancel(running, now_).ok());
  EXPECT_EQ(Take(), (std::vector<std::string>{
                        "task_finished task-2 (cancelled)",
                        "task_stopping task-1 @n1 reason=cancel",
                        "task_finished task-1 @n1 reason=cancel (cancelled)",
                    }));
  // The agent's confirmation frees the GPU: a stop, not a second finish.
  ASSERT_TRUE(core_.TaskFinished("n1", {running, false, 143, "cancelled", now_}, now_).ok());
  EXPECT_EQ(Take(),
            (std::vector<std::string>{"task_stopped task-1 @n1 reason=cancel (cancelled)"}));
}

TEST_F(EventsTest, ALostNodeRequeuesItsTasksThenFailsThemAfterMaxAttempts) {
  AddNode("n1", 1);
  (void)core_.TakeEvents();
  TaskNumber t = Submit(Priority::kHigh, 1);
  for (int attempt = 1; attempt <= config_.max_attempts; ++attempt) {
    core_.Schedule(now_);
    ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
    std::vector<std::string> got = Take();
    const std::string end = attempt < config_.max_attempts
                                ? "task_requeued task-1 @n1 (agent_lost)"
                                : "task_finished task-1 @n1 (agent_lost)";
    std::vector<std::string> want = {"task_scheduled task-1 @n1", "node_lost @n1 (lost)", end};
    if (attempt == 1) want.insert(want.begin(), "task_submitted task-1");
    EXPECT_EQ(got, want) << "attempt " << attempt;
    AddNode("n1", 1);
    (void)core_.TakeEvents();
  }
  EXPECT_EQ(core_.FindTask(t)->status, TaskStatus::kFailed);
}

TEST_F(EventsTest, ReconciliationAdoptsStopsAndRecordsFinishes) {
  AddNode("n1", 4);
  TaskNumber adopted = Submit(Priority::kLow, 1);   // Queued here, but the agent runs it.
  TaskNumber finished = Submit(Priority::kLow, 1);  // Queued here, but it ended there.
  (void)core_.TakeEvents();
  ASSERT_TRUE(core_.NodeLost("n1", now_).ok());
  ASSERT_TRUE(core_
                  .RegisterNode("n1", "n1:7000", MakeGpus(4, "A100"), {{adopted, {2}}, {77, {3}}},
                                {{finished, true, 0, "", now_}}, now_)
                  .ok());
  EXPECT_EQ(Take(), (std::vector<std::string>{
                        "node_lost @n1 (lost)",
                        "node_joined @n1 (n1:7000)",
                        "task_finished task-2 @n1",
                        "task_scheduled task-1 @n1 (adopted)",
                        "task_stopping task-77 @n1 reason=reconcile",
                    }));
}

TEST_F(EventsTest, QuotaChangesAreEvents) {
  ASSERT_TRUE(core_.SetOnlinePercent(0.25, now_).ok());
  std::vector<Event> events = core_.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, K::kQuotaChanged);
  EXPECT_EQ(events[0].online_percent, 0.25);
  EXPECT_EQ(events[0].time, now_);
}

TEST(EventsOffTest, ACoreThatRecordsNoEventsKeepsNone) {
  CoreConfig c;
  c.record_events = false;
  SchedulerCore core(c);
  ASSERT_TRUE(core.RegisterNode("n1", "", MakeGpus(1, "A100"), {}, {}, 0).ok());
  ASSERT_TRUE(core.Submit(Spec(Priority::kLow, 1, ""), 0).ok());
  core.Schedule(0);
  ASSERT_TRUE(core.SetOnlinePercent(0.5, 0).ok());
  ASSERT_TRUE(core.NodeLost("n1", 0).ok());
  EXPECT_TRUE(core.TakeEvents().empty());
}

}  // namespace
}  // namespace dgpu::core
