#include "scheduler/watch_hub.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dgpu::scheduler {
namespace {

constexpr core::TimeMicros kSec = core::kMicrosPerSecond;

// Records what the hub sends; can be made to refuse (a client gone).
class RecordingSink : public WatchSink {
 public:
  bool Send(const std::shared_ptr<const std::string>& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse_) return false;
    text_ += *text;
    return true;
  }
  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }
  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  void Refuse() {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_ = true;
  }
  // The "event: X" names in the order received.
  std::vector<std::string> Events() {
    std::vector<std::string> out;
    const std::string t = text();
    for (size_t at = t.find("event: "); at != std::string::npos; at = t.find("event: ", at + 1)) {
      out.push_back(t.substr(at + 7, t.find('\n', at) - at - 7));
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::string text_;
  bool refuse_ = false;
  bool closed_ = false;
};

template <typename F>
bool Eventually(F f) {
  for (int i = 0; i < 400; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

std::vector<core::GpuInfo> Gpus(int n) {
  std::vector<core::GpuInfo> gpus;
  gpus.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) gpus.push_back({i, "A100", 40960, "", true, ""});
  return gpus;
}

core::TaskSpec Spec() {
  core::TaskSpec s;
  s.command = "true";
  s.priority = core::Priority::kHigh;
  s.gpu_count = 1;
  return s;
}

class WatchHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(core_.SetOnlinePercent(1.0, now_).ok());
    ASSERT_TRUE(core_.RegisterNode("n1", "", Gpus(4), {}, {}, now_).ok());
    Pass();
  }
  // Hands the core's changes and events since the last call to the hub, as the loop does.
  void Pass(WatchHub* hub = nullptr) {
    core_.Schedule(now_);
    core_.TakeDecisions();
    auto changes = core_.TakeChanges();
    auto events = core_.TakeEvents();
    if (hub != nullptr) hub->OnPass(core_, {}, changes, events, 0, now_);
  }
  core::TaskNumber Submit(WatchHub* hub) {
    auto n = core_.Submit(Spec(), now_);
    EXPECT_TRUE(n.ok());
    Pass(hub);
    return *n;
  }

  core::SchedulerCore core_;
  core::TimeMicros now_ = 100 * kSec;
};

TEST_F(WatchHubTest, AWatcherGetsASyncThenEveryChangeOnce) {
  WatchHub hub;
  hub.Start();
  auto sink = std::make_shared<RecordingSink>();
  hub.Add(sink, std::nullopt);
  ASSERT_TRUE(Eventually([&] { return !sink->Events().empty(); }));
  EXPECT_EQ(sink->Events(), std::vector<std::string>{"sync"});
  Submit(&hub);  // Submitted and placed in one pass: one task event, one node event.
  ASSERT_TRUE(Eventually([&] { return sink->Events().size() == 3; }));
  EXPECT_EQ(sink->Events(), (std::vector<std::string>{"sync", "task", "node"}));
  const std::string text = sink->text();
  EXPECT_NE(text.find(R"("status":"running")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("free_gpus":3)"), std::string::npos) << text;
  EXPECT_EQ(hub.watchers(), 1U);
  hub.Stop();
  EXPECT_TRUE(sink->closed());
}

TEST_F(WatchHubTest, ResumingReplaysWhatIsKeptAndResetsWhatIsNot) {
  WatchOptions options;
  options.history = 3;
  WatchHub hub(options);
  hub.Start();
  auto first = std::make_shared<RecordingSink>();
  hub.Add(first, std::nullopt);
  ASSERT_TRUE(Eventually([&] { return !first->Events().empty(); }));
  const uint64_t start = hub.last_seq();
  for (int i = 0; i < 3; ++i) Submit(&hub);  // 6 events: task and node each.
  ASSERT_TRUE(Eventually([&] { return first->Events().size() == 7; }));
  EXPECT_EQ(hub.last_seq(), start + 6);

  auto kept = std::make_shared<RecordingSink>();  // The last 3 are kept: after start + 3.
  hub.Add(kept, start + 3);
  ASSERT_TRUE(Eventually([&] { return kept->Events().size() == 4; }));
  EXPECT_EQ(kept->Events(), (std::vector<std::string>{"node", "task", "node", "sync"}));
  EXPECT_EQ(kept->text().rfind("id: " + std::to_string(start + 4) + "\n", 0), 0U) << kept->text();

  auto old = std::make_shared<RecordingSink>();
  hub.Add(old, start + 2);
  auto future = std::make_shared<RecordingSink>();
  hub.Add(future, start + 7);
  ASSERT_TRUE(Eventually([&] { return !old->Events().empty() && !future->Events().empty(); }));
  EXPECT_EQ(old->Events(), std::vector<std::string>{"reset"});
  EXPECT_NE(old->text().find("no longer kept"), std::string::npos) << old->text();
  EXPECT_EQ(future->Events(), std::vector<std::string>{"reset"});
  EXPECT_NE(future->text().find("not from this scheduler process"), std::string::npos);
}

TEST_F(WatchHubTest, AGoneWatcherIsDroppedAndNothingIsRecordedWhenNobodyWatches) {
  WatchOptions options;
  options.keep_recording = std::chrono::milliseconds(0);
  WatchHub hub(options);
  hub.Start();
  auto sink = std::make_shared<RecordingSink>();
  hub.Add(sink, std::nullopt);
  ASSERT_TRUE(Eventually([&] { return !sink->Events().empty(); }));
  const uint64_t before = hub.last_seq();
  sink->Refuse();
  Submit(&hub);
  ASSERT_TRUE(Eventually([&] { return hub.watchers() == 0; }));
  EXPECT_TRUE(sink->closed());
  const uint64_t after = hub.last_seq();
  EXPECT_EQ(after, before + 2);
  Submit(&hub);  // Nobody watches: nothing is numbered.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(hub.last_seq(), after);
  // A watcher resuming across the gap is told to list again.
  auto back = std::make_shared<RecordingSink>();
  hub.Add(back, after);
  ASSERT_TRUE(Eventually([&] { return !back->Events().empty(); }));
  EXPECT_EQ(back->Events(), std::vector<std::string>{"reset"});
}

TEST_F(WatchHubTest, KeepalivesFlowWhileNothingHappens) {
  WatchOptions options;
  options.keepalive = std::chrono::milliseconds(20);
  WatchHub hub(options);
  hub.Start();
  auto sink = std::make_shared<RecordingSink>();
  hub.Add(sink, std::nullopt);
  ASSERT_TRUE(
      Eventually([&] { return sink->text().find(": keepalive\n\n") != std::string::npos; }));
}

TEST_F(WatchHubTest, AHugeBatchIsOneReset) {
  WatchOptions options;
  options.max_batch_tasks = 4;
  WatchHub hub(options);
  hub.Start();
  auto sink = std::make_shared<RecordingSink>();
  hub.Add(sink, std::nullopt);
  ASSERT_TRUE(Eventually([&] { return !sink->Events().empty(); }));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(core_.Submit(Spec(), now_).ok());
  Pass(&hub);
  ASSERT_TRUE(Eventually([&] { return sink->Events().size() >= 2; }));
  EXPECT_EQ(sink->Events()[1], "reset");
  EXPECT_NE(sink->text().find("one batch changed"), std::string::npos) << sink->text();
}

}  // namespace
}  // namespace dgpu::scheduler
