// Task rows of the database: their SQL and their binding and decoding, all derived from the
// task's field table (core/task_fields.h), and the statements that write and read them. Column N
// of a row is the table's field N, bound as the placeholder ?N. Private to the store.
#pragma once

#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/task_fields.h"
#include "core/types.h"
#include "store/sqlite.h"

namespace dgpu::store {

// "id, name, priority, ...": every column, in table order.
const std::string& TaskColumns();

// Inserts a task row (?1..?N), or replaces every column of the row with its id.
const std::string& UpsertTaskSql();

// Inserts the members of a job array in one statement, from the first member bound as for
// UpsertTaskSql: member i adds i to the id and the queue position and has array index i. The
// number of members is the placeholder ArrayMembersParameter().
const std::string& InsertArraySql();
int ArrayMembersParameter();

// The texts a bound row points into (its JSON columns): they must outlive the statement's next
// step, as must the task.
using TaskRowTexts = std::array<std::string, core::kTaskFieldCount>;

// Binds every field of `task`; returns the first SQLite result that is not SQLITE_OK, or
// SQLITE_OK.
int BindTaskRow(sqlite3_stmt* stmt, const core::Task& task, TaskRowTexts* texts);

// Decodes a row selected with TaskColumns(). A value no task can hold is DataLoss naming the
// task, the database (`path`) and the field.
StatusOr<core::Task> ReadTaskRow(sqlite3_stmt* stmt, const std::string& path);

// How a write transaction changes the kept task counts (table task_counts): the rows it replaces
// are taken away and the rows it writes added, by (status, priority); Flush adds the sums. Inserts
// and updates of task rows are counted here rather than by per-row triggers: a trigger makes
// SQLite keep a statement journal for every row written, which cost more than half of a large
// batch's time. Deletes (pruning) keep their trigger.
class CountDeltas {
 public:
  void Add(std::string_view status, std::string_view priority, int64_t n);
  // Takes away the rows numbered first..last that exist (about to be replaced).
  Status RemoveExisting(SqliteConnection& conn, core::TaskNumber first, core::TaskNumber last);
  Status Flush(SqliteConnection& conn);

 private:
  struct Delta {
    std::string status, priority;
    int64_t n = 0;
  };
  std::vector<Delta> deltas_;  // A few (status, priority) pairs: a list beats a map.
};

// Writes a task's row (insert or replace), counted in `counts`.
Status UpsertTask(SqliteConnection& conn, const core::Task& task, CountDeltas* counts);
// Writes every member of the array whose first member is `first` (see InsertArraySql).
Status InsertArray(SqliteConnection& conn, const core::Task& first, CountDeltas* counts);

// "SELECT <every column> FROM tasks <where_and_order>".
std::string TaskSelect(std::string_view where_and_order);
// Steps a task query to the end, handing each decoded row to `fn`; the first error, of reading
// or of `fn`, ends it.
Status StepRows(SqliteConnection& conn, sqlite3_stmt* stmt,
                const std::function<Status(core::Task&&)>& fn);
Status ForEachRow(SqliteConnection& conn, sqlite3_stmt* stmt,
                  const std::function<void(core::Task&&)>& fn);
// The unfinished tasks (see LoadedState) in queue order, each handed to `fn` as it is read;
// the first error, of reading or of `fn`, ends the walk.
Status ForEachUnfinished(SqliteConnection& conn, const std::function<Status(core::Task&&)>& fn);

}  // namespace dgpu::store
