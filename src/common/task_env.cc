#include "common/task_env.h"

#include <algorithm>

namespace dgpu::common {

bool IsReservedTaskEnvName(std::string_view name) {
  return name.starts_with(kDgpuEnvPrefix) ||
         std::find(kTaskEnvSetByDgpu.begin(), kTaskEnvSetByDgpu.end(), name) !=
             kTaskEnvSetByDgpu.end();
}

}  // namespace dgpu::common
