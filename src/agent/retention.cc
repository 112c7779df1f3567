#include "agent/retention.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "core/types.h"

namespace dgpu::agent {
namespace fs = std::filesystem;

std::vector<std::string> ExpiredTaskFiles(const std::string& work_dir,
                                          std::chrono::milliseconds retention,
                                          const std::set<std::string>& running,
                                          std::chrono::system_clock::time_point now) {
  struct Files {
    std::optional<fs::file_time_type> log_time;
    std::optional<fs::file_time_type> dir_time;
  };
  std::map<std::string, Files> tasks;
  std::error_code ec;
  for (fs::directory_iterator it(work_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool is_log = name.ends_with(".log");
    const std::string id = is_log ? name.substr(0, name.size() - 4) : name;
    if (!core::ParseTaskId(id) || running.count(id) > 0) continue;
    std::error_code stat_ec;
    const auto status = it->symlink_status(stat_ec);
    if (stat_ec) continue;
    const auto time = fs::last_write_time(it->path(), stat_ec);
    if (stat_ec) continue;
    if (is_log && fs::is_regular_file(status)) tasks[id].log_time = time;
    if (!is_log && fs::is_directory(status)) tasks[id].dir_time = time;
  }
  const auto cutoff = fs::file_time_type::clock::from_sys(now) -
                      std::chrono::duration_cast<fs::file_time_type::duration>(retention);
  std::vector<std::string> expired;
  for (const auto& [id, files] : tasks) {
    const auto last = files.log_time ? *files.log_time : *files.dir_time;
    if (last > cutoff) continue;
    if (files.dir_time) expired.push_back(work_dir + "/" + id);
    if (files.log_time) expired.push_back(work_dir + "/" + id + ".log");
  }
  return expired;
}

int RemoveTaskFiles(const std::vector<std::string>& paths) {
  int removed = 0;
  for (const auto& path : paths) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) {
      spdlog::warn("executor.retention: cannot remove {}: {}", path, ec.message());
    } else {
      ++removed;
    }
  }
  return removed;
}

}  // namespace dgpu::agent
