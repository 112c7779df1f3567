#include "scheduler/event_recorder.h"

#include <string>

#include "common/logging.h"

namespace dgpu::scheduler {
namespace {

using Kind = core::Event::Kind;

std::string JoinIndices(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(v[i]);
  }
  return out;
}

// The GPUs the task holds on `node` now, as "0,1", or "" when it holds none there.
std::string GpusOn(const core::SchedulerCore& core, core::TaskNumber task,
                   const std::string& node) {
  const core::Task* t = core.FindTask(task);
  if (t == nullptr) return "";
  for (const auto& na : t->allocation) {
    if (na.node_id == node) return JoinIndices(na.gpu_indices);
  }
  return "";
}

int AttemptsOf(const core::SchedulerCore& core, core::TaskNumber task) {
  const core::Task* t = core.FindTask(task);
  return t == nullptr ? 0 : t->attempts;
}

constexpr std::array<std::string_view, 7> kTaskLineNames = {
    "task_submitted", "task_scheduled", "task_adopted", "task_stopping",
    "task_stopped",   "task_requeued",  "task_finished"};

}  // namespace

void EventRecorder::OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>&,
                           const std::vector<core::Change>&, const std::vector<core::Event>& events,
                           double pass_seconds, core::TimeMicros now) {
  metrics_->pass_duration().Observe(pass_seconds);
  // Every batch passes here, the loop's 1 s timer included: a summary waits at most that long.
  RollWindow(now);
  for (const core::Event& e : events) Record(core, e, now);
}

void EventRecorder::RollWindow(core::TimeMicros now) {
  static_assert(kTaskLineNames.size() == kTaskLines);
  constexpr core::TimeMicros kSecond = 1'000'000;
  if (now < window_start_ + kSecond) return;
  int64_t total = 0;
  for (int64_t n : suppressed_) total += n;
  if (total > 0) {
    std::vector<common::LogField> fields;
    fields.push_back({"suppressed", total});
    for (size_t i = 0; i < kTaskLines; ++i) {
      if (suppressed_[i] > 0) fields.push_back({kTaskLineNames[i], suppressed_[i]});
    }
    fields.push_back({"limit_per_second", task_lines_per_second_});
    common::LogEvent("task_lines_suppressed", fields);
  }
  window_start_ = now;
  written_in_window_ = 0;
  suppressed_.fill(0);
}

bool EventRecorder::AdmitTaskLine(TaskLine line, core::TimeMicros now) {
  if (!common::LogEnabled(common::LogLevel::kInfo)) return false;
  if (task_lines_per_second_ <= 0) return true;
  RollWindow(now);
  if (written_in_window_ < task_lines_per_second_) {
    ++written_in_window_;
    return true;
  }
  ++suppressed_[line];
  return false;
}

void EventRecorder::Record(const core::SchedulerCore& core, const core::Event& e,
                           core::TimeMicros now) {
  const std::string task_id = e.task != 0 ? core::FormatTaskId(e.task) : std::string();
  switch (e.kind) {
    case Kind::kTaskSubmitted:
      metrics_->TaskSubmitted(e.priority);
      if (AdmitTaskLine(kSubmitted, now)) {
        common::LogEvent(common::events::kTaskSubmitted, {{"task_id", task_id},
                                                          {"priority", core::ToString(e.priority)},
                                                          {"gpu_count", e.gpus}});
      }
      return;
    case Kind::kTaskScheduled:
      if (e.detail == "adopted") {
        // A queued task found running at registration: a previous leader scheduled it.
        if (AdmitTaskLine(kAdopted, now)) {
          common::LogEvent("task_adopted", {{"task_id", task_id},
                                            {"node", e.node_id},
                                            {"gpus", GpusOn(core, e.task, e.node_id)}});
        }
        return;
      }
      metrics_->TaskScheduled(e.priority);
      metrics_->start_latency().Observe(static_cast<double>(e.time - e.created_at) / 1e6);
      if (AdmitTaskLine(kScheduled, now)) {
        common::LogEvent(common::events::kTaskScheduled, {{"task_id", task_id},
                                                          {"node", e.node_id},
                                                          {"gpus", GpusOn(core, e.task, e.node_id)},
                                                          {"priority", core::ToString(e.priority)},
                                                          {"attempt", AttemptsOf(core, e.task)}});
      }
      return;
    case Kind::kTaskStarted:
      common::LogEvent("task_started", {{"task_id", task_id}, {"node", e.node_id}},
                       common::LogLevel::kDebug);
      return;
    case Kind::kTaskStopping:
      if (AdmitTaskLine(kStopping, now)) {
        common::LogEvent(
            "task_stopping",
            {{"task_id", task_id}, {"node", e.node_id}, {"reason", core::ToString(e.reason)}});
      }
      return;
    case Kind::kTaskStopped:
      if (AdmitTaskLine(kStopped, now)) {
        common::LogEvent("task_stopped", {{"task_id", task_id},
                                          {"node", e.node_id},
                                          {"reason", core::ToString(e.reason)},
                                          {"exit_code", e.exit_code},
                                          {"error", e.detail}});
      }
      return;
    case Kind::kTaskRequeued:
      if (AdmitTaskLine(kRequeued, now)) {
        common::LogEvent("task_requeued", {{"task_id", task_id},
                                           {"node", e.node_id},
                                           {"reason", e.detail},
                                           {"attempts", AttemptsOf(core, e.task)}});
      }
      return;
    case Kind::kTaskFinished:
      metrics_->TaskFinished(e.priority, e.status);
      if (const core::Task* t = core.FindTask(e.task)) {
        if (auto used = core::UsageOf(t->allocation)) {
          metrics_->TaskUsage(e.priority, t->spec.team, *used);
        }
      }
      if (AdmitTaskLine(kFinished, now)) {
        common::LogEvent(common::events::kTaskFinished, {{"task_id", task_id},
                                                         {"node", e.node_id},
                                                         {"status", core::ToString(e.status)},
                                                         {"exit_code", e.exit_code},
                                                         {"error", e.detail}});
      }
      return;
    case Kind::kNodeJoined:
      common::LogEvent(common::events::kAgentRegistered,
                       {{"node", e.node_id}, {"address", e.detail}, {"gpus", e.gpus}});
      return;
    case Kind::kNodeLost:
      common::LogEvent(common::events::kAgentOffline, {{"node", e.node_id}, {"reason", e.detail}});
      return;
    case Kind::kNodeStateChanged:
      common::LogEvent("node_state_changed", {{"node", e.node_id}, {"change", e.detail}});
      return;
    case Kind::kTaskPreempted: {
      const core::Task* t = core.FindTask(e.task);
      const std::string team = t != nullptr ? t->spec.team : std::string(core::kDefaultTeam);
      metrics_->TaskPreempted(e.priority, team);
      // Not rate-limited: preemptions are what an operator looks for.
      common::LogEvent("task_preempted", {{"task_id", task_id},
                                          {"node", e.node_id},
                                          {"team", team},
                                          {"priority", core::ToString(e.priority)},
                                          {"by", e.detail}});
      return;
    }
    case Kind::kTeamChanged: {
      std::optional<core::TeamView> t = core.FindTeam(e.detail);
      if (t && t->configured) {
        common::LogEvent("team_changed", {{"team", e.detail},
                                          {"online", t->limits.online},
                                          {"batch", t->limits.batch},
                                          {"max_gpus", t->limits.max_gpus},
                                          {"weight", t->limits.weight},
                                          {"default_time_limit", t->limits.default_time_limit}});
      } else {
        common::LogEvent("team_changed", {{"team", e.detail}, {"deleted", true}});
      }
      return;
    }
    case Kind::kQuotaChanged: {
      core::QuotaView q = core.Quota();
      common::LogEvent("quota_changed", {{"online_percent", e.online_percent},
                                         {"online_gpus", q.quota[0]},
                                         {"batch_gpus", q.quota[1]}});
      return;
    }
  }
}

}  // namespace dgpu::scheduler
