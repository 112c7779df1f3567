// Helpers shared by the core's tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../sanitizer_scale.h"
#include "core/scheduler_core.h"

namespace dgpu::core::testing {

inline std::vector<GpuInfo> MakeGpus(int count, const std::string& model = "A100",
                                     int64_t memory_mb = 40960) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) gpus.push_back({i, model, memory_mb, "", true, ""});
  return gpus;
}

inline TaskSpec Spec(Priority p, int gpus, std::string model = "") {
  TaskSpec s;
  s.priority = p;
  s.gpu_count = gpus;
  s.gpu_model = std::move(model);
  s.command = "true";
  return s;
}

inline constexpr TimeMicros kSec = kMicrosPerSecond;

// How many random sequences a randomized test runs (tests/sanitizer_scale.h).
inline constexpr uint32_t kSequenceDivisor = dgpu::testing::kSanitizerDivisor;
inline constexpr uint32_t Sequences(uint32_t full) { return dgpu::testing::Scaled(full); }

}  // namespace dgpu::core::testing
