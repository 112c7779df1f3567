// state.json written within a deadline: a write that runs out of time stops, keeps the previous
// file, and says so; one that has time writes every task.
#include "scheduler/state_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../sanitizer_scale.h"
#include "../store/store_test_util.h"
#include "common/time_util.h"

namespace dgpu::scheduler {
namespace {

using store::testing::SimpleTask;
using store::testing::TempDir;
using store::testing::Upsert;

int64_t Now() { return common::SystemClock::Instance().MonotonicMicros(); }

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = store::Database::Open(dir_.path(), /*fsync=*/false);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
    std::vector<core::Change> changes;
    for (core::TaskNumber id = 1; id <= kTasks; ++id) {
      changes.push_back(Upsert(SimpleTask(id, core::TaskStatus::kPending)));
    }
    ASSERT_TRUE(db_->Apply(changes, 1).ok());
  }

  nlohmann::json ReadFile() const {
    std::ifstream in(dir_.path() + "/state.json");
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  }

  // Enough tasks that a write takes well over the 2 ms of the deadline test (a fifth under a
  // sanitizer, where each costs many times more).
  static constexpr core::TaskNumber kTasks = dgpu::testing::Scaled(20'000);
  TempDir dir_;
  std::unique_ptr<store::Database> db_;
  StateHeader header_;
};

TEST_F(StateFileTest, AWriteWithTimeWritesEveryTask) {
  const std::atomic<int64_t> deadline{Now() + 60'000'000};
  ASSERT_TRUE(WriteStateFile(dir_.path(), header_, *db_, &deadline).ok());
  const nlohmann::json j = ReadFile();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["tasks"].size(), kTasks);
  EXPECT_EQ(j["queues"]["low"].size(), kTasks);
}

TEST_F(StateFileTest, AWriteOutOfTimeStopsAndKeepsThePreviousFile) {
  ASSERT_TRUE(WriteStateFile(dir_.path(), header_, *db_).ok());
  const nlohmann::json before = ReadFile();

  const std::atomic<int64_t> passed{Now() - 1};
  Status s = WriteStateFile(dir_.path(), header_, *db_, &passed);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_EQ(ReadFile(), before);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/state.json.tmp"));
}

TEST_F(StateFileTest, ADeadlineSetWhileTheWriteRunsStopsItPartWay) {
  ASSERT_TRUE(WriteStateFile(dir_.path(), header_, *db_).ok());
  const nlohmann::json before = ReadFile();

  // Moved from "none" to "now" by another thread, as the shutdown does to a periodic write.
  std::atomic<int64_t> deadline{0};
  std::thread shutdown([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    deadline.store(Now());
  });
  const int64_t start = Now();
  Status s = WriteStateFile(dir_.path(), header_, *db_, &deadline);
  shutdown.join();
  const int64_t took = Now() - start;
  if (s.ok()) {
    // The whole write fitted in the 2 ms (a fast machine): nothing to stop.
    EXPECT_EQ(ReadFile()["tasks"].size(), kTasks);
    GTEST_SKIP() << "the write finished in " << took << " us, before the deadline was set";
  }
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_EQ(ReadFile(), before);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/state.json.tmp"));
}

TEST_F(StateFileTest, PeriodicWritesRestAsLongAsTheLastOneTook) {
  WorkerPool worker(1);
  StateFileWriter writer(dir_.path(), db_.get(), &worker);
  EXPECT_EQ(writer.last_write_micros(), 0);
  // A job holds the worker, so the first write is still to run when the second is asked.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  worker.Post([released] { released.wait(); });
  EXPECT_EQ(writer.Request(header_, Now()), StateFileWriter::Requested::kStarted);
  EXPECT_EQ(writer.Request(header_, Now()), StateFileWriter::Requested::kBusy);
  release.set_value();
  // Once written, the writer rests as long as the write took, then takes the next request.
  while (writer.last_write_micros() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int64_t took = writer.last_write_micros();
  const int64_t rest_until = writer.rest_until_micros();
  EXPECT_EQ(ReadFile()["tasks"].size(), kTasks);
  EXPECT_GT(took, 0);
  EXPECT_GE(rest_until - took, Now() - 60'000'000);  // The rest began as the write ended.
  EXPECT_LE(rest_until - took, Now());
  EXPECT_EQ(writer.Request(header_, rest_until - 1), StateFileWriter::Requested::kResting);
  EXPECT_EQ(writer.Request(header_, rest_until), StateFileWriter::Requested::kStarted);
  worker.Stop();
}

}  // namespace
}  // namespace dgpu::scheduler
