// CoreLoop: the one thread that owns the scheduling core.
//
// REST and gRPC threads never touch the core: they Post() a function, which runs on the owner
// thread with a Context. After each batch of posted functions (and due timers) the loop runs one
// scheduling pass, hands the pass's decisions to the Dispatcher at once, and appends the batch's
// changes to the journal in one group; callbacks registered with Context::OnDurable run (on the
// journal's writer thread) once those changes are durable, or with the storage error.
//
// Dispatch does not wait for durability: an agent may start a task whose start is not yet on
// disk. That is safe because a restarted scheduler reconciles with the agents: a reported task it
// holds as pending is adopted, and one it does not know is stopped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/time_util.h"
#include "core/scheduler_core.h"
#include "store/journal.h"

namespace dgpu::scheduler {

// Receives every decision of a pass, on the owner thread (it may read the core).
class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  virtual void Dispatch(const core::SchedulerCore& core,
                        const std::vector<core::Decision>& decisions) = 0;
};

// Observes what a batch did, on the owner thread (metrics, logs): its decisions, its durable
// changes and the core's events, in order.
class BatchObserver {
 public:
  virtual ~BatchObserver() = default;
  virtual void OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>& decisions,
                      const std::vector<core::Change>& changes,
                      const std::vector<core::Event>& events, double pass_seconds,
                      core::TimeMicros now) = 0;
};

// Several observers, called in the order given.
class BatchObservers final : public BatchObserver {
 public:
  explicit BatchObservers(std::vector<BatchObserver*> observers)
      : observers_(std::move(observers)) {}
  void OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>& decisions,
              const std::vector<core::Change>& changes, const std::vector<core::Event>& events,
              double pass_seconds, core::TimeMicros now) override {
    for (BatchObserver* o : observers_)
      o->OnPass(core, decisions, changes, events, pass_seconds, now);
  }

 private:
  std::vector<BatchObserver*> observers_;
};

// Replication of the change log to a standby (primary side). Called on the owner thread.
class ReplicationSink {
 public:
  virtual ~ReplicationSink() = default;
  // The batch appended to the journal with sequence number `seq`.
  virtual void Publish(uint64_t seq, const std::vector<core::Change>& changes) = 0;
  // Calls cb once the standby has acknowledged `seq` (at once when no standby counts).
  virtual void WhenReplicated(uint64_t seq, std::function<void(Status)> cb) = 0;
};

class CoreLoop {
 public:
  class Context {
   public:
    core::SchedulerCore& core;
    core::TimeMicros now;
    // Runs cb(status) once this batch's changes are durable (or failed to be).
    void OnDurable(std::function<void(Status)> cb) { callbacks_.push_back(std::move(cb)); }
    // The journal the batch's changes go to (for its health and statistics).
    const store::Journal& journal() const { return journal_; }

   private:
    friend class CoreLoop;
    Context(core::SchedulerCore& c, core::TimeMicros n, const store::Journal& j)
        : core(c), now(n), journal_(j) {}
    std::vector<std::function<void(Status)>> callbacks_;
    const store::Journal& journal_;
  };
  using Fn = std::function<void(Context&)>;

  struct Timer {
    std::chrono::milliseconds interval;
    Fn fn;
  };

  // Nothing is owned except the core; all pointers must outlive the loop.
  CoreLoop(std::unique_ptr<core::SchedulerCore> core, store::Journal* journal,
           Dispatcher* dispatcher, BatchObserver* observer, const common::Clock* clock);
  ~CoreLoop();

  // Optional hooks (before Start). `may_act` false: no scheduling pass and no dispatch (a
  // standby, or a leader whose lease may have lapsed).
  void SetReplication(ReplicationSink* sink) { replication_ = sink; }
  void SetActingGate(std::function<bool()> may_act) { may_act_ = std::move(may_act); }
  // Replaces the core after the current batch (promotion to leader). Thread-safe.
  void ReplaceCore(std::unique_ptr<core::SchedulerCore> core);

  // Adds a periodic function (before Start).
  void AddTimer(std::chrono::milliseconds interval, Fn fn);
  void Start();
  // Runs what is queued, then stops the thread. Idempotent.
  void Stop();

  // Thread-safe. Functions run in the order posted.
  void Post(Fn fn);
  // Runs fn on the owner thread and waits for it (for start-up and tests; not from the loop).
  void RunAndWait(Fn fn);

 private:
  void Loop();
  void RunBatch(std::vector<Fn>& batch, bool run_timers);

  std::unique_ptr<core::SchedulerCore> core_;
  std::unique_ptr<core::SchedulerCore> next_core_;  // GUARDED_BY(mu_)
  ReplicationSink* replication_ = nullptr;
  std::function<bool()> may_act_;
  store::Journal* journal_;
  Dispatcher* dispatcher_;
  BatchObserver* observer_;
  const common::Clock* clock_;

  struct TimerState {
    Timer timer;
    std::chrono::steady_clock::time_point next;
  };
  std::vector<TimerState> timers_;  // Owner thread only (after Start).

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Fn> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace dgpu::scheduler
