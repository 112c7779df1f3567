// EventRecorder: what the scheduler does with the core's events after each batch: counts them in
// the metrics and writes the life-cycle log lines (task_submitted, task_scheduled,
// task_finished, agent_registered, agent_offline, ...). One place for both, so that a handler
// never counts or logs a task's life on its own and nothing is counted twice.
//
// Runs on the owner thread (a BatchObserver); may read the core.
#pragma once

#include <vector>

#include "core/scheduler_core.h"
#include "scheduler/core_loop.h"
#include "scheduler/metrics.h"

namespace dgpu::scheduler {

class EventRecorder : public BatchObserver {
 public:
  explicit EventRecorder(Metrics* metrics) : metrics_(metrics) {}

  void OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>& decisions,
              const std::vector<core::Change>& changes, const std::vector<core::Event>& events,
              double pass_seconds, core::TimeMicros now) override;

  // One event: its metrics, then its log line.
  void Record(const core::SchedulerCore& core, const core::Event& e);

 private:
  Metrics* metrics_;
};

}  // namespace dgpu::scheduler
