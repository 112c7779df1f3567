// LogRelay: reads of task logs from the agents that hold them (GET /api/v1/tasks/{id}/logs).
//
// A read is one LogRequest pushed on the agent's Heartbeat stream and answered by one LogChunk
// on the same stream (scheduler.proto), matched by request id. No stream open to the agent, or no
// answer within the timeout (an agent that predates logs ignores the request), fails the read as
// unavailable; an agent without the log answers a piece whose `missing` says so. Thread-safe;
// `done` runs on a gRPC thread, or on the relay's timer thread for a timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "dgpu/v1/scheduler.pb.h"
#include "scheduler/application.h"

namespace dgpu::scheduler {

class LogRelay {
 public:
  using Done = std::function<void(const Result<LogPiece>&)>;
  // Writes a message on an agent's open stream; false when it has none (AgentHub::SendIfOpen).
  using SendFn = std::function<bool(const std::string& agent_id, dgpu::v1::HeartbeatResponse)>;

  explicit LogRelay(SendFn send, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~LogRelay();  // Fails what is pending as unavailable.
  LogRelay(const LogRelay&) = delete;
  LogRelay& operator=(const LogRelay&) = delete;

  void Read(const LogRead& read, Done done);
  // An answer from `agent_id`'s stream; one it did not ask for is ignored.
  void Deliver(const std::string& agent_id, const dgpu::v1::LogChunk& chunk);

 private:
  struct Pending {
    std::string agent_id;
    std::string task_id;
    std::chrono::steady_clock::time_point deadline;
    Done done;
  };
  void Expire();

  const SendFn send_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Pending> pending_;  // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                 // GUARDED_BY(mu_)
  bool stopping_ = false;                // GUARDED_BY(mu_)
  std::thread timer_;
};

}  // namespace dgpu::scheduler
