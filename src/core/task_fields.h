// Every field of a task, declared once.
//
// A task crosses several forms on its way between the core and the outside: a row of the
// database (store/database.cc), the store's JSON (store/task_codec.cc: snapshots), a replication
// record (scheduler/replication_codec.cc) and the REST API's task object (scheduler/api_json.cc).
// Each of them walks this table instead of naming the fields one by one, so a new field of `Task`
// or `TaskSpec` is one line here (plus its proto field and its column's migration; see "Adding a
// task field" in docs/architecture.md). A test (tests/core/task_fields_test.cc) fails when a
// member of `Task` or `TaskSpec` has no line here.
//
// A field's position is its number everywhere: the database's placeholder `?N` and the
// replication record's proto field number are both the 1-based position in this table, so new
// fields go at the end and none is ever reordered or removed.
//
// How each form spells a field follows from its C++ type (integers, bool, string, the core's
// enums by name, the env list, the allocation and the dependencies), and from the few
// properties below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "base/status.h"
#include "core/types.h"

namespace dgpu::core {

// How the REST API's task object shows a field.
enum class ApiForm : uint8_t {
  kHidden,         // Not shown: the core's own bookkeeping.
  kValue,          // Its value (enums by name, env as an object, allocation as a list).
  kTime,           // RFC 3339 text, null when 0.
  kNullWhenUnset,  // Its value, or null while it has its default (array_index, array_size).
  kComputed,       // Shown, but worked out by the API from more than the field (exit_code).
};

struct TaskFieldInfo {
  std::string_view name;  // The column, the stored JSON key and the REST key.
  // Written by the first release: a stored task without it is damaged. A later field may be
  // absent from what an older release wrote; it then reads as its default.
  bool first_release = false;
  ApiForm api = ApiForm::kValue;
  // Integers: the smallest value a stored or replicated task may hold.
  int64_t min = std::numeric_limits<int64_t>::min();
};

// One field: its properties and `get(task)`, the member as a reference (const when the task is).
template <typename Get>
struct TaskField {
  TaskFieldInfo info;
  Get get;
};

template <typename Get>
constexpr TaskField<Get> MakeTaskField(TaskFieldInfo info, Get get) {
  return {info, get};
}

#define DGPU_TASK_MEMBER(member) ([](auto& t) -> auto& { return t.member; })

inline constexpr bool kFirstRelease = true;
inline constexpr bool kLater = false;

// The table. Append only (see above).
inline constexpr auto kTaskFields = std::make_tuple(
    MakeTaskField({"id", kFirstRelease, ApiForm::kHidden}, DGPU_TASK_MEMBER(id)),  // REST task_id
    MakeTaskField({"name", kFirstRelease}, DGPU_TASK_MEMBER(spec.name)),
    MakeTaskField({"priority", kFirstRelease}, DGPU_TASK_MEMBER(spec.priority)),
    MakeTaskField({"gpu_count", kFirstRelease}, DGPU_TASK_MEMBER(spec.gpu_count)),
    MakeTaskField({"gpu_model", kFirstRelease}, DGPU_TASK_MEMBER(spec.gpu_model)),
    MakeTaskField({"command", kFirstRelease}, DGPU_TASK_MEMBER(spec.command)),
    MakeTaskField({"env", kFirstRelease}, DGPU_TASK_MEMBER(spec.env)),
    MakeTaskField({"timeout_seconds", kFirstRelease}, DGPU_TASK_MEMBER(spec.timeout_seconds)),
    MakeTaskField({"image", kFirstRelease}, DGPU_TASK_MEMBER(spec.image)),
    MakeTaskField({"status", kFirstRelease}, DGPU_TASK_MEMBER(status)),
    MakeTaskField({"queue_seq", kFirstRelease, ApiForm::kHidden}, DGPU_TASK_MEMBER(queue_seq)),
    MakeTaskField({"allocation", kFirstRelease}, DGPU_TASK_MEMBER(allocation)),
    MakeTaskField({"attempts", kFirstRelease}, DGPU_TASK_MEMBER(attempts)),
    MakeTaskField({"exit_code", kFirstRelease, ApiForm::kComputed}, DGPU_TASK_MEMBER(exit_code)),
    MakeTaskField({"error", kFirstRelease}, DGPU_TASK_MEMBER(error)),
    MakeTaskField({"created_at", kFirstRelease, ApiForm::kTime}, DGPU_TASK_MEMBER(created_at)),
    MakeTaskField({"started_at", kFirstRelease, ApiForm::kTime}, DGPU_TASK_MEMBER(started_at)),
    MakeTaskField({"finished_at", kFirstRelease, ApiForm::kTime}, DGPU_TASK_MEMBER(finished_at)),
    MakeTaskField({"stopping", kFirstRelease, ApiForm::kHidden}, DGPU_TASK_MEMBER(stopping)),
    MakeTaskField({"stop_reason", kLater, ApiForm::kHidden}, DGPU_TASK_MEMBER(stop_reason)),
    MakeTaskField({"team", kLater}, DGPU_TASK_MEMBER(spec.team)),
    MakeTaskField({"user", kLater}, DGPU_TASK_MEMBER(spec.user)),
    MakeTaskField({"preemptible", kLater}, DGPU_TASK_MEMBER(spec.preemptible)),
    MakeTaskField({"preemption_grace_seconds", kLater, ApiForm::kValue, -1},
                  DGPU_TASK_MEMBER(spec.preemption_grace_seconds)),
    MakeTaskField({"borrowed", kLater, ApiForm::kComputed}, DGPU_TASK_MEMBER(borrowed)),
    MakeTaskField({"preemptions", kLater}, DGPU_TASK_MEMBER(preemptions)),
    MakeTaskField({"preempted_by", kLater, ApiForm::kHidden}, DGPU_TASK_MEMBER(preempted_by)),
    MakeTaskField({"array_index", kLater, ApiForm::kNullWhenUnset},
                  DGPU_TASK_MEMBER(spec.array_index)),
    MakeTaskField({"array_size", kLater, ApiForm::kNullWhenUnset},
                  DGPU_TASK_MEMBER(spec.array_size)),
    MakeTaskField({"max_retries", kLater, ApiForm::kValue, 0}, DGPU_TASK_MEMBER(spec.max_retries)),
    MakeTaskField({"retry_backoff_seconds", kLater, ApiForm::kValue, 0},
                  DGPU_TASK_MEMBER(spec.retry_backoff_seconds)),
    MakeTaskField({"retries", kLater, ApiForm::kValue, 0}, DGPU_TASK_MEMBER(retries)),
    MakeTaskField({"retry_at", kLater, ApiForm::kTime, 0}, DGPU_TASK_MEMBER(retry_at)),
    MakeTaskField({"nodes", kLater, ApiForm::kValue, 1}, DGPU_TASK_MEMBER(spec.nodes)),
    MakeTaskField({"master_port", kLater, ApiForm::kNullWhenUnset, 0},
                  DGPU_TASK_MEMBER(master_port)),
    MakeTaskField({"cpus_milli", kLater, ApiForm::kHidden, 0},  // REST cpus
                  DGPU_TASK_MEMBER(spec.cpus_milli)),
    MakeTaskField({"memory_mb", kLater, ApiForm::kComputed, 0}, DGPU_TASK_MEMBER(spec.memory_mb)),
    MakeTaskField({"node_selector", kLater}, DGPU_TASK_MEMBER(spec.node_selector)),
    MakeTaskField({"depends_on", kLater}, DGPU_TASK_MEMBER(spec.depends_on)));

#undef DGPU_TASK_MEMBER

inline constexpr int kTaskFieldCount = static_cast<int>(std::tuple_size_v<decltype(kTaskFields)>);

// Calls fn(number, field) for every field in table order; `number` is the 1-based position.
template <typename Fn>
constexpr void ForEachTaskField(Fn&& fn) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (fn(static_cast<int>(I) + 1, std::get<I>(kTaskFields)), ...);
  }
  (std::make_index_sequence<kTaskFieldCount>{});
}

// Calls fn(number, field) in table order until one returns a Status that is not OK; returns
// that one, or OK.
template <typename Fn>
Status ForEachTaskFieldUntilError(Fn&& fn) {
  Status s;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (void)((s = fn(static_cast<int>(I) + 1, std::get<I>(kTaskFields)), s.ok()) && ...);
  }
  (std::make_index_sequence<kTaskFieldCount>{});
  return s;
}

// The C++ type of a field.
template <typename Field>
using TaskFieldType =
    std::remove_cvref_t<decltype(std::declval<Field>().get(std::declval<Task&>()))>;

// The field's value in a new Task: what an absent field reads as.
template <typename Field>
const TaskFieldType<Field>& TaskFieldDefault(const Field& field) {
  static const Task kDefault;
  return field.get(kDefault);
}

// The enums' names, for the forms that spell them as text.
inline std::optional<Priority> ParseName(std::string_view s, Priority*) { return ParsePriority(s); }
inline std::optional<TaskStatus> ParseName(std::string_view s, TaskStatus*) {
  return ParseTaskStatus(s);
}
inline std::optional<StopReason> ParseName(std::string_view s, StopReason*) {
  return ParseStopReason(s);
}
inline std::optional<DependencyCondition> ParseName(std::string_view s, DependencyCondition*) {
  return ParseDependencyCondition(s);
}
inline std::optional<DependencyState> ParseName(std::string_view s, DependencyState*) {
  return ParseDependencyState(s);
}
template <typename Enum>
std::optional<Enum> ParseName(std::string_view s) {
  return ParseName(s, static_cast<Enum*>(nullptr));
}
// What a valid name of the enum is, for error messages.
std::string_view NamesOf(Priority*);
std::string_view NamesOf(TaskStatus*);
std::string_view NamesOf(StopReason*);
std::string_view NamesOf(DependencyCondition*);
std::string_view NamesOf(DependencyState*);

// What every decoder of a stored or replicated task does once its fields are read: a field that
// only means something in one state is cleared in the others (retry_at outside pending). Then
// returns what is wrong across fields (an invalid team name, array fields that disagree), or an
// empty string.
std::string FinishDecodedTask(Task* task);

}  // namespace dgpu::core
