#include "store/journal.h"

#include <iterator>
#include <limits>
#include <utility>

namespace dgpu::store {

void Journal::RestartSequence(uint64_t last_durable_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.last_appended_seq = last_durable_seq;
  stats_.last_durable_seq = last_durable_seq;
  completed_seq_ = last_durable_seq;
}

Journal::Journal(Database* db, uint64_t last_durable_seq) : db_(db) {
  stats_.last_appended_seq = last_durable_seq;
  stats_.last_durable_seq = last_durable_seq;
  completed_seq_ = last_durable_seq;
  writer_ = std::thread([this] { WriterLoop(); });
}

Journal::~Journal() { Shutdown(); }

uint64_t Journal::Append(std::vector<core::Change> changes, DurableCallback on_durable) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    lock.unlock();
    if (on_durable) on_durable(FailedPrecondition("journal is shut down"));
    return 0;
  }
  const uint64_t seq = ++stats_.last_appended_seq;
  ++stats_.appends;
  Status invalid = ValidateChanges(changes);
  if (!invalid.ok()) changes.clear();
  queue_.push_back(
      PendingAppend{seq, std::move(changes), std::move(on_durable), std::move(invalid)});
  lock.unlock();
  work_cv_.notify_one();
  return seq;
}

Status Journal::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = stats_.last_appended_seq;
  const uint64_t attempts_before = attempts_;
  const bool retry = has_kept_changes_ && !stopping_;
  if (retry) {
    retry_requested_ = true;
    work_cv_.notify_one();
  }
  done_cv_.wait(lock, [&] {
    const bool all_attempted = completed_seq_ >= target || writer_done_;
    const bool retried = !retry || attempts_ > attempts_before || writer_done_;
    return all_attempted && retried;
  });
  return health_;
}

void Journal::WhenAttempted(uint64_t seq, DurableCallback cb) {
  std::unique_lock<std::mutex> lock(mu_);
  if (completed_seq_ >= seq || writer_done_) {
    const Status health = health_;
    lock.unlock();
    cb(health);
    return;
  }
  attempt_waiters_.emplace(seq, std::move(cb));
}

void Journal::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  if (writer_.joinable()) writer_.join();
}

Status Journal::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

JournalStats Journal::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status Journal::CommitBatch(std::deque<PendingAppend>& batch, uint64_t* last_seq,
                            size_t* change_count) {
  // Kept changes go first: the database must never show a later change without an earlier one.
  std::vector<core::Change> all = std::move(kept_changes_);
  kept_changes_.clear();
  for (PendingAppend& append : batch) {
    if (all.empty()) {
      all = std::move(append.changes);
    } else {
      all.insert(all.end(), std::make_move_iterator(append.changes.begin()),
                 std::make_move_iterator(append.changes.end()));
    }
    append.changes.clear();
  }
  *last_seq = batch.empty() ? kept_last_seq_ : batch.back().seq;
  *change_count = all.size();
  Status status = db_->Apply(all, *last_seq);
  if (!status.ok()) {
    kept_changes_ = std::move(all);
    kept_last_seq_ = *last_seq;
  }
  return status;
}

void Journal::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool final_retry_done = false;
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || retry_requested_; });
    const bool only_stopping = queue_.empty() && !retry_requested_;
    if (only_stopping) {
      // Queue drained: one last try for kept changes, then stop.
      if (!has_kept_changes_ || final_retry_done) break;
      final_retry_done = true;
    }
    std::deque<PendingAppend> batch;
    batch.swap(queue_);
    retry_requested_ = false;
    const bool was_healthy = health_.ok();
    lock.unlock();

    uint64_t last_seq = 0;
    size_t change_count = 0;
    const Status status = CommitBatch(batch, &last_seq, &change_count);
    const bool kept = !kept_changes_.empty();

    lock.lock();
    ++attempts_;
    has_kept_changes_ = kept;
    if (status.ok()) {
      health_ = OkStatus();
      ++stats_.batches_committed;
      for (const PendingAppend& append : batch) {
        if (append.invalid.ok()) ++stats_.appends_committed;
      }
      stats_.changes_committed += change_count;
      stats_.last_durable_seq = last_seq;
    } else {
      health_ = Unavailable("storage failed: " + status.message());
      ++stats_.batches_failed;
    }
    const Status reported = status.ok() || was_healthy ? status : health_;
    lock.unlock();

    for (PendingAppend& append : batch) {
      if (append.on_durable) append.on_durable(append.invalid.ok() ? reported : append.invalid);
    }

    lock.lock();
    if (!batch.empty()) completed_seq_ = batch.back().seq;
    done_cv_.notify_all();
    RunAttemptWaiters(lock, completed_seq_);
  }
  writer_done_ = true;
  done_cv_.notify_all();
  RunAttemptWaiters(lock, std::numeric_limits<uint64_t>::max());
}

void Journal::RunAttemptWaiters(std::unique_lock<std::mutex>& lock, uint64_t reached) {
  while (!attempt_waiters_.empty() && attempt_waiters_.begin()->first <= reached) {
    DurableCallback cb = std::move(attempt_waiters_.begin()->second);
    attempt_waiters_.erase(attempt_waiters_.begin());
    const Status health = health_;
    lock.unlock();
    cb(health);
    lock.lock();
  }
}

}  // namespace dgpu::store
