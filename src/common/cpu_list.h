// CPU lists in the kernel's format ("0-3,8,10-11": cpuset.cpus, local_cpulist,
// Cpus_allowed_list), as the agent binds tasks to CPUs and dgpuctl shows them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dgpu::common {

// The list to sorted CPU ids; nullopt when malformed. "" and "\n" are the empty list.
std::optional<std::vector<int>> ParseCpuList(std::string_view text);
// Sorted CPU ids to the list format, ranges folded: {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace dgpu::common
