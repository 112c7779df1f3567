// Workload traces for dgpu-sim: the Philly format and a generic format, parsed into jobs.
//
// Both formats are CSV with a fixed header (see docs/sim.md). Parsing is locale-independent and
// timezone-independent: Philly timestamps are read as UTC calendar times. Errors name the file,
// the 1-based line and the field. Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/types.h"

namespace dgpu::sim {

enum class TraceFormat : uint8_t { kPhilly, kGeneric };

std::string_view ToString(TraceFormat f);
std::optional<TraceFormat> ParseTraceFormat(std::string_view s);

inline constexpr std::string_view kPhillyHeader = "timestamp,duration,num_gpus,gpu_time,cluster";
inline constexpr std::string_view kGenericHeader =
    "submit_time,duration,gpu_count,priority,gpu_model,team";

struct TraceJob {
  core::TimeMicros submit = 0;    // Philly: since the Unix epoch; generic: as written.
  core::TimeMicros duration = 0;  // Run time once started.
  int gpus = 1;
  std::optional<core::Priority> priority;  // Generic only; nullopt: decided by the team mapping.
  uint32_t model = 0;  // Index into Trace::models; model 0 is always "" (any model).
  uint32_t team = 0;   // Index into Trace::teams.
  int line = 0;        // Line in the file, for messages.
};

struct Trace {
  TraceFormat format = TraceFormat::kPhilly;
  std::string name;                 // File name, for messages.
  std::vector<TraceJob> jobs;       // Sorted by submit time; ties keep the file order.
  std::vector<std::string> models;  // models[0] == "".
  std::vector<std::string> teams;   // In order of first appearance.
};

// Parses a whole trace. `format` nullopt: detected from the header. `name` is used in errors
// ("name:line: field 'duration': ..."). InvalidArgument on any bad line or header.
StatusOr<Trace> ParseTrace(std::istream& in, std::string name, std::optional<TraceFormat> format);

// Opens and parses `path`. NotFound if it cannot be opened.
StatusOr<Trace> LoadTrace(const std::string& path, std::optional<TraceFormat> format);

// "YYYY-MM-DD HH:MM:SS" as a UTC calendar time -> seconds since the Unix epoch.
std::optional<int64_t> ParseUtcTimestamp(std::string_view s);

// A non-negative decimal number of seconds ("12", "12.5") -> microseconds, rounded.
std::optional<core::TimeMicros> ParseSeconds(std::string_view s);

}  // namespace dgpu::sim
