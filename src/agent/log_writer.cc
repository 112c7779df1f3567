#include "agent/log_writer.h"

#include <unistd.h>

#include <cerrno>
#include <vector>

namespace dgpu::agent {

std::string LogCutLine(int64_t max_bytes) {
  char line[160];
  const size_t n = dgpu_log_cut_line(max_bytes, line, sizeof(line));
  return std::string(line, n);
}

LogCopier::LogCopier(int out, int64_t max_bytes) { dgpu_log_copier_init(&c_, out, max_bytes); }

void LogCopier::Write(const char* data, size_t n) { dgpu_log_copier_write(&c_, data, n); }

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
