// Atomic file replacement: a crash leaves either the old file or the new one, never a mix.
//
// Every function writes or moves a file inside the target's own directory, fsyncs the file,
// renames it over the target and fsyncs the directory, checking each step. A failure names the
// file and the step that failed and removes the temporary file. Disk full (ENOSPC, EDQUOT) is
// kResourceExhausted; any other error is kUnavailable.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dgpu::common {

// Writes `contents` to `<path>.tmp` and moves it over `path`.
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Like WriteFileAtomically, but hands back the new file still open for appending
// (O_WRONLY | O_APPEND | O_CLOEXEC). The caller owns the descriptor.
StatusOr<int> WriteFileAtomicallyKeepOpen(const std::string& path, std::string_view contents);

// Moves `temp`, a complete file in the same directory as `path`, over `path`.
Status ReplaceFileAtomically(const std::string& temp, const std::string& path);

// Contents produced piece by piece: Open creates `<path>.tmp`, Write appends (buffered), Commit
// flushes, fsyncs, renames over `path` and fsyncs the directory. A writer destroyed without a
// successful Commit removes the temp file and leaves `path` untouched. Errors as above; the
// first one is kept (later writes are dropped) and returned by Commit.
class AtomicFileWriter {
 public:
  static StatusOr<std::unique_ptr<AtomicFileWriter>> Open(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void Write(std::string_view data);
  Status Commit();

 private:
  AtomicFileWriter(std::string path, int fd);
  void FlushBuffer();

  const std::string path_;
  const std::string tmp_;
  int fd_;
  std::string buffer_;
  Status status_;
  bool committed_ = false;
};

// Fsyncs the directory `dir`, which makes the creation, renaming or removal of its entries
// durable.
Status SyncDirectory(const std::string& dir);

}  // namespace dgpu::common
