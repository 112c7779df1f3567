#include "agent/docker_executor.h"

#include <fmt/format.h>

#include <utility>

#include "agent/process_executor.h"
#include "agent/run_as.h"
#include "common/task_env.h"

namespace dgpu::agent {

std::string DockerContainerName(const std::string& task_id) { return "dgpu-" + task_id; }

std::vector<std::pair<std::string, std::string>> ContainerTaskEnv(const TaskLaunch& launch) {
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [key, value] : launch.env) {
    if (!common::IsReservedTaskEnvName(key)) env.emplace_back(key, value);
  }
  std::vector<int> container_ordinals;
  for (size_t i = 0; i < launch.gpu_indices.size(); ++i) {
    container_ordinals.push_back(static_cast<int>(i));
  }
  env.emplace_back(common::kEnvCudaVisibleDevices, JoinGpuIndices(container_ordinals));
  env.emplace_back(common::kEnvCudaDeviceOrder, "PCI_BUS_ID");
  env.emplace_back(common::kEnvTaskId, launch.task_id);
  env.emplace_back(common::kEnvGpuIds, JoinGpuIndices(launch.gpu_indices));
  AddArrayEnv(launch, &env);
  // The hostfile is written on the host, outside the container: not named there.
  AddGangEnv(launch, "", &env);
  return env;
}

namespace {

// The launch without CPUs and memory (executor.isolation: none).
TaskLaunch WithoutLimits(const TaskLaunch& launch) {
  TaskLaunch copy = launch;
  copy.cpus_milli = 0;
  copy.memory_mb = 0;
  return copy;
}

}  // namespace

StatusOr<std::vector<std::string>> BuildDockerRunArgv(
    const TaskLaunch& launch, const std::string& default_image, const std::string& docker_binary,
    int64_t pids_limit, const std::vector<int>& cpus, const std::vector<int>& shared_cpus) {
  Status valid = ValidateLaunch(launch);
  if (!valid.ok()) return valid;
  const std::string& image = launch.image.empty() ? default_image : launch.image;
  if (image.empty()) return InvalidArgument("image is empty and no default image is configured");
  std::vector<std::string> argv = {docker_binary, "run", "--rm", "--name",
                                   DockerContainerName(launch.task_id)};
  if (!launch.gpu_indices.empty()) {
    // Docker parses the value as CSV: the quotes keep "device=0,1" one field.
    argv.push_back("--gpus");
    argv.push_back("\"device=" + JoinGpuIndices(launch.gpu_indices) + "\"");
  }
  if (launch.memory_mb > 0) {
    const std::string memory = std::to_string(launch.memory_mb) + "m";
    argv.insert(argv.end(), {"--memory", memory, "--memory-swap", memory});
  }
  if (!cpus.empty()) {
    argv.insert(argv.end(), {"--cpuset-cpus", FormatCpuList(cpus)});
  } else {
    if (launch.cpus_milli > 0) {
      argv.insert(argv.end(), {"--cpus", fmt::format("{}", core::CpusOfMilli(launch.cpus_milli))});
    }
    if (!shared_cpus.empty()) {
      argv.insert(argv.end(), {"--cpuset-cpus", FormatCpuList(shared_cpus)});
    }
  }
  if (pids_limit > 0) argv.insert(argv.end(), {"--pids-limit", std::to_string(pids_limit)});
  for (const auto& [key, value] : ContainerTaskEnv(launch)) {
    argv.push_back("-e");
    argv.push_back(key + "=" + value);
  }
  argv.push_back(image);
  argv.push_back("sh");
  argv.push_back("-c");
  argv.push_back(launch.command);
  return argv;
}

std::vector<std::string> BuildDockerStopArgv(const std::string& task_id, int64_t grace_seconds,
                                             const std::string& docker_binary) {
  return {docker_binary, "stop", "-t", std::to_string(grace_seconds), DockerContainerName(task_id)};
}

DockerExecutor::DockerExecutor(DockerExecutorOptions options)
    : SupervisedExecutor(SupervisorOptions{
          options.work_dir, options.kill_grace, options.child_subreaper,
          std::chrono::milliseconds(1000), options.clock, options.max_log_bytes, options.shim,
          std::chrono::milliseconds(10000), options.run_dir, options.max_idle_shims, nullptr,
          options.cpu_pool, options.gpu_local_cpus}),
      options_(std::move(options)) {}

Status DockerExecutor::Start(const TaskLaunch& launch) {
  StatusOr<std::vector<std::string>> argv =
      BuildDockerRunArgv(options_.limits ? launch : WithoutLimits(launch), options_.default_image,
                         options_.docker_binary, options_.limits ? options_.max_pids_per_task : 0);
  if (!argv.ok()) return argv.status();
  LaunchPlan plan;
  if (options_.limits && options_.cpu_pool.has_value()) {
    // Bound to CPUs of its own, or else on those no task is bound to, moved with docker update
    // as they change.
    std::vector<int> shared;
    if (!supervisor_.BindCpus(launch, &plan)) {
      shared = supervisor_.SharedCpus();
      plan.shares_cpus = true;
    }
    argv = BuildDockerRunArgv(launch, options_.default_image, options_.docker_binary,
                              options_.max_pids_per_task, plan.cpus, shared);
  }
  plan.argv = std::move(*argv);
  if (options_.run_as_submitter) {
    StatusOr<RunAsUser> user = LookUpRunAsUser(launch.user, options_.allow_root);
    if (!user.ok()) {
      plan.refused = user.status().message();
    } else {
      // After "run": docker run --user U:G --group-add G1 ... (the rest as built).
      std::vector<std::string> ids = {"--user",
                                      std::to_string(user->uid) + ":" + std::to_string(user->gid)};
      for (gid_t g : user->groups) {
        if (g == user->gid) continue;
        ids.push_back("--group-add");
        ids.push_back(std::to_string(g));
      }
      plan.argv.insert(plan.argv.begin() + 2, ids.begin(), ids.end());
      plan.owner = std::make_pair(user->uid, user->gid);
    }
  }
  std::vector<std::pair<std::string, std::string>> client_env;
  if (!options_.socket.empty()) client_env.emplace_back("DOCKER_HOST", "unix://" + options_.socket);
  plan.env = MergeEnvironment(CurrentEnvironment(), client_env);
  SetStopCommands(launch, &plan);
  return supervisor_.Start(launch, plan);
}

void DockerExecutor::SetStopCommands(const TaskLaunch& launch, LaunchPlan* plan) const {
  std::vector<std::pair<std::string, std::string>> client_env;
  if (!options_.socket.empty()) client_env.emplace_back("DOCKER_HOST", "unix://" + options_.socket);
  plan->helper_env = MergeEnvironment(CurrentEnvironment(), client_env);
  plan->stop_argv = [task_id = launch.task_id, docker = options_.docker_binary](int64_t grace) {
    return BuildDockerStopArgv(task_id, grace, docker);
  };
  plan->kill_argv = {options_.docker_binary, "kill", DockerContainerName(launch.task_id)};
  if (options_.limits && options_.cpu_pool.has_value()) {
    plan->set_cpus_argv = [task_id = launch.task_id,
                           docker = options_.docker_binary](const std::vector<int>& cpus) {
      return std::vector<std::string>{docker, "update", "--cpuset-cpus", FormatCpuList(cpus),
                                      DockerContainerName(task_id)};
    };
  }
}

LaunchPlan DockerExecutor::AdoptionPlan(const TaskLaunch& launch) const {
  LaunchPlan plan;
  SetStopCommands(launch, &plan);
  return plan;
}

}  // namespace dgpu::agent
