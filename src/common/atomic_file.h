// Atomic file replacement: a crash leaves either the old file or the new one, never a mix.
//
// Every function writes or moves a file inside the target's own directory, fsyncs the file,
// renames it over the target and fsyncs the directory, checking each step. A failure names the
// file and the step that failed and removes the temporary file. Disk full (ENOSPC, EDQUOT) is
// kResourceExhausted; any other error is kUnavailable.
#pragma once

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

// Fsyncs the directory `dir`, which makes the creation, renaming or removal of its entries
// durable.
Status SyncDirectory(const std::string& dir);

}  // namespace dgpu::common
