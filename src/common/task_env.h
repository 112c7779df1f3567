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

// Every variable the agent sets for a task.
inline constexpr std::array<std::string_view, 5> kTaskEnvSetByDgpu = {
    kEnvCudaVisibleDevices, kEnvNvidiaVisibleDevices, kEnvCudaDeviceOrder, kEnvTaskId, kEnvGpuIds};

// dgpu's own variables start so; all of them are reserved, including names added later.
inline constexpr std::string_view kDgpuEnvPrefix = "DGPU_";

// True for a name a task's env may not give: one of kTaskEnvSetByDgpu or any DGPU_ name.
bool IsReservedTaskEnvName(std::string_view name);

}  // namespace dgpu::common
