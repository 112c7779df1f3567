// Structured logging on top of spdlog.
//
// SetupLogging installs spdlog's default logger, so LogEvent/Log below and plain spdlog calls
// (`spdlog::info("...")`) from any module write the same kind of line:
//   json: one JSON object per line, keys in this order: "ts" (RFC 3339 UTC with milliseconds),
//         "level" (debug|info|warn|error, or spdlog's trace|critical), "component", then either
//         "msg" or "event", then the structured fields in the order given. Strings are JSON
//         escaped; invalid UTF-8 becomes U+FFFD. Field keys named ts, level or component are
//         written with a leading '_' so a line never has a duplicate key.
//   text: "<ts> <level padded to 5> [<component>] <msg or event=NAME> key=value ...", with a value
//         double-quoted (and escaped) when it is empty or holds a space, '"', '=' or a control
//         character.
// Every line is flushed as it is written, so nothing is lost when the process dies.
//
// Cost: LogEvent and Log return after one atomic load when the level is disabled; arguments are
// not formatted.
//
// Thread-safety: logging functions may be called from any thread. SetupLogging replaces the
// process-wide logger and must not run while other threads log (call it at start-up).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/status.h"
#include "common/config.h"

namespace dgpu::common {

// Life-cycle event names shared by the daemons.
namespace events {
inline constexpr std::string_view kTaskSubmitted = "task_submitted";
inline constexpr std::string_view kTaskScheduled = "task_scheduled";
inline constexpr std::string_view kTaskFinished = "task_finished";
inline constexpr std::string_view kAgentRegistered = "agent_registered";
inline constexpr std::string_view kAgentOffline = "agent_offline";
inline constexpr std::string_view kLeaderElected = "leader_elected";
inline constexpr std::string_view kLeaderLost = "leader_lost";
}  // namespace events

// Sends log lines to config.output (stdout, stderr, or a file opened for appending) in
// config.format, dropping those below config.level. `component` (e.g. "scheduler") is written on
// every line. Errors: kInvalidArgument "logging.output: cannot open ..." when the file cannot be
// opened; the previous logger then stays in place.
Status SetupLogging(const LoggingConfig& config, std::string_view component);

// True when a line at `level` would be written.
bool LogEnabled(LogLevel level);

// Reopens the log file when logging.output is a path, so that a file that logrotate moved away
// is replaced by a new one at that path (the daemons call it on SIGHUP); lines logged meanwhile
// go to the old file or the new one, none is lost. Nothing to do for stdout/stderr. Errors:
// kUnavailable "cannot reopen the log file ..."; the previous file then stays in use.
Status ReopenLogs();
// ReopenLogs for a daemon that got SIGHUP: logs the outcome ("SIGHUP: log file reopened", or
// the error).
void ReopenLogsOnSighup();

// Writes buffered lines out (lines are flushed as written; this is for belt and braces before
// exit).
void FlushLogs();

// The value of a structured field: a string (written quoted in JSON), an integer, a floating
// point number or a bool (written bare). It views strings without copying: build it in the
// call's argument list and do not keep it.
class LogValue {
 public:
  enum class Kind { kString, kSigned, kUnsigned, kDouble, kBool };

  LogValue(std::string_view value) : kind_(Kind::kString), string_(value) {}    // NOLINT
  LogValue(const char* value) : kind_(Kind::kString), string_(value) {}         // NOLINT
  LogValue(const std::string& value) : kind_(Kind::kString), string_(value) {}  // NOLINT
  LogValue(bool value) : kind_(Kind::kBool), bool_(value) {}                    // NOLINT
  LogValue(double value) : kind_(Kind::kDouble), double_(value) {}              // NOLINT
  template <typename Int>
  requires(std::is_integral_v<Int> && !std::is_same_v<Int, bool> && !std::is_same_v<Int, char>)
      LogValue(Int value) {  // NOLINT
    if constexpr (std::is_signed_v<Int>) {
      kind_ = Kind::kSigned;
      signed_ = value;
    } else {
      kind_ = Kind::kUnsigned;
      unsigned_ = value;
    }
  }

  Kind kind() const { return kind_; }
  std::string_view string_value() const { return string_; }
  int64_t signed_value() const { return signed_; }
  uint64_t unsigned_value() const { return unsigned_; }
  double double_value() const { return double_; }
  bool bool_value() const { return bool_; }

 private:
  Kind kind_ = Kind::kString;
  std::string_view string_;
  int64_t signed_ = 0;
  uint64_t unsigned_ = 0;
  double double_ = 0;
  bool bool_ = false;
};

struct LogField {
  std::string_view key;
  LogValue value;
};

// Logs a life-cycle event:
//   LogEvent(events::kTaskScheduled, {{"task_id", "task-3"}, {"node", "n1"}, {"gpus", "0,1"}});
// json: {"ts":"...","level":"info","component":"scheduler","event":"task_scheduled",
//        "task_id":"task-3","node":"n1","gpus":"0,1"}
// text: ... [scheduler] event=task_scheduled task_id=task-3 node=n1 gpus=0,1
void LogEvent(std::string_view event, std::span<const LogField> fields,
              LogLevel level = LogLevel::kInfo);
inline void LogEvent(std::string_view event, std::initializer_list<LogField> fields = {},
                     LogLevel level = LogLevel::kInfo) {
  LogEvent(event, std::span<const LogField>(fields.begin(), fields.size()), level);
}

// Logs a free-text message with optional structured fields ("msg" in json).
void Log(LogLevel level, std::string_view message, std::span<const LogField> fields);
inline void Log(LogLevel level, std::string_view message,
                std::initializer_list<LogField> fields = {}) {
  Log(level, message, std::span<const LogField>(fields.begin(), fields.size()));
}

}  // namespace dgpu::common
