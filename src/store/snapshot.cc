#include "store/snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "store/task_codec.h"

namespace dgpu::store {
namespace {

Status ErrnoStatus(int err, const std::string& what) {
  if (err == ENOSPC || err == EDQUOT) return ResourceExhausted("disk full: " + what);
  return Unavailable(what + ": " + std::strerror(err));
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "writing " + path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening directory " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, "syncing directory " + dir);
  return OkStatus();
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "creating " + tmp);
  Status status = WriteAll(fd, contents, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, "syncing " + tmp);
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "closing " + tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, "renaming " + tmp + " to " + path);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return SyncDirectory(dir.empty() ? "." : dir);
}

Status WriteStateFile(const std::string& dir, const nlohmann::json& state) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create directory " + dir + ": " + ec.message());
  std::string text = DumpJson(state, /*indent=*/2);
  text.push_back('\n');
  return WriteFileAtomically((std::filesystem::path(dir) / kStateFileName).string(), text);
}

StatusOr<nlohmann::json> DumpStore(Database& db) {
  nlohmann::json tasks = nlohmann::json::array();
  StoreMeta meta;
  Status s = db.ForEachTask([&](const core::Task& t) { tasks.push_back(TaskToJson(t)); }, &meta);
  if (!s.ok()) return s;
  nlohmann::json meta_json = {{"epoch", meta.epoch},
                              {"next_task_number", meta.next_task_number},
                              {"last_applied_seq", meta.last_applied_seq}};
  if (meta.online_percent) meta_json["online_percent"] = *meta.online_percent;
  return nlohmann::json{{"format", "dgpu-store"},
                        {"schema_version", kSchemaVersion},
                        {"meta", std::move(meta_json)},
                        {"tasks", std::move(tasks)}};
}

}  // namespace dgpu::store
