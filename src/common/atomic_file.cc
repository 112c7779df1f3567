#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

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

constexpr size_t kWriteBufferBytes = 1 << 20;

StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Open(const std::string& path) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "creating " + tmp);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, fd));
}

AtomicFileWriter::AtomicFileWriter(std::string path, int fd)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), fd_(fd) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::Write(std::string_view data) {
  if (!status_.ok()) return;
  buffer_.append(data);
  if (buffer_.size() >= kWriteBufferBytes) FlushBuffer();
}

void AtomicFileWriter::FlushBuffer() {
  status_ = WriteAll(fd_, buffer_, tmp_);
  buffer_.clear();
}

Status AtomicFileWriter::Commit() {
  if (committed_) return status_;
  if (status_.ok()) FlushBuffer();
  if (!status_.ok()) return status_;
  if (Status s = SyncDescriptor(fd_, tmp_); !s.ok()) return status_ = s;
  if (::close(std::exchange(fd_, -1)) != 0) return status_ = ErrnoStatus(errno, "closing " + tmp_);
  status_ = RenameDurably(tmp_, path_);
  committed_ = status_.ok();
  return status_;
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening directory " + dir);
  Status status = SyncDescriptor(fd, "directory " + dir);
  ::close(fd);
  return status;
}

}  // namespace dgpu::common
