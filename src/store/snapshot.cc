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
}

StatusOr<nlohmann::json> DumpStore(Database& db) {
  nlohmann::json tasks = nlohmann::json::array();
  StoreMeta meta;
  Status s = db.ForEachTask([&](const core::Task& t) { tasks.push_back(TaskToJson(t)); }, &meta);
  if (!s.ok()) return s;
  nlohmann::json meta_json = {{"epoch", meta.epoch},
                              {"next_task_number", meta.next_task_number},
                              {"last_applied_seq", meta.last_applied_seq}};
  if (meta.online_percent) meta_json["online_percent"] = *meta.online_percent;
  return nlohmann::json{{"format", "dgpu-store"},
                        {"schema_version", kSchemaVersion},
                        {"meta", std::move(meta_json)},
                        {"tasks", std::move(tasks)}};
}

}  // namespace dgpu::store
