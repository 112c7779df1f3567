#include "scheduler/agent_service.h"

#include <spdlog/spdlog.h>

#include <deque>

#include "common/logging.h"
#include "scheduler/queued_bidi_reactor.h"

namespace dgpu::scheduler {
namespace {

using dgpu::v1::HeartbeatRequest;
using dgpu::v1::HeartbeatResponse;

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// Orders a stop in both forms (see HeartbeatResponse in scheduler.proto): the id for agents that
// predate StopOrder, and the StopOrder with its reason and grace period (-1: the agent's own).
void AddStop(HeartbeatResponse* msg, const std::string& task_id, core::StopReason reason,
             int32_t grace_seconds) {
  msg->add_cancel_task_ids(task_id);
  auto* order = msg->add_stop();
  order->set_task_id(task_id);
  order->set_reason(std::string(core::ToString(reason)));
  if (grace_seconds >= 0) order->set_grace_period_seconds(grace_seconds);
}

// Records an agent's start confirmation: the task's start time becomes the agent's.
Status RecordStart(core::SchedulerCore& core, const std::string& node_id,
                   const dgpu::v1::TaskStart& start) {
  auto n = core::ParseTaskId(start.task_id());
  if (!n) return InvalidArgument("task_id \"" + start.task_id() + "\" is not a task id");
  if (start.started_at_unix_micros() <= 0) {
    return InvalidArgument(start.task_id() + " has no started_at_unix_micros");
  }
  return core.TaskStarted(*n, node_id, start.started_at_unix_micros());
}

}  // namespace

// One agent's Heartbeat stream. Owns itself until OnDone; the hub holds a shared reference so
// that decisions can be pushed at any time. One write in flight at a time.
class HeartbeatReactor : public QueuedBidiReactor<HeartbeatRequest, HeartbeatResponse> {
 public:
  explicit HeartbeatReactor(AgentService* svc) : svc_(svc) {}
  void Begin(std::shared_ptr<HeartbeatReactor> self) {
    self_ = std::move(self);
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Close(grpc::Status::OK);
      return;
    }
    HandleHeartbeat(req_);
    StartRead(&req_);
  }

  void OnDone() override {
    if (!agent_id_.empty()) svc_->hub_->Detach(agent_id_, this);
    MarkDone();
    // `self` may be the last reference: this object is destroyed on return.
    std::shared_ptr<HeartbeatReactor> self = std::move(self_);
  }

 private:
  void HandleHeartbeat(const HeartbeatRequest& req) {
    if (req.agent_id().empty()) return;
    svc_->leader_->ObserveEpoch(req.epoch());
    if (agent_id_.empty()) {
      agent_id_ = req.agent_id();
      svc_->hub_->Attach(agent_id_, self_);
    }
    if (!req.started().empty()) {
      HandleStarts(req);
      return;
    }
    for (const auto& g : req.gpus()) {
      if (g.utilization_pct() >= 0) {
        svc_->metrics_->GpuUtilization(GpuId(agent_id_, g.index()), g.model(),
                                       g.utilization_pct() / 100.0);
      }
    }
    std::vector<std::string> running(req.running_task_ids().begin(), req.running_task_ids().end());
    std::string id = agent_id_;
    AgentHub* hub = svc_->hub_;
    LeaderState* leader = svc_->leader_;
    svc_->loop_->Post([id, running = std::move(running), hub, leader](CoreLoop::Context& ctx) {
      Status s = ctx.core.Heartbeat(id, ctx.now);
      HeartbeatResponse resp;
      resp.set_epoch(leader->epoch());
      if (!s.ok()) {
        resp.set_reregister(true);
        hub->Send(id, std::move(resp));
        return;
      }
      // Tasks the agent runs that are not ours to run there any more are stopped.
      for (const auto& tid : running) {
        auto n = core::ParseTaskId(tid);
        const core::Task* t = n ? ctx.core.FindTask(*n) : nullptr;
        bool ours = t != nullptr && (t->status == core::TaskStatus::kRunning || t->stopping) &&
                    !t->allocation.empty() && t->allocation[0].node_id == id;
        if (!ours) AddStop(&resp, tid, core::StopReason::kReconcile, -1);
      }
      hub->Send(id, std::move(resp));
    });
  }

  // A start confirmation (not a heartbeat): each start is posted to the core; a report the core
  // cannot apply (unknown task, not running on this agent, no time) is logged and dropped.
  void HandleStarts(const HeartbeatRequest& req) {
    std::vector<dgpu::v1::TaskStart> starts(req.started().begin(), req.started().end());
    svc_->loop_->Post([id = agent_id_, starts = std::move(starts)](CoreLoop::Context& ctx) {
      for (const auto& start : starts) {
        Status s = RecordStart(ctx.core, id, start);
        if (!s.ok()) spdlog::warn("ignored start confirmation from {}: {}", id, s.message());
      }
    });
  }

  AgentService* svc_;
  HeartbeatRequest req_;
  std::string agent_id_;  // Reactor callbacks only.
  // Set in Begin, released in OnDone (both reactor callbacks, never concurrent).
  std::shared_ptr<HeartbeatReactor> self_;
};

// ----------------------------------------------------------------------------------------------
// AgentHub

void AgentHub::Attach(const std::string& agent_id, std::shared_ptr<HeartbeatReactor> stream) {
  std::deque<HeartbeatResponse> backlog;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[agent_id] = stream;
    backlog.swap(backlog_[agent_id]);
  }
  for (auto& m : backlog) stream->Send(std::move(m));
}

void AgentHub::Detach(const std::string& agent_id, const HeartbeatReactor* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(agent_id);
  if (it != streams_.end() && it->second.get() == stream) streams_.erase(it);
}

void AgentHub::ForgetBacklog(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  backlog_.erase(agent_id);
}

bool AgentHub::Send(const std::string& agent_id, HeartbeatResponse msg) {
  std::shared_ptr<HeartbeatReactor> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(agent_id);
    if (it == streams_.end()) {
      // Registered but its stream is not open yet: deliver when it opens.
      auto& q = backlog_[agent_id];
      if (q.size() < 10000) q.push_back(std::move(msg));
      return false;
    }
    stream = it->second;
  }
  stream->Send(std::move(msg));
  return true;
}

size_t AgentHub::open_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

void AgentHub::CloseAll() {
  std::map<std::string, std::shared_ptr<HeartbeatReactor>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  for (auto& [id, s] : streams) {
    s->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "scheduler shutting down"));
  }
}

void AgentHub::Dispatch(const core::SchedulerCore& core,
                        const std::vector<core::Decision>& decisions) {
  std::map<std::string, HeartbeatResponse> by_node;
  for (const auto& d : decisions) {
    auto& msg = by_node[d.node_id];
    msg.set_epoch(leader_->epoch());
    if (d.kind == core::Decision::Kind::kStop) {
      AddStop(&msg, core::FormatTaskId(d.task), d.reason, d.grace_seconds);
      continue;
    }
    const core::Task* t = core.FindTask(d.task);
    if (t == nullptr) continue;
    auto* a = msg.add_start();
    a->set_task_id(core::FormatTaskId(t->id));
    a->set_name(t->spec.name);
    a->set_command(t->spec.command);
    for (const auto& [k, v] : t->spec.env) (*a->mutable_env())[k] = v;
    for (int i : d.gpu_indices) a->add_gpu_indices(i);
    a->set_timeout_seconds(t->spec.timeout_seconds);
    a->set_image(t->spec.image);
  }
  for (auto& [node, msg] : by_node) Send(node, std::move(msg));
}

// ----------------------------------------------------------------------------------------------
// AgentService

AgentService::AgentService(CoreLoop* loop, AgentHub* hub, LeaderState* leader, store::Database* db,
                           WorkerPool* readers, Metrics* metrics, int heartbeat_interval_seconds)
    : loop_(loop),
      hub_(hub),
      leader_(leader),
      db_(db),
      readers_(readers),
      metrics_(metrics),
      heartbeat_interval_seconds_(heartbeat_interval_seconds) {}

grpc::ServerUnaryReactor* AgentService::RegisterAgent(grpc::CallbackServerContext* ctx,
                                                      const dgpu::v1::RegisterAgentRequest* req,
                                                      dgpu::v1::RegisterAgentResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  leader_->ObserveEpoch(req->epoch());
  if (!leader_->is_leader()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader"));
    return reactor;
  }
  if (req->agent_id().empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "agent_id is required"));
    return reactor;
  }
  std::vector<core::GpuInfo> gpus;
  for (const auto& g : req->gpus()) {
    gpus.push_back({g.index(), g.model(), g.memory_mb(), g.uuid(), true, ""});
  }
  std::vector<core::RunningReport> running;
  std::vector<std::string> unparsable;
  for (const auto& r : req->running()) {
    auto n = core::ParseTaskId(r.task_id());
    if (!n) {
      unparsable.push_back(r.task_id());
      continue;
    }
    running.push_back({*n, {r.gpu_indices().begin(), r.gpu_indices().end()}});
  }
  std::vector<core::FinishReport> finished;
  for (const auto& f : req->finished()) {
    auto n = core::ParseTaskId(f.task_id());
    if (!n) continue;
    finished.push_back({*n, f.success(), f.exit_code(), f.error(), f.finished_at_unix_micros()});
    resp->add_acknowledged_finishes(f.task_id());
  }
  for (const auto& f : req->finished()) {
    if (!core::ParseTaskId(f.task_id())) resp->add_acknowledged_finishes(f.task_id());
  }
  std::string id = req->agent_id();
  std::string address = req->address().empty() ? ctx->peer() : req->address();
  loop_->Post([this, reactor, resp, id, address, gpus = std::move(gpus),
               running = std::move(running), finished = std::move(finished),
               unparsable = std::move(unparsable)](CoreLoop::Context& c) {
    hub_->ForgetBacklog(id);  // The registration reconciles everything decided before it.
    Status s = c.core.RegisterNode(id, address, gpus, running, finished, c.now);
    if (!s.ok()) {
      reactor->Finish(ToGrpc(s));
      return;
    }
    if (!unparsable.empty()) {
      HeartbeatResponse stop;
      stop.set_epoch(leader_->epoch());
      for (const auto& t : unparsable) AddStop(&stop, t, core::StopReason::kReconcile, -1);
      hub_->Send(id, std::move(stop));
    }
    resp->set_epoch(leader_->epoch());
    resp->set_heartbeat_interval_seconds(heartbeat_interval_seconds_);
    c.OnDurable([reactor](Status st) { reactor->Finish(ToGrpc(st)); });
  });
  return reactor;
}

grpc::ServerBidiReactor<HeartbeatRequest, HeartbeatResponse>* AgentService::Heartbeat(
    grpc::CallbackServerContext* ctx) {
  auto reactor = std::make_shared<HeartbeatReactor>(this);
  HeartbeatReactor* raw = reactor.get();
  raw->Begin(std::move(reactor));
  return raw;
}

namespace {

// Answers a finish report the core refused with `refused`: ALREADY_EXISTS when `t` (null if
// unknown) shows that this agent's finish of the task is recorded already.
void AnswerRefusedFinish(grpc::ServerUnaryReactor* reactor, const std::string& agent,
                         core::TaskNumber task, const core::Task* t, const Status& refused) {
  if (t != nullptr && core::IsFinished(t->status) && !t->stopping && !t->allocation.empty() &&
      t->allocation[0].node_id == agent) {
    reactor->Finish(grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                                 core::FormatTaskId(task) + " finish already recorded"));
    return;
  }
  spdlog::warn("rejected TaskFinished from {}: {}", agent, refused.message());
  reactor->Finish(ToGrpc(refused));
}

}  // namespace

grpc::ServerUnaryReactor* AgentService::TaskFinished(grpc::CallbackServerContext* ctx,
                                                     const dgpu::v1::TaskFinishedRequest* req,
                                                     dgpu::v1::TaskFinishedResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  leader_->ObserveEpoch(req->epoch());
  if (!leader_->is_leader()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader"));
    return reactor;
  }
  auto n = core::ParseTaskId(req->result().task_id());
  if (!n) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "task_id \"" + req->result().task_id() + "\" is not a task id"));
    return reactor;
  }
  const auto& r = req->result();
  core::FinishReport report{*n, r.success(), r.exit_code(), r.error(), r.finished_at_unix_micros()};
  std::string agent = req->agent_id();
  loop_->Post([this, reactor, resp, report, agent](CoreLoop::Context& c) {
    resp->set_epoch(leader_->epoch());
    auto node = c.core.FindNode(agent);
    if (!node) {
      spdlog::warn("TaskFinished from unregistered agent {} for {}", agent,
                   core::FormatTaskId(report.task));
      reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   "agent " + agent + " is not registered"));
      return;
    }
    Status s = c.core.TaskFinished(agent, report, c.now);
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kFailedPrecondition) {
      // A duplicate of a finish already recorded? A task leaves memory only once its finish is
      // durable, so one not in memory is looked up in the database, on a reader thread.
      if (const core::Task* t = c.core.FindTask(report.task)) {
        AnswerRefusedFinish(reactor, agent, report.task, t, s);
        return;
      }
      readers_->Post([db = db_, reactor, agent, task = report.task, s] {
        auto stored = db->GetTask(task);
        const core::Task* t = stored.ok() && stored->has_value() ? &**stored : nullptr;
        AnswerRefusedFinish(reactor, agent, task, t, s);
      });
      return;
    }
    if (!s.ok()) {
      reactor->Finish(ToGrpc(s));
      return;
    }
    // Counted and logged from the core's events (a finish, or the end of a stop).
    c.OnDurable([reactor](Status st) { reactor->Finish(ToGrpc(st)); });
  });
  return reactor;
}

}  // namespace dgpu::scheduler
