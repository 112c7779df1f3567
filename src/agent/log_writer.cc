#include "agent/log_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace dgpu::agent {
namespace {

// Writes all of it; an error (a full disk) drops the rest: the task must not block on its log.
void WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string LogCutLine(int64_t max_bytes) {
  return "dgpu: log cut at " + std::to_string(max_bytes) +
         " bytes (executor.max_log_bytes); further output is discarded\n";
}

int RunLogWriter(int in, int out, int64_t max_bytes) {
  struct stat st {};
  // An earlier run's output counts: the limit is the file's.
  int64_t size = fstat(out, &st) == 0 ? st.st_size : 0;
  bool cut = false;
  char last = '\n';
  std::vector<char> buffer(size_t{64} << 10);
  while (true) {
    const ssize_t n = read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (cut) continue;
    const auto take = static_cast<size_t>(std::clamp<int64_t>(max_bytes - size, 0, n));
    if (take > 0) {
      WriteAll(out, buffer.data(), take);
      size += static_cast<int64_t>(take);
      last = buffer[take - 1];
    }
    if (take < static_cast<size_t>(n)) {
      cut = true;
      const std::string marker = (last == '\n' ? "" : "\n") + LogCutLine(max_bytes);
      WriteAll(out, marker.data(), marker.size());
    }
  }
  return 0;
}

}  // namespace dgpu::agent
