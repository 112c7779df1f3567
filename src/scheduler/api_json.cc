#include "scheduler/api_json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <restinio/uri_helpers.hpp>
#include <type_traits>

#include "common/number.h"
#include "common/time_util.h"
#include "core/task_fields.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

bool IsEnvName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::optional<ApiError> ParseJsonObject(std::string_view body, json* out) {
  if (body.size() > kMaxBodyBytes) {
    return ApiError{413, "payload_too_large",
                    "request body is " + std::to_string(body.size()) + " bytes; the limit is " +
                        std::to_string(kMaxBodyBytes)};
  }
  try {
    *out = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    return ApiError{400, "invalid_json",
                    "malformed JSON at byte " + std::to_string(e.byte) + ": " +
                        std::string(e.what()).substr(std::string(e.what()).find(':') + 2)};
  } catch (const json::exception& e) {
    // E.g. out_of_range for a number that overflows a double (1e400).
    return ApiError{
        400, "invalid_json",
        "malformed JSON: " + std::string(e.what()).substr(std::string(e.what()).find(']') + 2)};
  }
  if (!out->is_object()) return ApiError{400, "invalid_json", "request body must be a JSON object"};
  return std::nullopt;
}

std::string TypeName(const json& v) { return v.type_name(); }

std::optional<ApiError> GetString(const json& v, std::string_view field, size_t max,
                                  std::string* out) {
  if (!v.is_string()) {
    return InvalidField(std::string(field) + " must be a string, got " + TypeName(v));
  }
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max) {
    return InvalidField(std::string(field) + " is " + std::to_string(s.size()) +
                        " bytes; the limit is " + std::to_string(max));
  }
  if (s.find('\0') != std::string::npos) {
    return InvalidField(std::string(field) + " must not contain a NUL byte");
  }
  *out = s;
  return std::nullopt;
}

std::optional<ApiError> GetInteger(const json& v, std::string_view field, int64_t lo, int64_t hi,
                                   int64_t* out) {
  if (!v.is_number_integer()) {
    std::string got = v.is_number_float() ? "a non-integer number" : TypeName(v);
    return InvalidField(std::string(field) + " must be an integer, got " + got);
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return InvalidField(std::string(field) + " must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi));
  }
  int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) {
    return InvalidField(std::string(field) + " must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + std::to_string(n));
  }
  *out = n;
  return std::nullopt;
}

json TimeOrNull(core::TimeMicros t) {
  return t == 0 ? json(nullptr) : json(common::FormatRfc3339(t));
}

}  // namespace

std::string ApiError::Body() const {
  return json{{"error", {{"code", code}, {"message", message}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

ApiError InvalidField(std::string message) {
  return ApiError{400, "invalid_field", std::move(message)};
}

std::optional<ApiError> CheckJsonContentType(std::string_view ct) {
  if (ct.empty()) return std::nullopt;
  std::string lower(ct.substr(0, ct.find(';')));
  lower.erase(
      std::remove_if(lower.begin(), lower.end(), [](unsigned char c) { return std::isspace(c); }),
      lower.end());
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower == "application/json") return std::nullopt;
  return ApiError{415, "unsupported_media_type",
                  "Content-Type must be application/json, got " + std::string(ct)};
}

std::optional<ApiError> ParseDependsOn(const json& list, core::Dependencies* out) {
  if (!list.is_array()) {
    return InvalidField("depends_on must be a list of {task_id, condition} objects, got " +
                        TypeName(list));
  }
  if (list.size() > core::kMaxDependencies) {
    return InvalidField("depends_on has " + std::to_string(list.size()) +
                        " entries; the limit is " + std::to_string(core::kMaxDependencies));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string where = "depends_on[" + std::to_string(i) + "]";
    if (!entry.is_object()) {
      return InvalidField(where + " must be a {task_id, condition} object, got " + TypeName(entry));
    }
    for (const auto& [key, value] : entry.items()) {
      if (key != "task_id" && key != "condition") {
        return InvalidField(where + " has an unknown field \"" + key + "\"");
      }
    }
    core::Dependency d;
    auto id = entry.find("task_id");
    if (id == entry.end() || !id->is_string()) {
      return InvalidField(where + ".task_id is required (a task id such as \"task-1\")");
    }
    std::optional<core::TaskNumber> parent = core::ParseTaskId(id->get_ref<const std::string&>());
    if (!parent) {
      return InvalidField(where + ".task_id \"" + id->get_ref<const std::string&>() +
                          "\" is not a task id (task-<number>)");
    }
    d.task = *parent;
    if (auto c = entry.find("condition"); c != entry.end() && !c->is_null()) {
      std::optional<core::DependencyCondition> condition;
      if (c->is_string())
        condition = core::ParseDependencyCondition(c->get_ref<const std::string&>());
      if (!condition) {
        return InvalidField(
            where + ".condition must be afterok, afternotok, afterany or after, got " + c->dump());
      }
      d.condition = *condition;
    }
    out->push_back(d);
  }
  return std::nullopt;
}

std::optional<ApiError> ParseSubmitRequest(std::string_view body, core::TaskSpec* spec,
                                           int* array) {
  json doc;
  if (auto err = ParseJsonObject(body, &doc)) return err;
  static const char* kKnown[] = {"priority",
                                 "gpu_count",
                                 "command",
                                 "gpu_model",
                                 "env",
                                 "name",
                                 "timeout_seconds",
                                 "image",
                                 "team",
                                 "user",
                                 "preemptible",
                                 "preemption_grace_seconds",
                                 "array",
                                 "max_retries",
                                 "retry_backoff_seconds",
                                 "nodes",
                                 "gpus_per_node",
                                 "cpus",
                                 "memory_mb",
                                 "node_selector",
                                 "depends_on"};
  for (const auto& [key, value] : doc.items()) {
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return ApiError{400, "unknown_field", "unknown field \"" + key + "\""};
    }
  }
  core::TaskSpec s;
  // priority
  auto it = doc.find("priority");
  if (it == doc.end() || it->is_null()) return InvalidField("priority is required (high or low)");
  if (!it->is_string())
    return InvalidField("priority must be \"high\" or \"low\", got " + TypeName(*it));
  auto prio = core::ParsePriority(it->get_ref<const std::string&>());
  if (!prio) {
    return InvalidField("priority must be \"high\" or \"low\", got \"" +
                        it->get_ref<const std::string&>() + "\"");
  }
  s.priority = *prio;
  // gpu_count, or a gang's nodes x gpus_per_node (gpu_count, if given too, must be their product)
  int64_t nodes = 1;
  if (it = doc.find("nodes"); it != doc.end() && !it->is_null()) {
    if (auto e = GetInteger(*it, "nodes", 1, core::kMaxGangNodes, &nodes)) return e;
  }
  int64_t per_node = 0;
  if (it = doc.find("gpus_per_node"); it != doc.end() && !it->is_null()) {
    if (auto e = GetInteger(*it, "gpus_per_node", 1, kMaxGpuCount, &per_node)) return e;
    if (nodes * per_node > kMaxGpuCount) {
      return InvalidField("nodes x gpus_per_node must be at most " + std::to_string(kMaxGpuCount) +
                          " GPUs, got " + std::to_string(nodes) + " x " + std::to_string(per_node));
    }
  }
  it = doc.find("gpu_count");
  int64_t n = nodes * per_node;
  if (it == doc.end() || it->is_null()) {
    if (per_node == 0) return InvalidField("gpu_count is required");
  } else {
    if (auto e = GetInteger(*it, "gpu_count", 1, kMaxGpuCount, &n)) return e;
    if (per_node != 0 && n != nodes * per_node) {
      return InvalidField("gpu_count " + std::to_string(n) + " is not nodes x gpus_per_node (" +
                          std::to_string(nodes) + " x " + std::to_string(per_node) + ")");
    }
    if (n % nodes != 0) {
      return InvalidField("gpu_count " + std::to_string(n) + " is not split evenly over " +
                          std::to_string(nodes) + " nodes: give gpus_per_node");
    }
  }
  s.gpu_count = static_cast<int>(n);
  s.nodes = static_cast<int32_t>(nodes);
  // command
  it = doc.find("command");
  if (it == doc.end() || it->is_null()) return InvalidField("command is required");
  if (auto e = GetString(*it, "command", kMaxCommandBytes, &s.command)) return e;
  if (std::all_of(s.command.begin(), s.command.end(),
                  [](unsigned char c) { return std::isspace(c); })) {
    return InvalidField("command must not be empty");
  }
  // Optional fields.
  if (it = doc.find("gpu_model"); it != doc.end() && !it->is_null()) {
    if (auto e = GetString(*it, "gpu_model", kMaxShortField, &s.gpu_model)) return e;
  }
  if (it = doc.find("name"); it != doc.end() && !it->is_null()) {
    if (auto e = GetString(*it, "name", kMaxShortField, &s.name)) return e;
  }
  if (it = doc.find("image"); it != doc.end() && !it->is_null()) {
    if (auto e = GetString(*it, "image", 1024, &s.image)) return e;
  }
  if (it = doc.find("timeout_seconds"); it != doc.end() && !it->is_null()) {
    if (auto e = GetInteger(*it, "timeout_seconds", 0, kMaxTimeoutSeconds, &s.timeout_seconds)) {
      return e;
    }
  }
  if (it = doc.find("team"); it != doc.end() && !it->is_null()) {
    if (auto e = GetString(*it, "team", 63, &s.team)) return e;
    if (!core::IsValidTeamName(s.team)) {
      return InvalidField(
          "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
          "digit; got \"" +
          s.team + "\"");
    }
  }
  if (it = doc.find("user"); it != doc.end() && !it->is_null()) {
    if (auto e = GetString(*it, "user", kMaxShortField, &s.user)) return e;
  }
  if (it = doc.find("preemptible"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return InvalidField("preemptible must be true or false, got " + TypeName(*it));
    }
    s.preemptible = it->get<bool>();
  }
  if (it = doc.find("preemption_grace_seconds"); it != doc.end() && !it->is_null()) {
    int64_t grace = 0;
    if (auto e = GetInteger(*it, "preemption_grace_seconds", 0, kMaxGraceSeconds, &grace)) {
      return e;
    }
    s.preemption_grace_seconds = static_cast<int32_t>(grace);
  }
  if (it = doc.find("env"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) {
      return InvalidField("env must be an object of string to string, got " + TypeName(*it));
    }
    if (it->size() > kMaxEnvEntries) {
      return InvalidField("env has " + std::to_string(it->size()) + " entries; the limit is " +
                          std::to_string(kMaxEnvEntries));
    }
    for (const auto& [key, value] : it->items()) {
      if (key.size() > kMaxShortField || !IsEnvName(key)) {
        return InvalidField("env key \"" + key +
                            "\" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)");
      }
      std::string v;
      if (auto e = GetString(value, "env." + key, kMaxCommandBytes, &v)) return e;
      s.env.emplace_back(key, std::move(v));
    }
    std::sort(s.env.begin(), s.env.end());
  }
  if (it = doc.find("node_selector"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) {
      return InvalidField("node_selector must be an object of label keys to values, got " +
                          TypeName(*it));
    }
    if (it->size() > core::kMaxSelectorEntries) {
      return InvalidField("node_selector has " + std::to_string(it->size()) +
                          " entries; the limit is " + std::to_string(core::kMaxSelectorEntries));
    }
    for (const auto& [key, value] : it->items()) {
      if (std::string why = core::CheckLabelKey(key); !why.empty()) {
        return InvalidField("node_selector key \"" + key + "\" is not valid: " + why);
      }
      if (!value.is_string()) {
        return InvalidField("node_selector." + key + " must be a string, got " + TypeName(value));
      }
      const std::string& v = value.get_ref<const std::string&>();
      if (std::string why = core::CheckLabelValue(v); !why.empty()) {
        return InvalidField("node_selector." + key + " \"" + v + "\" is not valid: " + why);
      }
      s.node_selector.emplace_back(key, v);
    }
    std::sort(s.node_selector.begin(), s.node_selector.end());
  }
  if (it = doc.find("depends_on"); it != doc.end() && !it->is_null()) {
    if (auto e = ParseDependsOn(*it, &s.depends_on)) return e;
  }
  if (it = doc.find("max_retries"); it != doc.end() && !it->is_null()) {
    int64_t n = 0;
    if (auto e = GetInteger(*it, "max_retries", 0, kMaxRetries, &n)) return e;
    s.max_retries = static_cast<int32_t>(n);
  }
  if (it = doc.find("retry_backoff_seconds"); it != doc.end() && !it->is_null()) {
    int64_t n = 0;
    // At least 1 s: an agent tells a task's runs apart by the task's id, so a rerun must not
    // end on the same node before the previous run's finish is acknowledged there.
    if (auto e = GetInteger(*it, "retry_backoff_seconds", 1, kMaxGraceSeconds, &n)) return e;
    s.retry_backoff_seconds = static_cast<int32_t>(n);
  }
  // Each member's CPUs (a number > 0, in thousandths at most) and memory (MiB); omitted: its
  // GPUs' share of the node it is placed on.
  if (it = doc.find("cpus"); it != doc.end() && !it->is_null()) {
    if (!it->is_number()) return InvalidField("cpus must be a number, got " + TypeName(*it));
    const double cpus = it->get<double>();
    const double milli = std::round(cpus * 1000.0);
    if (!(cpus > 0) || cpus > kMaxCpus) {
      return InvalidField("cpus must be more than 0 and at most " + std::to_string(kMaxCpus) +
                          ", got " + it->dump());
    }
    if (std::abs(milli - cpus * 1000.0) > 1e-6 * std::max(1.0, cpus)) {
      return InvalidField("cpus must have at most 3 decimals, got " + it->dump());
    }
    s.cpus_milli = static_cast<int64_t>(milli);
  }
  if (it = doc.find("memory_mb"); it != doc.end() && !it->is_null()) {
    if (auto e = GetInteger(*it, "memory_mb", 1, kMaxMemoryMb, &s.memory_mb)) return e;
  }
  if (it = doc.find("array"); it != doc.end() && !it->is_null()) {
    int64_t n = 0;
    if (auto e = GetInteger(*it, "array", 1, kMaxArraySize, &n)) return e;
    if (array == nullptr) return ApiError{400, "unknown_field", "unknown field \"array\""};
    *array = static_cast<int>(n);
  }
  *spec = std::move(s);
  return std::nullopt;
}

std::optional<ApiError> ParseQuotaRequest(std::string_view body, double* online_percent) {
  json doc;
  if (auto err = ParseJsonObject(body, &doc)) return err;
  for (const auto& [key, value] : doc.items()) {
    if (key != "online_percent" && key != "batch_percent") {
      return ApiError{400, "unknown_field", "unknown field \"" + key + "\""};
    }
  }
  auto check = [](const json& v, const char* field, double* out) -> std::optional<ApiError> {
    if (!v.is_number()) {
      return InvalidField(std::string(field) + " must be a number between 0 and 1, got " +
                          std::string(v.type_name()));
    }
    double x = v.get<double>();
    if (!(x >= 0.0 && x <= 1.0)) {
      return InvalidField(std::string(field) + " must be between 0 and 1, got " + v.dump());
    }
    *out = x;
    return std::nullopt;
  };
  auto on = doc.find("online_percent");
  auto batch = doc.find("batch_percent");
  if (on == doc.end() && batch == doc.end()) return InvalidField("online_percent is required");
  double online = 0, b = 0;
  if (on != doc.end()) {
    if (auto e = check(*on, "online_percent", &online)) return e;
  }
  if (batch != doc.end()) {
    if (auto e = check(*batch, "batch_percent", &b)) return e;
    if (on == doc.end()) {
      online = 1.0 - b;
    } else if (std::abs(online + b - 1.0) > 1e-9) {
      return InvalidField("online_percent and batch_percent must add up to 1");
    }
  }
  *online_percent = online;
  return std::nullopt;
}

std::string GpuId(const std::string& node_id, int index) {
  return node_id + "-gpu-" + std::to_string(index);
}

nlohmann::json TaskEventsToJson(const std::vector<core::TaskEventRecord>& events) {
  json list = json::array();
  for (const core::TaskEventRecord& e : events) {
    json j = {{"time", common::FormatRfc3339(e.time)}, {"type", e.type}};
    if (!e.node_id.empty()) j["node_id"] = e.node_id;
    j["message"] = e.message;
    list.push_back(std::move(j));
  }
  return {{"events", std::move(list)}};
}

namespace {

// A field's value as the task object shows it (ApiForm::kValue).
template <typename T>
json ApiValue(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return std::string(core::ToString(v));
  } else if constexpr (std::is_same_v<T, core::Allocation>) {
    json allocation = json::array();
    for (const auto& na : v) {
      json entry{{"node_id", na.node_id}, {"gpu_indices", na.gpu_indices}};
      // The CPUs the member is bound to (executor.cpu_binding: cpuset); null: not bound.
      entry["cpu_set"] = na.cpu_set.empty() ? json(nullptr) : json(na.cpu_set);
      allocation.push_back(std::move(entry));
    }
    return allocation;
  } else if constexpr (std::is_same_v<T, core::Dependencies>) {
    json deps = json::array();
    for (const core::Dependency& d : v) {
      deps.push_back({{"task_id", core::FormatTaskId(d.task)},
                      {"condition", core::ToString(d.condition)},
                      {"state", core::ToString(d.state)}});
    }
    return deps;
  } else if constexpr (std::is_same_v<T, std::vector<std::pair<std::string, std::string>>>) {
    json env = json::object();
    for (const auto& [k, val] : v) env[k] = val;
    return env;
  } else {
    return v;
  }
}

}  // namespace

json TaskToJson(const core::Task& t, core::PendingReason reason, std::string_view pending_detail,
                core::TaskNumber reserved_for) {
  json out = json::object();
  core::ForEachTaskField([&](int, const auto& field) {
    using T = core::TaskFieldType<decltype(field)>;
    const T& v = field.get(t);
    switch (field.info.api) {
      case core::ApiForm::kHidden:
      case core::ApiForm::kComputed:
        return;
      case core::ApiForm::kValue:
        out[std::string(field.info.name)] = ApiValue(v);
        return;
      case core::ApiForm::kTime:
        if constexpr (std::is_same_v<T, core::TimeMicros>) {
          out[std::string(field.info.name)] = TimeOrNull(v);
        }
        return;
      case core::ApiForm::kNullWhenUnset:
        out[std::string(field.info.name)] =
            v == core::TaskFieldDefault(field) ? json(nullptr) : ApiValue(v);
        return;
    }
  });
  // The fields worked out from more than themselves (ApiForm::kComputed), and the keys that are
  // no field (kTaskApiKeys).
  const bool finished = core::IsFinished(t.status);
  out["exit_code"] = finished && t.started_at != 0 ? json(t.exit_code) : json(nullptr);
  out["borrowed"] = t.status == core::TaskStatus::kRunning && t.borrowed;
  out["task_id"] = core::FormatTaskId(t.id);
  json gpus = json::array();
  for (const auto& na : t.allocation) {
    for (int idx : na.gpu_indices) gpus.push_back(GpuId(na.node_id, idx));
  }
  out["allocated_gpus"] = std::move(gpus);
  json node_id = nullptr;  // Rank 0's node.
  for (const auto& na : t.allocation) {
    if (!na.node_id.empty()) {
      node_id = na.node_id;
      break;
    }
  }
  out["node_id"] = std::move(node_id);
  out["gpus_per_node"] = core::GpusPerNode(t.spec);
  // Each member's CPUs and memory: as asked, else what rank 0 was given (its GPUs' share of a
  // node that reports them); null while neither is known.
  const core::NodeAllocation* rank0 = t.allocation.empty() ? nullptr : &t.allocation[0];
  const int64_t cpus = t.spec.cpus_milli > 0 ? t.spec.cpus_milli
                       : rank0 != nullptr    ? rank0->cpus_milli
                                             : 0;
  const int64_t memory = t.spec.memory_mb > 0 ? t.spec.memory_mb
                         : rank0 != nullptr   ? rank0->memory_mb
                                              : 0;
  out["cpus"] = cpus > 0 ? json(core::CpusOfMilli(cpus)) : json(nullptr);
  out["memory_mb"] = memory > 0 ? json(memory) : json(nullptr);
  // The CPUs rank 0 is bound to on its node (each member's: allocation[].cpu_set); null: none.
  out["cpu_set"] =
      rank0 != nullptr && !rank0->cpu_set.empty() ? json(rank0->cpu_set) : json(nullptr);
  // What its run used, where its agents measured it (a cgroup per task): CPU time summed over
  // its members, the highest member's peak memory; null where nothing was measured.
  const std::optional<core::ResourceUsage> used = core::UsageOf(t.allocation);
  out["usage"] = used ? json{{"cpu_seconds", static_cast<double>(used->cpu_micros) / 1e6},
                             {"max_memory_mb", used->max_memory_bytes >> 20}}
                      : json(nullptr);
  if (reason == core::PendingReason::kNone) {
    out["pending_reason"] = nullptr;
  } else if (reason == core::PendingReason::kReservedFor && reserved_for != 0) {
    out["pending_reason"] =
        std::string(core::ToString(reason)) + ":" + core::FormatTaskId(reserved_for);
  } else {
    out["pending_reason"] = core::ToString(reason);
  }
  out["pending_detail"] = pending_detail.empty() ? json(nullptr) : json(pending_detail);
  return out;
}

namespace {

json TeamClassToJson(const core::TeamView::ClassUse& c) {
  return json{{"guaranteed", c.guaranteed}, {"used", c.used}, {"borrowed", c.borrowed}};
}

}  // namespace

void AddQuotaTeams(const std::vector<core::TeamView>& teams, json* quota) {
  const char* classes[core::kPriorityCount] = {"online", "batch"};
  for (int p = 0; p < core::kPriorityCount; ++p) {
    json by_name = json::object();
    for (const core::TeamView& t : teams) {
      if (t.classes[p].guaranteed > 0 || t.classes[p].used > 0) {
        by_name[t.name] = TeamClassToJson(t.classes[p]);
      }
    }
    (*quota)[classes[p]]["teams"] = std::move(by_name);
  }
}

nlohmann::json QuotaStateToJson(const QuotaState& state) {
  json body = QuotaToJson(state.quota);
  AddQuotaTeams(state.teams, &body);
  body["online_percent"] = state.online_percent;
  body["batch_percent"] = 1.0 - state.online_percent;
  return body;
}

nlohmann::json TeamToJson(const core::TeamView& t) {
  auto cls = [&](int p) { return TeamClassToJson(t.classes[p]); };
  return json{
      {"name", t.name},
      {"configured", t.configured},
      {"online", cls(0)},
      {"batch", cls(1)},
      {"max_gpus", t.limits.max_gpus < 0 ? json(nullptr) : json(t.limits.max_gpus)},
      {"weight", t.limits.weight},
      {"default_time_limit",
       t.limits.default_time_limit > 0 ? json(t.limits.default_time_limit) : json(nullptr)},
      {"pending", t.pending},
      {"usage_gpu_seconds", t.usage},
  };
}

std::optional<ApiError> ParseTeamRequest(std::string_view body, TeamRequest* out) {
  json doc;
  if (auto err = ParseJsonObject(body, &doc)) return err;
  for (const auto& [key, value] : doc.items()) {
    if (key != "online" && key != "batch" && key != "max_gpus" && key != "weight" &&
        key != "default_time_limit") {
      return ApiError{400, "unknown_field", "unknown field \"" + key + "\""};
    }
  }
  constexpr int64_t kMaxGpus = 1 << 24;
  int64_t n = 0;
  if (auto it = doc.find("online"); it != doc.end() && !it->is_null()) {
    if (auto e = GetInteger(*it, "online", 0, kMaxGpus, &n)) return e;
    out->online = static_cast<int>(n);
  }
  if (auto it = doc.find("batch"); it != doc.end() && !it->is_null()) {
    if (auto e = GetInteger(*it, "batch", 0, kMaxGpus, &n)) return e;
    out->batch = static_cast<int>(n);
  }
  if (auto it = doc.find("max_gpus"); it != doc.end()) {
    // null: no cap.
    if (it->is_null()) {
      out->max_gpus = -1;
    } else {
      if (auto e = GetInteger(*it, "max_gpus", 0, kMaxGpus, &n)) return e;
      out->max_gpus = static_cast<int>(n);
    }
  }
  if (auto it = doc.find("weight"); it != doc.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
      return InvalidField("weight must be a number above 0");
    }
    out->weight = it->get<double>();
  }
  if (auto it = doc.find("default_time_limit"); it != doc.end()) {
    // Seconds; null or 0: none (the scheduler's default applies).
    if (it->is_null()) {
      out->default_time_limit = 0;
    } else {
      if (auto e = GetInteger(*it, "default_time_limit", 0, kMaxTimeoutSeconds, &n)) return e;
      out->default_time_limit = n;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseDrainRequest(std::string_view body, NodeModeRequest* out) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::nullopt;
  json doc;
  if (auto err = ParseJsonObject(body, &doc)) return err;
  for (const auto& [key, value] : doc.items()) {
    if (key != "evict" && key != "grace_seconds") {
      return ApiError{400, "unknown_field", "unknown field \"" + key + "\""};
    }
  }
  if (auto it = doc.find("evict"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidField("evict must be true or false, got " + TypeName(*it));
    out->evict = it->get<bool>();
  }
  if (auto it = doc.find("grace_seconds"); it != doc.end() && !it->is_null()) {
    int64_t grace = 0;
    if (auto e = GetInteger(*it, "grace_seconds", 0, kMaxGraceSeconds, &grace)) return e;
    out->grace_seconds = static_cast<int32_t>(grace);
  }
  return std::nullopt;
}

nlohmann::json AgentToJson(const core::NodeView& n) {
  return json{
      {"id", n.id},
      {"address", n.address},
      {"status", core::NodeStateName(n.online, n.mode)},
      {"mode", core::ToString(n.mode)},
      {"gpus", n.gpu_count},
      {"free_gpus", n.free_gpus},
      {"cpus", n.resources.cpus_milli > 0 ? json(core::CpusOfMilli(n.resources.cpus_milli))
                                          : json(nullptr)},
      {"memory_mb", n.resources.memory_mb > 0 ? json(n.resources.memory_mb) : json(nullptr)},
      {"allocated_cpus", core::CpusOfMilli(n.allocated_cpus_milli)},
      {"allocated_memory_mb", n.allocated_memory_mb},
      {"isolation", n.resources.isolation.empty() ? json(nullptr) : json(n.resources.isolation)},
      {"tasks", n.tasks},
      {"labels", n.labels},
      {"nvlink_groups", n.nvlink_groups},
      {"last_heartbeat",
       n.last_heartbeat == 0 ? json(nullptr) : json(common::FormatRfc3339(n.last_heartbeat))}};
}

nlohmann::json AutoscaleToJson(const AutoscaleStatus& status) {
  const auto seconds = [](std::chrono::milliseconds d) {
    return std::chrono::duration<double>(d).count();
  };
  json groups = json::array();
  for (const auto& g : status.groups) {
    json nodes = json::array();
    for (const auto& n : g.nodes) {
      nodes.push_back({{"id", n.id}, {"state", n.state}, {"idle_since", TimeOrNull(n.idle_since)}});
    }
    groups.push_back({{"name", g.spec.name},
                      {"model", g.spec.model},
                      {"gpus_per_node", g.spec.gpus_per_node},
                      {"min_nodes", g.spec.min_nodes},
                      {"max_nodes", g.spec.max_nodes},
                      {"online", g.online},
                      {"idle", g.idle},
                      {"releasing", g.releasing},
                      {"requested", g.requested},
                      {"booting", g.booting},
                      {"waiting_tasks", g.waiting_tasks},
                      {"nodes_requested", g.nodes_requested},
                      {"nodes_released", g.nodes_released},
                      {"failures", g.failures},
                      {"last_error", g.last_error.empty() ? json(nullptr) : json(g.last_error)},
                      {"last_error_at", TimeOrNull(g.last_error_at)},
                      {"retry_at", TimeOrNull(g.retry_at)},
                      {"last_scale_up", TimeOrNull(g.last_scale_up)},
                      {"last_scale_down", TimeOrNull(g.last_scale_down)},
                      {"nodes", std::move(nodes)}});
  }
  return json{{"enabled", status.enabled},
              {"scale_up_delay_seconds", seconds(status.config.scale_up_delay)},
              {"idle_timeout_seconds", seconds(status.config.idle_timeout)},
              {"boot_timeout_seconds", seconds(status.config.boot_timeout)},
              {"groups", std::move(groups)}};
}

nlohmann::json QuotaToJson(const core::QuotaView& q) {
  auto cls = [&](int p) {
    return json{{"quota", q.quota[p]},
                {"used", q.used[p]},
                {"available", std::max(0, q.quota[p] - q.used[p])},
                {"borrowed", q.borrowed[p]},
                {"lent", q.lent[p]}};
  };
  return json{{"total_gpus", q.total_gpus}, {"online", cls(0)}, {"batch", cls(1)}};
}

ApiError ToApiError(const Error& e) {
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
      return {400, "invalid_field", e.message};
    case ErrorCode::kNotFound:
      return {404, "not_found", e.message};
    case ErrorCode::kAlreadyExists:
      return {409, "already_exists", e.message};
    case ErrorCode::kConflict:
      return {409, "conflict", e.message};
    case ErrorCode::kForbidden:
      return {403, "forbidden", e.message};
    case ErrorCode::kTooManyPending:
      return {429, "too_many_pending", e.message};
    case ErrorCode::kNotLeader:
      return {503, "not_leader", e.message};
    case ErrorCode::kUnavailable:
      return {503, "unavailable", e.message};
    case ErrorCode::kStorageUnavailable:
      return {503, "storage_unavailable", e.message};
    case ErrorCode::kLogUnavailable:
      return {404, "log_unavailable", e.message};
    case ErrorCode::kInternal:
      break;
  }
  return {500, "internal", e.message};
}

std::optional<ApiError> ParseUsageQuery(std::string_view query, core::TimeMicros now,
                                        UsageRequest* out) {
  std::optional<core::TimeMicros> from;
  std::optional<core::TimeMicros> to;
  // Relaxed: times are written as they are ("...T10:00:00+02:00"); a '+' stays a '+'.
  try {
    for (const auto& [key, value] :
         restinio::parse_query<restinio::parse_query_traits::relaxed>(query)) {
      std::string k(key.data(), key.size());
      std::string v(value.data(), value.size());
      if (k == "from" || k == "to") {
        std::optional<int64_t> t = common::ParseRfc3339(v);
        if (!t) {
          return InvalidField(k + " must be an RFC 3339 time like 2026-12-01T00:00:00Z; got \"" +
                              v + "\"");
        }
        (k == "from" ? from : to) = *t;
      } else if (k == "group_by") {
        if (v != "team" && v != "user") {
          return InvalidField("group_by must be team or user; got \"" + v + "\"");
        }
        out->by_user = v == "user";
      } else {
        return ApiError{400, "unknown_field", "unknown query parameter \"" + k + "\""};
      }
    }
  } catch (const std::exception& e) {
    return InvalidField(std::string("malformed query string: ") + e.what());
  }
  out->to = to.value_or(now);
  out->from = from.value_or(out->to - core::TimeMicros{86400} * core::kMicrosPerSecond);
  if (out->from >= out->to) return InvalidField("from must be before to");
  return std::nullopt;
}

json UsageToJson(const UsageReport& report) {
  json groups = json::array();
  for (const store::UsageRow& row : report.groups) {
    groups.push_back({{"name", row.group}, {"gpu_seconds", row.gpu_seconds}, {"tasks", row.tasks}});
  }
  return {{"from", common::FormatRfc3339(report.from)},
          {"to", common::FormatRfc3339(report.to)},
          {"group_by", report.by_user ? "user" : "team"},
          {"groups", std::move(groups)}};
}

std::optional<ApiError> ParseListQuery(std::string_view query, ListTasksRequest* out) {
  int64_t limit = out->limit, offset = out->offset;
  try {
    for (const auto& [key, value] : restinio::parse_query(query)) {
      std::string k(key.data(), key.size());
      std::string v(value.data(), value.size());
      auto parse_int = [&](int64_t lo, int64_t hi, int64_t* x) -> bool {
        StatusOr<int64_t> parsed = common::ParseInt64(v, k);
        if (!parsed.ok() || *parsed < lo || *parsed > hi) return false;
        *x = *parsed;
        return true;
      };
      if (k == "status") {
        if (v.empty()) continue;
        out->status = core::ParseTaskStatus(v);
        if (!out->status) {
          return InvalidField(
              "status must be one of pending, running, success, failed, cancelled; got \"" + v +
              "\"");
        }
      } else if (k == "priority") {
        if (v.empty()) continue;
        out->priority = core::ParsePriority(v);
        if (!out->priority) {
          return InvalidField("priority must be high or low; got \"" + v + "\"");
        }
      } else if (k == "team") {
        if (v.empty()) continue;
        if (!core::IsValidTeamName(v)) {
          return InvalidField("team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"" + v +
                              "\"");
        }
        out->team = v;
      } else if (k == "limit") {
        if (!parse_int(1, 1000, &limit)) {
          return InvalidField("limit must be an integer from 1 to 1000");
        }
      } else if (k == "offset") {
        if (!parse_int(0, INT64_MAX / 2, &offset)) {
          return InvalidField("offset must be a non-negative integer");
        }
      } else if (k == "after") {
        if (v.empty()) continue;
        out->after = core::ParseTaskId(v);
        if (!out->after) {
          return InvalidField("after must be a task id like task-42 (the next of a page); got \"" +
                              v + "\"");
        }
      } else {
        return ApiError{400, "unknown_field", "unknown query parameter \"" + k + "\""};
      }
    }
  } catch (const std::exception& e) {
    return InvalidField(std::string("malformed query string: ") + e.what());
  }
  if (out->after && offset > 0) {
    return InvalidField(
        "after and offset cannot be combined: after already says where the page "
        "starts");
  }
  out->limit = static_cast<int>(limit);
  // An offset past INT_MAX is past every task: clamp it rather than let the cast wrap it.
  out->offset = static_cast<int>(std::min<int64_t>(offset, INT32_MAX));
  return std::nullopt;
}

std::optional<ApiError> ParseCancelQuery(std::string_view query, std::optional<int32_t>* grace) {
  try {
    for (const auto& [key, value] : restinio::parse_query(query)) {
      std::string k(key.data(), key.size());
      if (k != "grace_seconds") {
        return ApiError{400, "unknown_field", "unknown query parameter \"" + k + "\""};
      }
      int32_t x = -1;
      const char* end = value.data() + value.size();
      auto [ptr, ec] = std::from_chars(value.data(), end, x);
      if (ec != std::errc() || ptr != end) {
        return InvalidField("grace_seconds must be an integer from 0 to " +
                            std::to_string(kMaxGraceSeconds));
      }
      *grace = x;
    }
  } catch (const std::exception& e) {
    return InvalidField(std::string("malformed query string: ") + e.what());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseWatchQuery(std::string_view query, std::string_view last_event_id,
                                        std::optional<uint64_t>* since) {
  const auto parse = [since](std::string_view text, const char* what) -> std::optional<ApiError> {
    uint64_t x = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, x);
    if (text.empty() || ec != std::errc() || ptr != end) {
      return InvalidField(std::string(what) + " must be a sequence number (an id of the watch " +
                          "stream), not \"" + std::string(text) + "\"");
    }
    *since = x;
    return std::nullopt;
  };
  try {
    for (const auto& [key, value] : restinio::parse_query(query)) {
      std::string k(key.data(), key.size());
      if (k != "since") {
        return ApiError{400, "unknown_field", "unknown query parameter \"" + k + "\""};
      }
      if (auto e = parse(std::string_view(value.data(), value.size()), "since")) return e;
    }
  } catch (const std::exception& e) {
    return InvalidField(std::string("malformed query string: ") + e.what());
  }
  // A browser's EventSource resumes with this header; an explicit `since` wins.
  if (!*since && !last_event_id.empty()) return parse(last_event_id, "Last-Event-ID");
  return std::nullopt;
}

std::optional<ApiError> ParseLogQuery(std::string_view query, LogQuery* out) {
  bool offset_given = false;
  try {
    for (const auto& [key, value] : restinio::parse_query(query)) {
      std::string k(key.data(), key.size());
      std::string v(value.data(), value.size());
      auto parse_int = [&](int64_t lo, int64_t hi) -> std::optional<int64_t> {
        StatusOr<int64_t> parsed = common::ParseInt64(v, k);
        if (!parsed.ok() || *parsed < lo || *parsed > hi) return std::nullopt;
        return *parsed;
      };
      if (k == "tail") {
        auto n = parse_int(0, kMaxLogTailLines);
        if (!n) {
          return InvalidField("tail must be an integer from 0 to " +
                              std::to_string(kMaxLogTailLines) + " (lines); got \"" + v + "\"");
        }
        out->tail = static_cast<int32_t>(*n);
      } else if (k == "follow") {
        if (v == "true" || v == "1" || v.empty()) {
          out->follow = true;
        } else if (v == "false" || v == "0") {
          out->follow = false;
        } else {
          return InvalidField("follow must be true or false; got \"" + v + "\"");
        }
      } else if (k == "rank") {
        auto n = parse_int(0, 100000);
        if (!n) return InvalidField("rank must be an integer from 0 to 100000; got \"" + v + "\"");
        out->rank = static_cast<int>(*n);
      } else if (k == "offset") {
        auto n = parse_int(0, INT64_MAX / 2);
        if (!n) return InvalidField("offset must be a non-negative integer; got \"" + v + "\"");
        out->offset = *n;
        offset_given = true;
      } else {
        return ApiError{400, "unknown_field", "unknown query parameter \"" + k + "\""};
      }
    }
  } catch (const std::exception& e) {
    return InvalidField(std::string("malformed query string: ") + e.what());
  }
  if (offset_given && out->tail) {
    return InvalidField("tail and offset cannot be combined: each says where the log starts");
  }
  return std::nullopt;
}

bool AcceptsDeflate(std::string_view accept_encoding) {
  size_t start = 0;
  while (start <= accept_encoding.size()) {
    size_t end = accept_encoding.find(',', start);
    if (end == std::string_view::npos) end = accept_encoding.size();
    std::string_view item = accept_encoding.substr(start, end - start);
    std::string_view coding = item.substr(0, item.find(';'));
    const auto trim = [](std::string_view v) {
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      return v;
    };
    coding = trim(coding);
    if (coding.size() == 7 &&
        std::equal(coding.begin(), coding.end(), "deflate", [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        })) {
      const size_t q = item.find("q=");
      if (q == std::string_view::npos) return true;
      std::string_view value = trim(item.substr(q + 2));
      return !(value == "0" || value == "0.0" || value == "0.00" || value == "0.000");
    }
    start = end + 1;
  }
  return false;
}

}  // namespace dgpu::scheduler
