#include "scheduler/audit_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/time_util.h"

namespace dgpu::scheduler {
namespace {

int OpenAppend(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

}  // namespace

StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  std::unique_ptr<AuditLog> log(new AuditLog(path));
  log->fd_ = OpenAppend(path);
  if (log->fd_ < 0) {
    return Unavailable("logging.audit_file: cannot open " + path + ": " + std::strerror(errno));
  }
  return log;
}

AuditLog::~AuditLog() {
  if (fd_ >= 0) ::close(fd_);
}

bool AuditLog::IsWrite(std::string_view method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

std::string AuditLog::Line(int64_t now_micros, const Caller& caller, std::string_view method,
                           std::string_view path, int status, std::string_view task_id) {
  nlohmann::ordered_json line = {
      {"time", common::FormatRfc3339Millis(now_micros)},
      {"user", caller.identity.user.empty() ? nlohmann::ordered_json(nullptr)
                                            : nlohmann::ordered_json(caller.identity.user)},
      {"role", caller.identity.authenticated ? std::string(ToString(caller.identity.role))
                                             : std::string("none")},
      {"peer", caller.peer},
      {"method", method},
      {"path", path},
      {"status", status},
      {"task_id",
       task_id.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(task_id)}};
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void AuditLog::Record(const Caller& caller, std::string_view method, std::string_view path,
                      int status, std::string_view task_id) {
  if (!IsWrite(method)) return;
  std::string line = Line(common::NowMicros(), caller, method, path, status, task_id) + "\n";
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (fd_ < 0) return;
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    spdlog::error("cannot append to the audit log {}: {}", path_, std::strerror(errno));
  }
}

Status AuditLog::Reopen() {
  const int fd = OpenAppend(path_);
  if (fd < 0) {
    return Unavailable("cannot reopen the audit log " + path_ + ": " + std::strerror(errno));
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return OkStatus();
}

}  // namespace dgpu::scheduler
