#include "agent/task_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace dgpu::agent {
namespace {

constexpr int64_t kTailSearchBytes = int64_t{64} << 20;

// Reads up to n bytes at offset; fewer at the end of the file.
bool ReadAt(int fd, int64_t offset, size_t n, std::string* out) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r =
        pread(fd, out->data() + got, n - got, static_cast<off_t>(offset) + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out->resize(got);
  return true;
}

// Where the last `lines` lines of the first `size` bytes begin.
int64_t TailStart(int fd, int64_t size, int32_t lines) {
  const int64_t floor = std::max<int64_t>(0, size - kTailSearchBytes);
  int64_t end = size;
  int32_t newlines = 0;
  // A newline that ends the file ends the last line; it does not start one.
  bool skip_last = true;
  std::string block;
  while (end > floor) {
    const int64_t start = std::max(floor, end - 65536);
    if (!ReadAt(fd, start, static_cast<size_t>(end - start), &block)) return floor;
    for (int64_t i = static_cast<int64_t>(block.size()) - 1; i >= 0; --i) {
      if (block[static_cast<size_t>(i)] != '\n') {
        skip_last = false;
        continue;
      }
      if (skip_last && start + i == size - 1) {
        skip_last = false;
        continue;
      }
      if (++newlines == lines) return start + i + 1;
    }
    end = start;
  }
  return floor;
}

}  // namespace

LogRead ReadLog(const std::string& path, int64_t offset, int32_t tail_lines, int32_t max_bytes) {
  LogRead out;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    out.error = std::strerror(errno);
    return out;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    out.error = std::strerror(errno);
    close(fd);
    return out;
  }
  out.found = true;
  out.size = st.st_size;
  out.offset = tail_lines > 0 ? TailStart(fd, out.size, tail_lines)
                              : std::clamp<int64_t>(offset, 0, out.size);
  const int64_t n = std::min<int64_t>(std::max(max_bytes, 0), out.size - out.offset);
  if (n > 0 && !ReadAt(fd, out.offset, static_cast<size_t>(n), &out.data)) {
    out = LogRead{};
    out.error = std::strerror(errno);
  }
  close(fd);
  return out;
}

}  // namespace dgpu::agent
