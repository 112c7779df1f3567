// dgpu-log-writer --log-writer MAX_BYTES: one task's log writer (log_writer.h), started by the
// agent with the task's output pipe on stdin and its log on stdout.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "agent/log_writer.h"

int main(int argc, char** argv) {
  int64_t max = -1;
  if (argc == 3 && std::string_view(argv[1]) == dgpu::agent::kLogWriterFlag) {
    const std::string_view text(argv[2]);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), max);
    if (ec != std::errc() || end != text.data() + text.size()) max = -1;
  }
  if (max < 0) {
    std::fputs("usage: dgpu-log-writer --log-writer MAX_BYTES (started by dgpu-agent)\n", stderr);
    return 2;
  }
  return dgpu::agent::RunLogWriter(0, 1, max);
}
