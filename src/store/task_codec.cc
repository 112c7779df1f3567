#include "store/task_codec.h"

#include <cstdint>
#include <limits>
#include <optional>

namespace dgpu::store {
namespace {

using nlohmann::json;

Status Malformed(std::string_view field, std::string_view expected) {
  return DataLoss("stored task field '" + std::string(field) + "' is not " + std::string(expected));
}

// Field readers: each checks the JSON type before converting, so that nothing throws.
Status ReadString(const json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return Malformed(key, "a string");
  *out = it->get<std::string>();
  return OkStatus();
}

Status ReadInt64(const json& obj, const char* key, int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return Malformed(key, "an integer");
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Malformed(key, "a 64-bit signed integer");
  }
  *out = it->get<int64_t>();
  return OkStatus();
}

Status ReadInt(const json& obj, const char* key, int* out) {
  int64_t v = 0;
  if (Status s = ReadInt64(obj, key, &v); !s.ok()) return s;
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return Malformed(key, "a 32-bit integer");
  }
  *out = static_cast<int>(v);
  return OkStatus();
}

Status ReadBool(const json& obj, const char* key, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_boolean()) return Malformed(key, "a boolean");
  *out = it->get<bool>();
  return OkStatus();
}

// "stop_reason" is optional: a task written before it existed was not stopped for a reason.
Status ReadStopReason(const json& obj, core::StopReason* out) {
  auto it = obj.find("stop_reason");
  if (it == obj.end()) return OkStatus();
  std::optional<core::StopReason> reason;
  if (it->is_string()) reason = core::ParseStopReason(it->get<std::string>());
  if (!reason) {
    return Malformed("stop_reason",
                     "a stop reason (\"\", cancel, preempt, drain, member_failure, timeout, "
                     "gpu_failure or reconcile)");
  }
  *out = *reason;
  return OkStatus();
}

}  // namespace

json EnvToJson(const EnvList& env) {
  json out = json::array();
  for (const auto& [key, value] : env) out.push_back(json::array({key, value}));
  return out;
}

StatusOr<EnvList> EnvFromJson(const json& j) {
  if (!j.is_array()) return Malformed("env", "an array");
  EnvList env;
  env.reserve(j.size());
  for (const json& pair : j) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      return Malformed("env", "a list of [key, value] string pairs");
    }
    env.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  }
  return env;
}

json AllocationToJson(const core::Allocation& allocation) {
  json out = json::array();
  for (const core::NodeAllocation& a : allocation) {
    json entry{{"node_id", a.node_id}, {"gpu_indices", a.gpu_indices}};
    if (a.ended) entry["ended"] = true;  // Only members of multi-node tasks ever have it.
    out.push_back(std::move(entry));
  }
  return out;
}

StatusOr<core::Allocation> AllocationFromJson(const json& j) {
  if (!j.is_array()) return Malformed("allocation", "an array");
  core::Allocation allocation;
  allocation.reserve(j.size());
  for (const json& entry : j) {
    if (!entry.is_object()) return Malformed("allocation", "a list of objects");
    core::NodeAllocation a;
    if (Status s = ReadString(entry, "node_id", &a.node_id); !s.ok()) return s;
    auto it = entry.find("gpu_indices");
    if (it == entry.end() || !it->is_array()) return Malformed("gpu_indices", "an array");
    for (const json& index : *it) {
      if (!index.is_number_integer()) return Malformed("gpu_indices", "a list of integers");
      int64_t v = index.get<int64_t>();
      if (v < 0 || v > std::numeric_limits<int>::max()) {
        return Malformed("gpu_indices", "a list of GPU indices");
      }
      a.gpu_indices.push_back(static_cast<int>(v));
    }
    if (auto ended = entry.find("ended"); ended != entry.end()) {
      if (!ended->is_boolean()) return Malformed("ended", "a boolean");
      a.ended = ended->get<bool>();
    }
    allocation.push_back(std::move(a));
  }
  return allocation;
}

json TaskToJson(const core::Task& t) {
  return json{
      {"id", t.id},
      {"name", t.spec.name},
      {"priority", core::ToString(t.spec.priority)},
      {"gpu_count", t.spec.gpu_count},
      {"gpu_model", t.spec.gpu_model},
      {"command", t.spec.command},
      {"env", EnvToJson(t.spec.env)},
      {"timeout_seconds", t.spec.timeout_seconds},
      {"image", t.spec.image},
      {"status", core::ToString(t.status)},
      {"queue_seq", t.queue_seq},
      {"allocation", AllocationToJson(t.allocation)},
      {"attempts", t.attempts},
      {"exit_code", t.exit_code},
      {"error", t.error},
      {"created_at", t.created_at},
      {"started_at", t.started_at},
      {"finished_at", t.finished_at},
      {"stopping", t.stopping},
      {"stop_reason", core::ToString(t.stop_reason)},
      {"team", t.spec.team},
      {"user", t.spec.user},
      {"preemptible", t.spec.preemptible},
      {"preemption_grace_seconds", t.spec.preemption_grace_seconds},
      {"borrowed", t.borrowed},
      {"preemptions", t.preemptions},
      {"preempted_by", t.preempted_by},
      {"array_index", t.spec.array_index},
      {"array_size", t.spec.array_size},
      {"max_retries", t.spec.max_retries},
      {"retry_backoff_seconds", t.spec.retry_backoff_seconds},
      {"retries", t.retries},
      {"retry_at", t.retry_at},
  };
}

StatusOr<core::Task> TaskFromJson(const json& j) {
  if (!j.is_object()) return Malformed("task", "an object");
  core::Task t;
  auto id = j.find("id");
  if (id == j.end() || !id->is_number_unsigned() || id->get<uint64_t>() == 0) {
    return Malformed("id", "a positive task number");
  }
  t.id = id->get<uint64_t>();
  std::string priority, status;
  Status s;
  if (s = ReadString(j, "name", &t.spec.name); !s.ok()) return s;
  if (s = ReadString(j, "priority", &priority); !s.ok()) return s;
  if (s = ReadInt(j, "gpu_count", &t.spec.gpu_count); !s.ok()) return s;
  if (s = ReadString(j, "gpu_model", &t.spec.gpu_model); !s.ok()) return s;
  if (s = ReadString(j, "command", &t.spec.command); !s.ok()) return s;
  if (s = ReadInt64(j, "timeout_seconds", &t.spec.timeout_seconds); !s.ok()) return s;
  if (s = ReadString(j, "image", &t.spec.image); !s.ok()) return s;
  if (s = ReadString(j, "status", &status); !s.ok()) return s;
  if (s = ReadInt64(j, "queue_seq", &t.queue_seq); !s.ok()) return s;
  if (s = ReadInt(j, "attempts", &t.attempts); !s.ok()) return s;
  if (s = ReadInt(j, "exit_code", &t.exit_code); !s.ok()) return s;
  if (s = ReadString(j, "error", &t.error); !s.ok()) return s;
  if (s = ReadInt64(j, "created_at", &t.created_at); !s.ok()) return s;
  if (s = ReadInt64(j, "started_at", &t.started_at); !s.ok()) return s;
  if (s = ReadInt64(j, "finished_at", &t.finished_at); !s.ok()) return s;
  if (s = ReadBool(j, "stopping", &t.stopping); !s.ok()) return s;
  auto p = core::ParsePriority(priority);
  if (!p) return Malformed("priority", "high or low");
  t.spec.priority = *p;
  auto st = core::ParseTaskStatus(status);
  if (!st) return Malformed("status", "a task status");
  t.status = *st;
  auto env_it = j.find("env");
  if (env_it == j.end()) return Malformed("env", "present");
  StatusOr<EnvList> env = EnvFromJson(*env_it);
  if (!env.ok()) return env.status();
  t.spec.env = std::move(*env);
  auto alloc_it = j.find("allocation");
  if (alloc_it == j.end()) return Malformed("allocation", "present");
  StatusOr<core::Allocation> allocation = AllocationFromJson(*alloc_it);
  if (!allocation.ok()) return allocation.status();
  t.allocation = std::move(*allocation);
  if (s = ReadStopReason(j, &t.stop_reason); !s.ok()) return s;
  // Written by versions with teams; a task from before belongs to "default".
  if (j.contains("team")) {
    if (s = ReadString(j, "team", &t.spec.team); !s.ok()) return s;
    if (!core::IsValidTeamName(t.spec.team)) return Malformed("team", "a valid team name");
    if (s = ReadString(j, "user", &t.spec.user); !s.ok()) return s;
    if (s = ReadBool(j, "preemptible", &t.spec.preemptible); !s.ok()) return s;
    int grace = -1;
    if (s = ReadInt(j, "preemption_grace_seconds", &grace); !s.ok()) return s;
    if (grace < -1) return Malformed("preemption_grace_seconds", "-1 or more");
    t.spec.preemption_grace_seconds = grace;
    if (s = ReadBool(j, "borrowed", &t.borrowed); !s.ok()) return s;
    if (s = ReadInt(j, "preemptions", &t.preemptions); !s.ok()) return s;
    auto by = j.find("preempted_by");
    if (by == j.end() || !by->is_number_unsigned()) {
      return Malformed("preempted_by", "a task number");
    }
    t.preempted_by = by->get<uint64_t>();
  }
  // Written by versions with job arrays; a task from before is no array member.
  if (j.contains("array_size")) {
    if (s = ReadInt(j, "array_size", &t.spec.array_size); !s.ok()) return s;
    if (s = ReadInt(j, "array_index", &t.spec.array_index); !s.ok()) return s;
    if (!core::ValidArrayFields(t.spec)) {
      return Malformed("array_index", "within [0, array_size) of an array, -1 otherwise");
    }
  }
  // Written by versions with retries; a task from before is not retried.
  if (j.contains("max_retries")) {
    if (s = ReadInt(j, "max_retries", &t.spec.max_retries); !s.ok()) return s;
    if (s = ReadInt(j, "retry_backoff_seconds", &t.spec.retry_backoff_seconds); !s.ok()) return s;
    if (s = ReadInt(j, "retries", &t.retries); !s.ok()) return s;
    if (s = ReadInt64(j, "retry_at", &t.retry_at); !s.ok()) return s;
    if (t.spec.max_retries < 0 || t.spec.retry_backoff_seconds < 0 || t.retries < 0 ||
        t.retry_at < 0) {
      return Malformed("max_retries", "retry fields of 0 or more");
    }
  }
  return t;
}

std::string DumpJson(const json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

StatusOr<json> ParseJson(std::string_view text, std::string_view what) {
  json j = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss(std::string(what) + " is not valid JSON");
  return j;
}

}  // namespace dgpu::store
