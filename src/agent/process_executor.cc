#include "agent/process_executor.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "agent/run_as.h"
#include "common/task_env.h"

extern char** environ;

namespace dgpu::agent {

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  return env;
}

std::vector<std::string> MergeEnvironment(
    const std::vector<std::string>& base,
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> merged;
  std::unordered_map<std::string, size_t> position;
  auto put = [&](const std::string& key, const std::string& entry) {
    auto [it, inserted] = position.emplace(key, merged.size());
    if (inserted) {
      merged.push_back(entry);
    } else {
      merged[it->second] = entry;
    }
  };
  for (const auto& entry : base) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    put(entry.substr(0, eq), entry);
  }
  for (const auto& [key, value] : overrides) put(key, key + "=" + value);
  return merged;
}

ProcessExecutor::ProcessExecutor(ProcessExecutorOptions options)
    : SupervisedExecutor(SupervisorOptions{
          options.work_dir, options.kill_grace, options.child_subreaper,
          std::chrono::milliseconds(1000), options.clock, options.max_log_bytes, options.shim,
          std::chrono::milliseconds(10000), options.run_dir, options.max_idle_shims,
          options.cgroups.get(), options.cpu_pool, options.gpu_local_cpus}),
      options_(std::move(options)) {}

std::vector<std::string> ProcessExecutor::BuildEnvironment(const TaskLaunch& launch) const {
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const auto& [key, value] : launch.env) {
    if (!common::IsReservedTaskEnvName(key)) overrides.emplace_back(key, value);
  }
  for (auto& entry : ReservedTaskEnv(launch)) overrides.push_back(std::move(entry));
  AddGangEnv(launch, GangHostfilePath(options_.work_dir, launch.task_id), &overrides);
  return MergeEnvironment(options_.base_env.has_value() ? *options_.base_env : CurrentEnvironment(),
                          overrides);
}

Status ProcessExecutor::Start(const TaskLaunch& launch) {
  Status valid = ValidateLaunch(launch);
  if (!valid.ok()) return valid;
  LaunchPlan plan;
  plan.argv = {options_.shell, "-c", launch.command};
  plan.env = BuildEnvironment(launch);
  if (options_.run_as_submitter) {
    StatusOr<RunAsUser> user = LookUpRunAsUser(launch.user, options_.allow_root);
    if (!user.ok()) {
      plan.refused = user.status().message();
    } else {
      std::vector<std::string> argv = SetprivPrefix(*user, options_.setpriv);
      argv.insert(argv.end(), plan.argv.begin(), plan.argv.end());
      plan.argv = std::move(argv);
      plan.env = MergeEnvironment(
          plan.env, {{"HOME", user->home}, {"USER", user->name}, {"LOGNAME", user->name}});
      plan.owner = std::make_pair(user->uid, user->gid);
    }
  }
  if (options_.cgroups != nullptr) {
    plan.cgroup = CgroupLimits(launch);
    if (supervisor_.BindCpus(launch, &plan)) {
      plan.cgroup->cpus = plan.cpus;
      plan.cgroup->cpu_quota_milli = 0;
    } else if (options_.cpu_pool.has_value()) {
      // Not bound: it runs on the CPUs no task is bound to, and follows them.
      plan.cgroup->cpus = supervisor_.SharedCpus();
      plan.shares_cpus = true;
    }
  }
  return supervisor_.Start(launch, plan);
}

TaskCgroupLimits ProcessExecutor::CgroupLimits(const TaskLaunch& launch) const {
  TaskCgroupLimits limits;
  limits.memory_bytes = launch.memory_mb * (int64_t{1} << 20);
  limits.pids_max = options_.max_pids_per_task;
  if (options_.cpu_quota) limits.cpu_quota_milli = launch.cpus_milli;
  for (const auto& [index, device] : options_.gpu_devices) {
    if (std::find(launch.gpu_indices.begin(), launch.gpu_indices.end(), index) ==
        launch.gpu_indices.end()) {
      limits.denied_devices.push_back(device);
    }
  }
  return limits;
}

std::vector<TaskExit> ProcessExecutor::StopAll(std::chrono::milliseconds grace) {
  std::vector<TaskExit> exits = SupervisedExecutor::StopAll(grace);
  if (options_.cgroups != nullptr) options_.cgroups->Close();
  return exits;
}

}  // namespace dgpu::agent
