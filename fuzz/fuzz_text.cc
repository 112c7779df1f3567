// Text from outside programs and files: nvidia-smi's CSV output (its metrics or its health
// query), a fake GPU fault file and the simulator's traces (the first byte picks a family, the
// second which one; for traces, the format or letting the parser guess).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "agent/gpu_discovery.h"
#include "agent/smi_discovery.h"
#include "sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (data[0] % 2 == 0) {
    switch (data[1] % 3) {
      case 0:
        (void)dgpu::agent::ParseNvidiaSmiCsv(input);
        break;
      case 1:
        (void)dgpu::agent::ParseNvidiaSmiHealthCsv(input);
        break;
      default:
        (void)dgpu::agent::ParseFaultFile(input, "fuzz");
        break;
    }
    return 0;
  }
  std::optional<dgpu::sim::TraceFormat> format;
  if (data[1] % 3 == 1) format = dgpu::sim::ParseTraceFormat("philly");
  if (data[1] % 3 == 2) format = dgpu::sim::ParseTraceFormat("generic");
  std::istringstream in(input);
  (void)dgpu::sim::ParseTrace(in, "fuzz", format);
  return 0;
}
