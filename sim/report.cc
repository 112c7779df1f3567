#include "sim/report.h"

#include <cstdarg>
#include <cstdio>

namespace dgpu::sim {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kClassNames[] = {"high", "low", "all"};
// Team guarantees are per class, named as in a teams file.
constexpr const char* kTeamClassNames[] = {"online", "batch"};

double Seconds(core::TimeMicros us) { return static_cast<double>(us) / 1e6; }

Json DistributionJson(const Distribution& d) {
  return Json{{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p95", d.p95}, {"p99", d.p99}};
}

double MeanFreeWhileFragmented(const SimResult& r) {
  return r.fragmented_time > 0 ? r.fragmented_free_gpu_seconds / Seconds(r.fragmented_time) : 0;
}

double Ratio(double num, double den) { return den > 0 ? num / den : 0; }

double PreemptedShare(const SimResult& r) {
  return Ratio(r.preempted_gpu_seconds, r.busy_gpu_seconds);
}

double DecisionsPerSecond(const SimResult& r) {
  return r.replay_wall_seconds > 0 ? static_cast<double>(r.decisions) / r.replay_wall_seconds : 0;
}

double DecisionsPerCpuSecond(const SimResult& r) {
  return r.replay_cpu_seconds > 0 ? static_cast<double>(r.decisions) / r.replay_cpu_seconds : 0;
}

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

}  // namespace

Json ResultToJson(const SimResult& r, const RunContext& c) {
  Json cluster = Json::array();
  for (const auto& g : c.cluster.groups) {
    Json group{{"count", g.count}, {"gpus_per_node", g.gpus_per_node}, {"model", g.model}};
    if (!g.labels.empty()) group["labels"] = g.labels;
    if (!g.nvlink_groups.empty()) group["nvlink_groups"] = g.nvlink_groups;
    cluster.push_back(std::move(group));
  }
  Json input{{"trace", c.trace_path},          {"format", std::string(ToString(c.format))},
             {"trace_jobs", c.trace_jobs},     {"teams", c.teams},
             {"online_teams", c.online_teams}, {"arrival_scale", c.workload.arrival_scale},
             {"repeat", c.workload.repeat},    {"seed", c.workload.seed}};
  if (c.workload.window) {
    input["window"] = {c.workload.window->first, c.workload.window->second};
  }
  if (c.workload.limit) input["limit"] = *c.workload.limit;
  Json config{{"policy", std::string(ToString(r.policy))},
              {"nodes", r.nodes},
              {"total_gpus", r.total_gpus},
              {"node_groups", cluster},
              {"online_percent", c.sim.online_percent},
              {"max_bypass", c.sim.max_bypass},
              {"borrowing", c.sim.borrowing},
              {"backfill", c.sim.backfill},
              {"backfill_depth", c.sim.backfill_depth},
              {"limit_factor", c.sim.limit_factor},
              {"gangs", c.sim.gangs},
              {"topology_key", c.sim.topology_key},
              {"nvlink", c.sim.nvlink},
              {"preemption_grace_seconds", c.sim.preemption_grace_seconds},
              {"min_runtime_seconds", Seconds(c.sim.min_runtime)},
              {"team_guarantees", c.team_guarantees}};
  if (c.sim.max_time) config["max_time"] = Seconds(*c.sim.max_time);

  Json delays;
  for (int p = 0; p <= core::kPriorityCount; ++p) {
    delays[kClassNames[p]] = DistributionJson(r.queueing_delay[p]);
  }
  delays["gangs"] = DistributionJson(r.gang_queueing_delay);
  Json out;
  out["input"] = input;
  out["config"] = config;
  out["jobs"] = {{"total", r.jobs},
                 {"submitted", r.submitted},
                 {"rejected", r.rejected_exceeds_node + r.rejected_no_model},
                 {"rejected_exceeds_node", r.rejected_exceeds_node},
                 {"rejected_no_gpu_model", r.rejected_no_model},
                 {"gangs", r.gangs},
                 {"started", r.started},
                 {"completed", r.completed},
                 {"running_at_end", r.running_at_end},
                 {"pending_at_end", r.pending_at_end[0] + r.pending_at_end[1]},
                 {"pending_at_end_high", r.pending_at_end[0]},
                 {"pending_at_end_low", r.pending_at_end[1]},
                 {"not_arrived", r.not_arrived}};
  out["queueing_delay_seconds"] = delays;
  out["completion_time_seconds"] = {{"count", r.completion_time.count},
                                    {"mean", r.completion_time.mean},
                                    {"p50", r.completion_time.p50}};
  out["makespan_seconds"] = Seconds(r.makespan);
  out["busy_gpu_seconds"] = r.busy_gpu_seconds;
  out["utilization"] = r.utilization;
  out["fragmentation"] = {
      {"fragmented_seconds", Seconds(r.fragmented_time)},
      {"fragmented_time_fraction", Ratio(Seconds(r.fragmented_time), Seconds(r.makespan))},
      {"mean_free_gpus_while_fragmented", MeanFreeWhileFragmented(r)},
      {"stranded_gpu_fraction", Ratio(r.fragmented_free_gpu_seconds,
                                      static_cast<double>(r.total_gpus) * Seconds(r.makespan))}};
  out["multi_node_tasks"] = r.multi_node_tasks;
  out["multi_node_task_nodes"] = r.multi_node_task_nodes;
  Json spread = Json::array();
  for (const auto& s : r.spread) {
    spread.push_back(
        {{"key", s.key},
         {"starts", s.starts},
         {"mean_values", Ratio(static_cast<double>(s.values), static_cast<double>(s.starts))},
         {"one_value_fraction",
          Ratio(static_cast<double>(s.one_value), static_cast<double>(s.starts))}});
  }
  out["multi_node_spread"] = spread;
  if (r.links) {
    const double placements = static_cast<double>(r.links->placements);
    out["nvlink"] = {
        {"placements", r.links->placements},
        {"one_group_fraction", Ratio(static_cast<double>(r.links->in_one_group), placements)},
        {"mean_gpus_outside_group", Ratio(static_cast<double>(r.links->gpus_outside), placements)}};
  } else {
    out["nvlink"] = nullptr;
  }
  out["decisions"] = r.decisions;
  out["passes"] = r.passes;
  out["preemptions"] = r.preemptions;
  out["preempted_gpu_seconds"] = r.preempted_gpu_seconds;
  out["preempted_busy_fraction"] = PreemptedShare(r);
  Json teams = Json::array();
  for (const auto& t : r.teams) {
    teams.push_back({{"team", t.team},
                     {"class", kTeamClassNames[static_cast<int>(t.priority)]},
                     {"guarantee", t.guarantee},
                     {"jobs", t.jobs},
                     {"queueing_delay_seconds", DistributionJson(t.queueing_delay)},
                     {"preemptions", t.preemptions}});
  }
  out["teams"] = teams;
  if (r.autoscale) {
    const auto& a = *r.autoscale;
    const auto& as = *c.sim.autoscale;
    out["autoscale"] = {
        {"boot_time_seconds", Seconds(as.boot_time)},
        {"scale_up_delay_seconds", Seconds(as.settings.scale_up_delay)},
        {"idle_timeout_seconds", Seconds(as.settings.idle_timeout)},
        {"provisioned_gpu_hours", a.provisioned_gpu_seconds / 3600.0},
        {"provisioned_utilization", Ratio(r.busy_gpu_seconds, a.provisioned_gpu_seconds)},
        {"mean_nodes", a.mean_nodes},
        {"peak_nodes", a.peak_nodes},
        {"scale_ups", a.scale_ups},
        {"nodes_requested", a.nodes_requested},
        {"nodes_released", a.nodes_released},
        {"boot_timeouts", a.boot_timeouts}};
  }
  out["speed"] = {{"replay_wall_seconds", r.replay_wall_seconds},
                  {"replay_cpu_seconds", r.replay_cpu_seconds},
                  {"total_wall_seconds", c.total_wall_seconds},
                  {"decisions_per_second", DecisionsPerSecond(r)},
                  {"decisions_per_cpu_second", DecisionsPerCpuSecond(r)}};
  return out;
}

std::string ResultToText(const SimResult& r, const RunContext& c) {
  std::string out;
  out += Format("dgpu-sim  policy %s  trace %s (%s, %llu jobs)\n",
                std::string(ToString(r.policy)).c_str(), c.trace_path.c_str(),
                std::string(ToString(c.format)).c_str(),
                static_cast<unsigned long long>(c.trace_jobs));
  out += Format("cluster   %d nodes, %d GPUs, online_percent %.2f, max_bypass %d, gangs %s%s%s\n",
                r.nodes, r.total_gpus, c.sim.online_percent, c.sim.max_bypass,
                c.sim.gangs ? "on" : "off",
                c.sim.topology_key.empty() ? "" : (", topology_key " + c.sim.topology_key).c_str(),
                c.sim.nvlink ? "" : ", nvlink off");
  out += Format("workload  arrival_scale %g, repeat %d, seed %llu, online teams %zu of %llu\n",
                c.workload.arrival_scale, c.workload.repeat,
                static_cast<unsigned long long>(c.workload.seed), c.online_teams.size(),
                static_cast<unsigned long long>(c.teams));
  if (c.sim.backfill || c.sim.limit_factor > 0) {
    out += Format(
        "backfill  %s (depth %d), time limits %s\n", c.sim.backfill ? "on" : "off",
        c.sim.backfill_depth,
        c.sim.limit_factor > 0 ? Format("run time x %g", c.sim.limit_factor).c_str() : "none");
  }
  out += Format("teams     guarantees %s, borrowing %s, preemption grace %d s, min runtime %g s\n",
                c.team_guarantees.c_str(), c.sim.borrowing ? "on" : "off",
                c.sim.preemption_grace_seconds, Seconds(c.sim.min_runtime));
  out += "\n";
  auto row = [&](const char* name, uint64_t v) {
    out += Format("  %-26s %12llu\n", name, static_cast<unsigned long long>(v));
  };
  out += "jobs\n";
  row("total", r.jobs);
  row("submitted", r.submitted);
  row("rejected (exceeds node)", r.rejected_exceeds_node);
  row("rejected (no GPU model)", r.rejected_no_model);
  row("larger than a node (gangs)", r.gangs);
  row("started", r.started);
  row("completed", r.completed);
  row("running at end", r.running_at_end);
  row("pending at end (high)", r.pending_at_end[0]);
  row("pending at end (low)", r.pending_at_end[1]);
  row("not arrived (max-time)", r.not_arrived);
  out += "\n";
  out += Format("%-28s %10s %12s %12s %12s %12s\n", "queueing delay (s)", "count", "mean", "p50",
                "p95", "p99");
  for (int p = 0; p <= core::kPriorityCount; ++p) {
    const Distribution& d = r.queueing_delay[p];
    out += Format("  %-26s %10llu %12.1f %12.1f %12.1f %12.1f\n", kClassNames[p],
                  static_cast<unsigned long long>(d.count), d.mean, d.p50, d.p95, d.p99);
  }
  {
    const Distribution& d = r.gang_queueing_delay;
    out += Format("  %-26s %10llu %12.1f %12.1f %12.1f %12.1f\n", "gangs (in all)",
                  static_cast<unsigned long long>(d.count), d.mean, d.p50, d.p95, d.p99);
  }
  out += Format("%-28s %10llu %12.1f %12.1f\n", "job completion time (s)",
                static_cast<unsigned long long>(r.completion_time.count), r.completion_time.mean,
                r.completion_time.p50);
  out += "\n";
  out += Format("%-28s %14.1f s\n", "makespan", Seconds(r.makespan));
  out += Format("%-28s %14.4f\n", "GPU utilization", r.utilization);
  out += Format("%-28s %14.4f of makespan\n", "fragmented time",
                Ratio(Seconds(r.fragmented_time), Seconds(r.makespan)));
  out += Format("%-28s %14.2f GPUs\n", "free while fragmented", MeanFreeWhileFragmented(r));
  out += Format("%-28s %14llu (%llu nodes)\n", "multi-node tasks",
                static_cast<unsigned long long>(r.multi_node_tasks),
                static_cast<unsigned long long>(r.multi_node_task_nodes));
  for (const auto& s : r.spread) {
    out += Format("  %-26s %14.2f mean, %.4f of starts on one\n", ("values of " + s.key).c_str(),
                  Ratio(static_cast<double>(s.values), static_cast<double>(s.starts)),
                  Ratio(static_cast<double>(s.one_value), static_cast<double>(s.starts)));
  }
  if (r.links) {
    const double placements = static_cast<double>(r.links->placements);
    out +=
        Format("%-28s %14.4f of %llu placements, %.3f GPUs outside on average\n",
               "in one NVLink group", Ratio(static_cast<double>(r.links->in_one_group), placements),
               static_cast<unsigned long long>(r.links->placements),
               Ratio(static_cast<double>(r.links->gpus_outside), placements));
  }
  out += Format("%-28s %14llu in %llu passes\n", "decisions",
                static_cast<unsigned long long>(r.decisions),
                static_cast<unsigned long long>(r.passes));
  out += Format("%-28s %14llu, %.1f GPU-s lost (%.4f of busy GPU time)\n", "preemptions",
                static_cast<unsigned long long>(r.preemptions), r.preempted_gpu_seconds,
                PreemptedShare(r));
  if (r.autoscale) {
    const auto& a = *r.autoscale;
    const auto& as = *c.sim.autoscale;
    out += Format("%-28s %14.1f GPU-hours (busy %.4f of them), boot %g s, idle timeout %g s\n",
                  "provisioned", a.provisioned_gpu_seconds / 3600.0,
                  Ratio(r.busy_gpu_seconds, a.provisioned_gpu_seconds), Seconds(as.boot_time),
                  Seconds(as.settings.idle_timeout));
    out += Format("%-28s %14.1f mean, %d peak; %llu scale-ups for %llu nodes, %llu released\n",
                  "nodes", a.mean_nodes, a.peak_nodes, static_cast<unsigned long long>(a.scale_ups),
                  static_cast<unsigned long long>(a.nodes_requested),
                  static_cast<unsigned long long>(a.nodes_released));
  }
  out += "\n";
  out += Format("%-28s %-7s %9s %10s %12s %12s %11s\n", "teams", "class", "guarantee", "jobs",
                "delay mean", "delay p99", "preemptions");
  for (const auto& t : r.teams) {
    out += Format("  %-26s %-7s %9d %10llu %12.1f %12.1f %11llu\n", t.team.c_str(),
                  kTeamClassNames[static_cast<int>(t.priority)], t.guarantee,
                  static_cast<unsigned long long>(t.jobs), t.queueing_delay.mean,
                  t.queueing_delay.p99, static_cast<unsigned long long>(t.preemptions));
  }
  out += Format(
      "speed: %.0f decisions/s (%.0f per CPU second), replay %.3f s wall (%.3f s CPU), total "
      "%.3f s wall\n",
      DecisionsPerSecond(r), DecisionsPerCpuSecond(r), r.replay_wall_seconds, r.replay_cpu_seconds,
      c.total_wall_seconds);
  return out;
}

}  // namespace dgpu::sim
