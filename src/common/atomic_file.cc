#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dgpu::common {
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

Status SyncDescriptor(int fd, const std::string& path) {
  if (::fsync(fd) != 0) return ErrnoStatus(errno, "syncing " + path);
  return OkStatus();
}

std::string DirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Renames `temp` over `path` and makes that durable; removes `temp` if the rename fails.
Status RenameDurably(const std::string& temp, const std::string& path) {
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Status status = ErrnoStatus(errno, "renaming " + temp + " to " + path);
    ::unlink(temp.c_str());
    return status;
  }
  return SyncDirectory(DirectoryOf(path));
}

// Writes and fsyncs `<path>.tmp`, then renames it over `path`. Returns the open descriptor.
StatusOr<int> WriteAndReplace(const std::string& path, std::string_view contents, int flags) {
  const std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | flags, 0644);
  if (fd < 0) return ErrnoStatus(errno, "creating " + temp);
  Status status = WriteAll(fd, contents, temp);
  if (status.ok()) status = SyncDescriptor(fd, temp);
  if (status.ok()) status = RenameDurably(temp, path);
  if (!status.ok()) {
    ::close(fd);
    ::unlink(temp.c_str());
    return status;
  }
  return fd;
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  StatusOr<int> fd = WriteAndReplace(path, contents, 0);
  if (!fd.ok()) return fd.status();
  if (::close(*fd) != 0) return ErrnoStatus(errno, "closing " + path);
  return OkStatus();
}

StatusOr<int> WriteFileAtomicallyKeepOpen(const std::string& path, std::string_view contents) {
  return WriteAndReplace(path, contents, O_APPEND);
}

Status ReplaceFileAtomically(const std::string& temp, const std::string& path) {
  int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    Status status = ErrnoStatus(errno, "opening " + temp);
    ::unlink(temp.c_str());
    return status;
  }
  Status status = SyncDescriptor(fd, temp);
  ::close(fd);
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  return RenameDurably(temp, path);
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening directory " + dir);
  Status status = SyncDescriptor(fd, "directory " + dir);
  ::close(fd);
  return status;
}

}  // namespace dgpu::common
