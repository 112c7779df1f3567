// dgpuctl's node commands: get gpus / agents / autoscale, top, cordon, uncordon and drain.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/cpu_list.h"
#include "ctl/api_call.h"
#include "ctl/commands.h"
#include "ctl/format.h"
#include "ctl/render.h"

namespace dgpu::ctl {

using nlohmann::json;

int GetGpus(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/gpus", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("gpus") || !(*reply)["gpus"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/gpus did not return a gpus array");
  }
  // The health column only when a GPU is unhealthy: the usual table stays as it was.
  bool any_reason = false;
  for (const json& gpu : (*reply)["gpus"])
    any_reason = any_reason || !Field(gpu, "health_reason").empty();
  std::vector<std::string> columns = {"id", "node", "index", "model", "memory", "status", "task"};
  if (any_reason) columns.push_back("health");
  Table table(columns);
  for (const json& gpu : (*reply)["gpus"]) {
    std::string memory = Field(gpu, "memory_mb");
    std::vector<std::string> row = {Cell(Field(gpu, "id")),
                                    Cell(Field(gpu, "node_id")),
                                    Cell(Field(gpu, "index")),
                                    Cell(Field(gpu, "model")),
                                    memory.empty() ? "-" : memory + "MB",
                                    Cell(Field(gpu, "status")),
                                    Cell(Field(gpu, "current_task"))};
    if (any_reason) row.push_back(Cell(Field(gpu, "health_reason")));
    table.AddRow(std::move(row));
  }
  if (table.size() == 0) {
    *ctx.err << "no GPUs found\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (!ctx.no_headers) {
    *ctx.out << "\n"
             << OrDash(Field(*reply, "total")) << " GPUs: " << OrDash(Field(*reply, "idle"))
             << " idle, " << OrDash(Field(*reply, "busy")) << " busy, "
             << OrDash(Field(*reply, "offline")) << " offline";
    const std::string unhealthy = Field(*reply, "unhealthy");
    if (!unhealthy.empty() && unhealthy != "0") *ctx.out << ", " << unhealthy << " unhealthy";
    *ctx.out << "\n";
  }
  return kExitOk;
}

namespace {

// One node's line of `top`, from its GPUs in GET /gpus.
struct NodeUse {
  int gpus = 0, busy = 0, idle = 0, offline = 0, unhealthy = 0;
  int reporting = 0;       // GPUs with a utilization
  double utilization = 0;  // Their sum
  std::string map;         // One character per GPU, by index: # busy . idle x offline ! unhealthy
};

std::string Percent(double ratio) { return std::to_string(std::lround(ratio * 100)) + "%"; }

// "a2" before "a10": names compared with their digit runs as numbers.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      const std::string da = a.substr(i, ei - i), db = b.substr(j, ej - j);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

int Top(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/gpus", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (!reply->is_object() || !reply->contains("gpus") || !(*reply)["gpus"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/gpus did not return a gpus array");
  }
  std::map<std::string, NodeUse> nodes;
  std::map<std::string, std::map<int, char>> maps;
  NodeUse all;
  for (const json& gpu : (*reply)["gpus"]) {
    const std::string node = Field(gpu, "node_id");
    const std::string status = Field(gpu, "status");
    NodeUse& n = nodes[node];
    char mark = '.';
    for (NodeUse* u : {&n, &all}) {
      u->gpus++;
      if (status == "busy") {
        u->busy++;
        mark = '#';
      } else if (status == "offline") {
        u->offline++;
        mark = 'x';
      } else if (status == "unhealthy") {
        u->unhealthy++;
        mark = '!';
      } else {
        u->idle++;
      }
      auto util = gpu.find("utilization");
      if (util != gpu.end() && util->is_number() && status != "offline") {
        u->reporting++;
        u->utilization += util->get<double>();
      }
    }
    maps[node][gpu.value("index", 0)] = mark;
  }
  std::vector<std::string> order;
  for (auto& [name, use] : nodes) {
    for (const auto& [index, mark] : maps[name]) use.map += mark;
    order.push_back(name);
  }
  std::sort(order.begin(), order.end(), NaturalLess);
  const auto util_of = [](const NodeUse& u) {
    return u.reporting == 0 ? json(nullptr) : json(u.utilization / u.reporting);
  };
  if (ctx.output == OutputFormat::kJson) {
    json out = json::array();
    for (const auto& name : order) {
      const NodeUse& u = nodes[name];
      out.push_back({{"node_id", name},
                     {"gpus", u.gpus},
                     {"busy", u.busy},
                     {"idle", u.idle},
                     {"offline", u.offline},
                     {"unhealthy", u.unhealthy},
                     {"utilization", util_of(u)}});
    }
    *ctx.out << DumpJson(json{{"nodes", out}}) << "\n";
    return kExitOk;
  }
  if (order.empty()) {
    *ctx.err << "no GPUs found\n";
    return kExitOk;
  }
  Table table({"node", "gpus", "busy", "idle", "down", "util", "gpu use"});
  for (const auto& name : order) {
    const NodeUse& u = nodes[name];
    table.AddRow({name, std::to_string(u.gpus), std::to_string(u.busy), std::to_string(u.idle),
                  std::to_string(u.offline + u.unhealthy),
                  u.reporting == 0 ? "-" : Percent(u.utilization / u.reporting), u.map});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (!ctx.no_headers) {
    *ctx.out << "\n"
             << all.gpus << " GPUs: " << all.busy << " busy ("
             << Percent(static_cast<double>(all.busy) / all.gpus) << "), " << all.idle << " idle, "
             << all.offline << " offline";
    if (all.unhealthy > 0) *ctx.out << ", " << all.unhealthy << " unhealthy";
    if (all.reporting > 0) {
      *ctx.out << "; utilization " << Percent(all.utilization / all.reporting) << " on "
               << all.reporting << " reporting GPUs";
    }
    *ctx.out << "\n(gpu use: # busy, . idle, x offline, ! unhealthy)\n";
  }
  return kExitOk;
}

namespace {

// An agent's NVLink groups as "0-3|4-7" (runs of indices as ranges, "0,2|1,3" otherwise);
// empty when it has none.
std::string NvlinkGroups(const json& agent) {
  std::string out;
  auto groups = agent.find("nvlink_groups");
  if (groups == agent.end() || !groups->is_array()) return out;
  for (const json& group : *groups) {
    if (!group.is_array()) continue;
    std::vector<int> gpus;
    for (const json& g : group) {
      if (g.is_number_integer()) gpus.push_back(g.get<int>());
    }
    if (gpus.empty()) continue;
    std::sort(gpus.begin(), gpus.end());
    if (!out.empty()) out += '|';
    out += common::FormatCpuList(gpus);  // The kernel's list format, for GPU indices too.
  }
  return out;
}

}  // namespace

int GetAgents(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/agents", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("agents") || !(*reply)["agents"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/agents did not return an agents array");
  }
  Table table({"id", "address", "status", "gpus", "free", "cpus", "memory", "isolation", "tasks",
               "nvlink", "last heartbeat", "labels"});
  // Given to tasks of what the node offers ("-" where it reports none).
  const auto used_of = [](const json& agent, const char* used, const char* total,
                          const char* unit) -> std::string {
    const std::string of = Field(agent, total);
    if (of.empty()) return "-";
    return Field(agent, used) + "/" + of + unit;
  };
  const Clock::time_point now = ctx.now();
  for (const json& agent : (*reply)["agents"]) {
    std::string gpus;
    auto it = agent.find("gpus");
    if (it != agent.end() && it->is_array()) {
      gpus = std::to_string(it->size());
    } else {
      gpus = Field(agent, "gpus");
    }
    std::string heartbeat = AgeOf(agent, "last_heartbeat", now);
    std::string labels;  // rack=r1,zone=a
    if (auto l = agent.find("labels"); l != agent.end() && l->is_object()) {
      for (const auto& [key, value] : l->items()) {
        if (!labels.empty()) labels += ',';
        labels += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    table.AddRow(
        {Cell(Field(agent, "id")), Cell(Field(agent, "address")), Cell(Field(agent, "status")),
         Cell(gpus), Cell(Field(agent, "free_gpus")), used_of(agent, "allocated_cpus", "cpus", ""),
         used_of(agent, "allocated_memory_mb", "memory_mb", "MB"), Cell(Field(agent, "isolation")),
         Cell(Field(agent, "tasks")), Cell(NvlinkGroups(agent)),
         heartbeat == "-" ? "-" : heartbeat + " ago", Cell(labels)});
  }
  if (table.size() == 0) {
    *ctx.err << "no agents found\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int GetAutoscale(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/autoscale", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("groups") || !(*reply)["groups"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/autoscale did not return a groups array");
  }
  if (!reply->value("enabled", false)) {
    *ctx.err << "autoscaling is off (autoscale.enabled in the scheduler's configuration)\n";
    return kExitOk;
  }
  Table table({"group", "model", "gpus/node", "nodes", "online", "idle", "booting", "releasing",
               "waiting", "last error"});
  for (const json& g : (*reply)["groups"]) {
    const int booting = g.value("booting", 0) + g.value("requested", 0);
    const std::string error = Field(g, "last_error");
    table.AddRow({Cell(Field(g, "name")), Cell(Field(g, "model")), Cell(Field(g, "gpus_per_node")),
                  Field(g, "min_nodes") + ".." + Field(g, "max_nodes"), Cell(Field(g, "online")),
                  Cell(Field(g, "idle")), std::to_string(booting), Cell(Field(g, "releasing")),
                  Cell(Field(g, "waiting_tasks")), error.empty() ? "-" : error});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int SetNodeMode(const CtlContext& ctx, const NodeModeOptions& options) {
  ApiFailure failure;
  json body = json::object();
  if (options.verb == "drain") {
    if (options.evict) body["evict"] = true;
    if (options.grace_seconds) body["grace_seconds"] = *options.grace_seconds;
  }
  auto reply = CallApi(ctx, HttpMethod::kPost,
                       "/agents/" + UrlEncode(options.node) + "/" + options.verb, &body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("agent") || !(*reply)["agent"].is_object()) {
    return BadResponse(ctx, "the answer has no agent object");
  }
  const json& agent = (*reply)["agent"];
  *ctx.out << "node " << options.node << " is " << Field(agent, "status");
  if (options.verb == "drain") {
    const std::string tasks = Field(agent, "tasks");
    if (options.evict) {
      *ctx.out << "; " << Field(*reply, "evicted") << " task(s) evicted (requeued)";
    } else if (!tasks.empty() && tasks != "0") {
      *ctx.out << "; its " << tasks << " task(s) run to their end";
    }
  }
  *ctx.out << "\n";
  return kExitOk;
}

}  // namespace dgpu::ctl
