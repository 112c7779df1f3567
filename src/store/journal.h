// Journal: makes the core's changes durable with group commit.
//
// The owner thread (the one thread that drives the scheduling core) calls Append with the
// changes of one command and a callback. A writer thread takes everything waiting, applies it in
// one Database::Apply transaction (one fsync for the whole group) and then calls the callbacks,
// in Append order, with OkStatus() once the changes are durable or with the error. While one
// group commits, the next one gathers, so throughput grows with load while a lone append still
// commits at once.
//
// Ordering: Append assigns increasing sequence numbers (continuing after the database's
// last_applied_seq) and the database only ever holds a prefix of the appended changes: it never
// shows a later change without every earlier one.
//
// Failures: when a group fails to commit (disk full, I/O error), its callbacks get that error
// (ResourceExhausted("disk full: ...") for a full disk) and the journal turns unhealthy:
// health() reports Unavailable("storage failed: <reason>"). The failed changes are NOT dropped:
// the core already holds them in memory, so the journal keeps them and commits them ahead of
// anything appended later. Every later Append (and every Flush) retries that commit, so storage
// that recovers (space freed) is picked up without any reset. While storage keeps failing, each
// later Append's callback gets Unavailable("storage failed: <reason>"). An error therefore means
// "not durable now"; the change becomes durable when storage recovers, unless the process ends
// first. Callers that promised nothing to a client yet (a submission) should answer with an
// error that says so.
//
// Threads: Append and Shutdown must be called from one owner thread. Flush, health() and
// stats() may be called from any thread except the writer thread (from a callback, Flush would
// deadlock). Callbacks run on the writer thread, one after the other: they must be quick, must
// not throw and must not call Append or Flush (post the result to the owner thread instead).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "core/types.h"
#include "store/database.h"

namespace dgpu::store {

struct JournalStats {
  uint64_t appends = 0;            // Append calls accepted.
  uint64_t batches_committed = 0;  // Transactions committed.
  uint64_t appends_committed = 0;  // Appends whose callback got OkStatus().
  uint64_t changes_committed = 0;  // Changes stored by committed transactions.
  uint64_t batches_failed = 0;     // Commit attempts that failed.
  uint64_t last_appended_seq = 0;
  uint64_t last_durable_seq = 0;  // Every append up to this one is durable.

  // Appends per committed batch: the group-commit factor.
  double MeanBatchSize() const {
    return batches_committed == 0
               ? 0.0
               : static_cast<double>(appends_committed) / static_cast<double>(batches_committed);
  }
};

class Journal {
 public:
  using DurableCallback = std::function<void(Status)>;

  // Starts the writer thread. `db` is not owned and must outlive the journal. Sequence numbers
  // continue after `last_durable_seq`, normally LoadedState::last_applied_seq.
  Journal(Database* db, uint64_t last_durable_seq);
  // Shutdown().
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Queues `changes` (possibly none: a barrier) and returns their sequence number. `on_durable`
  // (may be empty) is called exactly once, on the writer thread, after the group holding them
  // committed or failed. Changes that ValidateChanges refuses are not stored and not kept: their
  // callback alone gets the InvalidArgument, in order, and the journal stays healthy. Owner thread
  // only. After Shutdown the callback is called at once, on the calling thread, with
  // FailedPrecondition, and 0 is returned.
  uint64_t Append(std::vector<core::Change> changes, DurableCallback on_durable);

  // Waits until everything appended before the call has been attempted and its callbacks have
  // run; when storage is failing it first retries the kept changes once. Returns OkStatus() if
  // all of it is durable, else health().
  Status Flush();

  // Calls `cb` once every append up to `seq` has been attempted and its callbacks have run: at
  // once on the calling thread when that is so already (or the journal is shut down), else on
  // the writer thread right after the group that reaches `seq`, with health() as it is then.
  // Appends nothing, so it is safe where nothing may be appended (a standby). Any thread but the
  // writer's. Callbacks follow the rules of Append's.
  void WhenAttempted(uint64_t seq, DurableCallback cb);

  // Continues numbering after `last_durable_seq` (a standby that was fed the primary's log
  // becomes primary). Owner thread only; call Flush() first so nothing is in flight.
  void RestartSequence(uint64_t last_durable_seq);
  // Commits what is queued (one last retry of kept changes included), runs the callbacks and
  // stops the writer thread. Idempotent. Owner thread only.
  void Shutdown();

  // OkStatus(), or Unavailable("storage failed: <reason>") since the last failed commit.
  Status health() const;
  JournalStats stats() const;

 private:
  struct PendingAppend {
    uint64_t seq = 0;
    std::vector<core::Change> changes;
    DurableCallback on_durable;
    Status invalid;  // Not OK: refused by ValidateChanges, never applied.
  };

  void WriterLoop();
  // Runs (unlocked, one at a time) the WhenAttempted callbacks whose sequence number is at most
  // `reached`. Writer thread only, with `lock` held.
  void RunAttemptWaiters(std::unique_lock<std::mutex>& lock, uint64_t reached);
  // Applies the kept changes plus `batch` in one transaction. Writer thread only.
  Status CommitBatch(std::deque<PendingAppend>& batch, uint64_t* last_seq, size_t* change_count);

  Database* const db_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // Signals the writer: work, retry or stop.
  std::condition_variable done_cv_;  // Signals Flush: an attempt finished.
  std::deque<PendingAppend> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;            // GUARDED_BY(mu_)
  bool retry_requested_ = false;     // GUARDED_BY(mu_)
  bool writer_done_ = false;         // GUARDED_BY(mu_) The writer thread has left its loop.
  bool has_kept_changes_ = false;    // GUARDED_BY(mu_) Mirrors !kept_changes_.empty().
  uint64_t completed_seq_ = 0;       // GUARDED_BY(mu_) Callbacks up to here have run.
  uint64_t attempts_ = 0;            // GUARDED_BY(mu_) Commit attempts finished.
  // WhenAttempted callbacks by the sequence number they wait for. GUARDED_BY(mu_)
  std::multimap<uint64_t, DurableCallback> attempt_waiters_;
  Status health_;       // GUARDED_BY(mu_)
  JournalStats stats_;  // GUARDED_BY(mu_)

  // Changes of failed commits, in order, committed ahead of anything later. Writer thread only.
  std::vector<core::Change> kept_changes_;
  uint64_t kept_last_seq_ = 0;  // Writer thread only.

  std::thread writer_;  // Started last, joined by Shutdown (owner thread).
};

}  // namespace dgpu::store
