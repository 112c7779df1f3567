#include "store/task_codec.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/task_fields.h"

namespace dgpu::store {
namespace {

using nlohmann::json;

Status Malformed(std::string_view field, std::string_view expected) {
  return DataLoss("stored task field '" + std::string(field) + "' is not " + std::string(expected));
}

// Readers check the JSON type before converting, so that nothing throws.
Status ReadString(const json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return Malformed(key, "a string");
  *out = it->get<std::string>();
  return OkStatus();
}

// Reads one field's JSON value into `out`, checking its type and range first.
template <typename T>
Status ReadValue(const json& v, const core::TaskFieldInfo& info, T* out) {
  const std::string name(info.name);
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return Malformed(name, "a boolean");
    *out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (!v.is_number_unsigned()) return Malformed(name, "a task number");
    *out = v.get<uint64_t>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) return Malformed(name, "an integer");
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Malformed(name, "a 64-bit signed integer");
    }
    const auto n = v.get<int64_t>();
    if (n < std::numeric_limits<T>::min() || n > std::numeric_limits<T>::max()) {
      return Malformed(name, sizeof(T) == 4 ? "a 32-bit integer" : "an integer");
    }
    if (n < info.min) return Malformed(name, std::to_string(info.min) + " or more");
    *out = static_cast<T>(n);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return Malformed(name, "a string");
    *out = v.get<std::string>();
  } else if constexpr (std::is_enum_v<T>) {
    std::optional<T> value;
    if (v.is_string()) value = core::ParseName<T>(v.get<std::string>());
    if (!value) return Malformed(name, core::NamesOf(static_cast<T*>(nullptr)));
    *out = *value;
  } else {
    StatusOr<T> value = [&] {
      if constexpr (std::is_same_v<T, EnvList>) {
        return EnvFromJson(v, name);
      } else if constexpr (std::is_same_v<T, core::Dependencies>) {
        return DependenciesFromJson(v);
      } else {
        static_assert(std::is_same_v<T, core::Allocation>, "a task field of a new type");
        return AllocationFromJson(v);
      }
    }();
    if (!value.ok()) return value.status();
    *out = std::move(*value);
  }
  return OkStatus();
}

template <typename T>
json WriteValue(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return std::string(core::ToString(value));
  } else if constexpr (std::is_same_v<T, EnvList>) {
    return EnvToJson(value);
  } else if constexpr (std::is_same_v<T, core::Allocation>) {
    return AllocationToJson(value);
  } else if constexpr (std::is_same_v<T, core::Dependencies>) {
    return DependenciesToJson(value);
  } else {
    return value;
  }
}

}  // namespace

json EnvToJson(const EnvList& env) {
  json out = json::array();
  for (const auto& [key, value] : env) out.push_back(json::array({key, value}));
  return out;
}

StatusOr<EnvList> EnvFromJson(const json& j, std::string_view name) {
  if (!j.is_array()) return Malformed(name, "an array");
  EnvList env;
  env.reserve(j.size());
  for (const json& pair : j) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      return Malformed(name, "a list of [key, value] string pairs");
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
    // Only members placed on nodes that report their CPUs and memory have these.
    if (a.cpus_milli != 0) entry["cpus_milli"] = a.cpus_milli;
    if (a.memory_mb != 0) entry["memory_mb"] = a.memory_mb;
    // Only members whose agent measured what they used (executor.isolation) have these.
    if (a.usage.cpu_micros != 0) entry["usage_cpu_micros"] = a.usage.cpu_micros;
    if (a.usage.max_memory_bytes != 0) entry["usage_max_memory_bytes"] = a.usage.max_memory_bytes;
    // Only members bound to CPUs (executor.cpu_binding: cpuset) have it.
    if (!a.cpu_set.empty()) entry["cpu_set"] = a.cpu_set;
    out.push_back(std::move(entry));
  }
  return out;
}

namespace {

// A list of ids in [0, INT_MAX] (GPU indices, CPU ids) under `key`; `ids` names them.
Status ReadIdList(const json& list, std::string_view key, std::string_view ids,
                  std::vector<int>* out) {
  if (!list.is_array()) return Malformed(key, "an array");
  for (const json& id : list) {
    if (!id.is_number_integer()) return Malformed(key, "a list of integers");
    const auto v = id.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int>::max()) {
      return Malformed(key, "a list of " + std::string(ids));
    }
    out->push_back(static_cast<int>(v));
  }
  return OkStatus();
}

}  // namespace

StatusOr<core::Allocation> AllocationFromJson(const json& j) {
  if (!j.is_array()) return Malformed("allocation", "an array");
  core::Allocation allocation;
  allocation.reserve(j.size());
  for (const json& entry : j) {
    if (!entry.is_object()) return Malformed("allocation", "a list of objects");
    core::NodeAllocation a;
    if (Status s = ReadString(entry, "node_id", &a.node_id); !s.ok()) return s;
    auto it = entry.find("gpu_indices");
    if (it == entry.end()) return Malformed("gpu_indices", "an array");
    if (Status s = ReadIdList(*it, "gpu_indices", "GPU indices", &a.gpu_indices); !s.ok()) return s;
    if (auto ended = entry.find("ended"); ended != entry.end()) {
      if (!ended->is_boolean()) return Malformed("ended", "a boolean");
      a.ended = ended->get<bool>();
    }
    for (auto [key, value] : {std::pair{"cpus_milli", &a.cpus_milli},
                              {"memory_mb", &a.memory_mb},
                              {"usage_cpu_micros", &a.usage.cpu_micros},
                              {"usage_max_memory_bytes", &a.usage.max_memory_bytes}}) {
      if (auto it = entry.find(key); it != entry.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 0) {
          return Malformed(key, "a non-negative integer");
        }
        *value = it->get<int64_t>();
      }
    }
    if (auto cpus = entry.find("cpu_set"); cpus != entry.end()) {
      if (Status s = ReadIdList(*cpus, "cpu_set", "CPU ids", &a.cpu_set); !s.ok()) return s;
    }
    allocation.push_back(std::move(a));
  }
  return allocation;
}

json DependenciesToJson(const core::Dependencies& deps) {
  json out = json::array();
  for (const core::Dependency& d : deps) {
    out.push_back({{"task", d.task},
                   {"condition", core::ToString(d.condition)},
                   {"state", core::ToString(d.state)}});
  }
  return out;
}

StatusOr<core::Dependencies> DependenciesFromJson(const json& j) {
  if (!j.is_array()) return Malformed("depends_on", "an array");
  core::Dependencies deps;
  deps.reserve(j.size());
  for (const json& entry : j) {
    if (!entry.is_object()) return Malformed("depends_on", "a list of objects");
    core::Dependency d;
    auto task = entry.find("task");
    if (task == entry.end() || !task->is_number_unsigned() || task->get<uint64_t>() == 0) {
      return Malformed("depends_on task", "a task number");
    }
    d.task = task->get<uint64_t>();
    std::string text;
    if (Status s = ReadString(entry, "condition", &text); !s.ok()) return s;
    std::optional<core::DependencyCondition> c = core::ParseDependencyCondition(text);
    if (!c)
      return Malformed("condition",
                       core::NamesOf(static_cast<core::DependencyCondition*>(nullptr)));
    d.condition = *c;
    if (Status s = ReadString(entry, "state", &text); !s.ok()) return s;
    std::optional<core::DependencyState> state = core::ParseDependencyState(text);
    if (!state)
      return Malformed("state", core::NamesOf(static_cast<core::DependencyState*>(nullptr)));
    d.state = *state;
    deps.push_back(d);
  }
  return deps;
}

json TaskToJson(const core::Task& t) {
  json out = json::object();
  core::ForEachTaskField([&](int, const auto& field) {
    out[std::string(field.info.name)] = WriteValue(field.get(t));
  });
  return out;
}

StatusOr<core::Task> TaskFromJson(const json& j) {
  if (!j.is_object()) return Malformed("task", "an object");
  core::Task t;
  Status s = core::ForEachTaskFieldUntilError([&](int, const auto& field) -> Status {
    auto it = j.find(std::string(field.info.name));
    if (it == j.end()) {
      // Absent from what an older release wrote: the field's default.
      return field.info.first_release ? Malformed(field.info.name, "present") : OkStatus();
    }
    return ReadValue(*it, field.info, &field.get(t));
  });
  if (!s.ok()) return s;
  if (t.id == 0) return Malformed("id", "a positive task number");
  if (std::string problem = core::FinishDecodedTask(&t); !problem.empty()) {
    return DataLoss("stored " + core::FormatTaskId(t.id) + ": " + problem);
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
