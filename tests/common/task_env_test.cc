#include "common/task_env.h"

#include <gtest/gtest.h>

#include <string>

namespace dgpu::common {
namespace {

TEST(TaskEnvTest, EveryNameDgpuSetsIsReserved) {
  for (std::string_view name : kTaskEnvSetByDgpu) {
    EXPECT_TRUE(IsReservedTaskEnvName(name)) << name;
  }
}

TEST(TaskEnvTest, EveryDgpuNameIsReserved) {
  for (const char* name : {"DGPU_", "DGPU_TASK_ID", "DGPU_FUTURE_NAME", "DGPU_it_marker"}) {
    EXPECT_TRUE(IsReservedTaskEnvName(name)) << name;
  }
}

TEST(TaskEnvTest, OtherNamesAreFree) {
  for (const char* name :
       {"", "DGPU", "dgpu_task_id", "XDGPU_A", "cuda_visible_devices", "CUDA_VISIBLE_DEVICES_X",
        "CUDA_HOME", "NVIDIA_DRIVER_CAPABILITIES", "PATH"}) {
    EXPECT_FALSE(IsReservedTaskEnvName(name)) << name;
  }
}

}  // namespace
}  // namespace dgpu::common
