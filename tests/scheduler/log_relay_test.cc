#include "scheduler/log_relay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <vector>

namespace dgpu::scheduler {
namespace {

using dgpu::v1::HeartbeatResponse;
using dgpu::v1::LogChunk;

// Records what the relay writes to agents; `open` says whether an agent has a stream.
struct FakeAgents {
  std::mutex mu;
  std::vector<std::pair<std::string, HeartbeatResponse>> sent;
  bool open = true;

  LogRelay::SendFn Send() {
    return [this](const std::string& agent, HeartbeatResponse msg) {
      std::lock_guard<std::mutex> lock(mu);
      if (!open) return false;
      sent.emplace_back(agent, std::move(msg));
      return true;
    };
  }
};

struct Answer {
  std::promise<Result<LogPiece>> promise;
  std::future<Result<LogPiece>> future = promise.get_future();
  LogRelay::Done Done() {
    return [this](const Result<LogPiece>& r) { promise.set_value(r); };
  }
  Result<LogPiece> Get() {
    EXPECT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    return future.get();
  }
};

TEST(LogRelayTest, ARequestGoesToTheNodeAndItsChunkIsTheAnswer) {
  FakeAgents agents;
  LogRelay relay(agents.Send());
  Answer answer;
  relay.Read({"node-a", "task-7", 10, 0, 4096}, answer.Done());
  ASSERT_EQ(agents.sent.size(), 1u);
  EXPECT_EQ(agents.sent[0].first, "node-a");
  ASSERT_EQ(agents.sent[0].second.log_requests_size(), 1);
  const auto& request = agents.sent[0].second.log_requests(0);
  EXPECT_EQ(request.task_id(), "task-7");
  EXPECT_EQ(request.offset(), 10);
  EXPECT_EQ(request.max_bytes(), 4096);

  LogChunk chunk;
  chunk.set_request_id(request.request_id());
  chunk.set_found(true);
  chunk.set_offset(10);
  chunk.set_data("hello\n");
  chunk.set_size(16);
  relay.Deliver("node-b", chunk);  // Another node's answer to this id is not taken.
  EXPECT_EQ(answer.future.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  relay.Deliver("node-a", chunk);
  Result<LogPiece> r = answer.Get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().offset, 10);
  EXPECT_EQ(r.value().data, "hello\n");
  EXPECT_EQ(r.value().size, 16);
  relay.Deliver("node-a", chunk);  // A second answer is ignored.
}

TEST(LogRelayTest, NoLogIsSaidAndNoStreamOrNoAnswerIsLogUnavailable) {
  FakeAgents agents;
  LogRelay relay(agents.Send(), std::chrono::milliseconds(100));

  Answer missing;
  relay.Read({"node-a", "task-1", 0, 0, 10}, missing.Done());
  LogChunk chunk;
  chunk.set_request_id(agents.sent.back().second.log_requests(0).request_id());
  chunk.set_error("No such file or directory");
  relay.Deliver("node-a", chunk);
  Result<LogPiece> r = missing.Get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().missing, "node node-a holds no log of task-1 (No such file or directory)");
  EXPECT_EQ(r.value().data, "");

  Answer silent;
  const auto start = std::chrono::steady_clock::now();
  relay.Read({"node-a", "task-2", 0, 0, 10}, silent.Done());
  r = silent.Get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kLogUnavailable);
  EXPECT_EQ(r.error().message, "node node-a did not answer for the log within 100 ms");
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));

  agents.open = false;
  Answer closed;
  relay.Read({"node-b", "task-3", 0, 0, 10}, closed.Done());
  r = closed.Get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "node node-b, which holds the log of task-3, is not connected");
}

TEST(LogRelayTest, WhatIsPendingFailsWhenTheRelayStops) {
  FakeAgents agents;
  Answer answer;
  {
    LogRelay relay(agents.Send());
    relay.Read({"node-a", "task-1", 0, 0, 10}, answer.Done());
  }
  Result<LogPiece> r = answer.Get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kLogUnavailable);
}

}  // namespace
}  // namespace dgpu::scheduler
