// The log writer: the process between a task and its log when executor.max_log_bytes is set.
//
// The task's stdout and stderr are one pipe; the writer copies what comes out of it to the log
// (opened O_APPEND, shared with the agent's own "dgpu: ..." lines) until the file holds
// max_log_bytes, writes one marker line (LogCutLine) and from then on reads and discards the
// rest, so that the task never blocks on a full pipe. It exits when every writer of the pipe
// has closed it (the task and all it started have ended). It runs as `dgpu-agent --log-writer
// MAX_BYTES` in a session of its own, outside the task's process group and without the task's
// environment, so that stopping the task does not stop it and an agent restart leaves it be.
#pragma once

#include <cstdint>
#include <string>

namespace dgpu::agent {

// The flag of dgpu-agent that runs the writer (main.cc).
inline constexpr const char* kLogWriterFlag = "--log-writer";

// The line written where a log is cut (with a newline before it if the cut is mid-line).
std::string LogCutLine(int64_t max_bytes);

// Copies `in` to `out` as above until end of input; returns the process exit code (0).
int RunLogWriter(int in, int out, int64_t max_bytes);

}  // namespace dgpu::agent
