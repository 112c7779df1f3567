#include "store/sqlite.h"

#include <cstring>

namespace dgpu::store {

std::string ErrnoText(int err) { return std::strerror(err); }

// Maps a SQLite result code onto a Status; `context` says what was being done, with the path.
Status SqliteStatus(int rc, const std::string& context, const char* detail) {
  std::string message = context + ": " + (detail != nullptr ? detail : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return ResourceExhausted("disk full: " + message);
    case SQLITE_NOMEM:
      return ResourceExhausted("out of memory: " + message);
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PERM:
    case SQLITE_PROTOCOL:
      return Unavailable(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLoss(message);
    case SQLITE_INTERRUPT:
      return Status(StatusCode::kCancelled, "interrupted: " + message);
    default:
      return Internal(message);
  }
}

Status StepDone(SqliteConnection& conn, sqlite3_stmt* stmt, std::string_view what) {
  int rc = sqlite3_step(stmt);
  return rc == SQLITE_DONE ? OkStatus() : conn.Error(rc, what);
}

}  // namespace dgpu::store
