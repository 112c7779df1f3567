// How much of a randomized or bulk test runs: all of it in an ordinary build, a fifth under a
// sanitizer (DGPU_SANITIZED, set by the sanitizer builds), where each step costs ten to fifty
// times more and the point is the memory and threading checks on every path, which a fifth still
// reaches (tests with coverage thresholds scale them the same way and fail when it does not).
#pragma once

#include <cstdint>

namespace dgpu::testing {

inline constexpr uint32_t kSanitizerDivisor =
#ifdef DGPU_SANITIZED
    5;
#else
    1;
#endif

// `full` in an ordinary build, a fifth of it under a sanitizer.
inline constexpr uint32_t Scaled(uint32_t full) { return full / kSanitizerDivisor; }

}  // namespace dgpu::testing
