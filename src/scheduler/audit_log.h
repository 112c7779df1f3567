// The audit log (logging.audit_file): one JSON line per write request (POST, PUT, DELETE),
// refused ones included: time, user, role, peer, method, path, status and the task id when the
// request is about one. Tokens and request bodies are never written.
//
// Lines are appended with one write(2) each on an O_APPEND descriptor, so concurrent HTTP
// threads never interleave them and a crash of the scheduler loses none that were answered.
// Reopen (SIGHUP) starts a new file after logrotate moved the old one.
#pragma once

#include <shared_mutex>
#include <string>
#include <string_view>

#include "base/status.h"
#include "scheduler/application.h"

namespace dgpu::scheduler {

class AuditLog {
 public:
  // Opens (creating, mode 0600) `path` for appending; Unavailable naming the file on failure.
  static StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path);
  ~AuditLog();

  // Writes the line of a write request; reads (GET, HEAD) are not recorded.
  void Record(const Caller& caller, std::string_view method, std::string_view path, int status,
              std::string_view task_id);
  Status Reopen();

  // The line, without its newline (exposed for tests).
  static std::string Line(int64_t now_micros, const Caller& caller, std::string_view method,
                          std::string_view path, int status, std::string_view task_id);
  static bool IsWrite(std::string_view method);

 private:
  explicit AuditLog(std::string path) : path_(std::move(path)) {}
  std::string path_;
  std::shared_mutex mu_;  // Shared: writers; exclusive: Reopen swapping the descriptor.
  int fd_ = -1;
};

}  // namespace dgpu::scheduler
