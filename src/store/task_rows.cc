#include "store/task_rows.h"

#include <limits>
#include <type_traits>
#include <utility>

#include "store/sqlite_util.h"
#include "store/task_codec.h"

namespace dgpu::store {
namespace {

template <typename T>
constexpr bool kIsEnum = std::is_enum_v<T>;

struct TaskSql {
  std::string columns, upsert, insert_array;
};

TaskSql MakeTaskSql() {
  TaskSql sql;
  std::string conflict = "ON CONFLICT (id) DO UPDATE SET ";
  std::string values, selected;
  core::ForEachTaskField([&](int n, const auto& field) {
    const std::string name(field.info.name);
    const std::string param = "?" + std::to_string(n);
    const bool first = n == 1;
    sql.columns += (first ? "" : ", ") + name;
    values += (first ? "" : ", ") + param;
    if (!first) conflict += (n == 2 ? "" : ", ") + name + " = excluded." + name;
    std::string member = param;  // What member i of an array stores in this column.
    if (name == "id" || name == "queue_seq") member = param + " + i";
    if (name == "array_index") member = "i";
    selected += (first ? "" : ", ") + member;
  });
  const std::string members = "?" + std::to_string(ArrayMembersParameter());
  sql.upsert = "INSERT INTO tasks (" + sql.columns + ") VALUES (" + values + ") " + conflict;
  sql.insert_array =
      "WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i + 1 < " + members +
      ") INSERT INTO tasks (" + sql.columns + ") SELECT " + selected + " FROM m WHERE true " +
      conflict;
  return sql;
}

const TaskSql& Sql() {
  static const TaskSql sql = MakeTaskSql();
  return sql;
}

int BindText(sqlite3_stmt* stmt, int n, std::string_view value) {
  return sqlite3_bind_text(stmt, n, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
}

template <typename T>
int BindValue(sqlite3_stmt* stmt, int n, const T& value, std::string* text) {
  if constexpr (std::is_same_v<T, bool>) {
    return sqlite3_bind_int(stmt, n, value ? 1 : 0);
  } else if constexpr (std::is_integral_v<T>) {
    return sqlite3_bind_int64(stmt, n, static_cast<int64_t>(value));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return BindText(stmt, n, value);
  } else if constexpr (kIsEnum<T>) {
    return BindText(stmt, n, core::ToString(value));
  } else if constexpr (std::is_same_v<T, EnvList>) {
    *text = DumpJson(EnvToJson(value));
    return BindText(stmt, n, *text);
  } else {
    static_assert(std::is_same_v<T, core::Allocation>, "a task field of a new type");
    *text = DumpJson(AllocationToJson(value));
    return BindText(stmt, n, *text);
  }
}

// Reads column `col` into `out`; an empty string, or what is wrong with the value.
template <typename T>
std::string ReadValue(sqlite3_stmt* stmt, int col, const core::TaskFieldInfo& info, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    *out = sqlite3_column_int64(stmt, col) != 0;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    *out = static_cast<uint64_t>(sqlite3_column_int64(stmt, col));
  } else if constexpr (std::is_integral_v<T>) {
    const int64_t v = sqlite3_column_int64(stmt, col);
    if (v < std::max<int64_t>(info.min, std::numeric_limits<T>::min()) ||
        v > std::numeric_limits<T>::max()) {
      return std::string(info.name) + " " + std::to_string(v) + " is out of range";
    }
    *out = static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    *out = ColumnText(stmt, col);
  } else if constexpr (kIsEnum<T>) {
    const std::string text = ColumnText(stmt, col);
    std::optional<T> value = core::ParseName<T>(text);
    if (!value) return "unknown " + std::string(info.name) + " '" + text + "'";
    *out = *value;
  } else {
    StatusOr<nlohmann::json> json = ParseJson(ColumnText(stmt, col), info.name);
    if (!json.ok()) return std::string(json.status().message());
    StatusOr<T> value = [&] {
      if constexpr (std::is_same_v<T, EnvList>) {
        return EnvFromJson(*json);
      } else {
        return AllocationFromJson(*json);
      }
    }();
    if (!value.ok()) return std::string(value.status().message());
    *out = std::move(*value);
  }
  return "";
}

}  // namespace

const std::string& TaskColumns() { return Sql().columns; }
const std::string& UpsertTaskSql() { return Sql().upsert; }
const std::string& InsertArraySql() { return Sql().insert_array; }
int ArrayMembersParameter() { return core::kTaskFieldCount + 1; }

int BindTaskRow(sqlite3_stmt* stmt, const core::Task& task, TaskRowTexts* texts) {
  int rc = SQLITE_OK;
  core::ForEachTaskField([&](int n, const auto& field) {
    if (rc == SQLITE_OK) rc = BindValue(stmt, n, field.get(task), &(*texts)[n - 1]);
  });
  return rc;
}

StatusOr<core::Task> ReadTaskRow(sqlite3_stmt* stmt, const std::string& path) {
  core::Task t;
  std::string problem;
  core::ForEachTaskField([&](int n, const auto& field) {
    if (problem.empty()) problem = ReadValue(stmt, n - 1, field.info, &field.get(t));
  });
  if (problem.empty()) problem = core::FinishDecodedTask(&t);
  if (!problem.empty()) return DataLoss(core::FormatTaskId(t.id) + " in " + path + ": " + problem);
  return t;
}

}  // namespace dgpu::store
