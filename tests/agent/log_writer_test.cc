#include "agent/log_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "agent/retention.h"
#include "test_util.h"

namespace dgpu::agent {
namespace {

using testing::TempDir;

// Runs the writer on a pipe fed with `input`, appending to `path` with the limit `max`.
void Feed(const std::string& path, const std::string& input, int64_t max) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  int out = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(out, 0);
  std::thread feeder([&] {
    // In pieces, as a task writes.
    for (size_t at = 0; at < input.size(); at += 1000) {
      const std::string piece = input.substr(at, 1000);
      ASSERT_EQ(write(fds[1], piece.data(), piece.size()), static_cast<ssize_t>(piece.size()));
    }
    close(fds[1]);
  });
  EXPECT_EQ(RunLogWriter(fds[0], out, max), 0);
  feeder.join();
  close(fds[0]);
  close(out);
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(LogWriterTest, CopiesEverythingUnderTheLimit) {
  TempDir dir;
  const std::string log = dir.path() + "/task-1.log";
  Feed(log, "one\ntwo\n", 100);
  EXPECT_EQ(Read(log), "one\ntwo\n");
}

TEST(LogWriterTest, CutsAtTheLimitWithOneMarkerAndReadsTheRest) {
  TempDir dir;
  const std::string log = dir.path() + "/task-1.log";
  std::string input;
  for (int i = 0; i < 10000; ++i) input += "line " + std::to_string(i) + "\n";
  Feed(log, input, 4000);
  EXPECT_EQ(Read(log), input.substr(0, 4000) + "\n" + LogCutLine(4000));
  EXPECT_EQ(LogCutLine(4000),
            "dgpu: log cut at 4000 bytes (executor.max_log_bytes); further output is discarded\n");
}

TEST(LogWriterTest, AnEarlierRunsOutputCountsAndACutAtALineEndAddsNoBlankLine) {
  TempDir dir;
  const std::string log = dir.path() + "/task-1.log";
  { std::ofstream(log) << "run 1\n"; }
  Feed(log, "run 2\nmore\n", 12);
  EXPECT_EQ(Read(log), "run 1\nrun 2\n" + LogCutLine(12));
}

TEST(RetentionTest, OnlyOldFilesOfTasksThatDoNotRunAreExpired) {
  TempDir dir;
  const std::string& d = dir.path();
  auto make = [&](const std::string& name, bool is_dir, int age_days) {
    const std::string path = d + "/" + name;
    if (is_dir) {
      std::filesystem::create_directory(path);
    } else {
      std::ofstream(path) << "x";
    }
    std::filesystem::last_write_time(
        path, std::filesystem::file_time_type::clock::now() - std::chrono::hours(24 * age_days));
  };
  make("task-1", true, 10);  // Old, finished: both go.
  make("task-1.log", false, 8);
  make("task-2", true, 10);  // Started long ago, wrote yesterday: kept.
  make("task-2.log", false, 1);
  make("task-3", true, 10);  // Old but still running: kept.
  make("task-3.log", false, 10);
  make("task-4", true, 9);  // No log: the directory's time counts.
  make("task-5.log", false, 9);
  make("notes", true, 30);  // Not a task's.
  make(".dgpu-instance", false, 30);
  make("task-x.log", false, 30);
  auto expired =
      ExpiredTaskFiles(d, std::chrono::hours(24 * 7), {"task-3"}, std::chrono::system_clock::now());
  std::sort(expired.begin(), expired.end());
  EXPECT_EQ(expired, (std::vector<std::string>{d + "/task-1", d + "/task-1.log", d + "/task-4",
                                               d + "/task-5.log"}));
  std::ofstream(d + "/task-1/model.ckpt") << "weights";
  EXPECT_EQ(RemoveTaskFiles(expired), 4);
  EXPECT_FALSE(std::filesystem::exists(d + "/task-1"));
  EXPECT_TRUE(std::filesystem::exists(d + "/task-2"));
  EXPECT_TRUE(std::filesystem::exists(d + "/notes"));
  EXPECT_TRUE(
      ExpiredTaskFiles(d, std::chrono::hours(24 * 7), {"task-3"}, std::chrono::system_clock::now())
          .empty());
}

}  // namespace
}  // namespace dgpu::agent
