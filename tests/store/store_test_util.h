// Helpers shared by the store's tests: temporary directories, tmpfs mounts, sample tasks.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/task_fields.h"
#include "core/types.h"
#include "store/database.h"

namespace dgpu::store::testing {

// Matches a Status (or StatusOr) whose code is `code` and whose message contains `substring`.
MATCHER_P2(StatusIs, code, substring,
           std::string("has code ") + std::string(StatusCodeName(code)) + " and a message with '" +
               std::string(substring) + "'") {
  const Status& s = [&]() -> const Status& {
    if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, Status>) {
      return arg;
    } else {
      return arg.status();
    }
  }();
  *result_listener << "status is " << s.ToString();
  return s.code() == code && s.message().find(substring) != std::string::npos;
}

// A fresh directory under /tmp, removed (with everything below it) at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dgpu-store-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A tmpfs mounted on a directory for the lifetime of the object (root only).
class TmpfsMount {
 public:
  // Returns an empty optional, with `why` set, when mounting is not permitted here.
  static std::optional<TmpfsMount> Make(const std::string& dir, const std::string& options,
                                        bool read_only, std::string* why) {
    std::filesystem::create_directories(dir);
    unsigned long flags = read_only ? MS_RDONLY : 0;
    if (::mount("tmpfs", dir.c_str(), "tmpfs", flags, options.c_str()) != 0) {
      *why = "cannot mount a tmpfs on " + dir + ": " + std::strerror(errno);
      return std::nullopt;
    }
    return TmpfsMount(dir);
  }
  TmpfsMount(TmpfsMount&& other) noexcept : dir_(std::exchange(other.dir_, "")) {}
  ~TmpfsMount() {
    if (!dir_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }

  // Makes the mount read-only in place.
  bool RemountReadOnly() const {
    return ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  explicit TmpfsMount(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Opens the database in `dir`; a failure fails the test (and gives null).
inline std::unique_ptr<Database> OpenOrDie(const std::string& dir) {
  StatusOr<std::unique_ptr<Database>> db = Database::Open(dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(*db) : nullptr;
}

inline bool IsRoot() { return ::geteuid() == 0; }

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs SQL on a database file through SQLite directly, as another program would.
inline void RunSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline uint64_t FreeBytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// A task with every field set to something other than its default.
inline core::Task FullTask(core::TaskNumber id) {
  core::Task t;
  t.id = id;
  t.spec.name = "train-" + std::to_string(id) + " \xc3\xa9t\xc3\xa9";  // UTF-8 "été".
  t.spec.priority = core::Priority::kHigh;
  t.spec.gpu_count = 4;
  t.spec.nodes = 2;
  t.spec.gpu_model = "H100";
  t.spec.command = "python train.py --lr=0.1 'quoted \"x\"'\n echo done";
  t.spec.env = {{"B", "2"}, {"A", "x=y"}, {"A", "duplicate kept"}, {"EMPTY", ""}};
  t.spec.timeout_seconds = 3600;
  t.spec.image = "nvidia/cuda:12.0";
  t.status = core::TaskStatus::kRunning;
  t.queue_seq = -42;
  t.allocation = {{"node-a", {0, 2}, false, 4000, 8192, {12'345'678, 3'221'225'472}, {4, 5, 6, 7}},
                  {"node-b", {5, 7}}};
  t.attempts = 2;
  t.exit_code = -9;
  t.error = "agent_lost";
  t.created_at = 1'700'000'000'123'456;
  t.started_at = 1'700'000'001'000'000;
  t.finished_at = 1'700'000'002'000'001;
  t.stopping = true;
  t.stop_reason = core::StopReason::kPreempt;
  t.spec.team = "vision";
  t.spec.user = "alice";
  t.spec.preemptible = false;
  t.spec.preemption_grace_seconds = 45;
  t.borrowed = true;
  t.preemptions = 3;
  t.preempted_by = 99;
  t.spec.array_index = 1;
  t.spec.array_size = 3;
  t.spec.max_retries = 4;
  t.spec.retry_backoff_seconds = 7;
  t.retries = 2;
  t.master_port = 29501;
  t.spec.cpus_milli = 2500;
  t.spec.memory_mb = 16384;
  t.spec.node_selector = {{"rack", "r1"}, {"topology.example.com/zone", "a"}};
  t.spec.depends_on = {{3, core::DependencyCondition::kAfterOk, core::DependencyState::kSatisfied},
                       {1'000'000'007, core::DependencyCondition::kAfterNotOk,
                        core::DependencyState::kNeverSatisfied},
                       {2, core::DependencyCondition::kAfter, core::DependencyState::kWaiting}};
  // retry_at stays 0: only a pending task has one (FullPendingTask).
  return t;
}

// FullTask waiting out a retry's backoff: pending, no allocation, a retry time.
inline core::Task FullPendingTask(core::TaskNumber id) {
  core::Task t = FullTask(id);
  t.status = core::TaskStatus::kPending;
  t.allocation = {};
  t.stopping = false;
  t.stop_reason = core::StopReason::kNone;
  t.retry_at = 1'700'000'003'000'000;
  return t;
}

// A small task in a given state.
inline core::Task SimpleTask(core::TaskNumber id, core::TaskStatus status,
                             core::Priority priority = core::Priority::kLow, int64_t queue_seq = 0,
                             core::TimeMicros finished_at = 0, bool stopping = false) {
  core::Task t;
  t.id = id;
  t.spec.priority = priority;
  t.spec.command = "echo " + std::to_string(id);
  t.status = status;
  t.queue_seq = queue_seq != 0 ? queue_seq : static_cast<int64_t>(id);
  t.created_at = static_cast<core::TimeMicros>(id) * 1000;
  t.finished_at = finished_at;
  t.stopping = stopping;
  return t;
}

inline core::Change Upsert(const core::Task& t) {
  core::Change c;
  c.kind = core::Change::Kind::kTaskUpsert;
  c.task = t;
  return c;
}

inline core::Change Quota(double online_percent) {
  core::Change c;
  c.kind = core::Change::Kind::kQuotaPercent;
  c.online_percent = online_percent;
  return c;
}

inline core::Change Team(core::TeamRecord team) {
  core::Change c;
  c.kind = core::Change::Kind::kTeamUpsert;
  c.team = std::move(team);
  return c;
}

inline core::Change NextNumber(core::TaskNumber n) {
  core::Change c;
  c.kind = core::Change::Kind::kNextTaskNumber;
  c.next_number = n;
  return c;
}

// Compares every field of two tasks (the field table's), naming each that differs.
inline void ExpectSameTask(const core::Task& want, const core::Task& got) {
  core::ForEachTaskField([&](int, const auto& field) {
    EXPECT_EQ(field.get(want), field.get(got)) << field.info.name;
  });
  EXPECT_TRUE(want == got);
}

inline std::vector<core::TaskNumber> Ids(const std::vector<core::Task>& tasks) {
  std::vector<core::TaskNumber> ids;
  for (const core::Task& t : tasks) ids.push_back(t.id);
  return ids;
}

}  // namespace dgpu::store::testing
