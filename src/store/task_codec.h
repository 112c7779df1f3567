// The store's own JSON encoding of tasks and their parts.
//
// Used for the `env`, `allocation`, `node_selector` and `depends_on` columns of the database and
// for the store's JSON snapshot. This is the durable format, not the REST format: it is lossless
// (env keeps its order and any duplicate keys) and stable across releases. Decoding never throws;
// malformed input yields DataLoss naming the field.
//
// Strings that are not valid UTF-8 cannot be represented in JSON: their invalid bytes are
// replaced by U+FFFD when encoded (text columns of the database keep raw bytes).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "core/types.h"

namespace dgpu::store {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// env: [["KEY","VALUE"], ...] in the task's order.
nlohmann::json EnvToJson(const EnvList& env);
StatusOr<EnvList> EnvFromJson(const nlohmann::json& json, std::string_view name = "env");

// allocation: [{"node_id":"n1","gpu_indices":[0,1]}, ...].
nlohmann::json AllocationToJson(const core::Allocation& allocation);
StatusOr<core::Allocation> AllocationFromJson(const nlohmann::json& json);

// depends_on: [{"task":5,"condition":"afterok","state":"waiting"}, ...].
nlohmann::json DependenciesToJson(const core::Dependencies& deps);
StatusOr<core::Dependencies> DependenciesFromJson(const nlohmann::json& json);

// Every field of a task, with enums as their core names ("pending", "high", "cancel").
// "stop_reason" may be absent (a task written before it existed): it reads as no reason.
nlohmann::json TaskToJson(const core::Task& task);
StatusOr<core::Task> TaskFromJson(const nlohmann::json& json);

// Compact text, never throwing (invalid UTF-8 is replaced, see above).
std::string DumpJson(const nlohmann::json& json, int indent = -1);
// Parses text; DataLoss naming `what` on malformed input.
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what);

}  // namespace dgpu::store
