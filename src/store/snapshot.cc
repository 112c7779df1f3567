#include "store/snapshot.h"

#include <filesystem>
#include <utility>

#include "common/atomic_file.h"
#include "store/task_codec.h"

namespace dgpu::store {

StatusOr<std::unique_ptr<common::AtomicFileWriter>> OpenStateFile(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create directory " + dir + ": " + ec.message());
  return common::AtomicFileWriter::Open((std::filesystem::path(dir) / kStateFileName).string());
}

Status WriteStateFile(const std::string& dir, const nlohmann::json& state) {
  StatusOr<std::unique_ptr<common::AtomicFileWriter>> writer = OpenStateFile(dir);
  if (!writer.ok()) return writer.status();
  (*writer)->Write(DumpJson(state, /*indent=*/2));
  (*writer)->Write("\n");
  return (*writer)->Commit();
