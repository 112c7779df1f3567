// The log cut of executor.max_log_bytes, done by a task's shim (task_shim.h).
//
// The task's stdout and stderr are one pipe; the shim copies what comes out of it to the log
// (opened O_APPEND, shared with the agent's own "dgpu: ..." lines) until the file holds
// max_log_bytes, writes one marker line (LogCutLine) and from then on reads and discards the
// rest, so that the task never blocks on a full pipe.
#pragma once

#include <cstdint>
#include <string>

#include "agent/shim_runtime.h"

namespace dgpu::agent {

// The line written where a log is cut (with a newline before it if the cut is mid-line).
std::string LogCutLine(int64_t max_bytes);

// Copies what it is given to `out` as above. Write errors (a full disk) drop the data: the task
// must not block on its log.
class LogCopier {
 public:
  // An earlier run's output in `out` counts: the limit is the file's.
  LogCopier(int out, int64_t max_bytes);
  void Write(const char* data, size_t n);
  bool cut() const { return c_.cut != 0; }

 private:
  dgpu_log_copier c_;  // The shim's own code (shim_runtime.h), which this wraps for C++.
};

// Copies `in` to `out` with a LogCopier until end of input; returns 0.
int RunLogWriter(int in, int out, int64_t max_bytes);

}  // namespace dgpu::agent
