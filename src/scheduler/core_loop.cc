#include "scheduler/core_loop.h"

#include <future>

#include "scheduler/task_history.h"

namespace dgpu::scheduler {

CoreLoop::CoreLoop(std::unique_ptr<core::SchedulerCore> core, store::Journal* journal,
                   Dispatcher* dispatcher, BatchObserver* observer, const common::Clock* clock)
    : core_(std::move(core)),
      journal_(journal),
      dispatcher_(dispatcher),
      observer_(observer),
      clock_(clock) {}

CoreLoop::~CoreLoop() { Stop(); }

void CoreLoop::AddTimer(std::chrono::milliseconds interval, Fn fn) {
  timers_.push_back({{interval, std::move(fn)}, std::chrono::steady_clock::now() + interval});
}

void CoreLoop::ReplaceCore(std::unique_ptr<core::SchedulerCore> core) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_core_ = std::move(core);
  }
  Post([](Context&) {});
}

void CoreLoop::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void CoreLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;  // Idempotent: a second Stop finds the thread joined.
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CoreLoop::Post(Fn fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void CoreLoop::RunAndWait(Fn fn) {
  std::promise<void> done;
  Post([&](Context& ctx) {
    fn(ctx);
    done.set_value();
  });
  done.get_future().wait();
}

void CoreLoop::Loop() {
  std::vector<Fn> batch;
  for (;;) {
    bool timers_due = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      for (const auto& t : timers_) next = std::min(next, t.next);
      cv_.wait_until(lock, next, [&] { return stopping_ || !queue_.empty(); });
      batch.swap(queue_);
      if (stopping_ && batch.empty()) break;
      timers_due = std::chrono::steady_clock::now() >= next;
    }
    RunBatch(batch, timers_due);
    batch.clear();
  }
}

void CoreLoop::RunBatch(std::vector<Fn>& batch, bool run_timers) {
  Context ctx(*core_, clock_->NowMicros(), *journal_);
  for (auto& fn : batch) fn(ctx);
  if (run_timers) {
    auto now = std::chrono::steady_clock::now();
    for (auto& t : timers_) {
      if (now < t.next) continue;
      t.timer.fn(ctx);
      t.next = now + t.timer.interval;
    }
  }
  const bool acting = !may_act_ || may_act_();
  auto start = std::chrono::steady_clock::now();
  if (acting) core_->Schedule(ctx.now);
  double pass_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<core::Decision> decisions = core_->TakeDecisions();
  // Not acting: orders are dropped; agents are reconciled when they register with the leader.
  if (!decisions.empty() && acting) dispatcher_->Dispatch(*core_, decisions);
  std::vector<core::Change> changes = core_->TakeChanges();
  std::vector<core::Event> events = core_->TakeEvents();
  // Each task's history is stored (and replicated) with the changes of the same batch.
  AppendTaskHistory(*core_, events, &changes);
  if (observer_ != nullptr) {
    observer_->OnPass(*core_, decisions, changes, events, pass_seconds, ctx.now);
  }

  // Finished tasks leave memory once durable: history is served from the database.
  std::vector<core::TaskNumber> finished;
  for (const auto& c : changes) {
    if (c.kind == core::Change::Kind::kTaskUpsert && core::IsFinished(c.task.status) &&
        !c.task.stopping) {
      finished.push_back(c.task.id);
    }
  }
  if (!changes.empty() || !ctx.callbacks_.empty()) {
    auto done = [this, cbs = std::move(ctx.callbacks_),
                 finished = std::move(finished)](const Status& s) mutable {
      for (auto& cb : cbs) cb(s);
      if (s.ok() && !finished.empty()) {
        Post([finished = std::move(finished)](Context& c) {
          for (auto id : finished) c.core.Forget(id);
        });
      }
    };
    if (replication_ == nullptr) {
      journal_->Append(std::move(changes), std::move(done));
    } else {
      // Acknowledged once durable here and, in sync mode, on the standby too. Only this thread
      // appends, so the batch's sequence number is the next one.
      ReplicationSink* rep = replication_;
      const uint64_t seq = journal_->stats().last_appended_seq + 1;
      std::vector<core::Change> published = changes;  // The standby gets the same batch.
      auto shared_done = std::make_shared<decltype(done)>(std::move(done));
      journal_->Append(std::move(changes), [rep, shared_done, seq](const Status& s) {
        if (!s.ok()) {
          (*shared_done)(s);
          return;
        }
        rep->WhenReplicated(seq, [shared_done](const Status& r) { (*shared_done)(r); });
      });
      rep->Publish(seq, published);
    }
  }
  std::unique_ptr<core::SchedulerCore> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next = std::move(next_core_);
  }
  if (next) core_ = std::move(next);
}

}  // namespace dgpu::scheduler
