#include "agent/executor.h"

#include <set>
#include <string>

#include "common/task_env.h"

namespace dgpu::agent {
namespace {

constexpr size_t kMaxTaskIdLength = 128;

bool IsTaskIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

}  // namespace

Status ValidateTaskId(std::string_view task_id) {
  const std::string id(task_id);
  if (id.empty() || id.size() > kMaxTaskIdLength) {
    return InvalidArgument("task_id must have 1 to 128 characters");
  }
  if (id[0] == '.' || id[0] == '-') {
    return InvalidArgument("task_id '" + id + "' must not start with '.' or '-'");
  }
  for (char c : id) {
    if (!IsTaskIdChar(c)) {
      return InvalidArgument("task_id '" + id + "' may only hold letters, digits, '_', '.', '-'");
    }
  }
  return OkStatus();
}

Status ValidateLaunch(const TaskLaunch& launch) {
  Status id = ValidateTaskId(launch.task_id);
  if (!id.ok()) return id;
  if (launch.command.empty()) return InvalidArgument("command is empty");
  if (launch.command.find('\0') != std::string::npos) {
    return InvalidArgument("command contains a NUL byte");
  }
  if (launch.timeout_seconds < 0) return InvalidArgument("timeout_seconds is negative");
  std::set<int> seen;
  for (int index : launch.gpu_indices) {
    if (index < 0)
      return InvalidArgument("gpu_indices holds negative index " + std::to_string(index));
    if (!seen.insert(index).second) {
      return InvalidArgument("gpu_indices holds index " + std::to_string(index) + " twice");
    }
  }
  for (const auto& [key, value] : launch.env) {
    if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos) {
      return InvalidArgument("env key '" + key + "' is empty or holds '=' or NUL");
    }
    if (value.find('\0') != std::string::npos) {
      return InvalidArgument("env value of '" + key + "' holds a NUL byte");
    }
  }
  return OkStatus();
}

std::string JoinGpuIndices(const std::vector<int>& indices) {
  std::string joined;
  for (int index : indices) {
    if (!joined.empty()) joined += ',';
    joined += std::to_string(index);
  }
  return joined;
}

std::vector<std::pair<std::string, std::string>> ReservedTaskEnv(const TaskLaunch& launch) {
  const std::string gpus = JoinGpuIndices(launch.gpu_indices);
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back(common::kEnvCudaVisibleDevices, gpus);
  env.emplace_back(common::kEnvCudaDeviceOrder, "PCI_BUS_ID");
  env.emplace_back(common::kEnvNvidiaVisibleDevices, gpus);
  env.emplace_back(common::kEnvTaskId, launch.task_id);
  env.emplace_back(common::kEnvGpuIds, gpus);
  AddArrayEnv(launch, &env);
  return env;
}

void AddArrayEnv(const TaskLaunch& launch, std::vector<std::pair<std::string, std::string>>* env) {
  if (launch.array_size <= 0) return;
  env->emplace_back(common::kEnvArrayIndex, std::to_string(launch.array_index));
  env->emplace_back(common::kEnvArraySize, std::to_string(launch.array_size));
}

void AddGangEnv(const TaskLaunch& launch, const std::string& hostfile,
                std::vector<std::pair<std::string, std::string>>* env) {
  if (!launch.gang.has_value()) return;
  const TaskLaunch::Gang& g = *launch.gang;
  const std::string rank = std::to_string(g.node_rank);
  const std::string nnodes = std::to_string(g.nnodes);
  const std::string port = std::to_string(g.master_port);
  env->emplace_back(common::kEnvNodeRank, rank);
  env->emplace_back(common::kEnvNnodes, nnodes);
  env->emplace_back(common::kEnvMasterAddr, g.master_addr);
  env->emplace_back(common::kEnvMasterPort, port);
  if (!hostfile.empty()) env->emplace_back(common::kEnvHostfile, hostfile);
  env->emplace_back("MASTER_ADDR", g.master_addr);
  env->emplace_back("MASTER_PORT", port);
  env->emplace_back("NNODES", nnodes);
  env->emplace_back("NODE_RANK", rank);
  env->emplace_back("WORLD_SIZE", std::to_string(g.nnodes * g.gpus_per_node));
}

std::string GangHostfile(const TaskLaunch::Gang& gang) {
  std::string text;
  for (const std::string& host : gang.hosts) {
    text += host + " slots=" + std::to_string(gang.gpus_per_node) + "\n";
  }
  return text;
}

std::string GangHostfilePath(const std::string& work_dir, const std::string& task_id) {
  return work_dir + "/" + task_id + "/hostfile";
}

std::string StopErrorOf(core::StopReason reason) {
  return std::string(
      core::StopError(reason == core::StopReason::kNone ? core::StopReason::kCancel : reason));
}

std::string StopLogLine(core::StopReason reason, std::chrono::milliseconds grace,
                        const std::string& preempted_by) {
  const core::StopReason shown =
      reason == core::StopReason::kNone ? core::StopReason::kCancel : reason;
  std::string seconds = std::to_string(grace.count() / 1000);
  if (int64_t millis = grace.count() % 1000; millis != 0) {
    std::string fraction = std::to_string(1000 + millis).substr(1);
    fraction.erase(fraction.find_last_not_of('0') + 1);
    seconds += "." + fraction;
  }
  return "dgpu: stopping task (reason: " + std::string(core::ToString(shown)) + ", grace " +
         seconds + " s" + (preempted_by.empty() ? "" : ", for " + preempted_by) + ")";
}

}  // namespace dgpu::agent
