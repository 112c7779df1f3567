#include "store/task_rows.h"

#include <limits>
#include <string>
#include <type_traits>
#include <utility>

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
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return sqlite3_bind_int64(stmt, n, ToInt64(value));
  } else if constexpr (std::is_integral_v<T>) {
    return sqlite3_bind_int64(stmt, n, value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return BindText(stmt, n, value);
  } else if constexpr (kIsEnum<T>) {
    return BindText(stmt, n, core::ToString(value));
  } else if constexpr (std::is_same_v<T, EnvList>) {
    *text = DumpJson(EnvToJson(value));
    return BindText(stmt, n, *text);
  } else if constexpr (std::is_same_v<T, core::Dependencies>) {
    *text = DumpJson(DependenciesToJson(value));
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
    *out = ToUint64(sqlite3_column_int64(stmt, col));
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
        return EnvFromJson(*json, info.name);
      } else if constexpr (std::is_same_v<T, core::Dependencies>) {
        return DependenciesFromJson(*json);
      } else {
        return AllocationFromJson(*json);
      }
    }();
    if (!value.ok()) return std::string(value.status().message());
    *out = std::move(*value);
  }
  return "";
}

constexpr char kOldStatusSql[] = "SELECT status, priority FROM tasks WHERE id = ?1";
constexpr char kOldStatusesInRangeSql[] =
    "SELECT status, priority, count(*) FROM tasks WHERE id BETWEEN ?1 AND ?2 "
    "GROUP BY status, priority";
constexpr char kAddCountSql[] =
    "INSERT INTO task_counts (status, priority, n) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (status, priority) DO UPDATE SET n = n + excluded.n";

// Binds every field of `t` to the upsert statement (see BindTaskRow).
Status BindTask(SqliteConnection& conn, sqlite3_stmt* stmt, const core::Task& t,
                TaskRowTexts* texts) {
  if (t.id == 0) return InvalidArgument("task number 0 cannot be stored");
  if (t.id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("task number " + std::to_string(t.id) + " is out of range");
  }
  if (int rc = BindTaskRow(stmt, t, texts); rc != SQLITE_OK) {
    return conn.Error(rc, "binding task " + core::FormatTaskId(t.id) + " for");
  }
  return OkStatus();
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

void CountDeltas::Add(std::string_view status, std::string_view priority, int64_t n) {
  for (Delta& d : deltas_) {
    if (d.status == status && d.priority == priority) {
      d.n += n;
      return;
    }
  }
  deltas_.push_back({std::string(status), std::string(priority), n});
}

Status CountDeltas::RemoveExisting(SqliteConnection& conn, core::TaskNumber first,
                                   core::TaskNumber last) {
  const bool one = first == last;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(one ? kOldStatusSql : kOldStatusesInRangeSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(first));
  if (!one) sqlite3_bind_int64(*stmt, 2, ToInt64(last));
  while (true) {
    const int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "counting the tasks replaced in");
    Add(ColumnText(*stmt, 0), ColumnText(*stmt, 1), one ? -1 : -sqlite3_column_int64(*stmt, 2));
  }
}

Status CountDeltas::Flush(SqliteConnection& conn) {
  for (const Delta& d : deltas_) {
    if (d.n == 0) continue;
    StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kAddCountSql);
    if (!stmt.ok()) return stmt.status();
    StatementScope scope(*stmt);
    sqlite3_bind_text(*stmt, 1, d.status.data(), static_cast<int>(d.status.size()), SQLITE_STATIC);
    sqlite3_bind_text(*stmt, 2, d.priority.data(), static_cast<int>(d.priority.size()),
                      SQLITE_STATIC);
    sqlite3_bind_int64(*stmt, 3, d.n);
    if (Status s = StepDone(conn, *stmt, "storing task counts in"); !s.ok()) return s;
  }
  deltas_.clear();
  return OkStatus();
}

Status StepRows(SqliteConnection& conn, sqlite3_stmt* stmt,
                const std::function<Status(core::Task&&)>& fn) {
  while (true) {
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading tasks from");
    StatusOr<core::Task> task = ReadTaskRow(stmt, conn.path());
    if (!task.ok()) return task.status();
    if (Status s = fn(std::move(*task)); !s.ok()) return s;
  }
}

Status ForEachRow(SqliteConnection& conn, sqlite3_stmt* stmt,
                  const std::function<void(core::Task&&)>& fn) {
  return StepRows(conn, stmt, [&](core::Task&& t) {
    fn(std::move(t));
    return OkStatus();
  });
}

Status ForEachUnfinished(SqliteConnection& conn, const std::function<Status(core::Task&&)>& fn) {
  static const std::string kLoadSql =
      "SELECT " + TaskColumns() +
      " FROM tasks WHERE status IN ('pending', 'running') OR stopping = 1 ORDER BY queue_seq, id";
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kLoadSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  return StepRows(conn, *stmt, fn);
}

Status UpsertTask(SqliteConnection& conn, const core::Task& task, CountDeltas* counts) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(UpsertTaskSql());
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  TaskRowTexts texts;
  if (Status s = BindTask(conn, *stmt, task, &texts); !s.ok()) return s;
  if (Status s = counts->RemoveExisting(conn, task.id, task.id); !s.ok()) return s;
  counts->Add(core::ToString(task.status), core::ToString(task.spec.priority), 1);
  return StepDone(conn, *stmt, "storing " + core::FormatTaskId(task.id) + " in");
}

Status InsertArray(SqliteConnection& conn, const core::Task& first, CountDeltas* counts) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(InsertArraySql());
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  TaskRowTexts texts;
  if (Status s = BindTask(conn, *stmt, first, &texts); !s.ok()) return s;
  if (int rc = sqlite3_bind_int(*stmt, ArrayMembersParameter(), first.spec.array_size);
      rc != SQLITE_OK) {
    return conn.Error(rc, "binding the array of " + core::FormatTaskId(first.id) + " for");
  }
  const auto members = static_cast<core::TaskNumber>(first.spec.array_size);
  if (Status s = counts->RemoveExisting(conn, first.id, first.id + members - 1); !s.ok()) return s;
  counts->Add(core::ToString(first.status), core::ToString(first.spec.priority),
              first.spec.array_size);
  return StepDone(conn, *stmt,
                  "storing the " + std::to_string(first.spec.array_size) +
                      " members of the array from " + core::FormatTaskId(first.id) + " in");
}

std::string TaskSelect(std::string_view where_and_order) {
  return "SELECT " + TaskColumns() + " FROM tasks " + std::string(where_and_order);
}

}  // namespace dgpu::store
