#include "sim/workload.h"

#include <algorithm>
#include <cmath>

#include "sim/random.h"
#include "sim/teams.h"

namespace dgpu::sim {

StatusOr<Workload> BuildWorkload(const Trace& trace, const WorkloadOptions& options) {
  if (!(options.arrival_scale > 0) || !std::isfinite(options.arrival_scale)) {
    return InvalidArgument("--arrival-scale must be a positive number");
  }
  if (options.repeat < 1) return InvalidArgument("--repeat must be at least 1");
  double fraction =
      options.online_fraction.value_or(options.online_teams.empty() ? kDefaultOnlineFraction : 0.0);
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return InvalidArgument("--online-fraction must be between 0 and 1");
  }
  if (options.window &&
      !(options.window->first >= 0 && options.window->second > options.window->first)) {
    return InvalidArgument("--window must be START:END with 0 <= START < END");
  }

  // Priority of each team: the named ones, plus a seeded choice of round(fraction * teams).
  std::vector<bool> online(trace.teams.size(), false);
  for (const auto& name : options.online_teams) {
    auto it = std::find(trace.teams.begin(), trace.teams.end(), name);
    if (it == trace.teams.end()) {
      return InvalidArgument("--online-teams: team '" + name + "' does not occur in the trace");
    }
    online[it - trace.teams.begin()] = true;
  }
  std::vector<uint32_t> by_name(trace.teams.size());
  for (uint32_t i = 0; i < by_name.size(); ++i) by_name[i] = i;
  std::sort(by_name.begin(), by_name.end(),
            [&](uint32_t a, uint32_t b) { return trace.teams[a] < trace.teams[b]; });
  SplitMix64 rng(options.seed);
  for (size_t i = by_name.size(); i > 1; --i) {
    std::swap(by_name[i - 1], by_name[rng.Below(i)]);
  }
  auto chosen = static_cast<size_t>(std::llround(fraction * static_cast<double>(by_name.size())));
  for (size_t i = 0; i < chosen; ++i) online[by_name[i]] = true;

  // The core's team of each trace team. Two teams of the trace must not become one.
  std::vector<std::string> core_names(trace.teams.size());
  for (size_t i = 0; i < trace.teams.size(); ++i) core_names[i] = CoreTeamName(trace.teams[i]);
  std::vector<uint32_t> by_core(trace.teams.size());
  for (uint32_t i = 0; i < by_core.size(); ++i) by_core[i] = i;
  std::stable_sort(by_core.begin(), by_core.end(),
                   [&](uint32_t a, uint32_t b) { return core_names[a] < core_names[b]; });
  Workload w;
  std::vector<uint32_t> core_team(trace.teams.size());
  for (size_t k = 0; k < by_core.size(); ++k) {
    const uint32_t i = by_core[k];
    if (k > 0 && core_names[by_core[k - 1]] == core_names[i]) {
      const std::string& other = trace.teams[by_core[k - 1]];
      // An empty team is the default team by definition.
      const bool same = (other.empty() && trace.teams[i] == core::kDefaultTeam) ||
                        (trace.teams[i].empty() && other == core::kDefaultTeam);
      if (!same) {
        return InvalidArgument(trace.name + ": teams '" + other + "' and '" + trace.teams[i] +
                               "' both become team '" + core_names[i] +
                               "' (team names are lower-cased, other characters become '-'); "
                               "rename one");
      }
    } else {
      w.teams.push_back(core_names[i]);
    }
    core_team[i] = static_cast<uint32_t>(w.teams.size() - 1);
  }

  w.models = trace.models;
  w.team_count = trace.teams.size();
  w.trace_jobs = trace.jobs.size();
  for (size_t i = 0; i < online.size(); ++i) {
    if (online[i]) w.online_teams.push_back(trace.teams[i]);
  }
  std::sort(w.online_teams.begin(), w.online_teams.end());

  // Selection on the unscaled times.
  std::vector<const TraceJob*> selected;
  const core::TimeMicros trace_start = trace.jobs.empty() ? 0 : trace.jobs.front().submit;
  for (const auto& job : trace.jobs) {
    if (options.window) {
      double offset = static_cast<double>(job.submit - trace_start) / 1e6;
      if (offset < options.window->first || offset >= options.window->second) continue;
    }
    if (options.limit && selected.size() >= *options.limit) break;
    selected.push_back(&job);
  }
  if (selected.empty()) return w;

  const core::TimeMicros base = selected.front()->submit;
  std::vector<SimJob> one;
  one.reserve(selected.size());
  for (const TraceJob* job : selected) {
    SimJob s;
    s.submit = static_cast<core::TimeMicros>(
        std::llround(static_cast<double>(job->submit - base) / options.arrival_scale));
    s.duration = job->duration;
    s.gpus = job->gpus;
    s.model = job->model;
    s.team = core_team[job->team];
    s.priority =
        job->priority.value_or(online[job->team] ? core::Priority::kHigh : core::Priority::kLow);
    one.push_back(s);
  }
  const core::TimeMicros period =
      std::max<core::TimeMicros>(one.back().submit, core::kMicrosPerSecond);
  w.jobs.reserve(one.size() * options.repeat);
  for (int k = 0; k < options.repeat; ++k) {
    for (SimJob s : one) {
      s.submit += period * k;
      w.jobs.push_back(s);
    }
  }
  return w;
}

}  // namespace dgpu::sim
