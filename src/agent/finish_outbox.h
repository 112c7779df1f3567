// FinishOutbox: task exits that the scheduler has not acknowledged yet, kept on disk so that
// they survive an agent restart.
//
// Layout: one append-only journal, <work_dir>/.finish-outbox/journal, one JSON object per line:
// an exit (the TaskExit fields), or {"ack":"<task id>","run":<run>} once the scheduler has
// acknowledged it (an ack covers the pending exit of that run only; without "run", any run).
// Add/AddAll append their lines with one write and one fdatasync: no file is created, renamed or
// removed per finish (creating and deleting a file per batch made inode allocation the agent's
// largest cost, and needed a directory sync each time). Acks are appended without a sync: if one
// is lost in a crash, the finish is merely reported again and the scheduler answers
// ALREADY_EXISTS. When nothing is pending the journal is truncated; when it grows large with
// few pending exits it is rewritten (temporary file, fsync, rename, directory sync).
//
// Open() replays the journal. A last line without its newline (a write cut short by a crash) is
// dropped: it was never acknowledged as written. Any other unreadable line is described in
// load_errors(), the journal is kept as journal.corrupt for inspection and rewritten with what
// could be read; a load never fails because of a bad entry.
//
// Not thread-safe: one owner thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "base/status.h"

namespace dgpu::agent {

class FinishOutbox {
 public:
  // Creates <work_dir>/.finish-outbox if needed and loads its journal. Internal error when the
  // directory or the journal cannot be created, read or opened; a corrupt journal is rewritten
  // (common/atomic_file.h), whose errors are Unavailable or ResourceExhausted.
  static StatusOr<FinishOutbox> Open(const std::string& work_dir);

  FinishOutbox(FinishOutbox&& other) noexcept;
  FinishOutbox& operator=(FinishOutbox&& other) noexcept;
  FinishOutbox(const FinishOutbox&) = delete;
  FinishOutbox& operator=(const FinishOutbox&) = delete;
  ~FinishOutbox();

  // Persists `exit` (replacing a pending entry of the same task) before returning OK.
  // InvalidArgument for an invalid task id; Internal for an I/O failure (nothing recorded).
  Status Add(const TaskExit& exit);

  // Persists several exits (what one executor poll returned) with one write and one sync. All or
  // nothing is recorded.
  Status AddAll(const std::vector<TaskExit>& exits);

  // Forgets the exit of run `run` of `task_id` (see above: not synced); run 0 (not known): the
  // pending exit of any run. NotFound when none is pending, or the pending one is of another run
  // (a later run's exit is kept when a late copy of an earlier run's is acknowledged).
  Status Ack(const std::string& task_id, int run = 0);

  // Pending exits ordered by finish time, then task id.
  std::vector<TaskExit> Pending() const;
  size_t size() const { return pending_.size(); }

  // One line per corrupt entry found by Open(), naming the journal line and the problem.
  const std::vector<std::string>& load_errors() const { return load_errors_; }

  const std::string& directory() const { return dir_; }
  std::string journal_path() const { return dir_ + "/journal"; }

 private:
  explicit FinishOutbox(std::string dir) : dir_(std::move(dir)) {}
  // Appends whole lines; on a failure the journal is cut back to its previous length.
  Status Append(const std::string& lines, bool sync);
  // Writes the pending exits to a new journal and puts it in place durably.
  Status Rewrite();

  std::string dir_;
  int fd_ = -1;         // The journal, open for appending.
  uint64_t size_ = 0;   // Bytes in the journal.
  uint64_t lines_ = 0;  // Lines in the journal.
  std::map<std::string, TaskExit> pending_;
  std::vector<std::string> load_errors_;
};

// Whether an acknowledgement of run `acked` covers a pending exit of run `pending`; 0 (a
// scheduler or journal that predates run numbers) matches any run.
bool CoversRun(int acked, int pending);

// JSON form of a TaskExit used by the outbox (exposed for tests and tools).
std::string TaskExitToJson(const TaskExit& exit);
StatusOr<TaskExit> TaskExitFromJson(const std::string& text);

}  // namespace dgpu::agent
