// REST request bodies and query strings, as the HTTP threads parse them: the first byte picks
// the parser, the rest is the input. A parse that succeeds is also validated the way the
// application validates it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "scheduler/api_json.h"
#include "scheduler/application.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace dgpu::scheduler;
  switch (data[0] % 9) {
    case 0: {
      dgpu::core::TaskSpec spec;
      int array = 0;
      if (!ParseSubmitRequest(input, &spec, &array)) (void)ValidateTaskSpec(spec);
      break;
    }
    case 5: {
      NodeModeRequest drain;
      (void)ParseDrainRequest(input, &drain);
      break;
    }
    case 1: {
      TeamRequest team;
      team.name = "fuzz";
      (void)ParseTeamRequest(input, &team);
      break;
    }
    case 2: {
      double online = 0;
      (void)ParseQuotaRequest(input, &online);
      break;
    }
    case 3: {
      ListTasksRequest list;
      (void)ParseListQuery(input, &list);
      break;
    }
    case 6: {
      std::optional<uint64_t> since;
      (void)ParseWatchQuery(input, "", &since);
      (void)ParseWatchQuery("", input, &since);  // The Last-Event-ID header.
      (void)AcceptsDeflate(input);               // The Accept-Encoding header.
      break;
    }
    case 7: {
      UsageRequest usage;
      (void)ParseUsageQuery(input, 1764806400000000, &usage);
      break;
    }
    case 8: {
      LogQuery logs;
      (void)ParseLogQuery(input, &logs);
      break;
    }
    default: {
      std::optional<int32_t> grace;
      (void)ParseCancelQuery(input, &grace);
      break;
    }
  }
  return 0;
}
