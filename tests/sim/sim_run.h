// Runs the dgpu-sim command in-process for the end-to-end tests, and the inputs they share.
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/cli.h"

namespace dgpu::sim::testing_util {

inline constexpr char kGenericHeader[] = "submit_time,duration,gpu_count,priority,gpu_model,team\n";

struct SimRun {
  int code = 0;
  std::string out;
  std::string err;
  nlohmann::json json;  // When the output is JSON.
};

inline SimRun RunSim(const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  SimRun r;
  r.code = RunSimCommand(args, out, err);
  r.out = out.str();
  r.err = err.str();
  if (r.code == 0 && !r.out.empty() && r.out.front() == '{') r.json = nlohmann::json::parse(r.out);
  return r;
}

// A generic trace of `jobs` pseudo-random jobs (fixed generator): teams a-e, 1-8 GPUs, one in
// five of model B, up to 3000 s each, about 5 s apart.
inline std::string SyntheticTrace(int jobs) {
  std::string text = kGenericHeader;
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x >> 33;
  };
  double t = 0;
  static const char* kTeams[] = {"a", "b", "c", "d", "e"};
  for (int i = 0; i < jobs; ++i) {
    // One statement per draw: the order of operands of '+' is unspecified, and a test compares
    // figures of this trace with recorded ones.
    t += static_cast<double>(next() % 1000) / 100.0;
    const int gpus = 1 << (next() % 4);
    const uint64_t duration = 1 + next() % 3000;
    const char* model = next() % 5 == 0 ? "B" : "";
    const char* team = kTeams[next() % 5];
    text += std::to_string(t) + "," + std::to_string(duration) + "," + std::to_string(gpus) + ",," +
            model + "," + team + "\n";
  }
  return text;
}

}  // namespace dgpu::sim::testing_util
