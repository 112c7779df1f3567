// Rendering of a simulation result: one JSON object or a text table.
//
// Everything except the "speed" object (JSON) or the "speed" line (text) depends only on the
// inputs and the seed, so two runs can be compared byte for byte without it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/cluster.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace dgpu::sim {

// What the run was given, echoed in the report.
struct RunContext {
  std::string trace_path;
  TraceFormat format = TraceFormat::kPhilly;
  uint64_t trace_jobs = 0;
  uint64_t teams = 0;
  std::vector<std::string> online_teams;
  WorkloadOptions workload;
  ClusterSpec cluster;
  SimOptions sim;
  std::string team_guarantees = "none";  // "none", "proportional" or the file.
  double total_wall_seconds = 0;         // Load, replay and report; varies between runs.
};

nlohmann::ordered_json ResultToJson(const SimResult& result, const RunContext& context);
std::string ResultToText(const SimResult& result, const RunContext& context);

}  // namespace dgpu::sim
