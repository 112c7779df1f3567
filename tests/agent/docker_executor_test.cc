#include "agent/docker_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <string_view>

#include "common/task_env.h"
#include "test_util.h"

namespace dgpu::agent {
namespace {

using common::FormatCpuList;
using testing::PollUntilExit;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;

TaskLaunch Launch(std::string id, std::string command, std::vector<int> gpus) {
  TaskLaunch launch;
  launch.task_id = std::move(id);
  launch.command = std::move(command);
  launch.gpu_indices = std::move(gpus);
  return launch;
}

TEST(BuildDockerRunArgvTest, ExactArgv) {
  TaskLaunch launch = Launch("task-42", "python train.py --epochs 3", {1, 3});
  launch.env = {{"FOO", "bar"}, {"CUDA_VISIBLE_DEVICES", "9"}, {"EMPTY", ""}};
  auto argv = BuildDockerRunArgv(launch, "nvidia/cuda:12.0-runtime-ubuntu22.04");
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  EXPECT_EQ(*argv, (std::vector<std::string>{"docker",
                                             "run",
                                             "--rm",
                                             "--name",
                                             "dgpu-task-42",
                                             "--gpus",
                                             "\"device=1,3\"",
                                             "-e",
                                             "FOO=bar",
                                             "-e",
                                             "EMPTY=",
                                             "-e",
                                             "CUDA_VISIBLE_DEVICES=0,1",
                                             "-e",
                                             "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                                             "-e",
                                             "DGPU_TASK_ID=task-42",
                                             "-e",
                                             "DGPU_GPU_IDS=1,3",
                                             "nvidia/cuda:12.0-runtime-ubuntu22.04",
                                             "sh",
                                             "-c",
                                             "python train.py --epochs 3"}));
}

// Every name of the one reserved list reaches the container with dgpu's value: as `-e` or, for
// NVIDIA_VISIBLE_DEVICES, through docker's --gpus. The task's reserved names are dropped.
TEST(BuildDockerRunArgvTest, TheTasksLimits) {
  TaskLaunch launch = Launch("task-7", "true", {0});
  launch.cpus_milli = 1500;
  launch.memory_mb = 16384;
  auto argv = BuildDockerRunArgv(launch, "img:1", "docker", 2048);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  const std::vector<std::string> head(argv->begin(), argv->begin() + 15);
  EXPECT_EQ(head,
            (std::vector<std::string>{"docker", "run", "--rm", "--name", "dgpu-task-7", "--gpus",
                                      "\"device=0\"", "--memory", "16384m", "--memory-swap",
                                      "16384m", "--cpus", "1.5", "--pids-limit", "2048"}));
  launch.cpus_milli = 100500;
  launch.memory_mb = 0;
  argv = BuildDockerRunArgv(launch, "img:1");
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(std::vector<std::string>(argv->begin() + 7, argv->begin() + 10),
            (std::vector<std::string>{"--cpus", "100.5", "-e"}));
}

TEST(BuildDockerRunArgvTest, SetsEveryReservedNameOverTheTasksEnv) {
  TaskLaunch launch = Launch("task-7", "true", {2});
  for (std::string_view name : common::kTaskEnvSetByDgpu) {
    launch.env.emplace_back(name, "spoofed");
  }
  launch.env.emplace_back("DGPU_OTHER", "spoofed");
  auto argv = BuildDockerRunArgv(launch, "img:1");
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  const std::map<std::string_view, std::string> expected = {
      {common::kEnvCudaVisibleDevices, "-e CUDA_VISIBLE_DEVICES=0"},
      {common::kEnvNvidiaVisibleDevices, "--gpus \"device=2\""},
      {common::kEnvCudaDeviceOrder, "-e CUDA_DEVICE_ORDER=PCI_BUS_ID"},
      {common::kEnvTaskId, "-e DGPU_TASK_ID=task-7"},
      {common::kEnvGpuIds, "-e DGPU_GPU_IDS=2"}};
  std::string joined;
  for (const std::string& word : *argv) joined += word + " ";
  for (std::string_view name : common::kTaskEnvSetByDgpu) {
    ASSERT_EQ(expected.count(name), 1u) << name << " has no expected setting";
    EXPECT_NE(joined.find(expected.at(name) + " "), std::string::npos) << name << ": " << joined;
  }
  EXPECT_EQ(joined.find("spoofed"), std::string::npos) << joined;
}

TEST(BuildDockerRunArgvTest, TaskImageBinaryAndNoGpus) {
  TaskLaunch launch = Launch("t1", "true", {});
  launch.image = "alpine:3.19";
  auto argv = BuildDockerRunArgv(launch, "ignored:latest", "/opt/bin/docker");
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(*argv,
            (std::vector<std::string>{"/opt/bin/docker", "run", "--rm", "--name", "dgpu-t1", "-e",
                                      "CUDA_VISIBLE_DEVICES=", "-e", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                                      "-e", "DGPU_TASK_ID=t1", "-e", "DGPU_GPU_IDS=", "alpine:3.19",
                                      "sh", "-c", "true"}));
}

TEST(BuildDockerRunArgvTest, Errors) {
  EXPECT_EQ(BuildDockerRunArgv(Launch("t1", "true", {0}), "").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildDockerRunArgv(Launch("bad id", "true", {0}), "img").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(BuildDockerStopArgvTest, ExactArgv) {
  EXPECT_EQ(BuildDockerStopArgv("task-42", 30),
            (std::vector<std::string>{"docker", "stop", "-t", "30", "dgpu-task-42"}));
  EXPECT_EQ(BuildDockerStopArgv("t1", 0, "/opt/bin/docker"),
            (std::vector<std::string>{"/opt/bin/docker", "stop", "-t", "0", "dgpu-t1"}));
}

// A `docker` stub first on PATH: it writes its arguments (one per line) to <stub dir>/<cmd>.argv.
// `run` blocks until `stop` has run when DGPU_DOCKER_STUB_BLOCK is set (or until the file
// <stub dir>/end-<container name> exists, then exits 0).
class DockerExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = getenv("PATH");
    saved_path_ = path != nullptr ? path : "";
    stub_dir_ = dir_.path() + "/bin";
    std::filesystem::create_directories(stub_dir_);
    WriteFile(stub_dir_ + "/docker",
              "#!/bin/sh\n"
              "cmd=\"$1\"\n"
              "if [ \"$cmd\" = run ]; then echo \"container says hi\"; fi\n"
              "printf '%s\\n' \"$(basename \"$0\")\" \"$@\" > \"$DGPU_DOCKER_STUB_DIR/$cmd.argv\"\n"
              "case \"$cmd\" in\n"
              "  run)\n"
              "    name=; prev=; for a; do [ \"$prev\" = --name ] && name=$a; prev=$a; done\n"
              "    if [ -n \"${DGPU_DOCKER_STUB_BLOCK:-}\" ]; then\n"
              "      while [ ! -e \"$DGPU_DOCKER_STUB_DIR/stopped\" ]; do\n"
              "        [ -e \"$DGPU_DOCKER_STUB_DIR/end-$name\" ] && exit 0\n"
              "        sleep 0.02\n"
              "      done\n"
              "      exit 143\n"
              "    fi\n"
              "    exit 0 ;;\n"
              "  stop) touch \"$DGPU_DOCKER_STUB_DIR/stopped\"; for last; do :; done; "
              "echo \"$last\" ;;\n"
              "esac\n",
              true);
    setenv("PATH", (stub_dir_ + ":" + saved_path_).c_str(), 1);
    setenv("DGPU_DOCKER_STUB_DIR", stub_dir_.c_str(), 1);
    unsetenv("DGPU_DOCKER_STUB_BLOCK");
  }
  void TearDown() override {
    setenv("PATH", saved_path_.c_str(), 1);
    unsetenv("DGPU_DOCKER_STUB_DIR");
    unsetenv("DGPU_DOCKER_STUB_BLOCK");
  }
  DockerExecutorOptions Options() {
    DockerExecutorOptions options;
    options.work_dir = dir_.path() + "/work";
    options.kill_grace = std::chrono::milliseconds(2000);
    options.default_image = "nvidia/cuda:12.0-runtime-ubuntu22.04";
    options.shim = DGPU_TASK_SHIM_PATH;
    return options;
  }

  TempDir dir_;
  std::string stub_dir_;
  std::string saved_path_;
};

TEST_F(DockerExecutorTest, RunsDockerRun) {
  DockerExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-7", "nvidia-smi -L", {0, 1})).ok());
  auto exit = PollUntilExit(executor, "task-7");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  // executor.max_pids_per_task's default as the container's pids limit.
  EXPECT_EQ(ReadFile(stub_dir_ + "/run.argv"),
            "docker\nrun\n--rm\n--name\ndgpu-task-7\n--gpus\n\"device=0,1\"\n"
            "--pids-limit\n32768\n-e\nCUDA_VISIBLE_DEVICES=0,1\n-e\nCUDA_DEVICE_ORDER=PCI_BUS_ID\n"
            "-e\nDGPU_TASK_ID=task-7\n-e\nDGPU_GPU_IDS=0,1\n"
            "nvidia/cuda:12.0-runtime-ubuntu22.04\nsh\n-c\nnvidia-smi -L\n");
  EXPECT_EQ(ReadFile(executor.LogPath("task-7")), "container says hi\n");
  EXPECT_EQ(executor.name(), "docker");
}

TEST_F(DockerExecutorTest, CancelRunsDockerStop) {
  setenv("DGPU_DOCKER_STUB_BLOCK", "1", 1);
  DockerExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-8", "sleep 100", {2})).ok());
  ASSERT_TRUE(WaitUntil([&] { return !ReadFile(stub_dir_ + "/run.argv").empty(); }));
  ASSERT_TRUE(executor.Stop("task-8", StopOrder{}).ok());
  auto exit = PollUntilExit(executor, "task-8");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "cancelled");
  EXPECT_EQ(exit->exit_code, 143);
  EXPECT_EQ(exit->signal, 0);
  // The configured grace (2 s) when the order names none.
  EXPECT_EQ(ReadFile(stub_dir_ + "/stop.argv"), "docker\nstop\n-t\n2\ndgpu-task-8\n");
  // docker stop's output goes to the task log too.
  EXPECT_TRUE(WaitUntil([&] {
    executor.Poll(testing::UnixMicros());
    return ReadFile(executor.LogPath("task-8")) ==
           "container says hi\ndgpu: stopping task (reason: cancel, grace 2 s)\ndgpu-task-8\n";
  })) << ReadFile(executor.LogPath("task-8"));
}

TEST_F(DockerExecutorTest, StopOrderGraceGoesToDockerStop) {
  setenv("DGPU_DOCKER_STUB_BLOCK", "1", 1);
  DockerExecutor executor(Options());
  ASSERT_TRUE(executor.Start(Launch("task-10", "sleep 100", {0})).ok());
  ASSERT_TRUE(WaitUntil([&] { return !ReadFile(stub_dir_ + "/run.argv").empty(); }));
  ASSERT_TRUE(
      executor.Stop("task-10", {core::StopReason::kPreempt, std::chrono::seconds(7), {}}).ok());
  auto exit = PollUntilExit(executor, "task-10");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->error, "preempted");
  EXPECT_EQ(ReadFile(stub_dir_ + "/stop.argv"), "docker\nstop\n-t\n7\ndgpu-task-10\n");
}

// executor.cpu_binding: cpuset: a container not bound to CPUs of its own runs on those no task
// is bound to (--cpuset-cpus at its run, beside its --cpus quota), and docker update moves it as
// a bound one starts and ends.
TEST_F(DockerExecutorTest, ContainersNotBoundShareTheCpusNoTaskIsBoundTo) {
  const std::vector<int> all = AllowedCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const int cpu = all.back();
  const std::vector<int> rest(all.begin(), all.end() - 1);
  setenv("DGPU_DOCKER_STUB_BLOCK", "1", 1);
  DockerExecutorOptions options = Options();
  options.cpu_pool = CpuPool({cpu}, {});
  DockerExecutor executor(options);
  TaskLaunch shared = Launch("task-shared", "sleep 100", {0});
  shared.cpus_milli = 2000;  // More than the pool has: a quota, and the shared CPUs.
  ASSERT_TRUE(executor.Start(shared).ok());
  ASSERT_TRUE(WaitUntil([&] {
    return ReadFile(stub_dir_ + "/run.argv").find("dgpu-task-shared") != std::string::npos;
  }));
  EXPECT_THAT(ReadFile(stub_dir_ + "/run.argv"),
              ::testing::HasSubstr("--cpus\n2\n--cpuset-cpus\n" + FormatCpuList(all) + "\n"));
  EXPECT_EQ(executor.CpuSet("task-shared"), std::vector<int>{});
  auto update_to = [&](const std::vector<int>& cpus) {
    return "docker\nupdate\n--cpuset-cpus\n" + FormatCpuList(cpus) + "\ndgpu-task-shared\n";
  };
  TaskLaunch bound = Launch("task-bound", "sleep 100", {1});
  bound.cpus_milli = 1000;
  ASSERT_TRUE(executor.Start(bound).ok());
  EXPECT_EQ(executor.CpuSet("task-bound"), std::vector<int>{cpu});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(stub_dir_ + "/update.argv") == update_to(rest); }))
      << ReadFile(stub_dir_ + "/update.argv");
  WriteFile(stub_dir_ + "/end-dgpu-task-bound", "");
  auto exit = PollUntilExit(executor, "task-bound");
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->error;
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(stub_dir_ + "/update.argv") == update_to(all); }))
      << ReadFile(stub_dir_ + "/update.argv");
  // docker update's output (the container's name) stays out of the task's log.
  EXPECT_EQ(ReadFile(executor.LogPath("task-shared")),
            "dgpu: 2 CPU(s) to bind the task to and 1 free: a CPU quota of 2 instead\n"
            "container says hi\n");
  ASSERT_TRUE(executor.Stop("task-shared", StopOrder{}).ok());
  ASSERT_TRUE(PollUntilExit(executor, "task-shared").has_value());
}

TEST_F(DockerExecutorTest, MissingDockerIsAStartFailure) {
  DockerExecutorOptions options = Options();
  options.docker_binary = "dgpu-no-such-docker";
  DockerExecutor executor(options);
  ASSERT_TRUE(executor.Start(Launch("task-9", "true", {0})).ok());
  auto exits = executor.Poll(testing::UnixMicros());
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].error, "start_failed: program 'dgpu-no-such-docker' not found on PATH");
}

}  // namespace
}  // namespace dgpu::agent
