// The environment variables dgpu sets for every task it runs: GPU isolation and the task's own
// identity. One list, read by the REST API (a task's env may not give these names) and by the
// agent (which sets them over anything the task's env says).
#pragma once

#include <array>
#include <string_view>

namespace dgpu::common {

inline constexpr std::string_view kEnvCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
inline constexpr std::string_view kEnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES";
inline constexpr std::string_view kEnvCudaDeviceOrder = "CUDA_DEVICE_ORDER";
inline constexpr std::string_view kEnvTaskId = "DGPU_TASK_ID";
inline constexpr std::string_view kEnvGpuIds = "DGPU_GPU_IDS";
// Members of a job array only: the task's index in the array and the array's size.
inline constexpr std::string_view kEnvArrayIndex = "DGPU_ARRAY_INDEX";
inline constexpr std::string_view kEnvArraySize = "DGPU_ARRAY_SIZE";
// Members of a gang only: the member's rank, the member count, rank 0's address and the
// rendezvous port, and a file of one `host slots=<gpus>` line per member in rank order; then the
// same under the names torchrun reads (set over what the task's env says, for gangs only).
inline constexpr std::string_view kEnvNodeRank = "DGPU_NODE_RANK";
inline constexpr std::string_view kEnvNnodes = "DGPU_NNODES";
inline constexpr std::string_view kEnvMasterAddr = "DGPU_MASTER_ADDR";
inline constexpr std::string_view kEnvMasterPort = "DGPU_MASTER_PORT";
inline constexpr std::string_view kEnvHostfile = "DGPU_HOSTFILE";
inline constexpr std::array<std::string_view, 5> kTorchrunEnv = {
    "MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "WORLD_SIZE"};

// Every variable the agent sets for a task.
inline constexpr std::array<std::string_view, 5> kTaskEnvSetByDgpu = {
    kEnvCudaVisibleDevices, kEnvNvidiaVisibleDevices, kEnvCudaDeviceOrder, kEnvTaskId, kEnvGpuIds};

// dgpu's own variables start so; all of them are reserved, including names added later.
inline constexpr std::string_view kDgpuEnvPrefix = "DGPU_";

// True for a name a task's env may not give: one of kTaskEnvSetByDgpu or any DGPU_ name.
bool IsReservedTaskEnvName(std::string_view name);

}  // namespace dgpu::common
