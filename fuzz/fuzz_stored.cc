// What dgpu reads back from its own files, which a crash or a disk can corrupt: a line of the
// agent's finish journal and a task as the database stores it (first byte picks).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/finish_outbox.h"
#include "store/task_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    (void)dgpu::agent::TaskExitFromJson(input);
  } else {
    auto json = dgpu::store::ParseJson(input, "fuzz");
    if (json.ok()) (void)dgpu::store::TaskFromJson(*json);
  }
  return 0;
}
