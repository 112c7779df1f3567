// The human-readable JSON snapshot of the scheduler state, snapshot_dir/state.json.
//
// Its keys (pretty-printed, 2-space indent, in this order): epoch, next_task_number, nodes,
// online_percent, queues ({"high": [task ids], "low": [...]}, each in queue order), quota, tasks
// (every unfinished task: pending, running, or cancelled and still stopping, in id order, as
// the REST API shows them) and written_at.
//
// Two sources, so that the owner thread never serialises the task table:
//   - what only memory knows (epoch, next task number, nodes, quotas, and the pending reasons
//     of the queue heads) is copied on the owner thread into a StateHeader, O(nodes + queues);
//   - queues and tasks are streamed, row by row, from one read snapshot of the database, on
//     another thread. A pending task that is not a queue head in the header shows `queued`.
// The database view is the durable state when the file is written: a batch still on its way
// to disk, and the nodes' view of it, may differ by the few batches in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "core/scheduler_core.h"
#include "scheduler/worker_pool.h"
#include "store/database.h"

namespace dgpu::scheduler {

struct StateHeader {
  core::TimeMicros written_at = 0;
  uint64_t epoch = 0;
  double online_percent = 0;
  core::TaskNumber next_task_number = 1;
  core::QuotaView quota;
  std::vector<core::NodeView> nodes;
  std::unordered_map<core::TaskNumber, core::PendingReason> head_reasons;
};

// Owner thread: the in-memory part of the file.
StateHeader TakeStateHeader(const core::SchedulerCore& core, uint64_t epoch, core::TimeMicros now);

// Writes `<dir>/state.json` atomically (temp file, fsync, rename) from `header` and one read
// snapshot of `db`. On error the previous file is untouched. `deadline`, when given and not 0,
// is a monotonic time in microseconds (common::Clock::MonotonicMicros) that it may be changed
// to at any time: once it has passed, the write stops and returns kDeadlineExceeded.
Status WriteStateFile(const std::string& dir, const StateHeader& header, store::Database& db,
                      const std::atomic<int64_t>* deadline = nullptr);

// The periodic writes: one at a time, on `worker`, and at most half of the time: after a write
// that took T, the next one begins no sooner than T after it ended. A write holds a read
// transaction for as long as it takes, which keeps SQLite from checkpointing the WAL past it;
// the rests let the WAL be checkpointed, so it stays bounded and reads stay fast however large
// the queue (and state.json) grows.
class StateFileWriter {
 public:
  StateFileWriter(std::string dir, store::Database* db, WorkerPool* worker)
      : dir_(std::move(dir)), db_(db), worker_(worker) {}

  enum class Requested { kStarted, kBusy, kResting };
  // Owner thread: starts a write; kBusy while the previous one is still running, kResting
  // while it rests after it (see above). `now` is a monotonic time in microseconds.
  Requested Request(StateHeader header, int64_t now);

  // Shutdown: a write under way stops at once (the previous file stays), later ones too.
  void Abandon() { deadline_.store(1); }  // A monotonic time long past.

  // How long the last completed write took, in microseconds; 0 before the first one.
  int64_t last_write_micros() const { return last_write_micros_.load(); }
  // The monotonic time (microseconds) before which requests rest; 0 before the first write.
  int64_t rest_until_micros() const { return rest_until_.load(); }

 private:
  const std::string dir_;
  store::Database* const db_;
  WorkerPool* const worker_;
  std::atomic<bool> writing_{false};
  std::atomic<int64_t> deadline_{0};  // 0: none
  std::atomic<int64_t> last_write_micros_{0};
  std::atomic<int64_t> rest_until_{0};  // Monotonic microseconds.
};

}  // namespace dgpu::scheduler
