#include "store/schema_upgrade.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "common/atomic_file.h"
#include "store/database.h"
#include "store/schema.h"

namespace dgpu::store {
namespace {

constexpr char kCreatingSuffix[] = ".creating";

// The statements that record `version` as the schema version, in both places.
std::string SetVersionSql(int version) {
  const std::string v = std::to_string(version);
  return "UPDATE meta SET value = " + v +
         " WHERE key = 'schema_version'; PRAGMA user_version = " + v + ";";
}

// Version 1 and every migration: the layout of a new database.
std::string LatestSchemaSql() {
  std::string sql(kVersion1Schema);
  for (const Migration& m : kMigrations) sql += m.sql;
  return sql + SetVersionSql(kSchemaVersion);
}

std::optional<int> ParseVersion(std::string_view text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// The schema version of a dgpu database: meta.schema_version and PRAGMA user_version, which
// must agree, and must not be newer than this build.
StatusOr<int> ReadSchemaVersion(SqliteConnection& conn) {
  const std::string& path = conn.path();
  StatusOr<std::string> meta =
      conn.QueryText("SELECT value FROM meta WHERE key = 'schema_version'", "reading the meta of");
  if (!meta.ok()) {
    return DataLoss(path + " carries the dgpu application id but has no readable meta table (" +
                    meta.status().message() + "); refusing to use or modify it");
  }
  StatusOr<std::string> user = conn.QueryText("PRAGMA user_version", "reading the version of");
  if (!user.ok()) return user.status();
  const std::optional<int> meta_version = ParseVersion(*meta);
  const std::optional<int> user_version = ParseVersion(*user);
  if (!meta_version || !user_version || *meta_version < 1) {
    return DataLoss(path + " has an unreadable schema version (meta schema_version '" + *meta +
                    "', user_version '" + *user + "'); refusing to use or modify it");
  }
  const int newest = std::max(*meta_version, *user_version);
  if (newest > kSchemaVersion) {
    return FailedPrecondition(path + " has schema version " + std::to_string(newest) +
                              "; this dgpu-scheduler reads versions up to " +
                              std::to_string(kSchemaVersion) + ": use a newer binary");
  }
  if (*meta_version != *user_version) {
    return DataLoss(path + " has inconsistent schema versions (meta schema_version " + *meta +
                    ", user_version " + *user + "); refusing to use or modify it");
  }
  return *meta_version;
}

// The first of `<path>.v<version>.bak`, `<path>.v<version>.bak.2`, `.3`, ... that is free.
std::string FreeBackupPath(const std::string& path, int version) {
  const std::string base = path + ".v" + std::to_string(version) + ".bak";
  std::string candidate = base;
  struct stat st {};
  for (int n = 2; ::lstat(candidate.c_str(), &st) == 0; ++n) {
    candidate = base + "." + std::to_string(n);
  }
  return candidate;
}

}  // namespace

Status CheckHeader(const std::string& path, off_t size) {
  static constexpr char kMagic[] = "SQLite format 3";  // Followed by a NUL: 16 bytes.
  if (size == 0) {
    return DataLoss(path +
                    " is an empty file, not a dgpu database; refusing to use or overwrite it");
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unavailable("cannot read " + path + ": " + ErrnoText(errno));
  std::array<unsigned char, 100> header{};
  ssize_t n = 0;
  size_t got = 0;
  while (got < header.size() && (n = ::read(fd, header.data() + got, header.size() - got)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Unavailable("cannot read " + path + ": " + ErrnoText(err));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got < header.size() || std::memcmp(header.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataLoss(path +
                    " is not a SQLite database (bad file header): corrupt or foreign "
                    "file; refusing to use or overwrite it");
  }
  uint32_t app_id = (uint32_t{header[68]} << 24) | (uint32_t{header[69]} << 16) |
                    (uint32_t{header[70]} << 8) | uint32_t{header[71]};
  if (app_id != static_cast<uint32_t>(kApplicationId)) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  " is a SQLite database of another application (application_id 0x%08x, "
                  "expected 0x%08x); refusing to use or modify it",
                  app_id, static_cast<uint32_t>(kApplicationId));
    return FailedPrecondition(path + buf);
  }
  return OkStatus();
}

// Builds a new, empty database at `path` under a temporary name and renames it into place, so
// that a crash never leaves a half-initialised dgpu.db behind.
Status CreateDatabase(const std::string& path) {
  const std::string tmp = path + kCreatingSuffix;
  ::unlink(tmp.c_str());
  ::unlink((tmp + "-journal").c_str());
  {
    StatusOr<std::unique_ptr<SqliteConnection>> conn =
        SqliteConnection::Open(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!conn.ok()) return conn.status();
    Status s =
        (*conn)->Exec("PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL;", "configuring");
    if (s.ok()) {
      s = (*conn)->Exec("BEGIN; PRAGMA application_id = " + std::to_string(kApplicationId) + ";" +
                            LatestSchemaSql() + "COMMIT;",
                        "creating the schema of");
    }
    if (!s.ok()) {
      conn->reset();
      ::unlink(tmp.c_str());
      return s;
    }
  }
  return common::ReplaceFileAtomically(tmp, path);
}

// Checks an existing dgpu database through a read-only connection, which neither writes the
// file nor checkpoints a WAL into it, and returns its schema version.
StatusOr<int> ValidateDatabase(const std::string& path) {
  StatusOr<std::unique_ptr<SqliteConnection>> opened =
      SqliteConnection::Open(path, SQLITE_OPEN_READONLY);
  if (!opened.ok()) return opened.status();
  SqliteConnection& conn = **opened;
  StatusOr<std::string> check = conn.QueryText("PRAGMA quick_check", "checking the integrity of");
  if (!check.ok()) {
    if (check.status().code() == StatusCode::kDataLoss) {
      return DataLoss(check.status().message() + "; refusing to use or modify it");
    }
    return check.status();
  }
  if (*check != "ok") {
    std::replace(check->begin(), check->end(), '\n', ' ');
    return DataLoss(path + " failed its integrity check (" + *check +
                    "); refusing to use or modify it");
  }
  return ReadSchemaVersion(conn);
}

// Copies the database at `from`, with what its WAL holds, into the new file `to` with SQLite's
// online backup API; the copy is a rollback-journal database that needs no WAL beside it.
Status CopyDatabase(const std::string& from, const std::string& to) {
  StatusOr<std::unique_ptr<SqliteConnection>> source =
      SqliteConnection::Open(from, SQLITE_OPEN_READONLY);
  if (!source.ok()) return source.status();
  StatusOr<std::unique_ptr<SqliteConnection>> copy =
      SqliteConnection::Open(to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (!copy.ok()) return copy.status();
  sqlite3_backup* backup = sqlite3_backup_init((*copy)->db(), "main", (*source)->db(), "main");
  if (backup == nullptr) return (*copy)->Error(sqlite3_errcode((*copy)->db()), "copying into");
  const int step = sqlite3_backup_step(backup, -1);
  const int finish = sqlite3_backup_finish(backup);
  if (step != SQLITE_DONE) return (*copy)->Error(step, "copying into");
  if (finish != SQLITE_OK) return (*copy)->Error(finish, "copying into");
  StatusOr<std::string> mode =
      (*copy)->QueryText("PRAGMA journal_mode = DELETE", "configuring the journal of");
  return mode.ok() ? OkStatus() : mode.status();
}

// Removes the snapshot files (see Database::Snapshot) that a process ended before removing; the
// caller holds the directory's lock, so none of them is being written or sent.
void RemoveLeftoverSnapshots(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(std::string(kDatabaseFileName) + ".")) continue;
    if (name.ends_with(kSnapshotFileSuffix) ||
        name.ends_with(std::string(kSnapshotFileSuffix) + "-journal")) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

// Writes the copy of `path` that an upgrade keeps (see FreeBackupPath) under a temporary name,
// fsyncs it and renames it into place; returns its path.
StatusOr<std::string> WriteBackup(const std::string& dir, const std::string& path, int version) {
  const std::string backup = FreeBackupPath(path, version);
  const std::string tmp = backup + kCreatingSuffix;
  ::unlink(tmp.c_str());
  ::unlink((tmp + "-journal").c_str());
  Status s = CopyDatabase(path, tmp);
  if (s.ok()) s = common::ReplaceFileAtomically(tmp, backup);  // fsync, rename, fsync dir.
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    ::unlink((tmp + "-journal").c_str());
    return Status(s.code(), "cannot back up " + path + " before upgrading its schema: " +
                                s.message() + "; the database is unchanged");
  }
  return backup;
}

// Runs the migrations of a database at `version`, each in one transaction that also sets the
// version it reaches. A failed step is rolled back; the steps before it stay applied.
Status Migrate(SqliteConnection& conn, int version, const std::string& backup_path) {
  for (const Migration& m : kMigrations) {
    if (m.from_version < version) continue;
    const std::string sql =
        "BEGIN IMMEDIATE;" + std::string(m.sql) + SetVersionSql(m.from_version + 1) + "COMMIT;";
    const int rc = sqlite3_exec(conn.db(), sql.c_str(), nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) continue;
    const std::string from = std::to_string(m.from_version);
    const std::string step = "upgrading " + conn.path() + " from schema version " + from + " to " +
                             std::to_string(m.from_version + 1) + " (" + std::string(m.name) + ")";
    Status failed = SqliteStatus(rc, step, sqlite3_errmsg(conn.db()));
    conn.RollbackIfActive();
    return Status(failed.code(), failed.message() + "; the step was rolled back, the file is at " +
                                     "schema version " + from +
                                     " (copy before the upgrade: " + backup_path + ")");
  }
  return OkStatus();
}

}  // namespace dgpu::store
