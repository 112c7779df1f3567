// A small seeded random generator (SplitMix64) whose output is fixed by the seed alone, on
// every platform and standard library: the simulator's results must be reproducible bit for bit.
#pragma once

#include <cstdint>

namespace dgpu::sim {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) for n >= 1 (rejection sampling: no modulo bias).
  uint64_t Below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do {
      r = Next();
    } while (r >= limit);
    return r % n;
  }

 private:
  uint64_t state_;
};

}  // namespace dgpu::sim
