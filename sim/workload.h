// Turns a parsed trace into the simulator's workload: job selection (window, limit), priority
// mapping of teams, arrival scaling and repetition. Times become microseconds from the first
// selected arrival (time 0). Deterministic for a given trace, options and seed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/types.h"
#include "sim/trace.h"

namespace dgpu::sim {

struct WorkloadOptions {
  // Teams (Philly: clusters) whose jobs are online (priority high).
  std::vector<std::string> online_teams;
  // Share of the distinct teams, chosen by seed, whose jobs are online, in addition to
  // online_teams. nullopt: kDefaultOnlineFraction unless online_teams is given (then 0).
  std::optional<double> online_fraction;
  double arrival_scale = 1.0;  // Inter-arrival times are divided by this (> 0).
  // [start, end) in seconds from the trace's first submission, on the unscaled times.
  std::optional<std::pair<double, double>> window;
  std::optional<uint64_t> limit;  // First N jobs (after the window).
  int repeat = 1;                 // The selection is replayed this many times, back to back.
  uint64_t seed = 1;
};

inline constexpr double kDefaultOnlineFraction = 0.3;

struct SimJob {
  core::TimeMicros submit = 0;  // From time 0 = the first selected arrival.
  core::TimeMicros duration = 0;
  int gpus = 1;
  core::Priority priority = core::Priority::kLow;
  uint32_t model = 0;  // Index into Workload::models; 0 is "" (any model).
  uint32_t team = 0;   // Index into Workload::teams.
};

struct Workload {
  std::vector<SimJob> jobs;               // Sorted by submit time; ties keep the trace order.
  std::vector<std::string> models;        // As in the trace; models[0] == "".
  std::vector<std::string> online_teams;  // Teams mapped to high priority, sorted.
  // The core's names of the trace's teams (CoreTeamName), distinct, sorted.
  std::vector<std::string> teams;
  size_t team_count = 0;
  size_t trace_jobs = 0;  // Jobs in the trace before selection.
};

// InvalidArgument names the option (unknown team, scale <= 0, empty window, ...), or the trace
// when two of its teams have the same core name.
StatusOr<Workload> BuildWorkload(const Trace& trace, const WorkloadOptions& options);

}  // namespace dgpu::sim
