// Teams in dgpu-sim: the core's name for each team of a trace, team limits read from a file or
// computed from the workload (--team-guarantees), and the class quotas they must fit in.
// Pure functions; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/types.h"

namespace dgpu::sim {

using TeamLimitsMap = std::map<std::string, core::TeamLimits>;

// The core's name ([a-z0-9][a-z0-9_-]{0,62}) for a team of a trace: an empty team is "default";
// ASCII letters are lower-cased and every other byte outside [a-z0-9_-] becomes '-'; a name that
// does not then start with a letter or digit gets a 't' in front; the result is cut to 63
// characters. Names that are already valid are kept as they are (Philly cluster ids are).
std::string CoreTeamName(std::string_view trace_team);

// The class quotas of `total_gpus` as the core computes them: online round(total x percent),
// batch the rest. Indexed by priority (online = high first).
std::array<int, core::kPriorityCount> ClassQuotas(int total_gpus, double online_percent);

// A teams file (YAML):
//   teams:
//     search: {online: 16, batch: 0, max_gpus: -1, weight: 1}
// Every field is optional (online 0, batch 0, max_gpus -1 = no cap, weight 1); unknown keys are
// errors. InvalidArgument names the file, the team and the field ("f.yaml: teams.search: field
// 'online': ...").
StatusOr<TeamLimitsMap> ParseTeamsYaml(const std::string& text, const std::string& name);
// NotFound if the file cannot be opened.
StatusOr<TeamLimitsMap> LoadTeamsFile(const std::string& path);

// The guarantees of each class add up to at most its quota (the core refuses more).
// InvalidArgument names `where` and the class.
Status CheckGuaranteesFit(const TeamLimitsMap& teams, int total_gpus, double online_percent,
                          const std::string& where);

// --team-guarantees proportional: in each class, a team's guarantee is floor(quota x its share
// of the class's GPU time), exactly (integer arithmetic). gpu_time[i][p] is team i's GPU time
// (any unit) in class p. Teams whose guarantees are 0 in both classes get no limits; the
// remainder of each class stays shared.
TeamLimitsMap ProportionalGuarantees(const std::vector<std::string>& teams,
                                     const std::vector<std::array<uint64_t, 2>>& gpu_time,
                                     std::array<int, core::kPriorityCount> quotas);

}  // namespace dgpu::sim
