// EventRecorder: what the scheduler does with the core's events after each batch: counts them in
// the metrics and writes the life-cycle log lines (task_submitted, task_scheduled,
// task_finished, agent_registered, agent_offline, ...). One place for both, so that a handler
// never counts or logs a task's life on its own and nothing is counted twice.
//
// The per-task lines are limited to `task_lines_per_second` (scheduler.task_log_lines_per_second)
// so that thousands of submissions a second do not become thousands of log lines: past the limit
// in a second, lines are counted instead, and one line sums them up once the second is over:
//   event=task_lines_suppressed suppressed=11900 task_submitted=10000 task_scheduled=1900 ...
// The record of every task stays complete in the database and in the metrics. Node, quota and
// leadership lines are never limited.
//
// Runs on the owner thread (a BatchObserver); may read the core.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/scheduler_core.h"
#include "scheduler/core_loop.h"
#include "scheduler/metrics.h"

namespace dgpu::scheduler {

class EventRecorder : public BatchObserver {
 public:
  // `task_lines_per_second` 0: every per-task line is written.
  explicit EventRecorder(Metrics* metrics, int task_lines_per_second = 0)
      : metrics_(metrics), task_lines_per_second_(task_lines_per_second) {}

  void OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>& decisions,
              const std::vector<core::Change>& changes, const std::vector<core::Event>& events,
              double pass_seconds, core::TimeMicros now) override;

  // One event at `now`: its metrics, then its log line.
  void Record(const core::SchedulerCore& core, const core::Event& e, core::TimeMicros now);

 private:
  // The per-task lines, in the order of the summary line.
  enum TaskLine { kSubmitted, kScheduled, kAdopted, kStopping, kStopped, kRequeued, kFinished };
  static constexpr size_t kTaskLines = 7;

  // True when a per-task line may be written at `now`; false counts it as suppressed.
  bool AdmitTaskLine(TaskLine line, core::TimeMicros now);
  // Starts a new second once `now` is past the current one, writing the summary of the last.
  void RollWindow(core::TimeMicros now);

  Metrics* metrics_;
  const int task_lines_per_second_;
  core::TimeMicros window_start_ = 0;
  int64_t written_in_window_ = 0;
  std::array<int64_t, kTaskLines> suppressed_{};
};

}  // namespace dgpu::scheduler
