// Reading a task's log (<work_dir>/<task_id>.log) for the scheduler: GET /api/v1/tasks/{id}/logs
// is served from the agent that ran the task, through LogRequest/LogChunk on the Heartbeat
// stream, for running and finished tasks alike and across agent restarts (the file stays).
#pragma once

#include <cstdint>
#include <string>

namespace dgpu::agent {

struct LogRead {
  bool found = false;  // The log exists (and could be opened).
  int64_t offset = 0;  // Where `data` starts.
  std::string data;
  int64_t size = 0;   // The file's size when read.
  std::string error;  // Why not found, for people ("no such file", "invalid task id: ...").
};

// Up to `max_bytes` of the log at `path` from `offset` (clamped to the file's size), or, with
// tail_lines > 0, from the start of its last `tail_lines` lines (a last line without a newline
// counts; the search looks back at most 64 MiB).
LogRead ReadLog(const std::string& path, int64_t offset, int32_t tail_lines, int32_t max_bytes);

}  // namespace dgpu::agent
