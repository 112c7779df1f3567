// Snapshot: the human-readable JSON state file, written atomically (common/atomic_file.h), so
// that a reader (or a crash) sees either the old file or the new one, whole.
// The JSON a daemon writes is built by its caller (the REST layer owns that format); this module
// only adds the writer and the store's own dump of its database.
//
// Errors: ENOSPC -> ResourceExhausted("disk full: ..."); any other failure -> Unavailable naming
// the path and the reason. On error the previous file is untouched and the .tmp file removed.
// Thread safety: free functions; concurrent writers of the same path must be serialised by the
// caller.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "common/atomic_file.h"
#include "store/database.h"

namespace dgpu::store {

inline constexpr char kStateFileName[] = "state.json";

// A streaming atomic writer for `<dir>/state.json`, creating `dir` if missing.
StatusOr<std::unique_ptr<common::AtomicFileWriter>> OpenStateFile(const std::string& dir);

// Writes `state` (pretty-printed, 2-space indent) to `<dir>/state.json` atomically, creating
// `dir` if missing.
Status WriteStateFile(const std::string& dir, const nlohmann::json& state);

// The store's own snapshot of `db`, read from one consistent snapshot of the database:
//   {"format": "dgpu-store", "schema_version": 1,
//    "meta": {"epoch", "next_task_number", "last_applied_seq", "online_percent"?},
//    "tasks": [<TaskToJson>, ...]}   (every task, finished ones included, in id order)
StatusOr<nlohmann::json> DumpStore(Database& db);

}  // namespace dgpu::store
