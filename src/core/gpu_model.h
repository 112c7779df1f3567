// GPU model matching: which of the cluster's GPU models a task's wanted `gpu_model` selects.
// The one rule, used by the scheduling core and the simulator alike.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dgpu::core {

// The indices into `models` (in ascending order) that `wanted` selects:
//   - "" selects every model;
//   - else the models named `wanted`, ignoring ASCII case ("a100" selects "A100");
//   - else, when no model is named so, the models that contain `wanted`, ignoring ASCII case
//     ("V100" selects "Tesla V100-SXM2-32GB" and "Tesla V100-PCIE-16GB").
// Empty when nothing matches.
std::vector<int> MatchGpuModels(std::string_view wanted, std::span<const std::string> models);

}  // namespace dgpu::core
