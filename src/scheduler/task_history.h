// A task's history (GET /api/v1/tasks/{id}/events): what the core's events say of a task, as
// records stored beside the changes of the same batch, so that a task's history is exactly as
// durable as the task (and replicated with it).
#pragma once

#include <optional>
#include <vector>

#include "core/scheduler_core.h"

namespace dgpu::scheduler {

// The record of one core event, for the task `task` (null if it is not in memory any more);
// nullopt for events that are no part of a task's history (node, quota and team events, and a
// task's submission, which is its created_at, and stops being ordered or confirmed, which the
// requeue or finish that follows tells).
std::optional<core::TaskEventRecord> TaskHistoryEntry(const core::Event& e, const core::Task* task);

// Appends a kTaskEvent change for each entry of a task's history in `events` (in order). Run at
// the end of a batch: a start names the task's GPUs as they are then ("GPUs 0,1"), or their
// number when the task no longer holds them ("2 GPUs": started and ended in the same batch).
void AppendTaskHistory(const core::SchedulerCore& core, const std::vector<core::Event>& events,
                       std::vector<core::Change>* changes);

// The first entry of every task's history, made from the task itself: "submitted".
core::TaskEventRecord SubmittedEntry(const core::Task& t);

}  // namespace dgpu::scheduler
