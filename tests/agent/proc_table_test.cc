#include "agent/proc_table.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/child_process.h"

namespace dgpu::agent {
namespace {

TEST(ProcTableTest, ParsesCommWithSpacesAndParentheses) {
  auto stat = ParseProcStat(
      "4242 (my (odd) proc) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 "
      "1000 50 18446744073709551615\n");
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->pid, 4242);
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->ppid, 17);
  EXPECT_EQ(stat->pgid, 4242);
  EXPECT_EQ(stat->sid, 4242);
  EXPECT_EQ(stat->start_time, 987654u);
  EXPECT_FALSE(stat->zombie());
}

TEST(ProcTableTest, RejectsMalformed) {
  EXPECT_EQ(ParseProcStat(""), std::nullopt);
  EXPECT_EQ(ParseProcStat("12 (x) S 1 2"), std::nullopt);
  EXPECT_EQ(ParseProcStat("abc (x) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5"), std::nullopt);
}

TEST(ProcTableTest, ReadsOwnProcess) {
  auto stat = ReadProcStat(getpid());
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->pid, getpid());
  EXPECT_EQ(stat->ppid, getppid());
  EXPECT_EQ(stat->pgid, getpgrp());
  EXPECT_EQ(stat->sid, getsid(0));
  bool listed = false;
  for (const auto& p : ListProcesses()) listed = listed || p.pid == getpid();
  EXPECT_TRUE(listed);
}

TEST(ProcTableTest, EnvironContains) {
  common::SpawnOptions spawn;
  spawn.argv = {"/bin/sleep", "30"};
  spawn.env = std::vector<std::string>{"DGPU_MARK=task-1", "PATH=/bin"};
  auto pid = common::SpawnChild(spawn);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  // posix_spawn returns once the exec is under way; the kernel publishes the new environment a
  // moment later.
  bool found = false;
  for (int i = 0; i < 1000 && !found; ++i) {
    found = EnvironContains(*pid, "DGPU_MARK=task-1");
    if (!found) usleep(1000);
  }
  EXPECT_TRUE(found);
  EXPECT_FALSE(EnvironContains(*pid, "DGPU_MARK=task-10"));
  EXPECT_FALSE(EnvironContains(*pid, "DGPU_MARK=task"));
  kill(*pid, SIGKILL);
  int status = 0;
  EXPECT_EQ(waitpid(*pid, &status, 0), *pid);
  common::ReleaseChild(*pid);
  EXPECT_FALSE(EnvironContains(999999999, "A=B"));
}

TEST(ChildProcessTest, SpawnErrors) {
  EXPECT_EQ(common::SpawnChild({}).status().code(), StatusCode::kInvalidArgument);
  common::SpawnOptions missing;
  missing.argv = {"dgpu-no-such-program-anywhere"};
  auto status = common::SpawnChild(missing).status();
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "program 'dgpu-no-such-program-anywhere' not found on PATH");
  common::SpawnOptions bad_dir;
  bad_dir.argv = {"/bin/true"};
  bad_dir.working_dir = "/nonexistent/dir";
  status = common::SpawnChild(bad_dir).status();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "chdir to '/nonexistent/dir' failed: No such file or directory");
}

TEST(ChildProcessTest, RunCommandCapturesOutput) {
  auto result = common::RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 4"}, 5000);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->out, "out\n");
  EXPECT_EQ(result->err, "err\n");
  EXPECT_EQ(common::DescribeWaitStatus(result->wait_status), "exit code 4");
}

}  // namespace
}  // namespace dgpu::agent
