// WorkerPool: a few threads that run posted jobs, for work that must stay off the CoreLoop's
// owner thread (reads of stored tasks, state.json, a standby's initial snapshot).
//
// Jobs run in the order posted (with one thread, one after the other). Stop() runs what is
// queued, then joins; a job posted after Stop is dropped. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dgpu::scheduler {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Post(std::function<void()> job);
  // Idempotent; not from one of the pool's own jobs.
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                   // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace dgpu::scheduler
