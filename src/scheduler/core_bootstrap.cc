#include "scheduler/core_bootstrap.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

namespace dgpu::scheduler {

core::CoreConfig CoreConfigOf(const common::SchedulerConfig& cfg, const store::StoreMeta& meta) {
  core::CoreConfig core_cfg;
  core_cfg.online_percent = meta.online_percent.value_or(cfg.quota.online_percent);
  core_cfg.max_attempts = cfg.scheduler.max_attempts;
  core_cfg.max_bypass = cfg.scheduler.max_bypass;
  core_cfg.gang_port_low = cfg.scheduler.gang_port_low;
  core_cfg.gang_port_high = cfg.scheduler.gang_port_high;
  core_cfg.topology_key = cfg.scheduler.topology_key;
  core_cfg.default_time_limit = cfg.scheduler.default_time_limit_seconds;
  core_cfg.kill_invalid_dependencies = cfg.scheduler.kill_invalid_dependencies;
  core_cfg.backfill = cfg.scheduler.backfill;
  core_cfg.backfill_depth = cfg.scheduler.backfill_depth;
  core_cfg.heartbeat_timeout = cfg.agent.heartbeat_timeout.count() * 1000;
  core_cfg.borrowing = cfg.quota.borrowing;
  core_cfg.fairshare_half_life = cfg.quota.fairshare_half_life.count() * 1000;
  core_cfg.preemption_grace_seconds = static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(cfg.preemption.grace_period).count());
  core_cfg.min_runtime = cfg.preemption.min_runtime.count() * 1000;
  for (const auto& [name, team] : cfg.quota.teams) {
    core_cfg.teams[name] = {team.online, team.batch, team.max_gpus, team.weight,
                            team.default_time_limit_seconds};
  }
  return core_cfg;
}

std::unique_ptr<core::SchedulerCore> NewCore(const common::SchedulerConfig& cfg,
                                             const store::StoreMeta& meta) {
  auto core = std::make_unique<core::SchedulerCore>(CoreConfigOf(cfg, meta));
  for (const core::TeamRecord& team : meta.teams) {
    // Stored records were checked when they were read.
    (void)core->RestoreTeam(team);
  }
  for (const core::NodeRecord& node : meta.nodes) (void)core->RestoreNodeMode(node);
  return core;
}

StatusOr<std::unique_ptr<core::SchedulerCore>> BuildCoreFromDatabase(
    store::Database* db, const common::SchedulerConfig& cfg, core::TimeMicros now,
    store::StoreMeta* meta) {
  // The tasks go from the database into the core one by one: no vector of them all.
  std::unique_ptr<core::SchedulerCore> core;
  store::StoreMeta state;
  // Parents of dependencies that are no longer in memory are read from the database.
  auto lookup = [db](core::TaskNumber first, core::TaskNumber last) {
    return db->TaskStates(first, last);
  };
  Status s = db->LoadEach(
      [&](core::Task&& t) {
        if (core == nullptr) {
          core = NewCore(cfg, state);
          core->SetStoredTaskLookup(lookup);
        }
        const core::TaskNumber id = t.id;
        if (Status r = core->Restore(std::move(t), now); !r.ok()) {
          return Internal("cannot restore " + core::FormatTaskId(id) + ": " + r.message());
        }
        return OkStatus();
      },
      &state);
  if (!s.ok()) return s;
  if (core == nullptr) {
    core = NewCore(cfg, state);
    core->SetStoredTaskLookup(lookup);
  }
  core->SetNextTaskNumber(state.next_task_number);
  core->TakeChanges();                 // Restoring changes nothing on disk.
  if (meta != nullptr) *meta = state;  // The meta values read with the tasks.
  return core;
}

}  // namespace dgpu::scheduler
