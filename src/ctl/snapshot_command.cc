// dgpuctl snapshot: the scheduler's database saved as one SQLite file.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/atomic_file.h"
#include "common/number.h"
#include "common/time_util.h"
#include "ctl/api_call.h"
#include "ctl/commands.h"
#include "ctl/render.h"

namespace dgpu::ctl {

using nlohmann::json;

namespace {

// "12.0 KiB", "312.4 MiB".
std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " bytes";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

// The header every SQLite database file starts with.
bool IsSqliteFile(const std::string& path) {
  static constexpr char kMagic[] = "SQLite format 3";  // With its NUL: 16 bytes.
  char head[sizeof(kMagic)] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(head, sizeof(head));
  return in.gcount() == sizeof(head) && std::equal(head, head + sizeof(head), kMagic);
}

}  // namespace

int Snapshot(const CtlContext& ctx, const SnapshotOptions& options) {
  std::error_code ec;
  if (std::filesystem::exists(options.path, ec) && !options.force) {
    *ctx.err << "error: " << options.path << " exists; give --force to replace it\n";
    return kExitUsage;
  }
  if (std::filesystem::is_directory(options.path, ec)) {
    *ctx.err << "error: " << options.path << " is a directory; give the file to write\n";
    return kExitUsage;
  }
  const std::string part = options.path + ".part";
  const std::string url = ctx.server + kApiPrefix + "/snapshot";
  HttpResult result = ctx.http->Download(url, part);
  ApiFailure failure;
  if (!result.has_response()) {
    failure.transport = true;
    failure.detail = result.transport_error;
    return Fail(ctx, failure);
  }
  const HttpResponse& response = *result.response;
  if (response.status < 200 || response.status >= 300) {
    FailureFromResponse(response, &failure);
    return Fail(ctx, failure);
  }
  if (!IsSqliteFile(part)) {
    std::filesystem::remove(part, ec);
    return BadResponse(ctx, "the snapshot is not a SQLite database");
  }
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(part, ec));
  if (Status s = common::ReplaceFileAtomically(part, options.path); !s.ok()) {
    std::filesystem::remove(part, ec);
    *ctx.err << "error: cannot save the snapshot: " << s.message() << "\n";
    return kExitApiError;
  }
  auto number = [&](const char* header) -> json {
    StatusOr<int64_t> value = common::ParseInt64(response.Header(header), header);
    return value.ok() ? json(*value) : json(nullptr);
  };
  const json tasks = number("X-Dgpu-Snapshot-Tasks");
  const json seq = number("X-Dgpu-Snapshot-Seq");
  const json epoch = number("X-Dgpu-Snapshot-Epoch");
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson({{"path", options.path},
                          {"bytes", bytes},
                          {"tasks", tasks},
                          {"last_applied_seq", seq},
                          {"epoch", epoch}})
             << "\n";
    return kExitOk;
  }
  *ctx.out << "saved a snapshot";
  if (!tasks.is_null()) *ctx.out << " of " << tasks.get<int64_t>() << " tasks";
  if (!seq.is_null()) *ctx.out << " (journal seq " << seq.get<int64_t>();
  if (!seq.is_null() && !epoch.is_null()) *ctx.out << ", epoch " << epoch.get<int64_t>();
  if (!seq.is_null()) *ctx.out << ")";
  *ctx.out << " to " << options.path << ", " << FormatBytes(bytes) << "\n";
  return kExitOk;
}

}  // namespace dgpu::ctl
