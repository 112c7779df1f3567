#include "scheduler/replication_codec.h"

#include <google/protobuf/descriptor.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/task_fields.h"

namespace dgpu::scheduler {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using EnvList = std::vector<std::pair<std::string, std::string>>;

// The proto field a table field of C++ type T must have.
template <typename T>
std::string ExpectedProto(const FieldDescriptor* fd) {
  auto scalar = [&](FieldDescriptor::CppType type, const char* what) -> std::string {
    if (fd->cpp_type() != type || fd->is_repeated()) return std::string("a singular ") + what;
    return "";
  };
  if constexpr (std::is_same_v<T, bool>) {
    return scalar(FieldDescriptor::CPPTYPE_BOOL, "bool");
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return scalar(FieldDescriptor::CPPTYPE_UINT64, "uint64");
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return scalar(FieldDescriptor::CPPTYPE_INT64, "int64");
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return scalar(FieldDescriptor::CPPTYPE_INT32, "int32");
  } else if constexpr (std::is_same_v<T, std::string> || std::is_enum_v<T>) {
    return scalar(FieldDescriptor::CPPTYPE_STRING, "string");
  } else if constexpr (std::is_same_v<T, EnvList>) {
    const bool ok = (fd->number() == dgpu::v1::TaskRecord::kEnvFieldNumber ||
                     fd->number() == dgpu::v1::TaskRecord::kNodeSelectorFieldNumber) &&
                    fd->is_map() &&
                    fd->message_type()->map_key()->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
                    fd->message_type()->map_value()->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    return ok ? "" : "env or node_selector, a map<string, string>";
  } else if constexpr (std::is_same_v<T, core::Dependencies>) {
    const bool ok = fd->number() == dgpu::v1::TaskRecord::kDependsOnFieldNumber &&
                    fd->is_repeated() && fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                    fd->message_type() == dgpu::v1::DependencyRecord::descriptor();
    return ok ? "" : "depends_on, a repeated DependencyRecord";
  } else {
    static_assert(std::is_same_v<T, core::Allocation>, "a task field of a new type");
    const bool ok = fd->number() == dgpu::v1::TaskRecord::kAllocationFieldNumber &&
                    fd->is_repeated() && fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                    fd->message_type() == dgpu::v1::AllocationRecord::descriptor();
    return ok ? "" : "allocation, a repeated AllocationRecord";
  }
}

std::vector<std::string> Mismatches() {
  std::vector<std::string> out;
  const auto* d = dgpu::v1::TaskRecord::descriptor();
  core::ForEachTaskField([&](int n, const auto& field) {
    using T = core::TaskFieldType<decltype(field)>;
    const FieldDescriptor* fd = d->FindFieldByNumber(n);
    const std::string name(field.info.name);
    if (fd == nullptr) {
      out.push_back("task field " + name + " (" + std::to_string(n) + ") has no TaskRecord field " +
                    std::to_string(n));
    } else if (std::string want = ExpectedProto<T>(fd); !want.empty()) {
      out.push_back("TaskRecord field " + std::to_string(n) + " (" + fd->name() +
                    ") carries task field " + name + ": it must be " + want);
    }
  });
  return out;
}

// TaskRecord's fields by number, checked against the table once.
const std::array<const FieldDescriptor*, core::kTaskFieldCount + 1>& RecordFields() {
  static const auto fields = [] {
    if (std::vector<std::string> bad = Mismatches(); !bad.empty()) {
      for (const std::string& line : bad) spdlog::critical("{}", line);
      std::abort();
    }
    std::array<const FieldDescriptor*, core::kTaskFieldCount + 1> f{};
    for (int n = 1; n <= core::kTaskFieldCount; ++n) {
      f[n] = dgpu::v1::TaskRecord::descriptor()->FindFieldByNumber(n);
    }
    return f;
  }();
  return fields;
}

template <typename T>
void SetInteger(Message* r, const Reflection* refl, const FieldDescriptor* fd, T v) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    refl->SetUInt64(r, fd, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    refl->SetInt64(r, fd, v);
  } else {
    refl->SetInt32(r, fd, v);
  }
}

template <typename T>
T GetInteger(const Message& r, const Reflection* refl, const FieldDescriptor* fd) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    return refl->GetUInt64(r, fd);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return refl->GetInt64(r, fd);
  } else {
    return refl->GetInt32(r, fd);
  }
}

template <typename T>
void WriteField(const T& v, const T& def, Message* r, const Reflection* refl,
                const FieldDescriptor* fd) {
  if constexpr (std::is_same_v<T, bool>) {
    refl->SetBool(r, fd, v != def);
  } else if constexpr (std::is_integral_v<T>) {
    if (!fd->has_presence() || v != def) SetInteger(r, refl, fd, v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    refl->SetString(r, fd, v);
  } else if constexpr (std::is_enum_v<T>) {
    refl->SetString(r, fd, std::string(core::ToString(v)));
  } else if constexpr (std::is_same_v<T, EnvList>) {
    // The generated accessors of the one field of each of these types (Mismatches checks the
    // numbers): reflection over a map costs more than the rest of the record.
    auto* record = static_cast<dgpu::v1::TaskRecord*>(r);
    auto* map = fd->number() == dgpu::v1::TaskRecord::kEnvFieldNumber
                    ? record->mutable_env()
                    : record->mutable_node_selector();
    for (const auto& [key, value] : v) (*map)[key] = value;
  } else if constexpr (std::is_same_v<T, core::Dependencies>) {
    auto* deps = static_cast<dgpu::v1::TaskRecord*>(r)->mutable_depends_on();
    for (const core::Dependency& d : v) {
      dgpu::v1::DependencyRecord* rec = deps->Add();
      rec->set_task(d.task);
      rec->set_condition(std::string(core::ToString(d.condition)));
      rec->set_state(std::string(core::ToString(d.state)));
    }
  } else {
    auto* allocation = static_cast<dgpu::v1::TaskRecord*>(r)->mutable_allocation();
    for (const core::NodeAllocation& na : v) {
      dgpu::v1::AllocationRecord* a = allocation->Add();
      a->set_node_id(na.node_id);
      for (int i : na.gpu_indices) a->add_gpu_indices(i);
      a->set_ended(na.ended);
      a->set_cpus_milli(na.cpus_milli);
      a->set_memory_mb(na.memory_mb);
      a->set_usage_cpu_micros(na.usage.cpu_micros);
      a->set_usage_max_memory_bytes(na.usage.max_memory_bytes);
      for (int cpu : na.cpu_set) a->add_cpu_set(cpu);
    }
  }
}

template <typename T>
void ReadField(const Message& r, const Reflection* refl, const FieldDescriptor* fd,
               const core::TaskFieldInfo& info, const T& def, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    *out = refl->GetBool(r, fd) != def;
  } else if constexpr (std::is_integral_v<T>) {
    if (fd->has_presence() && !refl->HasField(r, fd)) {
      *out = def;
    } else {
      *out = GetInteger<T>(r, refl, fd);
      if constexpr (std::is_signed_v<T>) {
        if (*out < info.min) *out = static_cast<T>(info.min);
      }
    }
  } else if constexpr (std::is_same_v<T, std::string>) {
    std::string scratch;
    const std::string& v = refl->GetStringReference(r, fd, &scratch);
    *out = v.empty() ? def : v;
  } else if constexpr (std::is_enum_v<T>) {
    std::string scratch;
    *out = core::ParseName<T>(refl->GetStringReference(r, fd, &scratch)).value_or(def);
  } else if constexpr (std::is_same_v<T, EnvList>) {
    const auto& record = static_cast<const dgpu::v1::TaskRecord&>(r);
    const auto& map = fd->number() == dgpu::v1::TaskRecord::kEnvFieldNumber
                          ? record.env()
                          : record.node_selector();
    out->reserve(map.size());
    for (const auto& [key, value] : map) out->emplace_back(key, value);
    std::sort(out->begin(), out->end());  // A map's order is not kept; the core's are sorted.
  } else if constexpr (std::is_same_v<T, core::Dependencies>) {
    // Unknown words (a newer leader's) read as the defaults; the core checks the rest.
    for (const auto& d : static_cast<const dgpu::v1::TaskRecord&>(r).depends_on()) {
      out->push_back(
          {d.task(),
           core::ParseDependencyCondition(d.condition())
               .value_or(core::DependencyCondition::kAfterOk),
           core::ParseDependencyState(d.state()).value_or(core::DependencyState::kWaiting)});
    }
  } else {
    for (const auto& a : static_cast<const dgpu::v1::TaskRecord&>(r).allocation()) {
      out->push_back({a.node_id(),
                      {a.gpu_indices().begin(), a.gpu_indices().end()},
                      a.ended(),
                      std::max<int64_t>(a.cpus_milli(), 0),
                      std::max<int64_t>(a.memory_mb(), 0),
                      {std::max<int64_t>(a.usage_cpu_micros(), 0),
                       std::max<int64_t>(a.usage_max_memory_bytes(), 0)},
                      {a.cpu_set().begin(), a.cpu_set().end()}});
    }
  }
}

}  // namespace

std::vector<std::string> TaskRecordMismatches() { return Mismatches(); }

void TaskToRecord(const core::Task& t, dgpu::v1::TaskRecord* r) {
  const auto& fields = RecordFields();
  const Reflection* refl = dgpu::v1::TaskRecord::GetReflection();
  core::ForEachTaskField([&](int n, const auto& field) {
    WriteField(field.get(t), core::TaskFieldDefault(field), r, refl, fields[n]);
  });
}

core::Task TaskFromRecord(const dgpu::v1::TaskRecord& r) {
  const auto& fields = RecordFields();
  const Reflection* refl = dgpu::v1::TaskRecord::GetReflection();
  core::Task t;
  core::ForEachTaskField([&](int n, const auto& field) {
    ReadField(r, refl, fields[n], field.info, core::TaskFieldDefault(field), &field.get(t));
  });
  // A leader is trusted: fields that disagree are repaired rather than refused (array fields
  // from a leader that predates arrays are zero).
  if (!core::ValidArrayFields(t.spec)) {
    t.spec.array_size = 0;
    t.spec.array_index = -1;
  }
  if (t.spec.nodes > core::kMaxGangNodes || t.spec.gpu_count % t.spec.nodes != 0) t.spec.nodes = 1;
  (void)core::FinishDecodedTask(&t);
  return t;
}

void TeamToRecord(const core::TeamRecord& t, dgpu::v1::TeamRecord* r) {
  r->set_name(t.name);
  r->set_api_set(t.set);
  r->set_online(t.limits.online);
  r->set_batch(t.limits.batch);
  if (t.limits.max_gpus >= 0) r->set_max_gpus(t.limits.max_gpus);
  r->set_weight(t.limits.weight);
  r->set_deleted(t.deleted);
  r->set_usage(t.usage);
  r->set_usage_at(t.usage_at);
  r->set_default_time_limit(t.limits.default_time_limit);
}

core::TeamRecord TeamFromRecord(const dgpu::v1::TeamRecord& r) {
  core::TeamRecord t;
  t.name = r.name();
  t.set = r.api_set();
  t.limits.online = r.online();
  t.limits.batch = r.batch();
  t.limits.max_gpus = r.has_max_gpus() ? r.max_gpus() : -1;
  t.limits.weight = r.weight() > 0 ? r.weight() : 1.0;
  t.deleted = r.deleted();
  t.usage = r.usage();
  t.usage_at = r.usage_at();
  t.limits.default_time_limit =
      std::clamp<int64_t>(r.default_time_limit(), 0, core::kMaxTimeLimitSeconds);
  return t;
}

void NodeToRecord(const core::NodeRecord& n, dgpu::v1::NodeRecord* r) {
  r->set_id(n.id);
  r->set_mode(std::string(core::ToString(n.mode)));
}

core::NodeRecord NodeFromRecord(const dgpu::v1::NodeRecord& r) {
  // An unknown mode (from a newer primary) keeps the node out of placement.
  return {r.id(), core::ParseNodeMode(r.mode()).value_or(core::NodeMode::kCordoned)};
}

core::Change ChangeFromRecord(const dgpu::v1::ChangeRecord& r) {
  core::Change c;
  switch (r.change_case()) {
    case dgpu::v1::ChangeRecord::kTask:
      c.kind = core::Change::Kind::kTaskUpsert;
      c.task = TaskFromRecord(r.task());
      break;
    case dgpu::v1::ChangeRecord::kOnlinePercent:
      c.kind = core::Change::Kind::kQuotaPercent;
      c.online_percent = r.online_percent();
      break;
    case dgpu::v1::ChangeRecord::kTeam:
      c.kind = core::Change::Kind::kTeamUpsert;
      c.team = TeamFromRecord(r.team());
      break;
    case dgpu::v1::ChangeRecord::kNode:
      c.kind = core::Change::Kind::kNodeUpsert;
      c.node = NodeFromRecord(r.node());
      break;
    case dgpu::v1::ChangeRecord::kTaskArray:
      c.kind = core::Change::Kind::kTaskArray;
      c.task = TaskFromRecord(r.task_array());
      break;
    case dgpu::v1::ChangeRecord::kTaskEvent: {
      const dgpu::v1::TaskEventRecord& e = r.task_event();
      c.kind = core::Change::Kind::kTaskEvent;
      c.event = {e.task(), e.time_unix_micros(), e.type(), e.node_id(), e.message()};
      break;
    }
    default:
      c.kind = core::Change::Kind::kNextTaskNumber;
      c.next_number = r.next_task_number();
      break;
  }
  return c;
}

void ChangeToRecord(const core::Change& c, dgpu::v1::ChangeRecord* r) {
  switch (c.kind) {
    case core::Change::Kind::kTaskUpsert:
      TaskToRecord(c.task, r->mutable_task());
      break;
    case core::Change::Kind::kQuotaPercent:
      r->set_online_percent(c.online_percent);
      break;
    case core::Change::Kind::kNextTaskNumber:
      r->set_next_task_number(c.next_number);
      break;
    case core::Change::Kind::kTeamUpsert:
      TeamToRecord(c.team, r->mutable_team());
      break;
    case core::Change::Kind::kNodeUpsert:
      NodeToRecord(c.node, r->mutable_node());
      break;
    case core::Change::Kind::kTaskArray:
      TaskToRecord(c.task, r->mutable_task_array());
      break;
    case core::Change::Kind::kTaskEvent: {
      dgpu::v1::TaskEventRecord* e = r->mutable_task_event();
      e->set_task(c.event.task);
      e->set_time_unix_micros(c.event.time);
      e->set_type(c.event.type);
      e->set_node_id(c.event.node_id);
      e->set_message(c.event.message);
      break;
    }
  }
}

}  // namespace dgpu::scheduler
