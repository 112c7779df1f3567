// AgentSession: the agent's connection to the schedulers and its main loop.
//
// One owner thread runs Run(): it polls the executor (so tasks are watched whether or not a
// scheduler is reachable), keeps finishes in the on-disk outbox until a scheduler acknowledges
// them, and talks to the leader:
//   - register (GPUs, running tasks with their GPUs, unacknowledged finishes, highest epoch);
//   - keep one Heartbeat stream open, heartbeating every heartbeat_interval; tasks and
//     cancellations pushed on it are applied at once (a reader thread hands them over);
//   - report each finish with TaskFinished until acknowledged (ALREADY_EXISTS counts as
//     acknowledged: the scheduler recorded it before);
//   - on any failure, reconnect with exponential backoff and jitter from retry_interval to
//     max_retry_interval, alternating master and standby addresses, following whichever answers
//     as leader; orders from an epoch lower than the highest seen are ignored.
// Stop() (from a signal handler thread) ends Run(): tasks are stopped and reported, or left
// running when keep_tasks_on_exit.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "agent/finish_outbox.h"
#include "agent/gpu_discovery.h"
#include "common/config.h"

namespace dgpu::agent {

class AgentSession {
 public:
  AgentSession(common::AgentConfig config, std::string agent_id, std::unique_ptr<GpuDiscovery> gpus,
               std::unique_ptr<Executor> executor, FinishOutbox outbox);
  ~AgentSession();

  // Runs until Stop(). Returns the process exit code.
  int Run();
  // Thread-safe.
  void Stop() { stop_.store(true); }

 private:
  struct Connection;

  bool Connect();                       // Registers with the next address; true on success.
  void Disconnect(const std::string& why);
  void HandleInbound();                 // Applies what the reader thread received.
  void SendHeartbeat(int64_t now);
  void ReportFinishes(int64_t now, bool force);
  void StartTask(const std::string& task_id, const TaskLaunch& launch, uint64_t epoch);
  void ReportRefusal(const std::string& task_id, const std::string& why);
  bool AcceptEpoch(uint64_t epoch);     // False if lower than the highest seen.
  void PersistEpoch();
  void Shutdown();

  common::AgentConfig config_;
  std::string agent_id_;
  std::unique_ptr<GpuDiscovery> gpus_;
  std::unique_ptr<Executor> executor_;
  FinishOutbox outbox_;
  std::vector<GpuDevice> devices_;                       // Last discovery.
  std::map<std::string, std::vector<int>> task_gpus_;    // Running task -> GPU indices.
  std::unique_ptr<Connection> conn_;
  std::vector<std::string> addresses_;
  size_t next_address_ = 0;
  int failures_ = 0;
  int64_t next_attempt_ = 0;
  int64_t next_heartbeat_ = 0;
  int64_t next_finish_retry_ = 0;
  uint64_t highest_epoch_ = 0;
  std::mt19937_64 rng_;
  std::atomic<bool> stop_{false};
};

}  // namespace dgpu::agent
