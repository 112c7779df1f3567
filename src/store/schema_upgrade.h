// The database file's life before it is used: checking a file is a dgpu database, creating a new
// one, and upgrading an older one through the migrations of schema.h with a backup first (see
// docs/protocol.md). Private to the store.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/status.h"
#include "store/sqlite.h"

namespace dgpu::store {

// Checks a file's first bytes without opening it with SQLite: a SQLite database with dgpu's
// application id.
Status CheckHeader(const std::string& path, off_t size);

// Builds a new, empty database at `path` under a temporary name and renames it into place, so
// that a crash never leaves a half-initialised dgpu.db behind.
Status CreateDatabase(const std::string& path);

// Checks an existing dgpu database through a read-only connection, which neither writes the
// file nor checkpoints a WAL into it, and returns its schema version.
StatusOr<int> ValidateDatabase(const std::string& path);

// Copies the database at `from`, with what its WAL holds, into the new file `to` with SQLite's
// online backup API; the copy is a rollback-journal database that needs no WAL beside it.
Status CopyDatabase(const std::string& from, const std::string& to);

// Removes the snapshot files (see Database::Snapshot) that a process ended before removing; the
// caller holds the directory's lock, so none of them is being written or sent.
void RemoveLeftoverSnapshots(const std::string& dir);

// Writes the copy of `path` that an upgrade keeps (see FreeBackupPath) under a temporary name,
// fsyncs it and renames it into place; returns its path.
StatusOr<std::string> WriteBackup(const std::string& dir, const std::string& path, int version);

// Runs the migrations of a database at `version`, each in one transaction that also sets the
// version it reaches. A failed step is rolled back; the steps before it stay applied.
Status Migrate(SqliteConnection& conn, int version, const std::string& backup_path);

}  // namespace dgpu::store
