// executor.retention: the files of finished tasks are removed once they are old.
//
// A task leaves <work_dir>/<id>/ (its working directory) and <id>.log. Both go once the task is
// not running here and its log has not changed for `retention` (the log's last write is when
// its output ended; without a log, the directory's own time counts). Other entries of work_dir
// (the agent's own dot-files, anything not named like a task) are never touched.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace dgpu::agent {

// The paths to remove now (each task's directory and log, where they exist).
std::vector<std::string> ExpiredTaskFiles(const std::string& work_dir,
                                          std::chrono::milliseconds retention,
                                          const std::set<std::string>& running,
                                          std::chrono::system_clock::time_point now);

// Removes `paths` (directories with all they hold); returns how many were removed, logging
// each failure once.
int RemoveTaskFiles(const std::vector<std::string>& paths);

}  // namespace dgpu::agent
