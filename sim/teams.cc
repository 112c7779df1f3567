#include "sim/teams.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace dgpu::sim {
namespace {

constexpr size_t kMaxTeamName = 63;

// GPU time of a class can exceed 64 bits once multiplied by a quota.
__extension__ using Uint128 = unsigned __int128;

bool LowerOrDigit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// A scalar as a whole number; yaml-cpp's own conversion error does not say which field failed.
Status ReadInt(const YAML::Node& value, const std::string& where, const char* field, int& out) {
  if (value.IsScalar()) {
    try {
      out = value.as<int>();
      return OkStatus();
    } catch (const YAML::Exception&) {
      // Reported below.
    }
  }
  return InvalidArgument(where + "field '" + field + "': expected a whole number, found '" +
                         (value.IsScalar() ? value.Scalar() : std::string("a list or map")) + "'");
}

}  // namespace

std::string CoreTeamName(std::string_view trace_team) {
  if (trace_team.empty()) return std::string(core::kDefaultTeam);
  std::string name;
  name.reserve(trace_team.size() + 1);
  for (char c : trace_team) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    name.push_back(LowerOrDigit(c) || c == '_' || c == '-' ? c : '-');
  }
  if (!LowerOrDigit(name.front())) name.insert(name.begin(), 't');
  if (name.size() > kMaxTeamName) name.resize(kMaxTeamName);
  return name;
}

std::array<int, core::kPriorityCount> ClassQuotas(int total_gpus, double online_percent) {
  const int online =
      std::clamp(static_cast<int>(std::lround(total_gpus * online_percent)), 0, total_gpus);
  return {online, total_gpus - online};
}

StatusOr<TeamLimitsMap> ParseTeamsYaml(const std::string& text, const std::string& name) {
  TeamLimitsMap teams;
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) return InvalidArgument(name + ": expected a map with key 'teams'");
    for (const auto& kv : root) {
      auto key = kv.first.as<std::string>();
      if (key != "teams") return InvalidArgument(name + ": unknown key '" + key + "'");
    }
    YAML::Node list = root["teams"];
    if (!list || !list.IsMap()) {
      return InvalidArgument(name +
                             ": 'teams' must be a map of team name to {online, batch, max_gpus, "
                             "weight}");
    }
    for (const auto& team : list) {
      const auto team_name = team.first.as<std::string>();
      const std::string where = name + ": teams." + team_name + ": ";
      if (!core::IsValidTeamName(team_name)) {
        return InvalidArgument(where +
                               "not a valid team name (1 to 63 characters of a-z, 0-9, '_' and "
                               "'-', starting with a letter or digit)");
      }
      core::TeamLimits limits;
      const YAML::Node& fields = team.second;
      if (!fields.IsMap() && !fields.IsNull()) {
        return InvalidArgument(where + "expected a map of online, batch, max_gpus, weight");
      }
      if (fields.IsMap()) {
        for (const auto& field : fields) {
          const auto key = field.first.as<std::string>();
          Status s;
          if (key == "online") {
            s = ReadInt(field.second, where, "online", limits.online);
          } else if (key == "batch") {
            s = ReadInt(field.second, where, "batch", limits.batch);
          } else if (key == "max_gpus") {
            s = ReadInt(field.second, where, "max_gpus", limits.max_gpus);
          } else if (key == "weight") {
            try {
              limits.weight = field.second.as<double>();
            } catch (const YAML::Exception&) {
              return InvalidArgument(where + "field 'weight': expected a number, found '" +
                                     (field.second.IsScalar() ? field.second.Scalar() : "") + "'");
            }
          } else {
            return InvalidArgument(where + "unknown field '" + key + "'");
          }
          if (!s.ok()) return s;
        }
      }
      if (limits.online < 0) return InvalidArgument(where + "field 'online': must not be negative");
      if (limits.batch < 0) return InvalidArgument(where + "field 'batch': must not be negative");
      if (limits.max_gpus < -1) {
        return InvalidArgument(where + "field 'max_gpus': must be -1 (no cap) or more");
      }
      if (!(limits.weight > 0) || !std::isfinite(limits.weight)) {
        return InvalidArgument(where + "field 'weight': must be a number above 0");
      }
      if (limits.max_gpus >= 0 && limits.online + limits.batch > limits.max_gpus) {
        return InvalidArgument(where + "field 'max_gpus': " + std::to_string(limits.max_gpus) +
                               " is below the team's guarantees (online " +
                               std::to_string(limits.online) + " + batch " +
                               std::to_string(limits.batch) + ")");
      }
      teams[team_name] = limits;
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(name + ": " + e.what());
  }
  return teams;
}

StatusOr<TeamLimitsMap> LoadTeamsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open teams file " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseTeamsYaml(buf.str(), path);
}

Status CheckGuaranteesFit(const TeamLimitsMap& teams, int total_gpus, double online_percent,
                          const std::string& where) {
  const auto quotas = ClassQuotas(total_gpus, online_percent);
  int64_t sum[core::kPriorityCount] = {0, 0};
  for (const auto& [name, limits] : teams) {
    sum[0] += limits.online;
    sum[1] += limits.batch;
  }
  const char* names[core::kPriorityCount] = {"online", "batch"};
  for (int p = 0; p < core::kPriorityCount; ++p) {
    if (sum[p] > quotas[p]) {
      return InvalidArgument(where + ": the " + names[p] + " guarantees add up to " +
                             std::to_string(sum[p]) + " GPUs, more than the " + names[p] +
                             " quota of " + std::to_string(quotas[p]) + " (" +
                             std::to_string(total_gpus) + " GPUs, --online-percent)");
    }
  }
  return OkStatus();
}

TeamLimitsMap ProportionalGuarantees(const std::vector<std::string>& teams,
                                     const std::vector<std::array<uint64_t, 2>>& gpu_time,
                                     std::array<int, core::kPriorityCount> quotas) {
  Uint128 total[core::kPriorityCount] = {0, 0};
  for (const auto& t : gpu_time) {
    for (int p = 0; p < core::kPriorityCount; ++p) total[p] += t[p];
  }
  TeamLimitsMap out;
  for (size_t i = 0; i < teams.size(); ++i) {
    int guarantee[core::kPriorityCount] = {0, 0};
    for (int p = 0; p < core::kPriorityCount; ++p) {
      if (total[p] == 0 || quotas[p] <= 0) continue;
      guarantee[p] = static_cast<int>(static_cast<Uint128>(quotas[p]) * gpu_time[i][p] / total[p]);
    }
    if (guarantee[0] == 0 && guarantee[1] == 0) continue;
    core::TeamLimits limits;
    limits.online = guarantee[0];
    limits.batch = guarantee[1];
    out[teams[i]] = limits;
  }
  return out;
}

}  // namespace dgpu::sim
