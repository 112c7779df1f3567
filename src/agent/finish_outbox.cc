#include "agent/finish_outbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace dgpu::agent {
namespace {

constexpr char kSuffix[] = ".json";
constexpr char kBatchSuffix[] = ".batch.json";
constexpr char kTempSuffix[] = ".json.tmp";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

Status WriteFileDurably(const std::string& path, const std::string& data) {
  const std::string temp = path.substr(0, path.size() - strlen(kSuffix)) + kTempSuffix;
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Internal(Errno("open '" + temp + "'"));
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status error = Internal(Errno("write '" + temp + "'"));
      close(fd);
      unlink(temp.c_str());
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    Status error = Internal(Errno("fsync '" + temp + "'"));
    close(fd);
    unlink(temp.c_str());
    return error;
  }
  close(fd);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    Status error = Internal(Errno("rename '" + temp + "'"));
    unlink(temp.c_str());
    return error;
  }
  return OkStatus();
}

}  // namespace

std::string TaskExitToJson(const TaskExit& exit) {
  nlohmann::json j = {
      {"task_id", exit.task_id},     {"success", exit.success},
      {"exit_code", exit.exit_code}, {"signal", exit.signal},
      {"error", exit.error},         {"finished_at_unix_micros", exit.finished_at_unix_micros},
  };
  return j.dump();
}

StatusOr<TaskExit> TaskExitFromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
  if (!j.is_object()) return InvalidArgument("not a JSON object");
  auto field = [&](const char* name, auto check) -> const nlohmann::json* {
    auto it = j.find(name);
    if (it == j.end() || !check(*it)) return nullptr;
    return &*it;
  };
  auto is_string = [](const nlohmann::json& v) { return v.is_string(); };
  auto is_bool = [](const nlohmann::json& v) { return v.is_boolean(); };
  auto is_int = [](const nlohmann::json& v) { return v.is_number_integer(); };
  const auto* task_id = field("task_id", is_string);
  const auto* success = field("success", is_bool);
  const auto* exit_code = field("exit_code", is_int);
  const auto* signal = field("signal", is_int);
  const auto* error = field("error", is_string);
  const auto* finished = field("finished_at_unix_micros", is_int);
  if (!task_id || !success || !exit_code || !signal || !error || !finished) {
    return InvalidArgument(
        "missing or mistyped field (task_id, success, exit_code, signal, error, "
        "finished_at_unix_micros)");
  }
  TaskExit exit;
  exit.task_id = task_id->get<std::string>();
  exit.success = success->get<bool>();
  exit.exit_code = exit_code->get<int>();
  exit.signal = signal->get<int>();
  exit.error = error->get<std::string>();
  exit.finished_at_unix_micros = finished->get<int64_t>();
  return exit;
}

StatusOr<FinishOutbox> FinishOutbox::Open(const std::string& work_dir) {
  if (work_dir.empty()) return InvalidArgument("work_dir is empty");
  if (mkdir(work_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Internal(Errno("mkdir '" + work_dir + "'"));
  }
  FinishOutbox outbox(work_dir + "/.finish-outbox");
  if (mkdir(outbox.dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return Internal(Errno("mkdir '" + outbox.dir_ + "'"));
  }
  DIR* dir = opendir(outbox.dir_.c_str());
  if (dir == nullptr) return Internal(Errno("opendir '" + outbox.dir_ + "'"));
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) names.emplace_back(entry->d_name);
  closedir(dir);
  std::sort(names.begin(), names.end());

  for (const auto& name : names) {
    const std::string path = outbox.dir_ + "/" + name;
    if (EndsWith(name, kTempSuffix)) {
      unlink(path.c_str());  // An Add() interrupted before its rename: never acknowledged.
      continue;
    }
    if (!EndsWith(name, kSuffix)) continue;
    const bool batch = EndsWith(name, kBatchSuffix);
    std::string text;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    std::string problem;
    if (fd < 0) {
      problem = Errno("open");
    } else {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0 && text.size() < (1u << 20)) {
        text.append(buffer, static_cast<size_t>(n));
      }
      if (n < 0) problem = Errno("read");
      close(fd);
    }
    if (problem.empty() && batch) {
      size_t start = 0;
      int kept = 0;
      while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        start = end + 1;
        if (line.empty()) continue;
        StatusOr<TaskExit> exit = TaskExitFromJson(line);
        if (!exit.ok() || !ValidateTaskId(exit->task_id).ok()) {
          outbox.load_errors_.push_back("finish outbox entry '" + path +
                                        "' has a corrupt line: " +
                                        (exit.ok() ? "bad task id" : exit.status().message()));
          continue;
        }
        if (auto old = outbox.file_of_.find(exit->task_id); old != outbox.file_of_.end()) {
          outbox.refs_[old->second]--;
        }
        outbox.pending_[exit->task_id] = *exit;
        outbox.file_of_[exit->task_id] = path;
        kept++;
      }
      outbox.refs_[path] += kept;
      if (kept == 0) unlink(path.c_str());
      continue;
    }
    if (problem.empty()) {
      StatusOr<TaskExit> exit = TaskExitFromJson(text);
      const std::string expected_id = name.substr(0, name.size() - strlen(kSuffix));
      if (!exit.ok()) {
        problem = exit.status().message();
      } else if (exit->task_id != expected_id) {
        problem = "task_id '" + exit->task_id + "' does not match the file name";
      } else {
        if (auto old = outbox.file_of_.find(exit->task_id); old != outbox.file_of_.end()) {
          outbox.refs_[old->second]--;
        }
        outbox.pending_[exit->task_id] = *exit;
        outbox.file_of_[exit->task_id] = path;
        outbox.refs_[path]++;
        continue;
      }
    }
    outbox.load_errors_.push_back("finish outbox entry '" + path + "' is corrupt: " + problem);
    rename(path.c_str(), (path + ".corrupt").c_str());
  }
  return outbox;
}

Status FinishOutbox::SyncDirectory() const {
  int fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal(Errno("open '" + dir_ + "'"));
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  if (rc != 0) {
    errno = saved;
    return Internal(Errno("fsync '" + dir_ + "'"));
  }
  return OkStatus();
}

Status FinishOutbox::Add(const TaskExit& exit) {
  Status valid = ValidateTaskId(exit.task_id);
  if (!valid.ok()) return valid;
  Status written = WriteFileDurably(dir_ + "/" + exit.task_id + kSuffix, TaskExitToJson(exit));
  if (!written.ok()) return written;
  Status synced = SyncDirectory();
  if (!synced.ok()) return synced;
  const std::string path = dir_ + "/" + exit.task_id + kSuffix;
  if (auto old = file_of_.find(exit.task_id); old != file_of_.end() && old->second != path) {
    (void)Release(exit.task_id);
  }
  if (file_of_[exit.task_id] != path) refs_[path]++;
  pending_[exit.task_id] = exit;
  file_of_[exit.task_id] = path;
  return OkStatus();
}

Status FinishOutbox::AddAll(const std::vector<TaskExit>& exits) {
  if (exits.empty()) return OkStatus();
  std::string data;
  for (const auto& exit : exits) {
    Status valid = ValidateTaskId(exit.task_id);
    if (!valid.ok()) return valid;
    data += TaskExitToJson(exit);
    data += '\n';
  }
  const std::string path = dir_ + "/batch-" + exits.front().task_id + kBatchSuffix;
  Status written = WriteFileDurably(path, data);
  if (!written.ok()) return written;
  // One directory sync makes the batch file's rename durable.
  Status synced = SyncDirectory();
  if (!synced.ok()) return synced;
  for (const auto& exit : exits) {
    if (file_of_.count(exit.task_id) != 0) (void)Release(exit.task_id);
    pending_[exit.task_id] = exit;
    file_of_[exit.task_id] = path;
    refs_[path]++;
  }
  return OkStatus();
}

Status FinishOutbox::Release(const std::string& task_id) {
  auto f = file_of_.find(task_id);
  if (f == file_of_.end()) return OkStatus();
  std::string path = f->second;
  file_of_.erase(f);
  if (--refs_[path] > 0) return OkStatus();
  refs_.erase(path);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return Internal(Errno("unlink '" + path + "'"));
  return OkStatus();
}

Status FinishOutbox::Ack(const std::string& task_id) {
  auto it = pending_.find(task_id);
  if (it == pending_.end()) return NotFound("no pending finish for task '" + task_id + "'");
  pending_.erase(it);
  // No directory sync: an unlink lost in a crash only means the finish is reported again, and
  // the scheduler answers a repeated finish with ALREADY_EXISTS, which counts as acknowledged.
  return Release(task_id);
}

std::vector<TaskExit> FinishOutbox::Pending() const {
  std::vector<TaskExit> exits;
  for (const auto& [id, exit] : pending_) exits.push_back(exit);
  std::stable_sort(exits.begin(), exits.end(), [](const TaskExit& a, const TaskExit& b) {
    return a.finished_at_unix_micros < b.finished_at_unix_micros;
  });
  return exits;
}

}  // namespace dgpu::agent
