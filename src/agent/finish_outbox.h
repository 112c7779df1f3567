// FinishOutbox: task exits that the scheduler has not acknowledged yet, kept on disk so that
// they survive an agent restart.
//
// Layout: <work_dir>/.finish-outbox/<task_id>.json, one JSON object per exit, or
// batch-<task_id>.batch.json with one object per line for the exits of one executor poll. Each file is
// written to a temporary name, fsync'ed, renamed into place and the directory fsync'ed, so a
// crash leaves either the old state or the new one. Ack removes the file (and fsyncs the
// directory). Open() loads every entry; an unreadable or corrupt entry is renamed to
// <name>.corrupt and described in load_errors(), it never fails the load.
//
// Not thread-safe: one owner thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "core/status.h"

namespace dgpu::agent {

class FinishOutbox {
 public:
  // Creates <work_dir>/.finish-outbox if needed and loads it. Internal error when the directory
  // cannot be created or listed.
  static StatusOr<FinishOutbox> Open(const std::string& work_dir);

  // Persists `exit` (replacing a pending entry of the same task) before returning OK.
  // InvalidArgument for an invalid task id; Internal for an I/O failure (nothing recorded).
  Status Add(const TaskExit& exit);

  // Persists several exits (what one executor poll returned) in one batch file
  // `batch-<first task id>.batch.json`, one JSON object per line: one fsync and one directory
  // sync for the whole batch. All or nothing is recorded.
  Status AddAll(const std::vector<TaskExit>& exits);

  // Forgets the exit of `task_id` (the file is removed without a directory sync: if the removal
  // is lost in a crash, the finish is merely reported again). NotFound when none is pending.
  Status Ack(const std::string& task_id);

  // Pending exits ordered by finish time, then task id.
  std::vector<TaskExit> Pending() const;
  size_t size() const { return pending_.size(); }

  // One line per corrupt entry found by Open(), naming the file and the problem.
  const std::vector<std::string>& load_errors() const { return load_errors_; }

  const std::string& directory() const { return dir_; }

 private:
  explicit FinishOutbox(std::string dir) : dir_(std::move(dir)) {}
  Status SyncDirectory() const;

  std::string dir_;
  // Drops one reference to `path`; the file is removed when no pending exit is in it.
  Status Release(const std::string& task_id);

  std::map<std::string, TaskExit> pending_;
  std::map<std::string, std::string> file_of_;  // Task id -> file holding its exit.
  std::map<std::string, int> refs_;             // File -> pending exits in it.
  std::vector<std::string> load_errors_;
};

// JSON form of a TaskExit used by the outbox (exposed for tests and tools).
std::string TaskExitToJson(const TaskExit& exit);
StatusOr<TaskExit> TaskExitFromJson(const std::string& text);

}  // namespace dgpu::agent
