// The owner thread: posted functions run in order on one thread, every batch ends with a pass
// whose decisions are dispatched, OnDurable callbacks run once the journal committed (or failed),
// timers fire, and Stop runs what is queued.
#include "scheduler/core_loop.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/database.h"

namespace dgpu::scheduler {
namespace {

using namespace std::chrono_literals;

class RecordingDispatcher : public Dispatcher {
 public:
  void Dispatch(const core::SchedulerCore&, const std::vector<core::Decision>& d) override {
    std::lock_guard<std::mutex> lock(mu);
    decisions.insert(decisions.end(), d.begin(), d.end());
  }
  std::vector<core::Decision> Taken() {
    std::lock_guard<std::mutex> lock(mu);
    return decisions;
  }
  std::mutex mu;
  std::vector<core::Decision> decisions;
};

class PassObserver : public BatchObserver {
 public:
  void OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>&,
              const std::vector<core::Change>&, const std::vector<core::Event>&, double,
              core::TimeMicros) override {
    passes_seen.push_back(core.stats().passes);
  }
  // The core's pass count at each batch's end. Owner thread only; read through RunAndWait.
  std::vector<uint64_t> passes_seen;
};

core::TaskSpec HighTask() {
  core::TaskSpec s;
  s.command = "true";
  s.priority = core::Priority::kHigh;
  return s;
}

std::vector<core::GpuInfo> Gpus(int n) {
  std::vector<core::GpuInfo> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back({i, "A100", 40960, "", true, ""});
  return gpus;
}

class CoreLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "dgpu-loop-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    auto db = store::Database::Open(dir_, /*fsync=*/false);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
    journal_ = std::make_unique<store::Journal>(db_.get(), 0);
    loop_ = std::make_unique<CoreLoop>(std::make_unique<core::SchedulerCore>(), journal_.get(),
                                       &dispatcher_, &observer_, &clock_);
  }
  void TearDown() override {
    loop_.reset();
    journal_.reset();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<store::Journal> journal_;
  RecordingDispatcher dispatcher_;
  PassObserver observer_;
  common::FakeClock clock_{1'000'000'000};
  std::unique_ptr<CoreLoop> loop_;
};

TEST_F(CoreLoopTest, PostedFunctionsRunInOrderOnOneThreadThatIsNotTheCaller) {
  loop_->Start();
  constexpr int kPosts = 200;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < kPosts; ++i) {
    loop_->Post([&, i](CoreLoop::Context&) {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  loop_->RunAndWait([](CoreLoop::Context&) {});
  ASSERT_EQ(order.size(), static_cast<size_t>(kPosts));
  for (int i = 0; i < kPosts; ++i) EXPECT_EQ(order[i], i);
  for (const auto& id : threads) EXPECT_EQ(id, threads.front());
  EXPECT_NE(threads.front(), std::this_thread::get_id());
}

TEST_F(CoreLoopTest, EveryBatchEndsWithAPassWhoseStartsAreDispatched) {
  loop_->Start();
  core::TaskNumber task = 0;
  size_t batches_before = 0;
  loop_->RunAndWait([&](CoreLoop::Context& c) {
    batches_before = observer_.passes_seen.size();
    ASSERT_TRUE(c.core.RegisterNode("n1", "n1:1", Gpus(2), {}, {}, c.now).ok());
    auto submitted = c.core.Submit(HighTask(), c.now);
    ASSERT_TRUE(submitted.ok());
    task = *submitted;
    EXPECT_EQ(c.now, clock_.NowMicros());
  });
  // The next batch runs after the previous one's pass.
  std::vector<uint64_t> passes;
  loop_->RunAndWait([&](CoreLoop::Context&) { passes = observer_.passes_seen; });
  ASSERT_GT(passes.size(), batches_before);
  EXPECT_EQ(passes[batches_before], 1u);
  std::vector<core::Decision> decisions = dispatcher_.Taken();
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].kind, core::Decision::Kind::kStart);
  EXPECT_EQ(decisions[0].task, task);
  EXPECT_EQ(decisions[0].node_id, "n1");
  EXPECT_EQ(decisions[0].gpu_indices, std::vector<int>{0});
}

TEST_F(CoreLoopTest, NoPassAndNoDispatchWhileTheGateSaysNo) {
  loop_->SetActingGate([] { return false; });
  loop_->Start();
  loop_->RunAndWait([&](CoreLoop::Context& c) {
    ASSERT_TRUE(c.core.RegisterNode("n1", "n1:1", Gpus(2), {}, {}, c.now).ok());
    ASSERT_TRUE(c.core.Submit(HighTask(), c.now).ok());
  });
  std::vector<uint64_t> passes;
  loop_->RunAndWait([&](CoreLoop::Context&) { passes = observer_.passes_seen; });
  ASSERT_FALSE(passes.empty());
  for (uint64_t p : passes) EXPECT_EQ(p, 0u);
  EXPECT_TRUE(dispatcher_.Taken().empty());
}

TEST_F(CoreLoopTest, OnDurableRunsAfterTheCommitWithItsStatus) {
  loop_->Start();
  std::promise<std::pair<Status, bool>> durable;  // The status, and whether the row was stored.
  loop_->Post([&](CoreLoop::Context& c) {
    auto task = c.core.Submit(HighTask(), c.now);
    ASSERT_TRUE(task.ok());
    c.OnDurable([&, id = *task](Status s) {
      auto stored = db_->GetTask(id);
      durable.set_value({s, stored.ok() && stored->has_value()});
    });
  });
  auto [status, stored] = durable.get_future().get();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(stored);
}

TEST_F(CoreLoopTest, OnDurableGetsTheJournalsError) {
  loop_->Start();
  loop_->RunAndWait([&](CoreLoop::Context&) { journal_->Shutdown(); });
  std::promise<Status> durable;
  loop_->Post([&](CoreLoop::Context& c) {
    ASSERT_TRUE(c.core.Submit(HighTask(), c.now).ok());
    c.OnDurable([&](Status s) { durable.set_value(s); });
  });
  Status status = durable.get_future().get();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
}

TEST_F(CoreLoopTest, TimersFireRepeatedlyOnTheOwnerThread) {
  std::atomic<int> fired{0};
  std::promise<std::thread::id> timer_thread;
  loop_->AddTimer(10ms, [&](CoreLoop::Context&) {
    if (++fired == 1) timer_thread.set_value(std::this_thread::get_id());
  });
  loop_->Start();
  std::thread::id loop_thread;
  loop_->RunAndWait([&](CoreLoop::Context&) { loop_thread = std::this_thread::get_id(); });
  EXPECT_EQ(timer_thread.get_future().get(), loop_thread);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (fired < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_GE(fired.load(), 3);
}

TEST_F(CoreLoopTest, StopRunsEverythingPostedBeforeIt) {
  loop_->Start();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  loop_->Post([released](CoreLoop::Context&) { released.wait(); });
  constexpr int kQueued = 50;
  int ran = 0;
  for (int i = 0; i < kQueued; ++i) loop_->Post([&](CoreLoop::Context&) { ++ran; });
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    release.set_value();
  });
  loop_->Stop();
  releaser.join();
  EXPECT_EQ(ran, kQueued);
  loop_->Stop();  // Idempotent.
  EXPECT_EQ(ran, kQueued);
}

}  // namespace
}  // namespace dgpu::scheduler
