// AgentSession: the agent's connection to the schedulers and its main loop.
//
// One owner thread runs Run(): it polls the executor (so tasks are watched whether or not a
// scheduler is reachable), keeps finishes in the on-disk outbox until a scheduler acknowledges
// them, and talks to the leader:
//   - register (GPUs, running tasks with their GPUs, unacknowledged finishes, highest epoch);
//   - keep one Heartbeat stream open, heartbeating every heartbeat_interval; tasks and stop
//     orders pushed on it are applied at once (a reader thread hands them over), and each start
//     is confirmed on it at once with the time the task was spawned (kept and sent again on the
//     next connection when the stream is down);
//   - report each finish with TaskFinished until acknowledged (ALREADY_EXISTS counts as
//     acknowledged: the scheduler recorded it before). A finish is reported the moment the
//     executor sees it, while it is being written to the outbox: the reports are asynchronous,
//     so neither the outbox's fsync nor the scheduler's commit holds up the loop, and the
//     scheduler can give the GPUs to the next task in the meantime. A finish that is in neither
//     place when the agent crashes is treated by the scheduler as a lost task, exactly as if the
//     agent had crashed just before the exit;
//   - on any failure, reconnect with exponential backoff and jitter from retry_interval to
//     max_retry_interval, alternating master and standby addresses, following whichever answers
//     as leader; orders from an epoch lower than the highest seen are ignored.
// The loop sleeps until something happens: an order arrives on the stream, a report completes,
// Wake() is called (main() calls it on SIGCHLD, so a task's exit is seen at once; the GPU monitor
// when a GPU's health changes), an adopted task's shim ends (its pidfd), or the next thing that
// is due: a heartbeat, a reconnection, a retry, the retention sweep, a task's timeout or kill.
// An idle agent wakes for its heartbeats only (NextWake).
// Stop() (from a signal handler thread) ends Run(): tasks are stopped and reported, or left
// running when keep_tasks_on_exit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "agent/finish_outbox.h"
#include "agent/gpu_discovery.h"
#include "agent/gpu_monitor.h"
#include "common/config.h"
#include "common/tls_files.h"

namespace grpc {
class Status;
}  // namespace grpc

namespace dgpu::v1 {
class HeartbeatResponse;
}

namespace dgpu::agent {

class AgentSession {
 public:
  // `highest_epoch` is the one stored in the work directory (agent/epoch_file.h).
  AgentSession(common::AgentConfig config, std::string agent_id, std::unique_ptr<GpuDiscovery> gpus,
               std::unique_ptr<Executor> executor, FinishOutbox outbox, uint64_t highest_epoch);
  ~AgentSession();

  // Runs until Stop(). Returns the process exit code.
  int Run();
  // Thread-safe.
  void Stop() {
    stop_.store(true);
    waker_.Wake();
  }
  // Thread-safe: makes the loop run now (e.g. a child process has exited).
  void Wake() { waker_.Wake(); }
  // Sent with every registration (LoadOrCreateInstanceId); before Run.
  void SetInstanceId(std::string id) { instance_id_ = std::move(id); }
  // What the executor enforces (cgroup_v2, cgroup_v1 or none), reported at registration.
  void SetIsolation(std::string isolation) { isolation_ = std::move(isolation); }
  // The tasks the executor re-attached to (Executor::Reattach): reported as running when the
  // agent registers, so the scheduler keeps them where they run. Before Run.
  void AdoptTasks(const std::vector<HeldTask>& tasks);
  // scheduler.tls, checked (tls_files.h): gRPC over TLS; nullopt: plain text. Before Run.
  void SetTls(std::optional<common::TlsMaterial> tls) { tls_ = std::move(tls); }

  // Wakes the owner thread from other threads (an eventfd).
  class Waker {
   public:
    Waker();
    ~Waker();
    Waker(const Waker&) = delete;
    Waker& operator=(const Waker&) = delete;
    void Wake();
    // Sleeps until Wake() (since the last Wait), one of `fds` is readable, or `timeout`.
    void Wait(std::chrono::milliseconds timeout, const std::vector<int>& fds = {});

   private:
    int fd_ = -1;
  };

 private:
  struct Connection;
  struct Report;

  bool Connect();  // Registers with the next address; true on success.
  void Disconnect(const std::string& why);
  void HandleInbound();  // Applies what the reader thread received.
  // Answers a message's LogRequests with one message of LogChunks (task_log.h).
  // executor.retention: notes the running tasks (owner thread), then finds and removes old task
  // files on another thread,
  // at start and then every retention / 10 (between 1 s and an hour).
  void SweepTaskFiles(int64_t now);
  void ServeLogs(const dgpu::v1::HeartbeatResponse& m);
  static constexpr int32_t kMaxLogChunkBytes = 1 << 20;
  void SendHeartbeat(int64_t now);
  // Sends TaskFinished for each exit not already in flight (asynchronously).
  void SendReports(const std::vector<TaskExit>& exits);
  // Sends what the outbox holds and is not in flight, unless a failure put off retries.
  void RetryReports(int64_t now, bool force);
  // Applies the answers that arrived: acknowledged exits leave the outbox.
  void HandleReportResults(int64_t now);
  // The outbox's pending exits, then those not persisted yet.
  std::vector<TaskExit> UndeliveredFinishes() const;
  // Persists exits in the outbox; those that cannot be persisted now wait in unpersisted_.
  void PersistFinishes(const std::vector<TaskExit>& exits);
  void PersistFinish(const TaskExit& exit);
  // Tries the exits in unpersisted_ again, at most once a second.
  void RetryPersist(int64_t now);
  // A scheduler has the finish of run `run` of `task_id` (0: of whatever run is pending): it
  // leaves the outbox (or unpersisted_). A pending finish of another run stays.
  void ForgetFinish(const std::string& task_id, int run);
  // Waits (bounded) until no report is in flight, then applies the answers.
  void DrainReports(std::chrono::milliseconds timeout);
  void StartTask(const std::string& task_id, const TaskLaunch& launch, uint64_t epoch);
  // Applies a message's StopOrders, then its cancel_task_ids that have none (as cancels with
  // the configured grace period).
  void ApplyStops(const dgpu::v1::HeartbeatResponse& m);
  void StopTask(const std::string& task_id, const StopOrder& order, uint64_t epoch);
  // Confirms the starts not yet confirmed on the stream, in one message.
  void SendStarts();
  void ReportRefusal(const TaskLaunch& launch, const std::string& why);
  // Fails for an epoch lower than the highest seen, and for a higher one that cannot be stored.
  Status AcceptEpoch(uint64_t epoch);
  void Shutdown();
  // How long the loop may sleep from `now` (monotonic micros): until the earliest thing due.
  std::chrono::milliseconds NextWake(int64_t now) const;
  // agent.stop_tasks_after_disconnect: stops every task once no scheduler answered for that
  // long (once per disconnection).
  void StopTasksIfCutOff(int64_t now);
  void Contact(int64_t now) {
    last_contact_ = now;
    stopped_for_disconnect_ = false;
  }

  common::AgentConfig config_;
  // What the node offers its tasks besides GPUs (read once, at the start of Run).
  std::string isolation_ = "none";  // What the executor enforces: cgroup_v2, cgroup_v1, none.
  int64_t offered_cpus_milli_ = 0;
  int64_t offered_memory_mb_ = 0;
  std::string agent_id_;
  std::string instance_id_;
  std::optional<common::TlsMaterial> tls_;
  // What to check when a connection failed in a way TLS set-up explains; "" otherwise.
  std::string TransportHint(const grpc::Status& s) const;
  // GPU metrics and health, refreshed on the monitor's own thread (gpu_monitor.h).
  std::unique_ptr<GpuMonitor> gpus_;
  std::unique_ptr<Executor> executor_;
  FinishOutbox outbox_;
  std::vector<GpuDevice> devices_;  // The monitor's latest, as last sent.
  uint64_t health_generation_ = 0;  // Of devices_: a newer one is reported at once.
  // devices_ and health_generation_ from the monitor's latest.
  void TakeGpuSnapshot();
  struct RunningRun {
    std::vector<int> gpu_indices;
    int run = 0;  // TaskLaunch::run.
  };
  std::map<std::string, RunningRun> task_gpus_;  // Running task -> its GPU indices and run.
  struct StartReport {
    std::string task_id;
    int64_t started_at_micros = 0;
    int run = 0;
  };
  std::vector<StartReport> unreported_starts_;
  std::unique_ptr<Connection> conn_;
  std::vector<std::string> addresses_;
  size_t next_address_ = 0;
  int failures_ = 0;
  int64_t next_attempt_ = 0;
  int64_t next_heartbeat_ = 0;
  // The last time a scheduler answered (a registration, a message on the stream), monotonic
  // micros; and whether the tasks were stopped since, for agent.stop_tasks_after_disconnect.
  int64_t last_contact_ = 0;
  bool stopped_for_disconnect_ = false;
  int64_t next_finish_retry_ = 0;
  int64_t next_persist_retry_ = 0;
  int64_t next_sweep_ = 0;
  std::future<void> sweep_;                      // The removal under way, if any.
  std::map<std::string, TaskExit> unpersisted_;  // Finishes the outbox could not take yet.
  uint64_t highest_epoch_ = 0;
  uint64_t connection_generation_ = 0;  // Counts connections; reports remember theirs.
  std::mt19937_64 rng_;
  std::atomic<bool> stop_{false};
  Waker waker_;

  std::map<std::string, std::unique_ptr<Report>> reports_in_flight_;  // Owner thread only.
  std::mutex report_mu_;
  std::condition_variable report_cv_;
  std::vector<Report*> report_results_;  // GUARDED_BY(report_mu_): answered, not yet applied.
};

}  // namespace dgpu::agent
