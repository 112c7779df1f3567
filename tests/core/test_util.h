// Helpers shared by the core's tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// How many random sequences a randomized test runs: all of them in an ordinary build, a fifth
// under a sanitizer (DGPU_SANITIZED), where each step costs ten to fifty times more and the point
// is the memory and threading checks on every path, which a fifth still reaches (the tests'
// coverage thresholds are scaled the same way and fail when it does not).
inline constexpr uint32_t kSequenceDivisor =
#ifdef DGPU_SANITIZED
    5;
#else
    1;
#endif
inline constexpr uint32_t Sequences(uint32_t full) { return full / kSequenceDivisor; }

}  // namespace dgpu::core::testing
