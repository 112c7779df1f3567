// The scheduling core's start-up: its configuration from the scheduler's, and the core built from
// what the database holds (the daemon's start and a standby's promotion).
#pragma once

#include <memory>

#include "base/status.h"
#include "common/config.h"
#include "core/scheduler_core.h"
#include "store/database.h"

namespace dgpu::scheduler {

// The core's configuration: the scheduler's, with what the database stored winning (the online
// share); NewCore also restores the stored teams.
core::CoreConfig CoreConfigOf(const common::SchedulerConfig& cfg, const store::StoreMeta& meta);
std::unique_ptr<core::SchedulerCore> NewCore(const common::SchedulerConfig& cfg,
                                             const store::StoreMeta& meta);

// Builds a core from what the database holds (start-up and promotion); `meta` (optional)
// receives the meta values of the same read.
StatusOr<std::unique_ptr<core::SchedulerCore>> BuildCoreFromDatabase(
    store::Database* db, const common::SchedulerConfig& cfg, core::TimeMicros now,
    store::StoreMeta* meta);

}  // namespace dgpu::scheduler
