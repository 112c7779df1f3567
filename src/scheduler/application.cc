#include "scheduler/application.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "common/config.h"
#include "common/task_env.h"
#include "common/time_util.h"
#include "scheduler/api_json.h"
#include "scheduler/log_relay.h"
#include "scheduler/task_history.h"
#include "scheduler/watch_hub.h"

namespace dgpu::scheduler {
namespace {

Error MakeError(ErrorCode code, StatusCode cause, std::string message, std::string field = {}) {
  return Error{code, std::move(field), std::move(message), cause};
}

Error InvalidArgumentError(std::string field, std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, StatusCode::kInvalidArgument, std::move(message),
                   std::move(field));
}

Error StorageError(const Status& s) {
  return MakeError(ErrorCode::kStorageUnavailable, s.code(), s.message());
}

// An agent's command on a standby.
Error AgentNotLeader() {
  return MakeError(ErrorCode::kNotLeader, StatusCode::kUnavailable, "not the leader");
}

std::optional<Error> ValidateGrace(const std::optional<int32_t>& grace) {
  if (grace && (*grace < 0 || *grace > kMaxGraceSeconds)) {
    return InvalidArgumentError("grace_seconds", "grace_seconds must be an integer from 0 to " +
                                                     std::to_string(kMaxGraceSeconds));
  }
  return std::nullopt;
}

std::optional<Error> ValidateOnlinePercent(double online_percent) {
  if (!(online_percent >= 0.0 && online_percent <= 1.0)) {
    return InvalidArgumentError(
        "online_percent",
        fmt::format("online_percent must be between 0 and 1, got {}", online_percent));
  }
  return std::nullopt;
}

Target SubmissionTarget(const core::TaskSpec& spec) {
  Target t;
  t.priority = spec.priority;
  t.team = spec.team;
  t.user = spec.user;
  return t;
}

// An authenticated submitter's task is its own: `user` is the identity's name when the request
// gives none, and the team its first team when the request names the default one and the
// identity does not list that.
void ApplyIdentity(const Identity& identity, core::TaskSpec* spec) {
  if (!identity.authenticated) return;
  if (spec->user.empty()) spec->user = identity.user;
  if (spec->team == core::kDefaultTeam && !identity.teams.empty() &&
      std::find(identity.teams.begin(), identity.teams.end(), spec->team) == identity.teams.end()) {
    spec->team = identity.teams.front();
  }
}

std::string Describe(const Identity& identity) {
  return "user \"" + identity.user + "\" (role " + std::string(ToString(identity.role)) + ")";
}

Target TeamTarget(const std::string& team) {
  Target t;
  t.team = team;
  return t;
}

Target TaskTarget(core::TaskNumber task) {
  Target t;
  t.task = task;
  return t;
}

Target NodeTarget(std::string node_id, core::TaskNumber task = 0) {
  Target t;
  t.task = task;
  t.node_id = std::move(node_id);
  return t;
}

// An agent's start confirmation: the task's start time becomes the agent's.
Status RecordStart(core::SchedulerCore& core, const std::string& node_id,
                   const StartsRequest::Start& start) {
  auto n = core::ParseTaskId(start.task_id);
  if (!n) return InvalidArgument("task_id \"" + start.task_id + "\" is not a task id");
  if (start.started_at <= 0)
    return InvalidArgument(start.task_id + " has no started_at_unix_micros");
  return core.TaskStarted(*n, node_id, start.started_at, start.run, start.cpu_set);
}

// The task as the database holds it; the storage's error, or 404 for a task it does not hold.
Result<core::Task> StoredTask(store::Database& db, core::TaskNumber n) {
  auto stored = db.GetTask(n);
  if (!stored.ok()) return ErrorFromStatus(stored.status());
  if (!stored->has_value()) {
    return MakeError(ErrorCode::kNotFound, StatusCode::kNotFound,
                     "task " + core::FormatTaskId(n) + " not found");
  }
  return std::move(**stored);
}

// Whether the agent may run `t` there: a member of it runs (or is being stopped) on that node.
bool RunsOn(const core::Task* t, const std::string& node_id) {
  return t != nullptr && (t->status == core::TaskStatus::kRunning || t->stopping) &&
         core::RunningMemberOn(t->allocation, node_id) >= 0;
}

Error LogUnavailable(std::string message) {
  return MakeError(ErrorCode::kLogUnavailable, StatusCode::kNotFound, std::move(message));
}

// The node holding the log of `t`'s member `rank`, from its allocation (kept once it ended);
// nullopt when it has none (queued, or queued again).
std::optional<Result<LogSource>> SourceFromAllocation(const core::Task& t, int rank) {
  if (t.allocation.empty()) return std::nullopt;
  const std::string id = core::FormatTaskId(t.id);
  if (rank >= static_cast<int>(t.allocation.size())) {
    return Result<LogSource>(
        InvalidArgumentError("rank", fmt::format("{} has {} member(s): rank must be below {}", id,
                                                 t.allocation.size(), t.allocation.size())));
  }
  return Result<LogSource>(
      LogSource{t.allocation[static_cast<size_t>(rank)].node_id, id, core::IsFinished(t.status)});
}

// The node of `t`'s latest run from its stored events, for a task without an allocation.
Result<LogSource> SourceFromEvents(store::Database& db, const core::Task& t, int rank) {
  const std::string id = core::FormatTaskId(t.id);
  if (core::RunNumber(t) == 0) return LogUnavailable(id + " has not run on any node yet");
  if (rank > 0) {
    return InvalidArgumentError("rank", id + " is queued again: only rank 0 has a log to read");
  }
  auto events = db.TaskEvents(t.id);
  if (!events.ok()) return ErrorFromStatus(events.status());
  for (auto it = events->rbegin(); it != events->rend(); ++it) {
    if ((it->type == "scheduled" || it->type == "started") && !it->node_id.empty()) {
      return LogSource{it->node_id, id, core::IsFinished(t.status)};
    }
  }
  return LogUnavailable(id + ": no node of its runs is recorded");
}

// A node's GPUs as its agent registers them: at most `max` (agent.max_gpus_per_node), each index
// in [0, max) and given once.
std::optional<Error> CheckRegisteredGpus(const std::string& node,
                                         const std::vector<core::GpuInfo>& gpus, int max) {
  if (gpus.size() > static_cast<size_t>(max)) {
    return InvalidArgumentError("gpus",
                                fmt::format("node {} registers {} GPUs; a node has at most {} "
                                            "(agent.max_gpus_per_node of the scheduler)",
                                            node, gpus.size(), max));
  }
  std::vector<bool> seen(static_cast<size_t>(max), false);
  for (const core::GpuInfo& g : gpus) {
    if (g.index < 0 || g.index >= max) {
      return InvalidArgumentError("gpus",
                                  fmt::format("node {} registers GPU index {}; indices are 0 to {} "
                                              "(agent.max_gpus_per_node of the scheduler)",
                                              node, g.index, max - 1));
    }
    if (seen[static_cast<size_t>(g.index)]) {
      return InvalidArgumentError(
          "gpus", fmt::format("node {} registers GPU index {} twice", node, g.index));
    }
    seen[static_cast<size_t>(g.index)] = true;
    if (g.link_group != core::kNoLinkGroup &&
        (g.link_group < 0 || g.link_group >= core::kMaxLinkGroups)) {
      return InvalidArgumentError(
          "gpus", fmt::format("node {} registers GPU {} in NVLink group {}; groups are 0 to {}",
                              node, g.index, g.link_group, core::kMaxLinkGroups - 1));
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view ToString(Action action) {
  switch (action) {
    case Action::kSubmitTask:
      return "submit_task";
    case Action::kCancelTask:
      return "cancel_task";
    case Action::kReadTasks:
      return "read_tasks";
    case Action::kSetQuota:
      return "set_quota";
    case Action::kSetTeam:
      return "set_team";
    case Action::kSetNodeMode:
      return "set_node_mode";
    case Action::kReadCluster:
      return "read_cluster";
    case Action::kTakeSnapshot:
      return "take_snapshot";
    case Action::kRegisterNode:
      return "register_node";
    case Action::kNodeHeartbeat:
      return "node_heartbeat";
    case Action::kReportStart:
      return "report_start";
    case Action::kReportFinish:
      return "report_finish";
  }
  return "unknown";
}

Role RequiredRole(Action action) {
  switch (action) {
    case Action::kReadTasks:
    case Action::kReadCluster:
      return Role::kViewer;
    case Action::kSubmitTask:
    case Action::kCancelTask:
      return Role::kUser;
    case Action::kSetNodeMode:
      return Role::kOperator;
    case Action::kSetQuota:
    case Action::kSetTeam:
    case Action::kTakeSnapshot:
      return Role::kAdmin;
    case Action::kRegisterNode:
    case Action::kNodeHeartbeat:
    case Action::kReportStart:
    case Action::kReportFinish:
      break;
  }
  return Role::kAdmin;
}

Status RoleAuthorizer::Authorize(const Caller& caller, Action action, const Target& target) const {
  const bool agent_action = action == Action::kRegisterNode || action == Action::kNodeHeartbeat ||
                            action == Action::kReportStart || action == Action::kReportFinish;
  if (caller.transport == Caller::Transport::kGrpc) {
    if (agent_action) return OkStatus();
    return PermissionDenied(std::string(ToString(action)) + " is not an agent's action");
  }
  if (agent_action) return PermissionDenied(std::string(ToString(action)) + " is for agents");
  const Identity& who = caller.identity;
  if (!who.authenticated) return OkStatus();  // auth.mode none: the transport admitted the peer.
  const Role needed = RequiredRole(action);
  if (who.role < needed) {
    return PermissionDenied(Describe(who) + " may not " + std::string(ToString(action)) +
                            "; that needs role " + std::string(ToString(needed)) + " or higher");
  }
  if (action != Action::kSubmitTask) return OkStatus();
  if (target.user != who.user && who.role < Role::kAdmin) {
    return PermissionDenied(Describe(who) + " may not submit tasks as \"" + target.user +
                            "\"; leave `user` out or give its own name");
  }
  if (who.role >= Role::kOperator) return OkStatus();
  const bool member = who.teams.empty() ? target.team == core::kDefaultTeam
                                        : std::find(who.teams.begin(), who.teams.end(),
                                                    target.team) != who.teams.end();
  if (!member) {
    std::string teams;
    for (const auto& t : who.teams) teams += (teams.empty() ? "" : ", ") + t;
    return PermissionDenied(Describe(who) + " may not submit to team \"" + target.team +
                            "\"; its teams: " + (teams.empty() ? "default" : teams));
  }
  return OkStatus();
}

Error ErrorFromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return MakeError(ErrorCode::kInvalidArgument, s.code(), s.message());
    case StatusCode::kNotFound:
      return MakeError(ErrorCode::kNotFound, s.code(), s.message());
    case StatusCode::kFailedPrecondition:
      return MakeError(ErrorCode::kConflict, s.code(), s.message());
    case StatusCode::kAlreadyExists:
      return MakeError(ErrorCode::kAlreadyExists, s.code(), s.message());
    case StatusCode::kPermissionDenied:
      return MakeError(ErrorCode::kForbidden, s.code(), s.message());
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
    case StatusCode::kDataLoss:
      return MakeError(ErrorCode::kUnavailable, s.code(), s.message());
    default:
      return MakeError(ErrorCode::kInternal, s.code(), s.message());
  }
}

std::optional<Error> ValidateTaskSpec(const core::TaskSpec& spec) {
  if (!core::IsValidTeamName(spec.team)) {
    return InvalidArgumentError("team",
                                "team must be 1 to 63 characters of a-z, 0-9, '_' and "
                                "'-', starting with a letter or digit, got '" +
                                    spec.team + "'");
  }
  if (spec.preemption_grace_seconds < -1 || spec.preemption_grace_seconds > kMaxGraceSeconds) {
    return InvalidArgumentError(
        "preemption_grace_seconds",
        "preemption_grace_seconds must be between 0 and " + std::to_string(kMaxGraceSeconds));
  }
  for (const auto& [name, value] : spec.env) {
    if (common::IsReservedTaskEnvName(name)) {
      return InvalidArgumentError("env." + name, "env." + name +
                                                     " is set by dgpu for GPU isolation and "
                                                     "cannot be given");
    }
  }
  return std::nullopt;
}

// --- Shared steps ------------------------------------------------------------------------------

std::optional<Error> Application::Authorize(const Caller& caller, Action action,
                                            const Target& target) const {
  Status s = d_.authorizer->Authorize(caller, action, target);
  if (s.ok()) return std::nullopt;
  return MakeError(ErrorCode::kForbidden, StatusCode::kPermissionDenied, s.message());
}

// A client's write needs the leader and working storage.
Error Application::StandbyError(std::string message) const {
  std::string leader = d_.leader->leader_http();
  if (!leader.empty()) message += "; the leader is at " + leader;
  return MakeError(ErrorCode::kNotLeader, StatusCode::kUnavailable, std::move(message));
}

std::optional<Error> Application::RefuseClientWrite() const {
  if (!d_.leader->is_leader()) return StandbyError("this scheduler is a standby");
  if (Status h = d_.journal->health(); !h.ok()) return StorageError(h);
  return std::nullopt;
}

template <typename T>
void Application::ReplyWhenDurable(CoreLoop::Context& c, T value, Reply<T> reply,
                                   std::function<Error(const Status&)> on_failure) {
  c.OnDurable([value = std::move(value), reply = std::move(reply),
               on_failure = std::move(on_failure)](const Status& s) {
    if (s.ok()) {
      reply(value);
    } else {
      reply(on_failure ? on_failure(s) : StorageError(s));
    }
  });
}

// --- Client commands ---------------------------------------------------------------------------

void Application::Submit(const Caller& caller, SubmitRequest request, Reply<Submitted> reply) {
  ApplyIdentity(caller.identity, &request.spec);
  if (auto e = ValidateTaskSpec(request.spec)) return reply(*e);
  if (auto e = Authorize(caller, Action::kSubmitTask, SubmissionTarget(request.spec))) {
    return reply(*e);
  }
  if (auto e = RefuseClientWrite()) return reply(*e);
  d_.loop->Post([this, spec = std::move(request.spec), array = request.array,
                 reply = std::move(reply)](CoreLoop::Context& c) mutable {
    if (Status h = c.journal().health(); !h.ok()) return reply(StorageError(h));
    const size_t count = array > 0 ? static_cast<size_t>(array) : 1;
    if (!spec.user.empty() &&
        c.core.PendingOfUser(spec.user) + count > static_cast<size_t>(d_.max_pending_per_user)) {
      return reply(MakeError(ErrorCode::kTooManyPending, StatusCode::kResourceExhausted,
                             "user \"" + spec.user + "\" has " +
                                 std::to_string(c.core.PendingOfUser(spec.user)) +
                                 " pending tasks; " + std::to_string(count) +
                                 " more would pass limits.max_pending_per_user (" +
                                 std::to_string(d_.max_pending_per_user) +
                                 "); wait for some to start or cancel some"));
    }
    // An array's tasks are numbered one after another and reach the journal as one change.
    auto id = array > 0 ? c.core.SubmitArray(spec, array, c.now) : c.core.Submit(spec, c.now);
    if (!id.ok()) return reply(ErrorFromStatus(id.status()));  // Nothing was submitted.
    const core::TaskNumber first = *id;
    // Not durable: tell the client, and make sure the tasks do not run.
    auto withdraw = [loop = d_.loop, first, count](const Status& s) {
      loop->Post([first, count](CoreLoop::Context& cc) {
        for (core::TaskNumber n = first; n < first + count; ++n) {
          if (Status cancelled = cc.core.Cancel(n, cc.now); !cancelled.ok()) {
            spdlog::warn("cannot withdraw {}, which could not be stored: {}", core::FormatTaskId(n),
                         cancelled.message());
          }
        }
      });
      return MakeError(ErrorCode::kStorageUnavailable, s.code(),
                       "the task could not be stored (" + s.message() + "); it was not accepted");
    };
    ReplyWhenDurable(c, Submitted{first, c.now, static_cast<int>(count)}, std::move(reply),
                     std::move(withdraw));
  });
}

void Application::Cancel(const Caller& caller, const CancelRequest& request, Reply<Done> reply) {
  if (auto e = ValidateGrace(request.grace_seconds)) return reply(*e);
  if (auto e = Authorize(caller, Action::kCancelTask, TaskTarget(request.task))) return reply(*e);
  if (auto e = RefuseClientWrite()) return reply(*e);
  d_.loop->Post([this, n = request.task, grace = request.grace_seconds.value_or(-1),
                 identity = caller.identity,
                 reply = std::move(reply)](CoreLoop::Context& c) mutable {
    // A user cancels only its own tasks; operators and admins any.
    if (const core::Task* t = c.core.FindTask(n); t != nullptr && identity.authenticated &&
                                                  identity.role < Role::kOperator &&
                                                  t->spec.user != identity.user) {
      return reply(MakeError(ErrorCode::kForbidden, StatusCode::kPermissionDenied,
                             Describe(identity) + " may cancel only its own tasks; " +
                                 core::FormatTaskId(n) + " was submitted by \"" + t->spec.user +
                                 "\""));
    }
    Status s = c.core.Cancel(n, c.now, grace);
    if (s.code() == StatusCode::kNotFound) return AnswerCancelOfUnknown(n, std::move(reply));
    if (!s.ok()) return reply(ErrorFromStatus(s));
    ReplyWhenDurable(c, Done{}, std::move(reply));
  });
}

void Application::ReadCaughtUp(std::function<void()> read) {
  d_.loop->Post([journal = d_.journal, readers = d_.readers,
                 read = std::move(read)](CoreLoop::Context& c) mutable {
    // The changes of every earlier batch are appended by now (each batch appends at its end).
    journal->WhenAttempted(c.journal().stats().last_appended_seq,
                           [readers, read = std::move(read)](const Status&) mutable {
                             readers->Post(std::move(read));
                           });
  });
}

// A task the core does not hold cannot be cancelled: conflict if it finished (read on a reader
// thread), else not found.
void Application::AnswerCancelOfUnknown(core::TaskNumber n, Reply<Done> reply) {
  d_.readers->Post([db = d_.db, n, reply = std::move(reply)] {
    const std::string id = core::FormatTaskId(n);
    auto stored = db->GetTask(n);
    if (stored.ok() && stored->has_value()) {
      reply(MakeError(
          ErrorCode::kConflict, StatusCode::kFailedPrecondition,
          id + " already finished with status " + std::string(core::ToString((*stored)->status))));
    } else {
      reply(MakeError(ErrorCode::kNotFound, StatusCode::kNotFound, "task " + id + " not found"));
    }
  });
}

void Application::TaskEvents(const Caller& caller, core::TaskNumber n,
                             Reply<std::vector<core::TaskEventRecord>> reply) {
  if (auto e = Authorize(caller, Action::kReadTasks, TaskTarget(n))) return reply(*e);
  // A task is acknowledged once durable, so a task someone can name is in the database.
  ReadCaughtUp([db = d_.db, n, reply = std::move(reply)] {
    Result<core::Task> stored = StoredTask(*db, n);
    if (!stored.ok()) return reply(stored.error());
    auto events = db->TaskEvents(n);
    if (!events.ok()) return reply(ErrorFromStatus(events.status()));
    std::vector<core::TaskEventRecord> history;
    history.reserve(events->size() + 1);
    history.push_back(SubmittedEntry(stored.value()));
    for (auto& e : *events) history.push_back(std::move(e));
    reply(history);
  });
}

void Application::LocateLog(const Caller& caller, core::TaskNumber n, int rank,
                            Reply<LogSource> reply) {
  if (auto e = Authorize(caller, Action::kReadTasks, TaskTarget(n))) return reply(*e);
  if (rank < 0) return reply(InvalidArgumentError("rank", "rank must be 0 or more"));
  d_.loop->Post([this, n, rank, reply = std::move(reply)](CoreLoop::Context& c) mutable {
    std::optional<core::Task> live;
    if (const core::Task* t = c.core.FindTask(n)) {
      if (auto found = SourceFromAllocation(*t, rank)) return reply(*found);
      live = *t;
    }
    d_.readers->Post([db = d_.db, n, rank, live = std::move(live), reply = std::move(reply)] {
      Result<core::Task> task = live ? Result<core::Task>(*live) : StoredTask(*db, n);
      if (!task.ok()) return reply(task.error());
      if (auto found = SourceFromAllocation(task.value(), rank)) return reply(*found);
      reply(SourceFromEvents(*db, task.value(), rank));
    });
  });
}

void Application::ReadLog(const Caller& caller, const LogRead& read, Reply<LogPiece> reply) {
  auto n = core::ParseTaskId(read.task_id);
  if (!n) return reply(InvalidArgumentError("task_id", "not a task id: " + read.task_id));
  if (auto e = Authorize(caller, Action::kReadTasks, TaskTarget(*n))) return reply(*e);
  if (d_.logs == nullptr) {
    return reply(MakeError(ErrorCode::kUnavailable, StatusCode::kUnavailable,
                           "this scheduler serves no task logs"));
  }
  // Only the leader holds the agents' streams.
  if (!d_.leader->is_leader()) return reply(StandbyError("this scheduler is a standby"));
  d_.logs->Read(read, std::move(reply));
}

void Application::Usage(const Caller& caller, const UsageRequest& request,
                        Reply<UsageReport> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  ReadCaughtUp([db = d_.db, request, reply = std::move(reply)] {
    const core::TimeMicros now = common::NowMicros();
    UsageReport report{request.from, request.to == 0 ? now : request.to, request.by_user, {}};
    if (report.from >= report.to) {
      return reply(InvalidArgumentError("from", "from must be before to"));
    }
    auto rows = db->Usage({report.from, report.to, now, request.by_user});
    if (!rows.ok()) return reply(ErrorFromStatus(rows.status()));
    report.groups = std::move(*rows);
    reply(report);
  });
}

void Application::GetTask(const Caller& caller, core::TaskNumber n, Reply<TaskView> reply) {
  if (auto e = Authorize(caller, Action::kReadTasks, TaskTarget(n))) return reply(*e);
  d_.loop->Post([this, n, reply = std::move(reply)](CoreLoop::Context& c) mutable {
    if (const core::Task* t = c.core.FindTask(n)) {
      const auto detail = c.core.ExplainPending(n);
      return reply(TaskView{t, c.core.ReasonOf(*t), detail ? detail->Text() : std::string(),
                            c.core.ReservedFor(*t)});
    }
    // Not in memory: finished and durable (a task leaves memory only then), or unknown.
    d_.readers->Post([db = d_.db, n, reply = std::move(reply)] {
      Result<core::Task> stored = StoredTask(*db, n);
      if (!stored.ok()) return reply(stored.error());
      reply(TaskView{&stored.value(), core::PendingReason::kNone, {}});
    });
  });
}

void Application::ListTasks(const Caller& caller, const ListTasksRequest& request,
                            Reply<TaskPage> reply) {
  if (auto e = Authorize(caller, Action::kReadTasks, {})) return reply(*e);
  // Read on the readers pool, so that the transport's threads never wait for the database.
  d_.readers->Post([loop = d_.loop, db = d_.db, request, reply = std::move(reply)]() mutable {
    auto page = db->ListTasks({request.status, request.priority, request.limit, request.offset,
                               request.after, request.team});
    if (!page.ok()) return reply(ErrorFromStatus(page.status()));
    // Overlay what the core holds now (pending reasons, fresher states).
    loop->Post([stored = std::move(*page), reply = std::move(reply)](CoreLoop::Context& c) {
      TaskPage out;
      out.total = stored.total;
      out.next = stored.next;
      out.tasks.reserve(stored.tasks.size());
      for (const auto& t : stored.tasks) {
        const core::Task* live = c.core.FindTask(t.id);
        out.tasks.push_back(
            live != nullptr ? TaskView{live, c.core.ReasonOf(*live), {}, c.core.ReservedFor(*live)}
                            : TaskView{&t, core::PendingReason::kNone, {}});
      }
      reply(out);
    });
  });
}

void Application::Snapshot(const Caller& caller, Reply<store::SnapshotFile> reply) {
  if (auto e = Authorize(caller, Action::kTakeSnapshot, {})) return reply(*e);
  if (snapshotting_.exchange(true)) {
    return reply(MakeError(ErrorCode::kUnavailable, StatusCode::kUnavailable,
                           "a snapshot is being taken; ask again once it is done"));
  }
  d_.background->Post([this, reply = std::move(reply)] {
    StatusOr<store::SnapshotFile> file = d_.db->Snapshot();
    snapshotting_.store(false);
    if (!file.ok()) {
      spdlog::error("{}", file.status().message());
      return reply(ErrorFromStatus(file.status()));
    }
    spdlog::info("snapshot of {} tasks up to journal seq {}: {} bytes", file->tasks,
                 file->meta.last_applied_seq, file->bytes);
    reply(*file);
  });
}

void Application::SetQuota(const Caller& caller, const QuotaRequest& request, Reply<Done> reply) {
  if (auto e = ValidateOnlinePercent(request.online_percent)) return reply(*e);
  if (auto e = Authorize(caller, Action::kSetQuota, {})) return reply(*e);
  if (auto e = RefuseClientWrite()) return reply(*e);
  d_.loop->Post(
      [online = request.online_percent, reply = std::move(reply)](CoreLoop::Context& c) mutable {
        Status s = c.core.SetOnlinePercent(online, c.now);
        if (!s.ok()) return reply(ErrorFromStatus(s));
        ReplyWhenDurable(c, Done{}, std::move(reply));
      });
}

void Application::GetQuota(const Caller& caller, Reply<QuotaState> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  d_.loop->Post([reply = std::move(reply)](CoreLoop::Context& c) {
    reply(QuotaState{c.core.Quota(), c.core.online_percent(), c.core.Teams()});
  });
}

void Application::ListTeams(const Caller& caller, Reply<std::vector<core::TeamView>> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  d_.loop->Post([reply = std::move(reply)](CoreLoop::Context& c) { reply(c.core.Teams()); });
}

void Application::GetTeam(const Caller& caller, const std::string& name,
                          Reply<core::TeamView> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, TeamTarget(name))) return reply(*e);
  d_.loop->Post([name, reply = std::move(reply)](CoreLoop::Context& c) {
    std::optional<core::TeamView> team = c.core.FindTeam(name);
    if (!team) {
      return reply(
          MakeError(ErrorCode::kNotFound, StatusCode::kNotFound, "team " + name + " not found"));
    }
    reply(*team);
  });
}

void Application::SetTeam(const Caller& caller, const TeamRequest& request,
                          Reply<core::TeamView> reply) {
  if (!core::IsValidTeamName(request.name)) {
    return reply(InvalidArgumentError(
        "name",
        "team names are 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a "
        "letter or digit, got '" +
            request.name + "'"));
  }
  if (auto e = Authorize(caller, Action::kSetTeam, TeamTarget(request.name))) return reply(*e);
  if (auto e = RefuseClientWrite()) return reply(*e);
  d_.loop->Post([request, reply = std::move(reply)](CoreLoop::Context& c) mutable {
    if (Status h = c.journal().health(); !h.ok()) return reply(StorageError(h));
    core::TeamLimits limits;
    if (std::optional<core::TeamView> now = c.core.FindTeam(request.name); now && now->configured) {
      limits = now->limits;
    }
    if (request.online) limits.online = *request.online;
    if (request.batch) limits.batch = *request.batch;
    if (request.max_gpus) limits.max_gpus = *request.max_gpus;
    if (request.weight) limits.weight = *request.weight;
    if (request.default_time_limit) limits.default_time_limit = *request.default_time_limit;
    Status s = c.core.SetTeam(request.name, limits, c.now);
    if (!s.ok()) {
      Error e = ErrorFromStatus(s);
      // The core's message starts with the field it is about ("online: ..."), or names it.
      for (const char* field : {"online", "batch", "max_gpus", "weight", "default_time_limit"}) {
        if (s.message().starts_with(std::string(field) + ":") ||
            s.message().starts_with(std::string(field) + " ")) {
          e.field = field;
          break;
        }
      }
      return reply(e);
    }
    ReplyWhenDurable(c, *c.core.FindTeam(request.name), std::move(reply));
  });
}

void Application::DeleteTeam(const Caller& caller, const std::string& name, Reply<Done> reply) {
  if (auto e = Authorize(caller, Action::kSetTeam, TeamTarget(name))) return reply(*e);
  if (auto e = RefuseClientWrite()) return reply(*e);
  d_.loop->Post([name, reply = std::move(reply)](CoreLoop::Context& c) mutable {
    if (Status h = c.journal().health(); !h.ok()) return reply(StorageError(h));
    Status s = c.core.DeleteTeam(name, c.now);
    if (!s.ok()) return reply(ErrorFromStatus(s));
    ReplyWhenDurable(c, Done{}, std::move(reply));
  });
}

void Application::ListGpus(const Caller& caller, Reply<std::vector<core::GpuView>> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  d_.loop->Post([reply = std::move(reply)](CoreLoop::Context& c) { reply(c.core.Gpus()); });
}

void Application::SetNodeMode(const Caller& caller, const NodeModeRequest& request,
                              Reply<NodeModeSet> reply) {
  if (auto e = ValidateGrace(request.grace_seconds)) return reply(*e);
  Target target;
  target.node_id = request.node_id;
  if (auto e = Authorize(caller, Action::kSetNodeMode, target)) return reply(*e);
  if (auto e = RefuseClientWrite()) return reply(*e);
  d_.loop->Post([request, reply = std::move(reply)](CoreLoop::Context& c) mutable {
    if (Status h = c.journal().health(); !h.ok()) return reply(StorageError(h));
    NodeModeSet done;
    if (request.mode == core::NodeMode::kDraining) {
      StatusOr<int> evicted = c.core.DrainNode(request.node_id, request.evict,
                                               request.grace_seconds.value_or(-1), c.now);
      if (!evicted.ok()) return reply(ErrorFromStatus(evicted.status()));
      done.evicted = *evicted;
    } else if (Status s = c.core.SetNodeMode(request.node_id, request.mode, c.now); !s.ok()) {
      return reply(ErrorFromStatus(s));
    }
    done.node = *c.core.FindNode(request.node_id);
    spdlog::info("node {} is now {}{}", request.node_id, core::ToString(request.mode),
                 request.evict ? fmt::format(" ({} task(s) evicted)", done.evicted) : "");
    ReplyWhenDurable(c, std::move(done), std::move(reply));
  });
}

void Application::ListAgents(const Caller& caller, Reply<std::vector<core::NodeView>> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  d_.loop->Post([reply = std::move(reply)](CoreLoop::Context& c) { reply(c.core.Nodes()); });
}

void Application::GetAutoscale(const Caller& caller, Reply<AutoscaleStatus> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  if (d_.autoscale == nullptr) return reply(AutoscaleStatus{});
  d_.loop->Post(
      [this, reply = std::move(reply)](CoreLoop::Context&) { reply(d_.autoscale->View()); });
}

std::optional<Error> Application::Watch(const Caller& caller, std::shared_ptr<WatchSink> sink,
                                        std::optional<uint64_t> since) {
  // The feed carries tasks, nodes and quotas: whoever may read both.
  if (auto e = Authorize(caller, Action::kReadTasks, {})) return e;
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return e;
  if (d_.watch == nullptr) {
    return Error{ErrorCode::kUnavailable, "", "this scheduler serves no watch feed",
                 StatusCode::kUnavailable};
  }
  d_.watch->Add(std::move(sink), since);
  return std::nullopt;
}

void Application::Gauges(const Caller& caller, Reply<GaugeSnapshot> reply) {
  if (auto e = Authorize(caller, Action::kReadCluster, {})) return reply(*e);
  d_.loop->Post([this, reply = std::move(reply)](CoreLoop::Context& c) {
    GaugeSnapshot g = TakeGaugeSnapshot(c.core);
    g.is_leader = d_.leader->is_leader();
    g.epoch = d_.leader->epoch();
    auto js = d_.journal->stats();
    g.journal_batches = js.batches_committed;
    g.journal_mean_batch = js.MeanBatchSize();
    reply(g);
  });
}

Readiness Application::Ready() const {
  return Readiness{d_.leader->is_leader(), d_.leader->epoch(), d_.journal->health(),
                   d_.leader->detail()};
}

// --- Agent commands ----------------------------------------------------------------------------

void Application::RegisterNode(const Caller& caller, RegisterRequest request,
                               Reply<Registered> reply) {
  d_.leader->ObserveEpoch(request.epoch);
  if (!d_.leader->is_leader()) return reply(AgentNotLeader());
  if (request.agent_id.empty())
    return reply(InvalidArgumentError("agent_id", "agent_id is required"));
  if (Status id = common::CheckAgentId(request.agent_id); !id.ok()) {
    return reply(InvalidArgumentError("agent_id", id.message()));
  }
  if (auto e = Authorize(caller, Action::kRegisterNode, NodeTarget(request.agent_id))) {
    return reply(*e);
  }
  if (auto e = CheckRegisteredGpus(request.agent_id, request.gpus, d_.max_gpus_per_node)) {
    return reply(*e);
  }
  // Labels as agent.labels allows them (an agent checks its own; this keeps the core's clean).
  if (request.labels.size() > core::kMaxSelectorEntries) {
    return reply(InvalidArgumentError(
        "labels", "more than " + std::to_string(core::kMaxSelectorEntries) + " labels"));
  }
  for (const auto& [key, value] : request.labels) {
    std::string why = core::CheckLabelKey(key);
    if (why.empty()) why = core::CheckLabelValue(value);
    if (!why.empty()) {
      return reply(InvalidArgumentError("labels", "label " + key + "=" + value + ": " + why));
    }
  }
  std::vector<core::RunningReport> running;
  std::vector<std::string> unparsable;  // Not ours: stopped.
  for (auto& r : request.running) {
    if (auto n = core::ParseTaskId(r.task_id)) {
      running.push_back({*n, std::move(r.gpu_indices), r.run});
    } else {
      unparsable.push_back(std::move(r.task_id));
    }
  }
  // Every finish is acknowledged: those the core can take, then those it cannot.
  std::vector<core::FinishReport> finished;
  Registered registered;
  std::vector<std::string> unknown_finishes;
  for (auto& f : request.finished) {
    auto n = core::ParseTaskId(f.task_id);
    if (!n) {
      unknown_finishes.push_back(std::move(f.task_id));
      continue;
    }
    finished.push_back(
        {*n, f.success, f.exit_code, std::move(f.error), f.finished_at, f.run, f.usage});
    registered.acknowledged_finishes.push_back(std::move(f.task_id));
  }
  for (auto& t : unknown_finishes) registered.acknowledged_finishes.push_back(std::move(t));
  std::string address =
      request.address.empty() ? caller.peer : std::string(std::move(request.address));
  std::string where = address == caller.peer ? address : address + " (" + caller.peer + ")";
  d_.loop->Post([this, id = std::move(request.agent_id), address = std::move(address),
                 instance = std::move(request.instance_id), where = std::move(where),
                 group = std::move(request.node_group), gpus = std::move(request.gpus),
                 resources = std::move(request.resources), labels = std::move(request.labels),
                 running = std::move(running), finished = std::move(finished),
                 unparsable = std::move(unparsable), registered = std::move(registered),
                 reply = std::move(reply)](CoreLoop::Context& c) mutable {
    // Another agent under the id of a node whose session is alive (a copied configuration or
    // machine image): refused, so that it cannot take over the node's GPUs and tasks.
    auto known = node_instances_.find(id);
    if (!instance.empty() && known != node_instances_.end() && !known->second.instance_id.empty() &&
        known->second.instance_id != instance) {
      if (std::optional<core::NodeView> node = c.core.FindNode(id); node && node->online) {
        const std::string message = "agent id " + id + " is in use by a live agent at " +
                                    known->second.where + "; refused the registration from " +
                                    where +
                                    " (another agent instance): give each agent its own "
                                    "agent.id";
        spdlog::warn("{}", message);
        return reply(MakeError(ErrorCode::kAlreadyExists, StatusCode::kAlreadyExists, message));
      }
    }
    if (!instance.empty()) node_instances_[id] = {instance, where};
    d_.agents->BeginSession(id);
    Status s = c.core.RegisterNode(id, address, gpus, resources, running, finished, c.now);
    if (s.ok()) s = c.core.SetNodeLabels(id, std::move(labels));
    if (!s.ok()) return reply(ErrorFromStatus(s));
    if (d_.autoscale != nullptr) d_.autoscale->NodeRegistered(id, group, gpus);
    if (!unparsable.empty()) d_.agents->OrderStops(id, unparsable, core::StopReason::kReconcile);
    registered.epoch = d_.leader->epoch();
    ReplyWhenDurable(c, std::move(registered), std::move(reply));
  });
}

void Application::Heartbeat(const Caller& caller, HeartbeatReport report,
                            Reply<HeartbeatAnswer> reply) {
  d_.leader->ObserveEpoch(report.epoch);
  if (auto e = Authorize(caller, Action::kNodeHeartbeat, NodeTarget(report.agent_id))) {
    return reply(*e);
  }
  for (const auto& g : report.gpus) {
    if (g.utilization_pct >= 0) {
      d_.metrics->GpuUtilization(GpuId(report.agent_id, g.index), g.model,
                                 g.utilization_pct / 100.0);
    }
  }
  d_.loop->Post([this, report = std::move(report), reply = std::move(reply)](CoreLoop::Context& c) {
    HeartbeatAnswer answer;
    answer.epoch = d_.leader->epoch();
    if (!c.core.Heartbeat(report.agent_id, c.now).ok()) {
      answer.reregister = true;
      return reply(answer);
    }
    // GPU health as the agent's checks found it: an unhealthy GPU leaves placement and its
    // task is stopped (gpu_failure) and requeued; one healthy again returns.
    if (report.any_unhealthy || c.core.AnyUnhealthyGpu(report.agent_id)) {
      for (const auto& g : report.gpus) {
        (void)c.core.SetGpuHealth(report.agent_id, g.index, g.healthy, g.health_reason, c.now);
      }
    }
    for (const auto& u : report.usage) {
      if (auto n = core::ParseTaskId(u.task_id)) {
        (void)c.core.RecordUsage(report.agent_id, *n, u.run, u.usage);
      }
    }
    // Tasks the agent runs that are not ours to run there any more are stopped.
    for (const auto& tid : report.running_task_ids) {
      auto n = core::ParseTaskId(tid);
      if (!RunsOn(n ? c.core.FindTask(*n) : nullptr, report.agent_id)) {
        answer.stop_tasks.push_back(tid);
      }
    }
    reply(answer);
  });
}

void Application::ReportStarts(const Caller& caller, StartsRequest request, Reply<Done> reply) {
  d_.leader->ObserveEpoch(request.epoch);
  if (auto e = Authorize(caller, Action::kReportStart, NodeTarget(request.agent_id))) {
    return reply(*e);
  }
  d_.loop->Post([request = std::move(request), reply = std::move(reply)](CoreLoop::Context& c) {
    for (const auto& start : request.starts) {
      Status s = RecordStart(c.core, request.agent_id, start);
      if (!s.ok()) {
        spdlog::warn("ignored start confirmation from {}: {}", request.agent_id, s.message());
      }
    }
    reply(Done{});
  });
}

void Application::ReportFinish(const Caller& caller, const FinishRequest& request,
                               Reply<FinishRecorded> reply) {
  d_.leader->ObserveEpoch(request.epoch);
  if (!d_.leader->is_leader()) return reply(AgentNotLeader());
  auto n = core::ParseTaskId(request.task_id);
  if (!n) {
    return reply(
        InvalidArgumentError("task_id", "task_id \"" + request.task_id + "\" is not a task id"));
  }
  if (auto e = Authorize(caller, Action::kReportFinish, NodeTarget(request.agent_id, *n))) {
    return reply(*e);
  }
  core::FinishReport report{
      *n,          request.success, request.exit_code, request.error, request.finished_at,
      request.run, request.usage};
  d_.loop->Post([this, report = std::move(report), agent = request.agent_id,
                 reply = std::move(reply)](CoreLoop::Context& c) mutable {
    FinishRecorded recorded{d_.leader->epoch()};
    if (!c.core.FindNode(agent)) {
      spdlog::warn("TaskFinished from unregistered agent {} for {}", agent,
                   core::FormatTaskId(report.task));
      return reply(MakeError(ErrorCode::kConflict, StatusCode::kFailedPrecondition,
                             "agent " + agent + " is not registered"));
    }
    Status s = c.core.TaskFinished(agent, report, c.now);
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kFailedPrecondition) {
      // A duplicate of a finish already recorded? A task leaves memory only once its finish is
      // durable, so one not in memory is looked up in the database, on a reader thread.
      if (const core::Task* t = c.core.FindTask(report.task)) {
        return AnswerRefusedFinish(agent, report.task, t, s, reply);
      }
      d_.readers->Post([this, agent, task = report.task, s, reply = std::move(reply)] {
        auto stored = d_.db->GetTask(task);
        AnswerRefusedFinish(agent, task, stored.ok() && stored->has_value() ? &**stored : nullptr,
                            s, reply);
      });
      return;
    }
    if (s.code() == StatusCode::kAlreadyExists) {
      // A late copy of an earlier run's finish (sent again after its answer was lost).
      spdlog::info("TaskFinished from {}: {}", agent, s.message());
    }
    if (!s.ok()) return reply(ErrorFromStatus(s));
    // Counted and logged from the core's events (a finish, or the end of a stop).
    ReplyWhenDurable(c, recorded, std::move(reply));
  });
}

// A finish report the core refused with `refused`: already exists when `t` (null if unknown)
// shows that this agent's finish of the task is recorded already.
void Application::AnswerRefusedFinish(const std::string& agent, core::TaskNumber task,
                                      const core::Task* t, const Status& refused,
                                      const Reply<FinishRecorded>& reply) const {
  // A member of a multi-node task that has ended has had its finish recorded too.
  const bool member_ended = t != nullptr && std::any_of(t->allocation.begin(), t->allocation.end(),
                                                        [&](const core::NodeAllocation& m) {
                                                          return m.ended && m.node_id == agent;
                                                        });
  if (member_ended || (t != nullptr && core::IsFinished(t->status) && !t->stopping &&
                       core::HasMemberOn(t->allocation, agent))) {
    return reply(MakeError(ErrorCode::kAlreadyExists, StatusCode::kAlreadyExists,
                           core::FormatTaskId(task) + " finish already recorded"));
  }
  spdlog::warn("rejected TaskFinished from {}: {}", agent, refused.message());
  reply(ErrorFromStatus(refused));
}

}  // namespace dgpu::scheduler
