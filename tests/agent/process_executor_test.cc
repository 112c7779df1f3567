#include "agent/process_executor.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "agent/log_writer.h"
#include "agent/proc_table.h"
#include "agent/task_shim.h"
#include "common/child_process.h"
#include "common/task_env.h"
#include "test_util.h"

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;
using testing::PollUntilExit;
using testing::PollUntilExitWithClock;
using testing::ProcessGone;
using testing::ReadFile;
using testing::ReadPidFile;
using ::testing::StartsWith;
using testing::TempDir;
using testing::WaitUntil;

constexpr auto kShortGrace = std::chrono::milliseconds(300);

TaskLaunch Launch(std::string id, std::string command, std::vector<int> gpus = {}) {
  TaskLaunch launch;
  launch.task_id = std::move(id);
  launch.command = std::move(command);
  launch.gpu_indices = std::move(gpus);
  return launch;
}

class ProcessExecutorTest : public ::testing::Test {
 protected:
  ProcessExecutorOptions Options() {
    ProcessExecutorOptions options;
    options.work_dir = dir_.path() + "/work";
    options.kill_grace = kShortGrace;
    options.shim = DGPU_TASK_SHIM_PATH;
    return options;
  }
  std::string TaskFile(const std::string& task_id, const std::string& name) {
    return dir_.path() + "/work/" + task_id + "/" + name;
  }

  TempDir dir_;
};

TEST_F(ProcessExecutorTest, TaskSeesGpuEnvironmentAndWorkingDirectory) {
  setenv("DGPU_TEST_INHERITED", "from-agent", 1);
  ProcessExecutor executor(Options());
  TaskLaunch launch = Launch("task-env",
                             "echo CVD=$CUDA_VISIBLE_DEVICES; echo ORDER=$CUDA_DEVICE_ORDER; "
                             "echo NVD=$NVIDIA_VISIBLE_DEVICES; echo ID=$DGPU_TASK_ID; "
                             "echo IDS=$DGPU_GPU_IDS; echo FOO=$FOO; "
                             "echo INHERITED=$DGPU_TEST_INHERITED; echo PWD=$(pwd)",
                             {2, 0});
  launch.env = {{"FOO", "bar baz"}, {"CUDA_VISIBLE_DEVICES", "7"}};
  ASSERT_TRUE(executor.Start(launch).ok());
  EXPECT_EQ(executor.Running(), std::vector<std::string>{"task-env"});
  auto exit = PollUntilExit(executor, "task-env");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_EQ(exit->signal, 0);
  EXPECT_EQ(exit->error, "");
  EXPECT_EQ(ReadFile(executor.LogPath("task-env")),
            "CVD=2,0\nORDER=PCI_BUS_ID\nNVD=2,0\nID=task-env\nIDS=2,0\nFOO=bar baz\n"
            "INHERITED=from-agent\nPWD=" +
                dir_.path() + "/work/task-env\n");
  EXPECT_EQ(executor.LogPath("task-env"), dir_.path() + "/work/task-env.log");
  EXPECT_TRUE(executor.Running().empty());
}

TEST_F(ProcessExecutorTest, BuildEnvironmentOverridesInOrder) {
  ProcessExecutorOptions options = Options();
  options.base_env = std::vector<std::string>{"PATH=/bin", "CUDA_VISIBLE_DEVICES=5", "A=1"};
  ProcessExecutor executor(options);
  TaskLaunch launch = Launch("t1", "true", {1, 3});
  launch.env = {{"A", "2"}, {"B", "3"}, {"DGPU_TASK_ID", "spoofed"}};
  EXPECT_EQ(executor.BuildEnvironment(launch),
            (std::vector<std::string>{"PATH=/bin", "CUDA_VISIBLE_DEVICES=1,3", "A=2", "B=3",
                                      "CUDA_DEVICE_ORDER=PCI_BUS_ID", "NVIDIA_VISIBLE_DEVICES=1,3",
                                      "DGPU_TASK_ID=t1", "DGPU_GPU_IDS=1,3"}));
}

// Every name of the one reserved list is set by the agent, whatever the task's env says; the
// task's other reserved names (any DGPU_ name) are dropped.
TEST_F(ProcessExecutorTest, SetsEveryReservedNameOverTheTasksEnv) {
  ProcessExecutorOptions options = Options();
  options.base_env = std::vector<std::string>{"PATH=/bin"};
  ProcessExecutor executor(options);
  TaskLaunch launch = Launch("t1", "true", {1, 3});
  for (std::string_view name : common::kTaskEnvSetByDgpu) {
    launch.env.emplace_back(name, "spoofed");
  }
  launch.env.emplace_back("DGPU_OTHER", "spoofed");
  launch.env.emplace_back("KEPT", "yes");
  const std::vector<std::string> env = executor.BuildEnvironment(launch);
  for (std::string_view name : common::kTaskEnvSetByDgpu) {
    const std::string prefix = std::string(name) + "=";
    EXPECT_EQ(std::count_if(env.begin(), env.end(),
                            [&](const std::string& e) { return e.starts_with(prefix); }),
              1)
        << name;
  }
  EXPECT_THAT(env, ::testing::Not(::testing::Contains(HasSubstr("spoofed"))));
  EXPECT_EQ(env,
            (std::vector<std::string>{"PATH=/bin", "KEPT=yes", "CUDA_VISIBLE_DEVICES=1,3",
                                      "CUDA_DEVICE_ORDER=PCI_BUS_ID", "NVIDIA_VISIBLE_DEVICES=1,3",
                                      "DGPU_TASK_ID=t1", "DGPU_GPU_IDS=1,3"}));
}

TEST_F(ProcessExecutorTest, ExitCodes) {
  ProcessExecutor executor(Options());
  struct Case {
    std::string id;
    std::string command;
    bool success;
    int exit_code;
    int signal;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"exit-0", "exit 0", true, 0, 0, ""},
      {"exit-3", "exit 3", false, 3, 0, ""},
      {"usr1", "kill -USR1 $$", false, 128 + SIGUSR1, SIGUSR1, "signal:10"},
      {"not-found", "/nonexistent/program", false, 127, 0, ""},
  };
  for (const auto& c : cases) ASSERT_TRUE(executor.Start(Launch(c.id, c.command)).ok()) << c.id;
  std::map<std::string, TaskExit> exits;
  ASSERT_TRUE(WaitUntil([&] {
    for (auto& exit : executor.Poll(testing::UnixMicros())) exits[exit.task_id] = exit;
    return exits.size() == cases.size();
  }));
  for (const auto& c : cases) {
    const TaskExit& exit = exits[c.id];
    EXPECT_EQ(exit.success, c.success) << c.id;
    EXPECT_EQ(exit.exit_code, c.exit_code) << c.id;
    EXPECT_EQ(exit.signal, c.signal) << c.id;
    EXPECT_EQ(exit.error, c.error) << c.id;
    EXPECT_GT(exit.finished_at_unix_micros, 0) << c.id;
  }
}

TEST_F(ProcessExecutorTest, LogHoldsStdoutAndStderr) {
  ProcessExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-log", "echo to-out; echo to-err >&2; echo again")).ok());
  ASSERT_TRUE(PollUntilExit(executor, "task-log").has_value());
  EXPECT_EQ(ReadFile(executor.LogPath("task-log")), "to-out\nto-err\nagain\n");
}

TEST_F(ProcessExecutorTest, TheShimCutsTheLogAndTheTaskEndsOnceItHasCopiedEverything) {
  ProcessExecutorOptions options = Options();
  options.max_log_bytes = 100;
  ProcessExecutor executor(options);
  ASSERT_TRUE(executor.Start(Launch("task-cut", "seq 1 1000; echo done >&2")).ok());
  auto exit = PollUntilExit(executor, "task-cut");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  std::string expected;
  for (int i = 1; expected.size() < 100; ++i) expected += std::to_string(i) + "\n";
  expected.resize(100);  // "...38\n39\n4": cut mid-line, so the marker starts a new one.
  EXPECT_EQ(ReadFile(executor.LogPath("task-cut")), expected + "\n" + LogCutLine(100));

  // Under the limit: everything, as without a writer.
  ASSERT_TRUE(executor.Start(Launch("task-small", "echo to-out; echo to-err >&2")).ok());
  ASSERT_TRUE(PollUntilExit(executor, "task-small").has_value());
  EXPECT_EQ(ReadFile(executor.LogPath("task-small")), "to-out\nto-err\n");
}

TEST_F(ProcessExecutorTest, ATaskWhoseShimCannotStartFailsToStart) {
  ProcessExecutorOptions options = Options();
  options.shim = dir_.path() + "/no-such-shim";
  ProcessExecutor executor(options);
  ASSERT_TRUE(executor.Start(Launch("task-noshim", "touch ran")).ok());
  auto exit = PollUntilExit(executor, "task-noshim");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->error, "start_failed: cannot start the task's shim: program '" + dir_.path() +
                             "/no-such-shim' does not exist or is not executable");
  EXPECT_NE(ReadFile(executor.LogPath("task-noshim")).find("dgpu: task did not start"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(TaskFile("task-noshim", "ran")));
}

TEST_F(ProcessExecutorTest, ALeaderThatCannotRunIsAStartFailureNamedByTheShim) {
  // An executable file that is no program: the agent's check passes, exec fails in the shim.
  const std::string bogus = dir_.path() + "/not-a-program";
  testing::WriteFile(bogus,
                     "\x7f"
                     "ELF garbage",
                     /*executable=*/true);
  ProcessExecutorOptions options = Options();
  options.shell = bogus;
  ProcessExecutor executor(options);
  ASSERT_TRUE(executor.Start(Launch("task-badexec", "true")).ok());
  auto exit = PollUntilExit(executor, "task-badexec");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->error, "start_failed: cannot run " + bogus + ": Exec format error");
}

TEST_F(ProcessExecutorTest, ACommandWhosePidsRecordCannotBeWrittenIsStoppedAndFailsToStart) {
  // The shim starts the command, then notes who runs it; a command no later agent could find is
  // not left running. A directory where the record goes makes the write fail.
  ProcessExecutor executor(Options());
  const std::string record = dir_.path() + "/work/.run/task-norecord.pids";
  std::filesystem::create_directories(record);
  ASSERT_TRUE(executor.Start(Launch("task-norecord", "sleep 0.3; touch ran")).ok());
  auto exit = PollUntilExit(executor, "task-norecord");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->error, "start_failed: cannot write " + record + ": Is a directory");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_FALSE(std::filesystem::exists(TaskFile("task-norecord", "ran")));
}

TEST_F(ProcessExecutorTest, CancelKillsTaskAndAllDescendants) {
  ProcessExecutor executor(Options());
  // bg: a plain background child; escaped: a child that left the session with setsid;
  // orphan: a setsid'ed grandchild whose parent exited at once, so it is re-parented to the
  // task's shim (a child subreaper, the leader's parent).
  ASSERT_TRUE(executor
                  .Start(Launch("task-tree",
                                "(setsid sleep 100 & echo $! > orphan.pid); "
                                "setsid sh -c 'echo $$ > escaped.pid; exec sleep 100' & "
                                "sleep 100 & echo $! > bg.pid; wait",
                                {0}))
                  .ok());
  std::optional<pid_t> bg, escaped, orphan;
  ASSERT_TRUE(WaitUntil([&] {
    bg = ReadPidFile(TaskFile("task-tree", "bg.pid"));
    escaped = ReadPidFile(TaskFile("task-tree", "escaped.pid"));
    orphan = ReadPidFile(TaskFile("task-tree", "orphan.pid"));
    return bg && escaped && orphan;
  }));
  // Once the orphan has called setsid() and its parent subshell has exited:
  auto bg_stat = ReadProcStat(*bg);
  ASSERT_TRUE(bg_stat.has_value());
  auto leader = ReadProcStat(bg_stat->ppid);
  ASSERT_TRUE(leader.has_value());
  auto shim = ReadProcStat(leader->ppid);
  ASSERT_TRUE(shim.has_value());
  EXPECT_EQ(shim->ppid, getpid());
  EXPECT_TRUE(WaitUntil([&] {
    auto stat = ReadProcStat(*orphan);
    return stat && stat->ppid == shim->pid && stat->sid == *orphan;
  })) << "the shim should have adopted the orphan, which left the task's session";
  EXPECT_TRUE(WaitUntil([&] {
    auto stat = ReadProcStat(*escaped);
    return stat && stat->sid == *escaped;
  }));
  EXPECT_TRUE(executor.Poll(testing::UnixMicros()).empty());

  ASSERT_TRUE(executor.Stop("task-tree", StopOrder{}).ok());
  ASSERT_TRUE(executor.Stop("task-tree", StopOrder{}).ok());  // Idempotent.
  EXPECT_TRUE(executor.IsGpuBusy(0));
  auto exit = PollUntilExit(executor, "task-tree");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->error, "cancelled");
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_EQ(exit->exit_code, 128 + SIGTERM);
  // The exit is reported only once every process is gone (and reaped, for the adopted ones).
  EXPECT_TRUE(ProcessGone(*bg));
  EXPECT_TRUE(ProcessGone(*escaped));
  EXPECT_TRUE(ProcessGone(*orphan));
  EXPECT_FALSE(executor.IsGpuBusy(0));
  EXPECT_EQ(executor.Stop("task-tree", StopOrder{}).code(), StatusCode::kNotFound);
}

TEST_F(ProcessExecutorTest, LeftoverProcessesAreStoppedWhenTheTaskExits) {
  ProcessExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-leftover", "sleep 100 & echo $! > bg.pid; exit 0")).ok());
  auto exit = PollUntilExit(executor, "task-leftover");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  EXPECT_EQ(exit->error, "");
  auto bg = ReadPidFile(TaskFile("task-leftover", "bg.pid"));
  ASSERT_TRUE(bg.has_value());
  EXPECT_TRUE(ProcessGone(*bg));
}

TEST_F(ProcessExecutorTest, LeftoversOutsideTheSessionAreFoundWhenTheLeaderExits) {
  // A fixed clock: after the first Poll's full scan no periodic full scan is due, so the leader's
  // exit is handled by the partial scan alone (processes created since the oldest leader).
  const int64_t now = testing::UnixMicros();
  ProcessExecutor executor(Options());
  ASSERT_TRUE(executor
                  .Start(Launch("task-escape",
                                "(setsid sleep 100 & echo $! > orphan.pid); "
                                "setsid sh -c 'echo $$ > escaped.pid; exec sleep 100' & "
                                "while [ ! -s escaped.pid ]; do sleep 0.01; done; exit 0"))
                  .ok());
  EXPECT_TRUE(executor.Poll(now).empty());
  auto exit = PollUntilExitWithClock(executor, "task-escape", [now] { return now; });
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  auto escaped = ReadPidFile(TaskFile("task-escape", "escaped.pid"));
  auto orphan = ReadPidFile(TaskFile("task-escape", "orphan.pid"));
  ASSERT_TRUE(escaped.has_value());
  ASSERT_TRUE(orphan.has_value());
  // Reported only once both processes that left the task's session are gone.
  EXPECT_TRUE(ProcessGone(*escaped));
  EXPECT_TRUE(ProcessGone(*orphan));
}

TEST_F(ProcessExecutorTest, TimeoutEscalatesToSigkillOnFakeClock) {
  int64_t now = 1'000'000'000'000;
  ProcessExecutorOptions options = Options();
  options.kill_grace = std::chrono::seconds(2);
  options.clock = [&] { return now; };
  ProcessExecutor executor(options);
  TaskLaunch launch = Launch("task-stubborn", "trap '' TERM; echo ready > ready; sleep 100");
  launch.timeout_seconds = 5;
  ASSERT_TRUE(executor.Start(launch).ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(TaskFile("task-stubborn", "ready")) == "ready\n"; }));

  now += 4'999'999;
  EXPECT_TRUE(executor.Poll(now).empty());
  now += 1;  // Timeout: SIGTERM, which the task ignores.
  EXPECT_TRUE(executor.Poll(now).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  now += 1'999'999;
  EXPECT_TRUE(executor.Poll(now).empty());
  EXPECT_EQ(executor.Running(), std::vector<std::string>{"task-stubborn"});
  now += 1;  // Grace period over: SIGKILL.
  auto exit = testing::PollUntilExitWithClock(executor, "task-stubborn", [&] { return now; });
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "timeout");
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->exit_code, 128 + SIGKILL);
  EXPECT_EQ(exit->finished_at_unix_micros, now);
  EXPECT_FALSE(exit->success);
}

TEST_F(ProcessExecutorTest, TimeoutOnRealClock) {
  ProcessExecutor executor(Options());
  TaskLaunch launch = Launch("task-slow", "sleep 100");
  launch.timeout_seconds = 1;
  ASSERT_TRUE(executor.Start(launch).ok());
  auto exit = PollUntilExit(executor, "task-slow", std::chrono::seconds(5));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "timeout");
  EXPECT_EQ(exit->signal, SIGTERM);
}

// A task that ignores SIGTERM, started on a fake clock, with a configured grace of 10 s.
class StopOrderTest : public ProcessExecutorTest {
 protected:
  void SetUp() override {
    ProcessExecutorOptions options = Options();
    options.kill_grace = std::chrono::seconds(10);
    options.clock = [this] { return now_; };
    executor_.emplace(options);
    ASSERT_TRUE(executor_
                    ->Start(Launch("task-stubborn",
                                   "trap '' TERM; echo ready > ready; "
                                   "sleep 100"))
                    .ok());
    ASSERT_TRUE(
        WaitUntil([&] { return ReadFile(TaskFile("task-stubborn", "ready")) == "ready\n"; }));
  }
  void Advance(int64_t micros) { now_ += micros; }
  std::vector<TaskExit> Poll() { return executor_->Poll(now_); }
  std::optional<TaskExit> PollUntilExit() {
    return PollUntilExitWithClock(*executor_, "task-stubborn", [this] { return now_; });
  }
  std::string Log() { return ReadFile(executor_->LogPath("task-stubborn")); }

  int64_t now_ = 1'000'000'000'000;
  std::optional<ProcessExecutor> executor_;
};

TEST_F(StopOrderTest, OrderGraceReplacesTheConfiguredOne) {
  ASSERT_TRUE(
      executor_->Stop("task-stubborn", {core::StopReason::kCancel, std::chrono::seconds(1), {}})
          .ok());
  EXPECT_TRUE(Poll().empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Advance(999'999);
  EXPECT_TRUE(Poll().empty()) << "SIGTERM is ignored and the grace is not over";
  Advance(1);  // 1 s after the order, not the configured 10 s: SIGKILL.
  auto exit = PollUntilExit();
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "cancelled");
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->finished_at_unix_micros, now_);
  EXPECT_EQ(Log(), "dgpu: stopping task (reason: cancel, grace 1 s)\n");
}

TEST_F(StopOrderTest, ShorterSecondOrderShortensLongerOneNeverExtends) {
  ASSERT_TRUE(
      executor_->Stop("task-stubborn", {core::StopReason::kPreempt, std::chrono::seconds(5), {}})
          .ok());
  Advance(1'000'000);
  EXPECT_TRUE(Poll().empty());
  // Ends at +2 s instead of +5 s.
  ASSERT_TRUE(
      executor_->Stop("task-stubborn", {core::StopReason::kCancel, std::chrono::seconds(1), {}})
          .ok());
  // Would end at +11 s: ignored.
  ASSERT_TRUE(
      executor_
          ->Stop("task-stubborn", {core::StopReason::kCancel, std::chrono::milliseconds(-1), {}})
          .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Advance(999'999);
  EXPECT_TRUE(Poll().empty());
  Advance(1);
  auto exit = PollUntilExit();
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "preempted") << "the first order's reason is kept";
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->finished_at_unix_micros, 1'000'000'000'000 + 2'000'000);
  EXPECT_EQ(Log(),
            "dgpu: stopping task (reason: preempt, grace 5 s)\n"
            "dgpu: stopping task (reason: cancel, grace 1 s)\n");
}

TEST_F(StopOrderTest, NegativeGraceIsTheConfiguredOne) {
  ASSERT_TRUE(
      executor_
          ->Stop("task-stubborn", {core::StopReason::kDrain, std::chrono::milliseconds(-1), {}})
          .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Advance(9'999'999);
  EXPECT_TRUE(Poll().empty());
  Advance(1);
  auto exit = PollUntilExit();
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "drained");
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(Log(), "dgpu: stopping task (reason: drain, grace 10 s)\n");
}

TEST(StopWordsTest, ErrorAndLogLine) {
  EXPECT_EQ(StopErrorOf(core::StopReason::kCancel), "cancelled");
  EXPECT_EQ(StopErrorOf(core::StopReason::kNone), "cancelled");
  EXPECT_EQ(StopErrorOf(core::StopReason::kTimeout), "timeout");
  EXPECT_EQ(StopErrorOf(core::StopReason::kMemberFailure), "member_failed");
  EXPECT_EQ(StopErrorOf(core::StopReason::kReconcile), "stopped");
  EXPECT_EQ(StopLogLine(core::StopReason::kCancel, std::chrono::seconds(5)),
            "dgpu: stopping task (reason: cancel, grace 5 s)");
  EXPECT_EQ(StopLogLine(core::StopReason::kNone, std::chrono::milliseconds(1500)),
            "dgpu: stopping task (reason: cancel, grace 1.5 s)");
  EXPECT_EQ(StopLogLine(core::StopReason::kGpuFailure, std::chrono::milliseconds(250)),
            "dgpu: stopping task (reason: gpu_failure, grace 0.25 s)");
  EXPECT_EQ(StopLogLine(core::StopReason::kTimeout, std::chrono::milliseconds(0)),
            "dgpu: stopping task (reason: timeout, grace 0 s)");
}

TEST_F(ProcessExecutorTest, RefusesBusyGpuAndDuplicateId) {
  ProcessExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-a", "sleep 100", {1, 2})).ok());
  Status busy = executor.Start(Launch("task-b", "true", {3, 2}));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.message(), "GPU 2 is held by task 'task-a'");
  Status duplicate = executor.Start(Launch("task-a", "true", {5}));
  EXPECT_EQ(duplicate.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(executor.IsGpuBusy(1));
  EXPECT_TRUE(executor.IsGpuBusy(2));
  EXPECT_FALSE(executor.IsGpuBusy(3));
  EXPECT_TRUE(executor.Start(Launch("task-c", "sleep 100", {3})).ok());
  EXPECT_EQ(executor.Running(), (std::vector<std::string>{"task-a", "task-c"}));

  ASSERT_TRUE(executor.Stop("task-a", StopOrder{}).ok());
  ASSERT_TRUE(PollUntilExit(executor, "task-a").has_value());
  EXPECT_FALSE(executor.IsGpuBusy(2));
  EXPECT_TRUE(executor.Start(Launch("task-b", "true", {2})).ok());
  // A finished id may be reused once its exit was returned.
  ASSERT_TRUE(PollUntilExit(executor, "task-b").has_value());
}

TEST_F(ProcessExecutorTest, RejectsInvalidLaunches) {
  ProcessExecutor executor(Options());
  struct Case {
    TaskLaunch launch;
    std::string message;
  };
  TaskLaunch bad_env = Launch("t", "true");
  bad_env.env = {{"A=B", "c"}};
  TaskLaunch negative_timeout = Launch("t", "true");
  negative_timeout.timeout_seconds = -1;
  const std::vector<Case> cases = {
      {Launch("", "true"), "task_id must have 1 to 128 characters"},
      {Launch("../escape", "true"), "task_id '../escape' must not start with '.' or '-'"},
      {Launch("a/b", "true"), "task_id 'a/b' may only hold letters, digits, '_', '.', '-'"},
      {Launch("t", ""), "command is empty"},
      {Launch("t", "true", {0, 0}), "gpu_indices holds index 0 twice"},
      {Launch("t", "true", {-1}), "gpu_indices holds negative index -1"},
      {bad_env, "env key 'A=B' is empty or holds '=' or NUL"},
      {negative_timeout, "timeout_seconds is negative"},
  };
  for (const auto& c : cases) {
    Status status = executor.Start(c.launch);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(status.message(), c.message);
  }
  EXPECT_TRUE(executor.Running().empty());
}

TEST_F(ProcessExecutorTest, StartFailureIsReportedAsExit) {
  ProcessExecutorOptions options = Options();
  options.shell = "/nonexistent/sh";
  ProcessExecutor executor(options);
  ASSERT_TRUE(executor.Start(Launch("task-nosh", "true", {0})).ok());
  EXPECT_EQ(executor.Running(), std::vector<std::string>{"task-nosh"});
  EXPECT_EQ(executor.Start(Launch("task-nosh", "true")).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(executor.Stop("task-nosh", StopOrder{}).ok());
  auto exits = executor.Poll(testing::UnixMicros());
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].task_id, "task-nosh");
  EXPECT_FALSE(exits[0].success);
  EXPECT_EQ(exits[0].exit_code, -1);
  EXPECT_EQ(exits[0].error,
            "start_failed: program '/nonexistent/sh' does not exist or is not executable");
  EXPECT_TRUE(executor.Running().empty());
}

TEST_F(ProcessExecutorTest, StopAllStopsEverything) {
  ProcessExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-1", "sleep 100", {0})).ok());
  ASSERT_TRUE(
      executor.Start(Launch("task-2", "trap '' TERM; echo ready > ready; sleep 100", {1})).ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(TaskFile("task-2", "ready")) == "ready\n"; }));
  auto exits = executor.StopAll(std::chrono::milliseconds(200));
  ASSERT_EQ(exits.size(), 2u);
  std::sort(exits.begin(), exits.end(),
            [](const TaskExit& a, const TaskExit& b) { return a.task_id < b.task_id; });
  EXPECT_EQ(exits[0].task_id, "task-1");
  EXPECT_EQ(exits[0].error, "cancelled");
  EXPECT_EQ(exits[0].signal, SIGTERM);
  EXPECT_EQ(exits[1].task_id, "task-2");
  EXPECT_EQ(exits[1].error, "cancelled");
  EXPECT_EQ(exits[1].signal, SIGKILL);  // It ignores SIGTERM: killed when the grace ran out.
  EXPECT_TRUE(executor.Running().empty());
}

TEST_F(ProcessExecutorTest, DetachLeavesTasksRunning) {
  std::optional<pid_t> pid;
  {
    ProcessExecutor executor(Options());
    ASSERT_TRUE(executor.Start(Launch("task-kept", "echo $$ > pid; exec sleep 100")).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-kept", "pid"))).has_value(); }));
    executor.Detach();
    EXPECT_TRUE(executor.Running().empty());
    EXPECT_EQ(executor.Start(Launch("task-new", "true")).code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(kill(*pid, 0), 0) << "a detached task survives the executor";
  kill(*pid, SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return ProcessGone(*pid); }));  // Reaped by its shim.
}

TEST_F(ProcessExecutorTest, DestructorKillsTasks) {
  std::optional<pid_t> pid;
  {
    ProcessExecutor executor(Options());
    ASSERT_TRUE(executor.Start(Launch("task-doomed", "echo $$ > pid; exec sleep 100")).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-doomed", "pid"))).has_value(); }));
  }
  EXPECT_TRUE(ProcessGone(*pid));
}

TEST_F(ProcessExecutorTest, MakesTheAgentAChildSubreaper) {
  ProcessExecutor executor(Options());
  int flag = 0;
  ASSERT_EQ(prctl(PR_GET_CHILD_SUBREAPER, &flag, 0, 0, 0), 0);
  EXPECT_EQ(flag, 1);
}

// --- Tasks outlive the executor: shims, run records and Reattach ---------------------------

// A task that waits for the file `go` in its directory, then prints and exits with `code`.
std::string WaitForGo(int code) {
  return "echo $$ > pid; while [ ! -e go ]; do sleep 0.02; done; echo after-go; exit " +
         std::to_string(code);
}

TEST_F(ProcessExecutorTest, ANewExecutorAdoptsARunningTaskWithoutRestartingIt) {
  std::optional<pid_t> pid;
  {
    ProcessExecutor first(Options());
    TaskLaunch launch = Launch("task-live", WaitForGo(3), {1, 2});
    launch.run = 4;
    ASSERT_TRUE(first.Start(launch).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-live", "pid"))).has_value(); }));
    first.Detach();  // As an agent that dies: nothing is signalled.
  }
  ProcessExecutor second(Options());
  std::vector<std::string> lost;
  std::vector<HeldTask> held = second.Reattach(&lost);
  EXPECT_TRUE(lost.empty());
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].task_id, "task-live");
  EXPECT_EQ(held[0].gpu_indices, (std::vector<int>{1, 2}));
  EXPECT_EQ(held[0].run, 4);
  EXPECT_GT(held[0].started_at_micros, 0);
  EXPECT_EQ(second.Running(), std::vector<std::string>{"task-live"});
  EXPECT_TRUE(second.IsGpuBusy(1));
  EXPECT_EQ(second.Start(Launch("task-clash", "true", {2})).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(second.Poll(testing::UnixMicros()).empty());
  EXPECT_EQ(kill(*pid, 0), 0);

  testing::WriteFile(TaskFile("task-live", "go"), "");
  auto exit = PollUntilExit(second, "task-live");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->error, "");
  EXPECT_EQ(exit->run, 4);
  EXPECT_EQ(ReadFile(TaskFile("task-live", "pid")), std::to_string(*pid) + "\n");  // Ran once.
  EXPECT_EQ(ReadFile(second.LogPath("task-live")), "after-go\n");
  // The records go once the exit has been handed over (the next Poll).
  const std::string record = dir_.path() + "/work/.run/task-live.task";
  EXPECT_TRUE(std::filesystem::exists(record));
  second.Poll(testing::UnixMicros());
  EXPECT_FALSE(std::filesystem::exists(record));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/work/.run/task-live.exit"));
}

// executor.run_dir: the records live there (on a tmpfs in production), not in work_dir/.run, and
// the next executor adopts from there.
TEST_F(ProcessExecutorTest, RunRecordsLiveInTheRunDirAndAreAdoptedFromThere) {
  ProcessExecutorOptions options = Options();
  options.run_dir = dir_.path() + "/records";
  std::optional<pid_t> pid;
  {
    ProcessExecutor first(options);
    ASSERT_TRUE(first.Start(Launch("task-rd", WaitForGo(0))).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-rd", "pid"))).has_value(); }));
    first.Detach();
  }
  EXPECT_TRUE(std::filesystem::exists(options.run_dir + "/task-rd.task"));
  const auto pids = ReadShimPidsRecord(options.run_dir + "/task-rd.pids");
  ASSERT_TRUE(pids.has_value());
  EXPECT_EQ(pids->leader, *pid);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/work/.run/task-rd.task"));

  ProcessExecutor second(options);
  std::vector<std::string> lost;
  std::vector<HeldTask> held = second.Reattach(&lost);
  EXPECT_TRUE(lost.empty());
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].task_id, "task-rd");
  testing::WriteFile(TaskFile("task-rd", "go"), "");
  auto exit = PollUntilExit(second, "task-rd");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  second.Poll(testing::UnixMicros());
  EXPECT_FALSE(std::filesystem::exists(options.run_dir + "/task-rd.task"));
  EXPECT_FALSE(std::filesystem::exists(options.run_dir + "/task-rd.exit"));
}

// --- Kept shims: a shim runs the next task once its own has ended ----------------------------

pid_t ShimOf(const std::string& run_dir, const std::string& task_id) {
  const auto pids = ReadShimPidsRecord(run_dir + "/" + task_id + ".pids");
  return pids.has_value() ? pids->shim : 0;
}

TEST_F(ProcessExecutorTest, ATaskRunsOnTheShimAnEarlierTaskEndedOn) {
  ProcessExecutor executor(Options());
  const std::string run_dir = dir_.path() + "/work/.run";
  ASSERT_TRUE(executor.Start(Launch("task-k1", "echo one")).ok());
  const pid_t first = ShimOf(run_dir, "task-k1");
  ASSERT_GT(first, 0);
  auto exit = PollUntilExit(executor, "task-k1");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  ASSERT_TRUE(executor.Start(Launch("task-k2", "echo two; exit 4")).ok());
  EXPECT_EQ(ShimOf(run_dir, "task-k2"), first);
  exit = PollUntilExit(executor, "task-k2");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 4);
  EXPECT_EQ(ReadFile(executor.LogPath("task-k1")), "one\n");
  EXPECT_EQ(ReadFile(executor.LogPath("task-k2")), "two\n");
  EXPECT_EQ(kill(first, 0), 0);  // Idle, waiting for the next task.
}

TEST_F(ProcessExecutorTest, WithoutKeptShimsEveryTaskHasAShimOfItsOwn) {
  ProcessExecutorOptions options = Options();
  options.max_idle_shims = 0;
  ProcessExecutor executor(options);
  const std::string run_dir = dir_.path() + "/work/.run";
  ASSERT_TRUE(executor.Start(Launch("task-o1", "true")).ok());
  const pid_t first = ShimOf(run_dir, "task-o1");
  ASSERT_TRUE(PollUntilExit(executor, "task-o1").has_value());
  ASSERT_TRUE(executor.Start(Launch("task-o2", "true")).ok());
  const pid_t second = ShimOf(run_dir, "task-o2");
  EXPECT_GT(first, 0);
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  ASSERT_TRUE(PollUntilExit(executor, "task-o2").has_value());
  EXPECT_NE(kill(first, 0), 0);  // Ended with its task, and reaped.
}

TEST_F(ProcessExecutorTest, AnIdleShimThatDiedIsReplacedAndReaped) {
  ProcessExecutor executor(Options());
  const std::string run_dir = dir_.path() + "/work/.run";
  ASSERT_TRUE(executor.Start(Launch("task-d1", "true")).ok());
  const pid_t first = ShimOf(run_dir, "task-d1");
  ASSERT_TRUE(PollUntilExit(executor, "task-d1").has_value());
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] {
    auto stat = ReadProcStat(first);
    return stat.has_value() && stat->zombie();
  }));
  ASSERT_TRUE(executor.Start(Launch("task-d2", "echo fine")).ok());
  const pid_t second = ShimOf(run_dir, "task-d2");
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  auto exit = PollUntilExit(executor, "task-d2");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  EXPECT_EQ(ReadFile(executor.LogPath("task-d2")), "fine\n");
  EXPECT_FALSE(ReadProcStat(first).has_value());  // The dead one was reaped.
}

TEST_F(ProcessExecutorTest, ATaskTooLargeForOneRequestGetsAShimOfItsOwn) {
  ProcessExecutor executor(Options());
  // 300 KB of environment (one string may hold 128 KiB at most: execve's limit).
  TaskLaunch launch =
      Launch("task-big", "test $((${#BIG1} + ${#BIG2} + ${#BIG3})) -eq 300000 && echo ok");
  launch.env = {{"BIG1", std::string(100000, 'x')},
                {"BIG2", std::string(100000, 'y')},
                {"BIG3", std::string(100000, 'z')}};
  ASSERT_TRUE(executor.Start(launch).ok());
  auto exit = PollUntilExit(executor, "task-big");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  EXPECT_EQ(ReadFile(executor.LogPath("task-big")), "ok\n");
}

TEST_F(ProcessExecutorTest, IdleShimsEndWhenTheExecutorDetachesAndBusyOnesAfterTheirTask) {
  const std::string run_dir = dir_.path() + "/work/.run";
  pid_t idle = 0;
  pid_t busy = 0;
  {
    ProcessExecutor executor(Options());
    ASSERT_TRUE(executor.Start(Launch("task-i1", "true")).ok());
    idle = ShimOf(run_dir, "task-i1");
    ASSERT_TRUE(PollUntilExit(executor, "task-i1").has_value());
    ASSERT_TRUE(executor.Start(Launch("task-i2", "while [ ! -e go ]; do sleep 0.02; done")).ok());
    ASSERT_TRUE(executor.Start(Launch("task-i3", "true")).ok());
    busy = ShimOf(run_dir, "task-i2");
    ASSERT_TRUE(PollUntilExit(executor, "task-i3").has_value());
    EXPECT_EQ(busy, idle);  // task-i2 took the idle shim; task-i3 got a new one, now idle.
    idle = ShimOf(run_dir, "task-i3");
    executor.Detach();  // As an agent that exits leaving its tasks: the idle shim ends.
    EXPECT_FALSE(ReadProcStat(idle).has_value());
  }
  EXPECT_EQ(kill(busy, 0), 0);  // Still running task-i2.
  testing::WriteFile(TaskFile("task-i2", "go"), "");
  // Its task ended and nobody will send it another: it ends (reaped by this process, its parent,
  // once it is a zombie).
  ASSERT_TRUE(WaitUntil([&] {
    auto stat = ReadProcStat(busy);
    if (stat.has_value() && stat->zombie()) waitpid(busy, nullptr, WNOHANG);
    return !ReadProcStat(busy).has_value();
  }));
}

// Detaches `executor` as an agent killed now would leave it: `task_id`'s records (its exit not
// handed over yet) stay in `run_dir` (Detach removes them; they are copied to `scratch` and back).
void DetachLeavingRecordsOf(ProcessExecutor& executor, const std::string& run_dir,
                            const std::string& task_id, const std::string& scratch) {
  std::filesystem::create_directory(scratch);
  for (const auto& e : std::filesystem::directory_iterator(run_dir)) {
    if (e.path().filename().string().rfind(task_id + ".", 0) == 0) {
      std::filesystem::copy_file(e.path(), scratch / e.path().filename());
    }
  }
  executor.Detach();
  for (const auto& e : std::filesystem::directory_iterator(scratch)) {
    std::filesystem::copy_file(e.path(), run_dir / e.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
  }
}

// A kept shim runs one task after another: after a restart, an earlier task whose records were
// still there (its exit not yet handed over) names the same shim as the task it runs now. The
// shim's other children belong to the task it runs now, not to the earlier one: the earlier
// one's end signals none of them.
TEST_F(ProcessExecutorTest, AnAdoptedTaskThatHadEndedLeavesTheNextTaskOnItsShimAlone) {
  const std::string run_dir = dir_.path() + "/work/.run";
  std::optional<pid_t> pid;
  {
    ProcessExecutor first(Options());
    ASSERT_TRUE(first.Start(Launch("task-s1", "echo one")).ok());
    ASSERT_TRUE(PollUntilExit(first, "task-s1").has_value());
    // task-s1's records stay until the next Poll hands its exit over; the agent dies first.
    ASSERT_TRUE(first.Start(Launch("task-s2", WaitForGo(0))).ok());
    ASSERT_EQ(ShimOf(run_dir, "task-s2"), ShimOf(run_dir, "task-s1"));
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-s2", "pid"))).has_value(); }));
    // An agent killed now leaves task-s1's records as they are; Detach would remove them.
    DetachLeavingRecordsOf(first, run_dir, "task-s1", dir_.path() + "/saved");
  }
  ProcessExecutor second(Options());
  std::vector<std::string> lost;
  std::vector<HeldTask> held = second.Reattach(&lost);
  EXPECT_TRUE(lost.empty());
  ASSERT_EQ(held.size(), 2u);
  auto exit = PollUntilExit(second, "task-s1");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  // Several polls (scans, the stop of an ended task's leftovers): task-s2 runs on.
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(second.Poll(testing::UnixMicros()).empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(kill(*pid, 0), 0);
  testing::WriteFile(TaskFile("task-s2", "go"), "");
  exit = PollUntilExit(second, "task-s2");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_EQ(ReadFile(second.LogPath("task-s2")), "after-go\n");
}

// The shim names itself and its leader by their start times, read from /proc/<pid>/stat after
// the last ')' of the command name: here a shim whose name holds spaces and parentheses (the
// leader carries the shim's name until it runs its command).
TEST_F(ProcessExecutorTest, TheShimsRecordNamesItsProcessesWhateverTheShimIsCalled) {
  const std::string odd = dir_.path() + "/a) b (c";
  std::filesystem::copy_file(DGPU_TASK_SHIM_PATH, odd);
  std::filesystem::permissions(odd, std::filesystem::perms::owner_all);
  ProcessExecutorOptions options = Options();
  options.shim = odd;
  ProcessExecutor executor(options);
  ASSERT_TRUE(executor.Start(Launch("task-odd", "sleep 30")).ok());
  const auto pids = ReadShimPidsRecord(dir_.path() + "/work/.run/task-odd.pids");
  ASSERT_TRUE(pids.has_value());
  const auto shim = ReadProcStat(pids->shim);
  const auto leader = ReadProcStat(pids->leader);
  ASSERT_TRUE(shim.has_value());
  ASSERT_TRUE(leader.has_value());
  EXPECT_NE(pids->shim, pids->leader);
  EXPECT_GT(pids->leader_start_time, 0u);
  EXPECT_EQ(pids->shim_start_time, shim->start_time);
  EXPECT_EQ(pids->leader_start_time, leader->start_time);
  EXPECT_EQ(leader->ppid, pids->shim);
}

// Without a dgpu-task-shim beside it the agent runs as a shim itself (dgpu-agent --task-shim ...,
// RunTaskShim): the same code, linked into the agent. Here in a child of the test: it answers,
// records the exit and cuts the log as the shim binary does.
TEST_F(ProcessExecutorTest, TheAgentsOwnCopyOfTheShimRunsATask) {
  int hello[2];
  ASSERT_EQ(pipe(hello), 0);
  const std::string prefix = dir_.path() + "/own";
  const std::string log = dir_.path() + "/own.log";
  std::vector<std::string> args = {"dgpu-agent",
                                   kTaskShimFlag,
                                   std::to_string(kTaskShimStartProtocol),
                                   prefix,
                                   "40",
                                   "0",
                                   "--",
                                   "/bin/sh",
                                   "-c",
                                   "printf '%050d' 7; exit 3"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(hello[1], 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(hello[0]);
    _exit(RunTaskShim(static_cast<int>(args.size()), argv.data()));
  }
  close(hello[1]);
  char line[256] = {};
  const ssize_t n = read(hello[0], line, sizeof(line) - 1);
  close(hello[0]);
  ASSERT_GT(n, 0);
  const auto parsed = ParseShimHello(std::string_view(line, static_cast<size_t>(n) - 1));
  ASSERT_TRUE(parsed.has_value()) << line;
  EXPECT_TRUE(parsed->ok) << line;
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const auto exit = ReadShimExitRecord(prefix + ".exit");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(WIFEXITED(exit->wait_status) && WEXITSTATUS(exit->wait_status) == 3);
  const auto pids = ReadShimPidsRecord(prefix + ".pids");
  ASSERT_TRUE(pids.has_value());
  EXPECT_EQ(pids->shim, pid);
  EXPECT_EQ(pids->leader, parsed->leader);
  EXPECT_EQ(ReadFile(log), std::string(40, '0') + "\n" + LogCutLine(40));
}

TEST_F(ProcessExecutorTest, ATaskThatEndedWhileNoExecutorRanIsReportedWithItsExitCode) {
  {
    ProcessExecutorOptions options = Options();
    options.max_log_bytes = 1 << 20;  // Through the shim's pipe, which outlives the executor.
    ProcessExecutor first(options);
    ASSERT_TRUE(first.Start(Launch("task-ended", WaitForGo(7), {0})).ok());
    ASSERT_TRUE(WaitUntil([&] { return ReadPidFile(TaskFile("task-ended", "pid")).has_value(); }));
    first.Detach();
  }
  testing::WriteFile(TaskFile("task-ended", "go"), "");
  const std::string exit_record = dir_.path() + "/work/.run/task-ended.exit";
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(exit_record); }));
  // And the shim has ended too (it records the exit, then waits for the rest of the task).
  auto pids = ReadShimPidsRecord(dir_.path() + "/work/.run/task-ended.pids");
  ASSERT_TRUE(pids.has_value());
  ASSERT_TRUE(WaitUntil([&] {
    auto s = ReadProcStat(pids->shim);
    return !s || s->zombie();
  }));
  const int64_t ended_before = testing::UnixMicros();
  ProcessExecutor second(Options());
  std::vector<std::string> lost;
  ASSERT_EQ(second.Reattach(&lost).size(), 1u);
  auto exit = PollUntilExit(second, "task-ended");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 7);
  EXPECT_EQ(exit->signal, 0);
  EXPECT_FALSE(exit->success);
  EXPECT_LE(exit->finished_at_unix_micros, ended_before);  // When it ended, not when found.
  EXPECT_EQ(ReadFile(second.LogPath("task-ended")), "after-go\n");
}

TEST_F(ProcessExecutorTest, AnAdoptedTaskIsStoppedWithEverythingItStarted) {
  std::optional<pid_t> pid;
  {
    ProcessExecutor first(Options());
    ASSERT_TRUE(
        first.Start(Launch("task-stop", "sleep 100 & echo $! > bg.pid; " + WaitForGo(0))).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-stop", "pid"))).has_value(); }));
    first.Detach();
  }
  auto bg = ReadPidFile(TaskFile("task-stop", "bg.pid"));
  ASSERT_TRUE(bg.has_value());
  ProcessExecutor second(Options());
  ASSERT_EQ(second.Reattach(nullptr).size(), 1u);
  ASSERT_TRUE(second.Stop("task-stop", StopOrder{}).ok());
  auto exit = PollUntilExit(second, "task-stop");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "cancelled");
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_TRUE(ProcessGone(*pid));
  EXPECT_TRUE(ProcessGone(*bg));
}

TEST_F(ProcessExecutorTest, ATaskWhoseShimWasKilledIsLost) {
  std::optional<pid_t> pid;
  ProcessExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-orphan", WaitForGo(0))).ok());
  ASSERT_TRUE(
      WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-orphan", "pid"))).has_value(); }));
  auto stat = ReadProcStat(*pid);
  ASSERT_TRUE(stat.has_value());
  const pid_t shim = stat->ppid;
  ASSERT_NE(shim, getpid());
  ASSERT_EQ(kill(shim, SIGKILL), 0);
  auto exit = PollUntilExit(executor, "task-orphan");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->exit_code, -1);
  EXPECT_EQ(exit->error, "supervisor_lost: the task's shim (pid " + std::to_string(shim) +
                             ") ended before the task");
  EXPECT_TRUE(WaitUntil([&] { return ProcessGone(*pid); }));
}

TEST_F(ProcessExecutorTest, RecordsOfADeadShimAreNotAdopted) {
  std::optional<pid_t> pid;
  {
    ProcessExecutor first(Options());
    ASSERT_TRUE(first.Start(Launch("task-gone", WaitForGo(0))).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-gone", "pid"))).has_value(); }));
    first.Detach();
  }
  auto stat = ReadProcStat(*pid);
  ASSERT_TRUE(stat.has_value());
  ASSERT_EQ(kill(stat->ppid, SIGKILL), 0);  // The shim, before its task ended.
  ASSERT_TRUE(WaitUntil([&] {
    auto s = ReadProcStat(stat->ppid);
    return !s || s->zombie();
  }));
  // A record that is not valid is removed too, and named.
  testing::WriteFile(dir_.path() + "/work/.run/task-bad.task", "{not json");
  // And a task whose shim had not noted its leader yet (the agent died in between: its command
  // never ran).
  std::string early = ReadFile(dir_.path() + "/work/.run/task-gone.task");
  early.replace(early.find("task-gone"), 9, "task-early");
  testing::WriteFile(dir_.path() + "/work/.run/task-early.task", early);
  ProcessExecutor second(Options());
  std::vector<std::string> lost;
  EXPECT_TRUE(second.Reattach(&lost).empty());
  EXPECT_EQ(lost, (std::vector<std::string>{"task-bad", "task-early", "task-gone"}));
  EXPECT_TRUE(second.Running().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/work/.run/task-gone.task"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/work/.run/task-bad.task"));
  kill(*pid, SIGKILL);  // The agent's leftover sweep does this (main.cc).
}

TEST(TaskShimProtocolTest, HandshakeAndExitRecord) {
  auto ok = ParseShimHello("1 ok 123 456");
  ASSERT_TRUE(ok.has_value());
  EXPECT_TRUE(ok->ok);
  EXPECT_EQ(ok->leader, 123);
  EXPECT_EQ(ok->leader_start_time, 456u);
  auto error = ParseShimHello("1 error cannot run /x: No such file");
  ASSERT_TRUE(error.has_value());
  EXPECT_FALSE(error->ok);
  EXPECT_EQ(error->error, "cannot run /x: No such file");
  for (const char* bad : {"", "1", "2 ok 1 2", "1 ok", "1 ok 0 5", "1 ok x 5", "1 ok 5",
                          "1 maybe 1 2", "1 ok 1 2 3"}) {
    EXPECT_FALSE(ParseShimHello(bad).has_value()) << bad;
  }
  ShimExitRecord r{256 * 3, 1700000000000000};
  EXPECT_EQ(FormatShimExitRecord(r), "1 768 1700000000000000\n");
  auto back = ParseShimExitRecord(FormatShimExitRecord(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->wait_status, 768);
  EXPECT_EQ(back->unix_micros, 1700000000000000);
  for (const char* bad : {"", "1 768 17", "2 768 17\n", "1 768\n", "1 x 17\n", "1 7 8 9\n"}) {
    EXPECT_FALSE(ParseShimExitRecord(bad).has_value()) << bad;
  }
  ShimPidsRecord pids{10, 11, 12, 13};
  EXPECT_EQ(FormatShimPidsRecord(pids), "1 10 11 12 13\n");
  auto parsed = ParseShimPidsRecord("1 10 11 12 13\n");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(
      (std::vector<uint64_t>{static_cast<uint64_t>(parsed->shim), parsed->shim_start_time,
                             static_cast<uint64_t>(parsed->leader), parsed->leader_start_time}),
      (std::vector<uint64_t>{10, 11, 12, 13}));
  for (const char* bad : {"1 10 11 12 13", "1 0 11 12 13\n", "1 10 11 0 13\n", "2 10 11 12 13\n",
                          "1 10 11 12\n", "1 10 11 12 13 14\n"}) {
    EXPECT_FALSE(ParseShimPidsRecord(bad).has_value()) << bad;
  }
}

// --- executor.run_as: submitter ----------------------------------------------------------------

// A user and a group of its own, made with useradd and removed afterwards (root only).
class TestAccount {
 public:
  TestAccount() {
    const std::string suffix = std::to_string(getpid());
    name_ = "dgpu-ru-" + suffix;
    group_ = "dgpu-rg-" + suffix;
    ok_ = Run("groupadd " + group_) && Run("useradd -M -N -s /bin/sh -G " + group_ + " " + name_);
  }
  ~TestAccount() {
    Run("userdel " + name_);
    Run("groupdel " + group_);
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  std::string Id(const std::string& flag) const {
    auto r = common::RunCommand({"id", flag, name_}, 5000);
    if (!r.ok()) return "";
    std::string out = r->out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

 private:
  // /etc/passwd may be locked by a parallel test: a few tries.
  static bool Run(const std::string& command) {
    for (int i = 0; i < 20; ++i) {
      auto r = common::RunCommand({"/bin/sh", "-c", command + " 2>&1"}, 10000);
      if (r.ok() && r->wait_status == 0) return true;
      usleep(100000);
    }
    return false;
  }
  std::string name_, group_;
  bool ok_ = false;
};

class RunAsSubmitterTest : public ProcessExecutorTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "run_as submitter needs root";
    if (!common::FindExecutable("setpriv").ok() || !common::FindExecutable("useradd").ok()) {
      GTEST_SKIP() << "needs setpriv and useradd";
    }
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);  // The user walks into work_dir.
  }
  ProcessExecutorOptions Options(bool allow_root = false) {
    ProcessExecutorOptions o = ProcessExecutorTest::Options();
    o.run_as_submitter = true;
    o.allow_root = allow_root;
    return o;
  }
};

TEST_F(RunAsSubmitterTest, TaskRunsWithTheUsersIdsAndOwnsItsFiles) {
  TestAccount account;
  ASSERT_TRUE(account.ok());
  ProcessExecutor executor(Options());
  TaskLaunch launch = Launch("task-ru", "id -u; id -g; id -G; echo HOME=$HOME USER=$USER; touch f");
  launch.user = account.name();
  ASSERT_TRUE(executor.Start(launch).ok());
  auto exit = PollUntilExit(executor, "task-ru");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error << ReadFile(executor.LogPath("task-ru"));
  const std::string uid = account.Id("-u"), gid = account.Id("-g"), groups = account.Id("-G");
  ASSERT_FALSE(uid.empty());
  ASSERT_NE(uid, "0");
  EXPECT_EQ(ReadFile(executor.LogPath("task-ru")), uid + "\n" + gid + "\n" + groups +
                                                       "\nHOME=/home/" + account.name() +
                                                       " USER=" + account.name() + "\n");
  EXPECT_EQ(groups.find(' '), groups.rfind(' '));  // Its own group and the extra one.
  struct stat st {};
  ASSERT_EQ(stat(TaskFile("task-ru", "f").c_str(), &st), 0);
  EXPECT_EQ(std::to_string(st.st_uid), uid);
  ASSERT_EQ(stat(executor.LogPath("task-ru").c_str(), &st), 0);
  EXPECT_EQ(std::to_string(st.st_uid), uid);
  EXPECT_EQ(std::to_string(st.st_gid), gid);
  ASSERT_EQ(stat((dir_.path() + "/work/task-ru").c_str(), &st), 0);
  EXPECT_EQ(std::to_string(st.st_uid), uid);
}

TEST_F(RunAsSubmitterTest, UnknownUserNoUserAndRootFailTheTaskNamingWhy) {
  ProcessExecutor executor(Options());
  TaskLaunch nobody = Launch("task-unknown", "echo ran");
  nobody.user = "dgpu-no-such-user";
  TaskLaunch none = Launch("task-none", "echo ran");
  TaskLaunch root = Launch("task-root", "echo ran");
  root.user = "root";
  for (const TaskLaunch& l : {nobody, none, root}) ASSERT_TRUE(executor.Start(l).ok());
  // They fail at Start: one Poll returns all three.
  std::map<std::string, TaskExit> exits;
  for (const TaskExit& e : executor.Poll(testing::UnixMicros())) exits[e.task_id] = e;
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_EQ(exits["task-unknown"].error,
            "unknown_user: no user \"dgpu-no-such-user\" on this node");
  EXPECT_FALSE(exits["task-unknown"].success);
  EXPECT_EQ(exits["task-unknown"].exit_code, -1);
  EXPECT_THAT(exits["task-none"].error, StartsWith("unknown_user: the task names no user"));
  EXPECT_EQ(exits["task-root"].error,
            "root_not_allowed: user \"root\" has uid 0, and executor.allow_root is false on this "
            "node");
  EXPECT_EQ(ReadFile(executor.LogPath("task-unknown")),
            "dgpu: task did not start: unknown_user: no user \"dgpu-no-such-user\" on this node\n");

  // allow_root: root's task runs.
  ProcessExecutor rooted(Options(/*allow_root=*/true));
  TaskLaunch again = Launch("task-root2", "id -u");
  again.user = "root";
  ASSERT_TRUE(rooted.Start(again).ok());
  auto exit = PollUntilExit(rooted, "task-root2");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  EXPECT_EQ(ReadFile(rooted.LogPath("task-root2")), "0\n");
}

// Whether this process has `capability` in its effective set (/proc/self/status CapEff).
bool HasCapability(int capability) {
  std::istringstream status(ReadFile("/proc/self/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) == 0) {
      return ((std::stoull(line.substr(7), nullptr, 16) >> capability) & 1) != 0;
    }
  }
  return false;
}

// A task on GPU 0 that allocates 300 MiB under memory_mb 64, and the error it fails with.
TaskLaunch OutOfMemoryLaunch() {
  TaskLaunch oom = Launch("task-oom", "exec python3 -c 'b = b\"x\" * (300 << 20)'", {0});
  oom.memory_mb = 64;
  return oom;
}
constexpr const char* kOutOfMemoryError =
    "out_of_memory: killed at its memory limit of 64 MiB (memory_mb)";

// Tasks in cgroups of their own (executor.isolation), through kept shims (the parameter: idle
// shims kept) and through a shim of each task's own alike: an allocation above memory_mb fails
// out_of_memory, the other GPU's device file does not open, a stop kills what left the task's
// session, and each cgroup goes with its task.
class IsolatedExecutorTest : public ProcessExecutorTest,
                             public ::testing::WithParamInterface<size_t> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "cgroups and mknod need root";
    auto opened = TaskCgroups::Open("dgpu-pe-" + std::to_string(getpid()));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    cgroups_ = std::move(*opened);
    ASSERT_EQ(mknod(dir_.File("nvidia0").c_str(), S_IFCHR | 0666, makedev(195, 0)), 0);
    ASSERT_EQ(mknod(dir_.File("nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)), 0);
  }
  void TearDown() override {
    if (cgroups_ == nullptr) return;
    EXPECT_EQ(cgroups_->List(), std::vector<std::string>{});
    cgroups_->Close();
    for (const auto& h : cgroups_->hierarchies()) {
      EXPECT_FALSE(std::filesystem::exists(h.parent)) << h.parent;
    }
  }
  ProcessExecutorOptions IsolatedOptions() {
    ProcessExecutorOptions options = Options();
    options.cgroups = cgroups_;
    options.max_idle_shims = GetParam();
    options.gpu_devices = {{0, makedev(195, 0)}, {1, makedev(195, 1)}};
    return options;
  }
  std::shared_ptr<TaskCgroups> cgroups_;
};

TEST_P(IsolatedExecutorTest, LimitsApplyAndTheCgroupGoesWithTheTask) {
  ProcessExecutor executor(IsolatedOptions());
  const TaskLaunch oom = OutOfMemoryLaunch();
  ASSERT_TRUE(executor.Start(oom).ok());
  auto exit = PollUntilExit(executor, "task-oom", std::chrono::seconds(20));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, kOutOfMemoryError);
  EXPECT_EQ(exit->exit_code, 137);
  EXPECT_FALSE(cgroups_->Exists("task-oom"));
  EXPECT_THAT(ReadFile(executor.LogPath("task-oom")),
              ::testing::HasSubstr("dgpu: task failed: out_of_memory"));

  // Its own GPU reaches the (missing) driver, the other one is refused.
  const std::string probe =
      "exec python3 -c \"import errno, os\nfor i in (0, 1):\n try: os.open('" + dir_.path() +
      "/nvidia%d' % i, os.O_RDWR)\n except OSError as e: print(i, "
      "errno.errorcode[e.errno])\"";
  ASSERT_TRUE(executor.Start(Launch("task-dev", probe, {1})).ok());
  exit = PollUntilExit(executor, "task-dev", std::chrono::seconds(20));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  EXPECT_EQ(ReadFile(executor.LogPath("task-dev")), "0 EPERM\n1 ENXIO\n");

  // A process that left the task's session is found in its cgroup and ends with the task.
  const std::string pidfile = dir_.File("escaped.pid");
  ASSERT_TRUE(executor
                  .Start(Launch("task-stop", "setsid sh -c 'echo $$ > " + pidfile +
                                                 "; exec sleep 300' & exec sleep 300"))
                  .ok());
  std::optional<pid_t> escaped;
  WaitUntil([&] { return (escaped = ReadPidFile(pidfile)).has_value(); });
  ASSERT_TRUE(escaped.has_value());
  ASSERT_TRUE(executor.Stop("task-stop", StopOrder{}).ok());
  exit = PollUntilExit(executor, "task-stop", std::chrono::seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "cancelled");
  EXPECT_NE(kill(*escaped, 0), 0);
  EXPECT_FALSE(cgroups_->Exists("task-stop"));
}

// executor.cpu_binding: cpuset with a pool of one CPU: the first task is bound to it; the
// second, while the first holds it, gets a CPU quota instead and its log says why; the CPU is
// free again once the first has ended, and an executor started after a restart holds it for the
// task it adopts.
TEST_P(IsolatedExecutorTest, TasksAreBoundToCpusOfTheirOwnWhileEnoughAreFree) {
  const int cpu = AllowedCpus().back();
  ProcessExecutorOptions options = IsolatedOptions();
  options.cpu_pool = CpuPool({cpu}, {});
  const std::string allowed = "grep Cpus_allowed_list /proc/self/status | tr -d ' \\t' > cpus; ";
  std::optional<pid_t> pid;
  {
    ProcessExecutor executor(options);
    TaskLaunch bound = Launch("task-bound", allowed + WaitForGo(0));
    bound.cpus_milli = 500;
    ASSERT_TRUE(executor.Start(bound).ok());
    EXPECT_EQ(executor.CpuSet("task-bound"), std::vector<int>{cpu});
    TaskLaunch quota = Launch("task-quota", allowed);
    quota.cpus_milli = 1000;
    ASSERT_TRUE(executor.Start(quota).ok());
    EXPECT_EQ(executor.CpuSet("task-quota"), std::vector<int>{});
    auto exit = PollUntilExit(executor, "task-quota", std::chrono::seconds(10));
    ASSERT_TRUE(exit.has_value());
    EXPECT_TRUE(exit->success) << exit->error;
    EXPECT_EQ(ReadFile(executor.LogPath("task-quota")),
              "dgpu: 1 CPU(s) to bind the task to and 0 free: a CPU quota of 1 instead\n");
    // Not bound, it shares the CPUs no task is bound to: all but the bound one's (all of them
    // on a machine of one CPU).
    std::vector<int> shared = AllowedCpus();
    if (shared.size() > 1) shared.pop_back();
    EXPECT_EQ(ReadFile(TaskFile("task-quota", "cpus")),
              "Cpus_allowed_list:" + FormatCpuList(shared) + "\n");
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-bound", "pid"))).has_value(); }));
    EXPECT_EQ(ReadFile(TaskFile("task-bound", "cpus")),
              "Cpus_allowed_list:" + std::to_string(cpu) + "\n");
    executor.Detach();
  }
  ProcessExecutor second(options);
  std::vector<std::string> lost;
  ASSERT_EQ(second.Reattach(&lost).size(), 1u);
  EXPECT_EQ(second.CpuSet("task-bound"), std::vector<int>{cpu});
  TaskLaunch waiting = Launch("task-waiting", "true");
  waiting.cpus_milli = 1000;
  ASSERT_TRUE(second.Start(waiting).ok());
  EXPECT_EQ(second.CpuSet("task-waiting"), std::vector<int>{});  // The adopted task holds it.
  ASSERT_TRUE(PollUntilExit(second, "task-waiting", std::chrono::seconds(10)).has_value());
  testing::WriteFile(TaskFile("task-bound", "go"), "");
  auto exit = PollUntilExit(second, "task-bound", std::chrono::seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  TaskLaunch next = Launch("task-next", "true");
  next.cpus_milli = 1000;
  ASSERT_TRUE(second.Start(next).ok());
  EXPECT_EQ(second.CpuSet("task-next"), std::vector<int>{cpu});
  ASSERT_TRUE(PollUntilExit(second, "task-next", std::chrono::seconds(10)).has_value());
}

// The tasks not bound to CPUs of their own run on those no task is bound to, and follow them:
// off a bound task's CPUs before it starts, back on them once it has ended, and the same after
// an agent restart for the tasks it adopts.
TEST_P(IsolatedExecutorTest, TasksNotBoundRunOnTheCpusNoTaskIsBoundToAndFollowThem) {
  const std::vector<int> all = AllowedCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const int cpu = all.back();
  const std::vector<int> rest(all.begin(), all.end() - 1);
  ProcessExecutorOptions options = IsolatedOptions();
  options.cpu_pool = CpuPool({cpu}, {});
  auto allowed = [](pid_t pid) {
    std::istringstream status(ReadFile("/proc/" + std::to_string(pid) + "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        return std::string(line.substr(line.find_first_not_of(" \t", 18)));
      }
    }
    return std::string("?");
  };
  std::optional<pid_t> pid;
  {
    ProcessExecutor executor(options);
    ASSERT_TRUE(executor.Start(Launch("task-shared", WaitForGo(0), {0})).ok());
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-shared", "pid"))).has_value(); }));
    EXPECT_EQ(executor.CpuSet("task-shared"), std::vector<int>{});
    EXPECT_EQ(allowed(*pid), FormatCpuList(all));
    TaskLaunch bound = Launch("task-bound", WaitForGo(0), {1});
    bound.cpus_milli = 1000;
    ASSERT_TRUE(executor.Start(bound).ok());
    EXPECT_EQ(executor.CpuSet("task-bound"), std::vector<int>{cpu});
    EXPECT_EQ(allowed(*pid), FormatCpuList(rest));
    executor.Detach();
  }
  ProcessExecutor second(options);
  std::vector<std::string> lost;
  ASSERT_EQ(second.Reattach(&lost).size(), 2u);
  EXPECT_EQ(allowed(*pid), FormatCpuList(rest));
  testing::WriteFile(TaskFile("task-bound", "go"), "");
  auto exit = PollUntilExit(second, "task-bound", std::chrono::seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  EXPECT_EQ(allowed(*pid), FormatCpuList(all));
  testing::WriteFile(TaskFile("task-shared", "go"), "");
  exit = PollUntilExit(second, "task-shared", std::chrono::seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
}

// Slots: cgroup v1 and kept shims.
class SlotExecutorTest : public IsolatedExecutorTest {
 protected:
  void SetUp() override {
    IsolatedExecutorTest::SetUp();
    if (cgroups_ != nullptr && !cgroups_->slots()) GTEST_SKIP() << "slots are cgroup v1's";
  }
};

// cgroup v1 with kept shims: a task runs in a slot, cgroups kept from task to task with the
// kept shim living in them. The next task gets the same slot with its own limits (devices,
// memory, pids) and usage counted from zero; the shim stays out of the out-of-memory killer's
// reach and survives the kill of a stopped task; an earlier task's out-of-memory kill is not
// the next one's.
TEST_P(SlotExecutorTest, ASlotIsKeptFromTaskToTaskWithEachTasksOwnLimitsAndUsage) {
  ProcessExecutorOptions options = IsolatedOptions();
  options.max_pids_per_task = 20;
  ProcessExecutor executor(options);
  const std::string slot = "slot-0";
  auto memory_dir = [&] {
    for (const auto& h : cgroups_->hierarchies()) {
      if (std::find(h.controllers.begin(), h.controllers.end(), "memory") != h.controllers.end()) {
        return h.parent + "/" + slot;
      }
    }
    return std::string();
  };
  auto run = [&](const TaskLaunch& launch) {
    EXPECT_TRUE(executor.Start(launch).ok());
    auto exit = PollUntilExit(executor, launch.task_id, std::chrono::seconds(20));
    EXPECT_TRUE(exit.has_value());
    EXPECT_EQ(cgroups_->List(), std::vector<std::string>{slot});
    return exit.value_or(TaskExit{});
  };
  // Where it runs, its and its shim's oom_score_adj, the GPU device files it may open, and how
  // many processes it may start: 20 in all (the shell and python are two of them).
  const std::string probe =
      "grep -c " + slot +
      " /proc/self/cgroup; cat /proc/self/oom_score_adj /proc/$PPID/"
      "oom_score_adj; python3 -c \"import errno, os\nfor i in (0, 1):\n try: os.open('" +
      dir_.path() +
      "/nvidia%d' % i, os.O_RDWR)\n except OSError as e: print(i, errno.errorcode[e.errno])\"; "
      "python3 -c \"import os, time\nkids = []\ntry:\n while len(kids) < 30:\n  p = "
      "os.fork()\n  if p == 0:\n   time.sleep(30)\n   os._exit(0)\n  kids.append(p)\nexcept "
      "OSError: pass\nprint('started', len(kids))\nfor p in kids: os.kill(p, 9); "
      "os.waitpid(p, 0)\"";
  TaskLaunch first = Launch("task-a", probe + "; python3 -c 'b = b\"x\" * (40 << 20)'", {0});
  first.memory_mb = 64;
  TaskExit exit = run(first);
  EXPECT_TRUE(exit.success) << exit.error;
  const std::string hierarchies = std::to_string(cgroups_->hierarchies().size());
  // Lowering it takes CAP_SYS_RESOURCE, which root may lack in a container.
  const std::string shim_adj = HasCapability(CAP_SYS_RESOURCE) ? "-1000" : "0";
  EXPECT_EQ(ReadFile(executor.LogPath("task-a")),
            hierarchies + "\n0\n" + shim_adj + "\n0 ENXIO\n1 EPERM\nstarted 18\n");
  ASSERT_TRUE(exit.usage.has_value());
  EXPECT_GT(exit.usage->max_memory_bytes, int64_t{40} << 20);
  EXPECT_EQ(ReadFile(memory_dir() + "/memory.limit_in_bytes"), std::to_string(64 << 20) + "\n");

  // The other GPU, another memory limit: the slot follows, and counts from zero.
  TaskLaunch second = Launch("task-b", probe, {1});
  second.memory_mb = 128;
  exit = run(second);
  EXPECT_TRUE(exit.success) << exit.error;
  EXPECT_EQ(ReadFile(executor.LogPath("task-b")),
            hierarchies + "\n0\n" + shim_adj + "\n0 EPERM\n1 ENXIO\nstarted 18\n");
  ASSERT_TRUE(exit.usage.has_value());
  EXPECT_LT(exit.usage->max_memory_bytes, int64_t{40} << 20);
  EXPECT_EQ(ReadFile(memory_dir() + "/memory.limit_in_bytes"), std::to_string(128 << 20) + "\n");

  // Out of memory in the slot; the shim lives on, and the next task's failure is its own.
  const TaskLaunch oom = OutOfMemoryLaunch();
  exit = run(oom);
  EXPECT_EQ(exit.error, kOutOfMemoryError);
  TaskLaunch failing = Launch("task-fail", "exit 3", {0});
  failing.memory_mb = 64;
  exit = run(failing);
  EXPECT_EQ(exit.exit_code, 3);
  EXPECT_EQ(exit.error, "");

  // A stop kills everything in the slot but the shim, which takes the next task.
  ASSERT_TRUE(executor.Start(Launch("task-stop", "sleep 300 & exec sleep 300", {0})).ok());
  ASSERT_TRUE(WaitUntil([&] { return cgroups_->Pids(slot).size() == 3; }));
  ASSERT_TRUE(executor.Stop("task-stop", StopOrder{}).ok());
  auto stopped = PollUntilExit(executor, "task-stop", std::chrono::seconds(10));
  ASSERT_TRUE(stopped.has_value());
  EXPECT_EQ(stopped->error, "cancelled");
  EXPECT_EQ(cgroups_->Pids(slot).size(), 1u);
  exit = run(Launch("task-after", "grep -c " + slot + " /proc/self/cgroup", {0}));
  EXPECT_TRUE(exit.success) << exit.error;
  EXPECT_EQ(ReadFile(executor.LogPath("task-after")), hierarchies + "\n");
  // Without memory_mb: no limit again.
  EXPECT_GT(std::stoll(ReadFile(memory_dir() + "/memory.limit_in_bytes")), int64_t{1} << 50);
}

// After a restart, a task in a slot is adopted in it: an earlier task whose records were still
// there names the same slot, and its end kills nothing of the task that runs there now; the
// slot's out-of-memory kill before the task (in its run record) is not the task's.
TEST_P(SlotExecutorTest, AnAdoptedTaskInASlotKeepsItAndAnEarlierTaskOfTheSlotLeavesItAlone) {
  const std::string run_dir = dir_.path() + "/work/.run";
  std::optional<pid_t> pid;
  {
    ProcessExecutor first(IsolatedOptions());
    const TaskLaunch oom = OutOfMemoryLaunch();
    ASSERT_TRUE(first.Start(oom).ok());
    auto exit = PollUntilExit(first, "task-oom", std::chrono::seconds(20));
    ASSERT_TRUE(exit.has_value());
    EXPECT_EQ(exit->error, kOutOfMemoryError);
    ASSERT_TRUE(first.Start(Launch("task-s1", "echo one", {0})).ok());
    ASSERT_TRUE(PollUntilExit(first, "task-s1").has_value());
    ASSERT_TRUE(first.Start(Launch("task-s2", WaitForGo(3), {0})).ok());
    ASSERT_EQ(ShimOf(run_dir, "task-s2"), ShimOf(run_dir, "task-s1"));
    ASSERT_TRUE(
        WaitUntil([&] { return (pid = ReadPidFile(TaskFile("task-s2", "pid"))).has_value(); }));
    DetachLeavingRecordsOf(first, run_dir, "task-s1", dir_.path() + "/saved");
  }
  EXPECT_EQ(cgroups_->List(), std::vector<std::string>{"slot-0"});
  ProcessExecutor second(IsolatedOptions());
  std::vector<std::string> lost;
  ASSERT_EQ(second.Reattach(&lost).size(), 2u);
  EXPECT_TRUE(lost.empty());
  auto exit = PollUntilExit(second, "task-s1");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(second.Poll(testing::UnixMicros()).empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(kill(*pid, 0), 0);
  EXPECT_EQ(cgroups_->List(), std::vector<std::string>{"slot-0"});
  testing::WriteFile(TaskFile("task-s2", "go"), "");
  exit = PollUntilExit(second, "task-s2");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->error, "");
  // The slot goes with its earlier agent process's shim; the next task gets one of this one's
  // (the name is free again).
  EXPECT_TRUE(WaitUntil([&] {
    second.Poll(testing::UnixMicros());
    return cgroups_->List().empty();
  }));
  ASSERT_TRUE(second.Start(Launch("task-next", "true", {0})).ok());
  ASSERT_TRUE(PollUntilExit(second, "task-next").has_value());
  EXPECT_EQ(cgroups_->List().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Shims, SlotExecutorTest, ::testing::Values(size_t{16}),
                         [](const auto&) { return std::string("KeptShims"); });

INSTANTIATE_TEST_SUITE_P(Shims, IsolatedExecutorTest, ::testing::Values(size_t{0}, size_t{16}),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("OwnShim")
                                                  : std::string("KeptShims");
                         });

}  // namespace
}  // namespace dgpu::agent
