#include "scheduler/task_history.h"

#include <string>

namespace dgpu::scheduler {
namespace {

using Kind = core::Event::Kind;

// "GPUs 0,1" of the task's member on `node`, or "2 GPUs" when the allocation is not known.
std::string GpusOn(const core::Task* task, const std::string& node, int count) {
  if (task != nullptr) {
    for (const core::NodeAllocation& m : task->allocation) {
      if (m.node_id != node || m.gpu_indices.empty()) continue;
      std::string out = m.gpu_indices.size() == 1 ? "GPU " : "GPUs ";
      for (size_t i = 0; i < m.gpu_indices.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(m.gpu_indices[i]);
      }
      return out;
    }
  }
  return std::to_string(count) + (count == 1 ? " GPU" : " GPUs");
}

// "run 2 " when the task is known, "" otherwise.
std::string RunOf(const core::Task* task) {
  return task == nullptr ? std::string() : "run " + std::to_string(core::RunNumber(*task)) + " ";
}

}  // namespace

std::optional<core::TaskEventRecord> TaskHistoryEntry(const core::Event& e,
                                                      const core::Task* task) {
  core::TaskEventRecord r;
  r.task = e.task;
  r.time = e.time;
  r.node_id = e.node_id;
  switch (e.kind) {
    case Kind::kTaskScheduled:
      r.type = "scheduled";
      if (e.detail == "adopted") {
        r.message = RunOf(task) + "found running on " + e.node_id + " when it registered; adopted";
      } else {
        r.message = RunOf(task) + "ordered to start on " + e.node_id + ", " +
                    GpusOn(task, e.node_id, e.gpus);
      }
      return r;
    case Kind::kTaskStarted:
      r.type = "started";
      r.message = RunOf(task) + "started on " + e.node_id;
      return r;
    case Kind::kTaskPreempted:
      r.type = "preempted";
      r.message = "stopped on " + e.node_id + " to make room for " + e.detail;
      return r;
    case Kind::kTaskRequeued:
      if (e.detail == core::StopError(core::StopReason::kMemberLost)) {
        r.type = "node_lost";
        r.message = "node " + e.node_id + " was lost; queued again";
      } else {
        r.type = "requeued";
        r.message = "queued again: " + e.detail;
      }
      return r;
    case Kind::kTaskFinished:
      if (e.status == core::TaskStatus::kCancelled) {
        r.type = "cancelled";
        r.message = e.node_id.empty() ? "cancelled" : "cancelled; stopping it on " + e.node_id;
        return r;
      }
      r.type = "finished";
      if (e.status == core::TaskStatus::kSuccess) {
        r.message = "succeeded";
      } else {
        r.message = "failed with exit code " + std::to_string(e.exit_code);
        if (!e.detail.empty()) r.message += " (" + e.detail + ")";
      }
      return r;
    case Kind::kTaskSubmitted:
    case Kind::kTaskStopping:
    case Kind::kTaskStopped:
    case Kind::kNodeJoined:
    case Kind::kNodeLost:
    case Kind::kQuotaChanged:
    case Kind::kNodeStateChanged:
    case Kind::kTeamChanged:
      return std::nullopt;
  }
  return std::nullopt;
}

void AppendTaskHistory(const core::SchedulerCore& core, const std::vector<core::Event>& events,
                       std::vector<core::Change>* changes) {
  for (const core::Event& e : events) {
    if (e.task == 0) continue;
    std::optional<core::TaskEventRecord> entry = TaskHistoryEntry(e, core.FindTask(e.task));
    if (!entry) continue;
    core::Change& c = changes->emplace_back();
    c.kind = core::Change::Kind::kTaskEvent;
    c.event = std::move(*entry);
  }
}

core::TaskEventRecord SubmittedEntry(const core::Task& t) {
  core::TaskEventRecord r;
  r.task = t.id;
  r.time = t.created_at;
  r.type = "submitted";
  r.message = std::string(core::ToString(t.spec.priority)) + " priority, " +
              std::to_string(t.spec.gpu_count) + (t.spec.gpu_count == 1 ? " GPU" : " GPUs");
  if (!t.spec.gpu_model.empty()) r.message += " of model " + t.spec.gpu_model;
  r.message += ", team " + t.spec.team;
  if (!t.spec.user.empty()) r.message += ", by " + t.spec.user;
  return r;
}

}  // namespace dgpu::scheduler
