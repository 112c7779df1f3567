// Both daemons' YAML configuration files: the first byte picks the scheduler's or the agent's.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view yaml(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    (void)dgpu::common::LoadSchedulerConfigFromString(yaml);
  } else {
    (void)dgpu::common::LoadAgentConfigFromString(yaml);
  }
  return 0;
}
