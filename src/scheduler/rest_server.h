// The REST API on RESTinio (asio, keep-alive, a small thread pool). Handlers parse and validate
// on the HTTP threads, post the command to the CoreLoop and answer asynchronously: a write is
// answered once it is durable. A task the core no longer holds (finished and durable) is read
// from the database on a reader thread, never on the owner thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "scheduler/core_loop.h"
#include "scheduler/leader_state.h"
#include "scheduler/metrics.h"
#include "scheduler/worker_pool.h"
#include "store/database.h"
#include "store/journal.h"

namespace dgpu::scheduler {

struct RestDeps {
  CoreLoop* loop;
  LeaderState* leader;
  store::Database* db;
  WorkerPool* readers;  // Runs the reads of stored tasks, off the owner thread.
  store::Journal* journal;
  Metrics* metrics;
};

class RestServer {
 public:
  explicit RestServer(RestDeps deps);
  ~RestServer();
  // Binds host:port and starts `threads` HTTP threads. Unavailable if it cannot listen.
  Status Start(const std::string& host, uint16_t port, size_t threads);
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgpu::scheduler
