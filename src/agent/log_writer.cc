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

LogCopier::LogCopier(int out, int64_t max_bytes) : out_(out), max_bytes_(max_bytes) {
  struct stat st {};
  size_ = fstat(out, &st) == 0 ? st.st_size : 0;
}

void LogCopier::Write(const char* data, size_t n) {
  if (cut_ || n == 0) return;
  const auto take =
      static_cast<size_t>(std::clamp<int64_t>(max_bytes_ - size_, 0, static_cast<int64_t>(n)));
  if (take > 0) {
    WriteAll(out_, data, take);
    size_ += static_cast<int64_t>(take);
    last_ = data[take - 1];
  }
  if (take < n) {
    cut_ = true;
    const std::string marker = (last_ == '\n' ? "" : "\n") + LogCutLine(max_bytes_);
    WriteAll(out_, marker.data(), marker.size());
  }
}

int RunLogWriter(int in, int out, int64_t max_bytes) {
  LogCopier copier(out, max_bytes);
  std::vector<char> buffer(size_t{64} << 10);
  while (true) {
    const ssize_t n = read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    copier.Write(buffer.data(), static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace dgpu::agent
