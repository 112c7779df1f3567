// The human-readable JSON snapshot of the whole scheduler state (snapshot_dir/state.json).
#pragma once

#include <nlohmann/json.hpp>

#include "core/scheduler_core.h"

namespace dgpu::scheduler {

// Tasks in memory (pending, running, recently finished), nodes, GPUs and quotas.
nlohmann::json StateToJson(const core::SchedulerCore& core, uint64_t epoch, core::TimeMicros now);

}  // namespace dgpu::scheduler
