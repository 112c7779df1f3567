#include "sim/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "sim/cluster.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/teams.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace dgpu::sim {
namespace {

std::optional<std::pair<double, double>> ParseWindow(const std::string& s) {
  size_t colon = s.find(':');
  if (colon == std::string::npos) return std::nullopt;
  auto start = ParseSeconds(std::string_view(s).substr(0, colon));
  auto end = ParseSeconds(std::string_view(s).substr(colon + 1));
  if (!start || !end) return std::nullopt;
  return std::make_pair(static_cast<double>(*start) / 1e6, static_cast<double>(*end) / 1e6);
}

}  // namespace

int RunSimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const auto begin = std::chrono::steady_clock::now();
  CLI::App app{
      "dgpu-sim: replays a GPU-cluster trace through the dgpu scheduling core in "
      "virtual time"};
  app.name("dgpu-sim");

  std::string trace_path;
  std::string format_name;
  std::vector<std::string> online_teams;
  std::optional<double> online_fraction;
  double arrival_scale = 1.0;
  std::string window;
  std::optional<uint64_t> limit;
  int repeat = 1;
  uint64_t seed = 1;
  int nodes = 100;
  int gpus_per_node = 8;
  std::string model = "gpu";
  std::string cluster_path;
  double online_percent = 0.7;
  int max_bypass = 16;
  std::string policy_name = "dgpu";
  std::optional<double> max_time;
  bool borrowing = false;
  bool backfill = false;
  int backfill_depth = 100;
  double limit_factor = 0;
  int preemption_grace = 30;
  double min_runtime = 0;
  std::string team_guarantees;
  bool json = false;

  app.add_option("--trace", trace_path, "Trace file (CSV)")->required();
  app.add_option("--format", format_name, "philly or generic (default: from the header)")
      ->check(CLI::IsMember({"philly", "generic"}));
  app.add_option("--online-teams", online_teams,
                 "Teams (Philly: cluster ids) whose jobs are online, comma-separated")
      ->delimiter(',');
  app.add_option("--online-fraction", online_fraction,
                 "Share of distinct teams made online, chosen by --seed (default 0.3, or 0 "
                 "when --online-teams is given)");
  app.add_option("--arrival-scale", arrival_scale,
                 "Divide inter-arrival times by X (2 doubles the arrival rate)");
  app.add_option("--window", window, "START:END in seconds from the trace's first submission");
  app.add_option("--limit", limit, "Only the first N jobs (after --window)");
  app.add_option("--repeat", repeat, "Replay the selected jobs N times back to back");
  app.add_option("--seed", seed, "Seed for the team choice and policy original's GPU picks");
  auto* nodes_opt = app.add_option("--nodes", nodes, "Nodes (default 100)");
  auto* gpus_opt = app.add_option("--gpus-per-node", gpus_per_node, "GPUs per node (default 8)");
  auto* model_opt = app.add_option("--model", model, "GPU model of the nodes (default gpu)");
  app.add_option("--cluster", cluster_path,
                 "Cluster file: YAML (nodes: [{count, gpus_per_node, model, labels}]) or CSV "
                 "(count,gpus_per_node,model[,key=value;key=value])")
      ->excludes(nodes_opt)
      ->excludes(gpus_opt)
      ->excludes(model_opt);
  std::string topology_key;
  app.add_option("--topology-key", topology_key,
                 "scheduler.topology_key: a node label of the --cluster file (rack); gangs go "
                 "to the fewest values of it");
  std::string nvlink = "on";
  app.add_option("--nvlink", nvlink,
                 "on: the core places by the --cluster file's NVLink groups (default); off: it "
                 "is not told of them (the report still counts placements split over groups)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--online-percent", online_percent, "Online (high) quota share, 0..1");
  app.add_option("--max-bypass", max_bypass,
                 "Times the oldest task may be overtaken before its queue holds");
  app.add_option("--policy", policy_name, "dgpu (the core) or original (random idle GPUs)")
      ->check(CLI::IsMember({"dgpu", "original"}));
  app.add_option("--max-time", max_time, "Stop at this simulated time (seconds from start)");
  std::string gangs = "on";
  app.add_option("--gangs", gangs,
                 "on: jobs larger than a node run as gangs of whole members (default); off: they "
                 "are rejected")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--backfill", backfill,
               "Plan a start in time for each head that waits for node room (scheduler.backfill); "
               "younger jobs use its nodes only if their limit ends before it");
  app.add_option("--backfill-depth", backfill_depth,
                 "Starts planned per pass at most (default 100)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--limit-factor", limit_factor,
                 "Give every job a time limit of its real run time x this (1 or more; users "
                 "overestimate); default: no limits");
  app.add_flag("--borrowing", borrowing,
               "Lend idle GPUs beyond guarantees and quotas; take them back by preemption");
  app.add_option("--preemption-grace", preemption_grace,
                 "Seconds a preempted task takes to stop (default 30)");
  app.add_option("--min-runtime", min_runtime,
                 "Seconds a task runs before it may be preempted (default 0)");
  app.add_option("--team-guarantees", team_guarantees,
                 "proportional (from the workload's GPU time), or a YAML file "
                 "(teams: {name: {online, batch, max_gpus, weight}}); default: none");
  std::string autoscale_path;
  double boot_time = 120;
  app.add_option("--autoscale", autoscale_path,
                 "Autoscale the node groups of this file (the scheduler's autoscale section); "
                 "they are the cluster");
  app.add_option("--boot-time", boot_time,
                 "With --autoscale: seconds from a scale-up to its nodes registering (default "
                 "120)");
  app.add_flag("--json", json, "Print one JSON object");

  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }

  auto fail = [&](const Status& s) {
    err << "dgpu-sim: " << s.message() << "\n";
    return 1;
  };

  RunContext context;
  context.trace_path = trace_path;
  context.workload.online_teams = online_teams;
  context.workload.online_fraction = online_fraction;
  context.workload.arrival_scale = arrival_scale;
  context.workload.limit = limit;
  context.workload.repeat = repeat;
  context.workload.seed = seed;
  if (!window.empty()) {
    context.workload.window = ParseWindow(window);
    if (!context.workload.window) {
      return fail(InvalidArgument("--window must be START:END in seconds, found '" + window + "'"));
    }
  }
  context.sim.policy = *ParsePolicy(policy_name);
  context.sim.online_percent = online_percent;
  context.sim.max_bypass = max_bypass;
  context.sim.seed = seed;
  if (max_time) {
    if (!(*max_time >= 0) || !std::isfinite(*max_time)) {
      return fail(InvalidArgument("--max-time must be a non-negative number of seconds"));
    }
    context.sim.max_time = static_cast<core::TimeMicros>(std::llround(*max_time * 1e6));
  }
  context.sim.borrowing = borrowing;
  if (limit_factor != 0 && !(limit_factor >= 1 && limit_factor <= 1e6)) {
    return fail(InvalidArgument("--limit-factor must be a number from 1 to 1000000"));
  }
  if (policy_name != "dgpu" && backfill)
    return fail(InvalidArgument("--backfill needs --policy dgpu"));
  context.sim.backfill = backfill;
  context.sim.backfill_depth = backfill_depth;
  context.sim.limit_factor = limit_factor;
  context.sim.gangs = gangs == "on";
  context.sim.topology_key = topology_key;
  context.sim.nvlink = nvlink == "on";
  if (preemption_grace < 0) {
    return fail(InvalidArgument("--preemption-grace must be a whole number of seconds >= 0"));
  }
  context.sim.preemption_grace_seconds = preemption_grace;
  if (!(min_runtime >= 0) || !std::isfinite(min_runtime) || min_runtime > 1e12) {
    return fail(InvalidArgument("--min-runtime must be a non-negative number of seconds"));
  }
  context.sim.min_runtime = static_cast<core::TimeMicros>(std::llround(min_runtime * 1e6));
  context.team_guarantees = team_guarantees.empty() ? "none" : team_guarantees;
  if (policy_name != "dgpu" && (borrowing || !team_guarantees.empty())) {
    return fail(InvalidArgument("--borrowing and --team-guarantees need --policy dgpu"));
  }

  if (!autoscale_path.empty()) {
    if (!cluster_path.empty() || nodes_opt->count() > 0 || gpus_opt->count() > 0 ||
        model_opt->count() > 0) {
      return fail(InvalidArgument(
          "--autoscale sets the cluster (its node groups at max_nodes): drop --cluster, --nodes, "
          "--gpus-per-node and --model"));
    }
    if (!(boot_time >= 0) || !std::isfinite(boot_time) || boot_time > 1e9) {
      return fail(InvalidArgument("--boot-time must be a non-negative number of seconds"));
    }
    auto settings = LoadAutoscaleFile(autoscale_path);
    if (!settings.ok()) return fail(settings.status());
    settings->online_percent = online_percent;
    settings->borrowing = borrowing;
    SimOptions::Autoscale autoscale;
    autoscale.settings = std::move(*settings);
    autoscale.boot_time = static_cast<core::TimeMicros>(std::llround(boot_time * 1e6));
    context.cluster = AutoscaleCluster(autoscale.settings);
    context.sim.autoscale = std::move(autoscale);
  } else if (boot_time != 120) {
    return fail(InvalidArgument("--boot-time needs --autoscale"));
  } else if (cluster_path.empty()) {
    context.cluster.groups.push_back(NodeGroup{nodes, gpus_per_node, model, {}});
  } else {
    auto cluster = LoadClusterFile(cluster_path);
    if (!cluster.ok()) return fail(cluster.status());
    context.cluster = std::move(*cluster);
  }
  Status valid = ValidateCluster(context.cluster);
  if (!valid.ok()) return fail(valid);

  auto trace =
      LoadTrace(trace_path, format_name.empty() ? std::nullopt : ParseTraceFormat(format_name));
  if (!trace.ok()) return fail(trace.status());
  context.format = trace->format;
  context.trace_jobs = trace->jobs.size();
  context.teams = trace->teams.size();

  auto workload = BuildWorkload(*trace, context.workload);
  if (!workload.ok()) return fail(workload.status());
  context.online_teams = workload->online_teams;

  if (team_guarantees == "proportional") {
    context.sim.team_guarantees = TeamGuarantees::kProportional;
  } else if (!team_guarantees.empty()) {
    auto teams = LoadTeamsFile(team_guarantees);
    if (!teams.ok()) return fail(teams.status());
    for (const auto& [name, limits] : *teams) {
      if (!std::binary_search(workload->teams.begin(), workload->teams.end(), name)) {
        return fail(InvalidArgument(team_guarantees + ": teams." + name +
                                    ": no such team in the trace (team names as the core sees "
                                    "them: lower case, see docs/sim.md)"));
      }
    }
    // (A bad --online-percent is reported by Simulate.)
    Status fit =
        CheckGuaranteesFit(*teams, context.cluster.TotalGpus(), online_percent, team_guarantees);
    if (!fit.ok() && online_percent >= 0 && online_percent <= 1) return fail(fit);
    context.sim.team_guarantees = TeamGuarantees::kGiven;
    context.sim.teams = std::move(*teams);
  }

  auto result = Simulate(*workload, context.cluster, context.sim);
  if (!result.ok()) return fail(result.status());

  context.total_wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (json) {
    out << ResultToJson(*result, context).dump(2) << "\n";
  } else {
    out << ResultToText(*result, context);
  }
  return 0;
}

}  // namespace dgpu::sim
