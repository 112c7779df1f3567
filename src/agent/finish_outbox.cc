#include "agent/finish_outbox.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"

namespace dgpu::agent {
namespace {

// Rewrite the journal once it holds this many lines and mostly acknowledged ones.
constexpr uint64_t kRewriteMinLines = 4096;

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal(Errno("write '" + path + "'"));
    written += static_cast<size_t>(n);
  }
  return OkStatus();
}

StatusOr<std::string> ReadAll(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Internal(Errno("open '" + path + "'"));
  }
  std::string text;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error = Internal(Errno("read '" + path + "'"));
      close(fd);
      return error;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

std::string AckLine(const std::string& task_id, int run) {
  nlohmann::json j = {{"ack", task_id}};
  if (run != 0) j["run"] = run;
  return j.dump() + "\n";
}

// Applies an acknowledgement to the pending exits.
void ApplyAck(std::map<std::string, TaskExit>& pending, const std::string& task_id, int run) {
  auto it = pending.find(task_id);
  if (it != pending.end() && CoversRun(run, it->second.run)) pending.erase(it);
}

}  // namespace

bool CoversRun(int acked, int pending) { return acked == 0 || pending == 0 || acked == pending; }

std::string TaskExitToJson(const TaskExit& exit) {
  nlohmann::json j = {
      {"task_id", exit.task_id},     {"success", exit.success},
      {"exit_code", exit.exit_code}, {"signal", exit.signal},
      {"error", exit.error},         {"finished_at_unix_micros", exit.finished_at_unix_micros},
  };
  if (exit.run != 0) j["run"] = exit.run;
  if (exit.usage.has_value()) {
    j["usage"] = {{"cpu_micros", exit.usage->cpu_micros},
                  {"max_memory_bytes", exit.usage->max_memory_bytes}};
  }
  return j.dump();
}

namespace {

StatusOr<TaskExit> TaskExitFromValue(const nlohmann::json& j) {
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
  // Written from the release that numbers runs on; absent: 0.
  const auto run = j.find("run");
  if (run != j.end() && !run->is_number_integer()) return InvalidArgument("run is not an integer");
  TaskExit exit;
  exit.task_id = task_id->get<std::string>();
  exit.success = success->get<bool>();
  exit.exit_code = exit_code->get<int>();
  exit.signal = signal->get<int>();
  exit.error = error->get<std::string>();
  exit.finished_at_unix_micros = finished->get<int64_t>();
  if (run != j.end()) exit.run = run->get<int>();
  // Written where the run was measured (executor.isolation).
  if (const auto usage = j.find("usage"); usage != j.end()) {
    if (!usage->is_object() || !usage->contains("cpu_micros") ||
        !usage->contains("max_memory_bytes") || !(*usage)["cpu_micros"].is_number_integer() ||
        !(*usage)["max_memory_bytes"].is_number_integer()) {
      return InvalidArgument("usage is not {cpu_micros, max_memory_bytes}");
    }
    exit.usage = core::ResourceUsage{(*usage)["cpu_micros"].get<int64_t>(),
                                     (*usage)["max_memory_bytes"].get<int64_t>()};
  }
  return exit;
}

}  // namespace

StatusOr<TaskExit> TaskExitFromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
  return TaskExitFromValue(j);
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
  const std::string path = outbox.journal_path();
  unlink((path + ".tmp").c_str());  // A rewrite interrupted before its rename.
  StatusOr<std::string> text = ReadAll(path);
  if (!text.ok()) return text.status();

  // Replay: exits add, acks remove; the last line without its newline was cut short.
  size_t complete = 0;  // Bytes up to the end of the last complete line.
  uint64_t lines = 0;
  bool corrupt = false;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) break;
    ++lines;
    complete = end + 1;
    const std::string_view line(text->data() + start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    std::string problem;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      problem = "not valid JSON";
    } else if (j.is_object() && j.contains("ack") && j.size() == (j.contains("run") ? 2U : 1U)) {
      const bool run_ok = !j.contains("run") || j["run"].is_number_integer();
      if (j["ack"].is_string() && run_ok) {
        ApplyAck(outbox.pending_, j["ack"].get<std::string>(), j.value("run", 0));
        continue;
      }
      problem = run_ok ? "ack is not a string" : "ack's run is not an integer";
    } else {
      StatusOr<TaskExit> exit = TaskExitFromValue(j);
      if (exit.ok() && ValidateTaskId(exit->task_id).ok()) {
        outbox.pending_[exit->task_id] = *exit;
        continue;
      }
      problem = exit.ok() ? "invalid task id" : exit.status().message();
    }
    corrupt = true;
    outbox.load_errors_.push_back("finish outbox journal '" + path + "' line " +
                                  std::to_string(lines) + " is corrupt: " + problem);
  }

  outbox.fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (outbox.fd_ < 0) return Internal(Errno("open '" + path + "'"));
  outbox.size_ = complete;
  outbox.lines_ = lines;
  if (corrupt) {
    // Kept for inspection; the journal is replaced by what could be read.
    if (rename(path.c_str(), (path + ".corrupt").c_str()) != 0) {
      return Internal(Errno("rename '" + path + "'"));
    }
    Status rewritten = outbox.Rewrite();
    if (!rewritten.ok()) return rewritten;
  } else if (complete < text->size()) {
    if (ftruncate(outbox.fd_, static_cast<off_t>(complete)) != 0) {
      return Internal(Errno("truncate '" + path + "'"));
    }
  }
  return outbox;
}

FinishOutbox::FinishOutbox(FinishOutbox&& other) noexcept
    : dir_(std::move(other.dir_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      lines_(other.lines_),
      pending_(std::move(other.pending_)),
      load_errors_(std::move(other.load_errors_)) {}

FinishOutbox& FinishOutbox::operator=(FinishOutbox&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    dir_ = std::move(other.dir_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    lines_ = other.lines_;
    pending_ = std::move(other.pending_);
    load_errors_ = std::move(other.load_errors_);
  }
  return *this;
}

FinishOutbox::~FinishOutbox() {
  if (fd_ >= 0) close(fd_);
}

Status FinishOutbox::Append(const std::string& data, bool sync) {
  const std::string path = journal_path();
  Status status = WriteAll(fd_, data, path);
  if (status.ok() && sync && fdatasync(fd_) != 0)
    status = Internal(Errno("fdatasync '" + path + "'"));
  if (!status.ok()) {
    // Nothing of a failed append may stay behind a later one.
    if (ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      return Internal(status.message() + "; and cannot cut the journal back: " + strerror(errno));
    }
    return status;
  }
  size_ += data.size();
  lines_ += static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n'));
  return OkStatus();
}

Status FinishOutbox::Rewrite() {
  std::string data;
  for (const auto& [id, exit] : pending_) data += TaskExitToJson(exit) + "\n";
  StatusOr<int> fd = common::WriteFileAtomicallyKeepOpen(journal_path(), data);
  if (!fd.ok()) return fd.status();
  if (fd_ >= 0) close(fd_);
  fd_ = *fd;
  size_ = data.size();
  lines_ = pending_.size();
  return OkStatus();
}

Status FinishOutbox::Add(const TaskExit& exit) { return AddAll({exit}); }

Status FinishOutbox::AddAll(const std::vector<TaskExit>& exits) {
  if (exits.empty()) return OkStatus();
  std::string data;
  for (const auto& exit : exits) {
    Status valid = ValidateTaskId(exit.task_id);
    if (!valid.ok()) return valid;
    data += TaskExitToJson(exit);
    data += '\n';
  }
  Status appended = Append(data, /*sync=*/true);
  if (!appended.ok()) return appended;
  for (const auto& exit : exits) pending_[exit.task_id] = exit;
  return OkStatus();
}

Status FinishOutbox::Ack(const std::string& task_id, int run) {
  auto it = pending_.find(task_id);
  if (it == pending_.end()) return NotFound("no pending finish for task '" + task_id + "'");
  if (!CoversRun(run, it->second.run)) {
    return NotFound("the pending finish of task '" + task_id + "' is of run " +
                    std::to_string(it->second.run) + ", not " + std::to_string(run));
  }
  pending_.erase(it);
  if (pending_.empty()) {
    // Nothing left to keep. If the truncation is lost in a crash, the replay ends empty anyway,
    // or reports some finishes again.
    if (ftruncate(fd_, 0) != 0) return Internal(Errno("truncate '" + journal_path() + "'"));
    size_ = 0;
    lines_ = 0;
    return OkStatus();
  }
  Status appended = Append(AckLine(task_id, run), /*sync=*/false);
  if (!appended.ok()) return appended;
  if (lines_ >= kRewriteMinLines && lines_ > 8 * pending_.size()) return Rewrite();
  return OkStatus();
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
