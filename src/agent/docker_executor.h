// DockerExecutor: runs each task in a container through the docker CLI.
//
// Start() runs `docker run --rm --name dgpu-<task_id> --gpus "device=<indices>" -e K=V ...
// <image> sh -c <command>` as a child process (same machinery, log file and working directory as
// ProcessExecutor); the container's output reaches the log through the attached client. A stop
// order or a timeout runs `docker stop -t <grace seconds> dgpu-<task_id>`; when the grace period
// is over the client gets SIGKILL and `docker kill dgpu-<task_id>` runs. The exit code is the
// container's, as docker run reports it.
//
// Container environment: the task's env, then CUDA_VISIBLE_DEVICES=0,...,n-1,
// CUDA_DEVICE_ORDER=PCI_BUS_ID, DGPU_TASK_ID and DGPU_GPU_IDS=<host indices>. Inside the
// container --gpus exposes only the task's GPUs, renumbered from 0, so host indices in
// CUDA_VISIBLE_DEVICES would hide GPUs; NVIDIA_VISIBLE_DEVICES is set by docker from --gpus.
//
// Not thread-safe. Construction makes the agent a child subreaper unless disabled.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "agent/task_supervisor.h"

namespace dgpu::agent {

struct DockerExecutorOptions {
  std::string work_dir;
  std::string run_dir;  // executor.run_dir (task_supervisor.h); empty: <work_dir>/.run.
  // Shims kept for the next task (SupervisorOptions::max_idle_shims); 0: one per task.
  size_t max_idle_shims = 16;
  std::chrono::milliseconds kill_grace{10000};
  // executor.max_log_bytes: > 0: the task's shim cuts its log at this size (log_writer.h).
  int64_t max_log_bytes = 0;
  // The task shim (task_shim.h), run as `PROGRAM --task-shim 1 ...`: dgpu-task-shim, or the
  // agent binary itself.
  std::string shim = "/proc/self/exe";
  std::string docker_binary = "docker";  // Path, or a name looked up on PATH.
  std::string default_image = "nvidia/cuda:12.0-runtime-ubuntu22.04";
  // Docker daemon socket; when set, the docker CLI runs with DOCKER_HOST=unix://<socket>.
  std::string socket;
  bool child_subreaper = true;
  std::function<int64_t()> clock;  // Unix micros; default: system clock.
  // executor.run_as: submitter: the container runs with --user uid:gid and --group-add for the
  // submitter's groups on this node.
  bool run_as_submitter = false;
  bool allow_root = false;
  // executor.isolation other than none: the container gets the task's memory, CPUs and
  // executor.max_pids_per_task (0: no pids limit) as docker limits.
  bool limits = true;
  int64_t max_pids_per_task = 32768;
  // executor.cpu_binding: cpuset (with limits): the CPUs containers are bound to
  // (--cpuset-cpus; task_supervisor.h), and those local to each GPU.
  std::optional<CpuPool> cpu_pool;
  std::map<int, std::vector<int>> gpu_local_cpus;
};

// "dgpu-<task_id>".
std::string DockerContainerName(const std::string& task_id);

// Environment variables passed into the container with -e, in order (see the file comment).
std::vector<std::pair<std::string, std::string>> ContainerTaskEnv(const TaskLaunch& launch);

// The complete `docker run` argv (argv[0] = docker_binary). InvalidArgument for an invalid
// launch or when neither launch.image nor default_image is set. With no GPUs, --gpus is omitted.
// The task's limits, where it has them: --memory and --memory-swap (memory_mb, no swap beyond
// it), --cpuset-cpus (`cpus`, its own, not empty) or else --cpus (cpus_milli) and, when the
// container shares CPUs, --cpuset-cpus `shared_cpus`, and --pids-limit (`pids_limit` > 0).
StatusOr<std::vector<std::string>> BuildDockerRunArgv(const TaskLaunch& launch,
                                                      const std::string& default_image,
                                                      const std::string& docker_binary = "docker",
                                                      int64_t pids_limit = 0,
                                                      const std::vector<int>& cpus = {},
                                                      const std::vector<int>& shared_cpus = {});

// {docker_binary, "stop", "-t", "<grace_seconds>", "dgpu-<task_id>"}.
std::vector<std::string> BuildDockerStopArgv(const std::string& task_id, int64_t grace_seconds,
                                             const std::string& docker_binary = "docker");

class DockerExecutor final : public SupervisedExecutor {
 public:
  explicit DockerExecutor(DockerExecutorOptions options);

  Status Start(const TaskLaunch& launch) override;
  std::string name() const override { return "docker"; }

 protected:
  // docker stop and docker kill of the task's container.
  LaunchPlan AdoptionPlan(const TaskLaunch& launch) const override;

 private:
  // What stopping the task's container runs, in `plan`.
  void SetStopCommands(const TaskLaunch& launch, LaunchPlan* plan) const;
  DockerExecutorOptions options_;
};

}  // namespace dgpu::agent
