// Task rows of the database: their SQL and their binding and decoding, all derived from the
// task's field table (core/task_fields.h). Column N of a row is the table's field N, bound as
// the placeholder ?N. Private to the store.
#pragma once

#include <sqlite3.h>

#include <array>
#include <string>

#include "base/status.h"
#include "core/task_fields.h"
#include "core/types.h"

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

}  // namespace dgpu::store
