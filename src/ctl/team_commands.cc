// dgpuctl's team and quota commands: get / set quota, get / set / delete teams, and usage.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

#include "common/number.h"
#include "common/time_util.h"
#include "ctl/api_call.h"
#include "ctl/commands.h"
#include "ctl/format.h"
#include "ctl/render.h"

namespace dgpu::ctl {

using nlohmann::json;

int Usage(const CtlContext& ctx, const UsageOptions& options) {
  std::string path = "/usage?group_by=" + UrlEncode(options.by);
  if (!options.from.empty()) path += "&from=" + UrlEncode(options.from);
  if (!options.to.empty()) path += "&to=" + UrlEncode(options.to);
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, path, nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("groups") || !(*reply)["groups"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/usage did not return a groups array");
  }
  Table table({options.by, "gpu-hours", "gpu-seconds", "tasks"});
  for (const json& g : (*reply)["groups"]) {
    const auto seconds = g.find("gpu_seconds");
    char hours[32] = "-";
    char secs[32] = "-";
    if (seconds != g.end() && seconds->is_number()) {
      std::snprintf(hours, sizeof(hours), "%.2f", seconds->get<double>() / 3600.0);
      std::snprintf(secs, sizeof(secs), "%.1f", seconds->get<double>());
    }
    const std::string name = Field(g, "name");
    table.AddRow({name.empty() ? "(none)" : name, hours, secs, Cell(Field(g, "tasks"))});
  }
  if (!ctx.no_headers) {
    *ctx.out << "GPU time from " << Field(*reply, "from") << " to " << Field(*reply, "to") << "\n";
  }
  if (table.size() == 0) {
    *ctx.err << "no GPU time in this range\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int ShowQuota(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/quota", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "GET /api/v1/quota did not return an object");
  Table table({"class", "quota", "used", "available", "borrowed", "lent"});
  for (const char* name : {"online", "batch"}) {
    json klass = reply->value(name, json::object());
    table.AddRow({name, Cell(Field(klass, "quota")), Cell(Field(klass, "used")),
                  Cell(Field(klass, "available")), Cell(Field(klass, "borrowed")),
                  Cell(Field(klass, "lent"))});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (ctx.no_headers) return kExitOk;
  *ctx.out << "\ntotal GPUs: " << OrDash(Field(*reply, "total_gpus")) << "\n";
  // The teams holding a guarantee or GPUs in each class (a scheduler with teams sends them).
  Table teams({"team", "class", "guaranteed", "used", "borrowed"});
  for (const char* name : {"online", "batch"}) {
    json klass = reply->value(name, json::object());
    auto it = klass.find("teams");
    if (it == klass.end() || !it->is_object()) continue;
    for (const auto& [team, use] : it->items()) {
      teams.AddRow({Cell(team), name, Cell(Field(use, "guaranteed")), Cell(Field(use, "used")),
                    Cell(Field(use, "borrowed"))});
    }
  }
  if (teams.size() > 0) *ctx.out << "\n" << teams.Render(true);
  return kExitOk;
}

int SetQuota(const CtlContext& ctx, double online_percent) {
  if (!(online_percent >= 0.0 && online_percent <= 1.0)) {
    *ctx.err << "error: --online must be a fraction between 0 and 1, e.g. 0.7\n";
    return kExitUsage;
  }
  json body = {{"online_percent", online_percent}};
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kPut, "/quota", &body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  long online_bp = std::lround(online_percent * 10000);
  *ctx.out << "quota updated: online " << FormatPercent(online_bp) << ", batch "
           << FormatPercent(10000 - online_bp) << "\n";
  return kExitOk;
}

namespace {

// "16/4/0": the GPUs guaranteed to the team in a class, those it uses, and those of them beyond
// its guarantee.
std::string TeamClassCell(const json& team, const char* name) {
  auto it = team.find(name);
  if (it == team.end() || !it->is_object()) return "-";
  return OrDash(Field(*it, "guaranteed")) + "/" + OrDash(Field(*it, "used")) + "/" +
         OrDash(Field(*it, "borrowed"));
}

// "16 guaranteed, 4 used, 0 borrowed".
std::string TeamClassText(const json& team, const char* name) {
  auto it = team.find(name);
  if (it == team.end() || !it->is_object()) return "";
  return OrDash(Field(*it, "guaranteed")) + " guaranteed, " + OrDash(Field(*it, "used")) +
         " used, " + OrDash(Field(*it, "borrowed")) + " borrowed";
}

// max_gpus: null is no cap.
std::string MaxGpusText(const json& team) {
  auto it = team.find("max_gpus");
  if (it == team.end()) return "";
  return it->is_null() ? "none" : Text(*it);
}

// default_time_limit: seconds, null when the team has none.
std::string TimeLimitText(const json& team) {
  auto it = team.find("default_time_limit");
  if (it == team.end()) return "";
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) return "the scheduler's default";
  return common::FormatCompoundDuration(std::chrono::seconds(it->get<int64_t>())) +
         " for tasks submitted without one";
}

// Whole GPUs from an option's text: 0 or more.
std::optional<int64_t> ParseGpus(const std::string& text) {
  StatusOr<int64_t> value = common::ParseInt64(text, "");
  if (!value.ok() || *value < 0) return std::nullopt;
  return *value;
}

}  // namespace

std::string DescribeTeam(const json& team) {
  std::string max_gpus = MaxGpusText(team);
  if (max_gpus == "none") max_gpus = "none (no cap)";
  std::string usage = DecimalField(team, "usage_gpu_seconds");
  if (!usage.empty()) usage += " GPU-seconds";
  std::vector<std::pair<std::string, std::string>> lines = {
      {"Team", Field(team, "name")},
      {"Configured", YesNo(team, "configured")},
      {"Online", TeamClassText(team, "online")},
      {"Batch", TeamClassText(team, "batch")},
      {"Max GPUs", max_gpus},
      {"Weight", DecimalField(team, "weight")},
      {"Pending", Field(team, "pending")},
      {"Usage", usage},
  };
  // A server older than time limits sends none.
  if (team.contains("default_time_limit")) {
    lines.insert(lines.begin() + 6, {"Time limit", TimeLimitText(team)});
  }
  return RenderFields(lines, LabelWidth(lines, 0));
}

int GetTeams(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/teams", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("teams") || !(*reply)["teams"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/teams did not return a teams array");
  }
  const bool wide = ctx.output == OutputFormat::kWide;
  std::vector<std::string> header = {"team", "online", "batch", "max gpus", "weight", "pending"};
  if (wide) header.insert(header.end(), {"configured", "usage (gpu-s)"});
  Table table(header);
  for (const json& team : (*reply)["teams"]) {
    std::vector<std::string> row = {
        Cell(Field(team, "name")),          TeamClassCell(team, "online"),
        TeamClassCell(team, "batch"),       Cell(MaxGpusText(team)),
        Cell(DecimalField(team, "weight")), Cell(Field(team, "pending"))};
    if (wide) {
      row.insert(row.end(),
                 {Cell(YesNo(team, "configured")), Cell(DecimalField(team, "usage_gpu_seconds"))});
    }
    table.AddRow(std::move(row));
  }
  if (table.size() == 0) {
    *ctx.err << "no teams found\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (!ctx.no_headers) {
    *ctx.out << "\nONLINE, BATCH: guaranteed/used/borrowed GPUs (borrowed: used beyond the "
                "guarantee)\n";
  }
  return kExitOk;
}

int GetTeam(const CtlContext& ctx, const std::string& name) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, TeamPath(name), nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "the team is not a JSON object");
  *ctx.out << DescribeTeam(*reply);
  return kExitOk;
}

std::optional<json> BuildTeamBody(const TeamOptions& options, std::string* error) {
  if (!options.online && !options.batch && !options.max_gpus && !options.weight &&
      !options.time_limit) {
    *error = "team set needs at least one of --online, --batch, --max-gpus, --weight, --time-limit";
    return std::nullopt;
  }
  json body = json::object();
  for (const auto& [flag, key, value] : {std::tuple{"--online", "online", &options.online},
                                         std::tuple{"--batch", "batch", &options.batch}}) {
    if (!value->has_value()) continue;
    auto gpus = ParseGpus(**value);
    if (!gpus) {
      *error =
          std::string(flag) + " expects a whole number of GPUs, 0 or more; got '" + **value + "'";
      return std::nullopt;
    }
    body[key] = *gpus;
  }
  if (options.max_gpus) {
    if (*options.max_gpus == "none") {
      body["max_gpus"] = nullptr;
    } else {
      auto gpus = ParseGpus(*options.max_gpus);
      if (!gpus) {
        *error = "--max-gpus expects a whole number of GPUs, 0 or more, or none (no cap); got '" +
                 *options.max_gpus + "'";
        return std::nullopt;
      }
      body["max_gpus"] = *gpus;
    }
  }
  if (options.weight) {
    StatusOr<double> weight = common::ParseDouble(*options.weight, "--weight");
    if (!weight.ok() || !(*weight > 0)) {
      *error = "--weight expects a number above 0, e.g. 1 or 2.5; got '" + *options.weight + "'";
      return std::nullopt;
    }
    body["weight"] = *weight;
  }
  if (options.time_limit) {
    if (*options.time_limit == "none") {
      body["default_time_limit"] = nullptr;
    } else {
      auto limit = common::ParseDuration(*options.time_limit);
      if (!limit || limit->count() <= 0 || limit->count() % 1000 != 0) {
        *error =
            "--time-limit expects a duration of whole seconds like 90m, 2h, 7d, or none; got '" +
            *options.time_limit + "'";
        return std::nullopt;
      }
      body["default_time_limit"] = limit->count() / 1000;
    }
  }
  return body;
}

int SetTeam(const CtlContext& ctx, const TeamOptions& options) {
  std::string error;
  auto body = BuildTeamBody(options, &error);
  if (!body) {
    *ctx.err << "error: " << error << "\n";
    return kExitUsage;
  }
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kPut, TeamPath(options.name), &*body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "the team is not a JSON object");
  *ctx.out << DescribeTeam(*reply);
  return kExitOk;
}

int DeleteTeam(const CtlContext& ctx, const std::string& name) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kDelete, TeamPath(name), nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  *ctx.out << "team " << name << " deleted\n";
  return kExitOk;
}

}  // namespace dgpu::ctl
