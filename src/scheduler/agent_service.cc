#include "scheduler/agent_service.h"

#include <spdlog/spdlog.h>

#include <deque>
#include <limits>
#include <vector>

#include "common/logging.h"
#include "common/time_util.h"
#include "scheduler/grpc_access.h"
#include "scheduler/log_relay.h"
#include "scheduler/queued_bidi_reactor.h"

namespace dgpu::scheduler {
namespace {

using dgpu::v1::HeartbeatRequest;
using dgpu::v1::HeartbeatResponse;

grpc::Status ToGrpc(const Error& e) {
  return grpc::Status(static_cast<grpc::StatusCode>(e.cause), e.message);
}

// Ends a unary call with the use case's result; `fill` writes a value into the response.
template <typename T, typename Fill>
Reply<T> FinishWith(grpc::ServerUnaryReactor* reactor, Fill fill) {
  return [reactor, fill = std::move(fill)](const Result<T>& r) {
    if (!r.ok()) return reactor->Finish(ToGrpc(r.error()));
    fill(r.value());
    reactor->Finish(grpc::Status::OK);
  };
}

Caller GrpcCaller(const grpc::CallbackServerContext* ctx) {
  return {Caller::Transport::kGrpc, ctx->peer(), {}};
}

// Orders a stop in both forms (see HeartbeatResponse in scheduler.proto): the id for agents that
// predate StopOrder, and the StopOrder with its reason and grace period (-1: the agent's own).
void AddStop(HeartbeatResponse* msg, const std::string& task_id, core::StopReason reason,
             int32_t grace_seconds, core::TaskNumber preempted_by = 0) {
  msg->add_cancel_task_ids(task_id);
  auto* order = msg->add_stop();
  order->set_task_id(task_id);
  order->set_reason(std::string(core::ToString(reason)));
  if (grace_seconds >= 0) order->set_grace_period_seconds(grace_seconds);
  if (preempted_by != 0) order->set_preempted_by(core::FormatTaskId(preempted_by));
}

HeartbeatReport ToReport(const HeartbeatRequest& req) {
  HeartbeatReport report;
  report.agent_id = req.agent_id();
  report.epoch = req.epoch();
  report.running_task_ids.assign(req.running_task_ids().begin(), req.running_task_ids().end());
  for (const auto& u : req.usage()) {
    report.usage.push_back(
        {u.task_id(), u.run(), {u.usage().cpu_micros(), u.usage().max_memory_bytes()}});
  }
  for (const auto& g : req.gpus()) {
    report.gpus.push_back({static_cast<int>(g.index()), g.model(),
                           static_cast<double>(g.utilization_pct()), !g.unhealthy(),
                           g.health_reason()});
    report.any_unhealthy = report.any_unhealthy || g.unhealthy();
  }
  return report;
}

std::optional<core::ResourceUsage> UsageOf(const dgpu::v1::TaskResult& result) {
  if (!result.has_usage()) return std::nullopt;
  return core::ResourceUsage{result.usage().cpu_micros(), result.usage().max_memory_bytes()};
}

StartsRequest ToStarts(const HeartbeatRequest& req) {
  StartsRequest starts;
  starts.agent_id = req.agent_id();
  starts.epoch = req.epoch();
  for (const auto& s : req.started())
    starts.starts.push_back({s.task_id(),
                             s.started_at_unix_micros(),
                             s.run(),
                             {s.cpu_set().begin(), s.cpu_set().end()}});
  return starts;
}

}  // namespace

// One agent's Heartbeat stream. Owns itself until StreamDone; the hub holds a shared reference so
// that decisions can be pushed at any time. One write in flight at a time.
class HeartbeatReactor : public QueuedBidiReactor<HeartbeatRequest, HeartbeatResponse> {
 public:
  HeartbeatReactor(AgentService* svc, std::string peer, std::vector<std::string> names)
      : svc_(svc), peer_(std::move(peer)), names_(std::move(names)) {}
  void Begin(std::shared_ptr<HeartbeatReactor> self) {
    self_ = std::move(self);
    Read(&req_);
  }

 private:
  void ReadDone(bool ok) override {
    if (!ok) {
      Close(grpc::Status::OK);
      return;
    }
    HandleHeartbeat(req_);
    Read(&req_);
  }

  void StreamDone() override {
    if (!agent_id_.empty()) svc_->hub_->Detach(agent_id_, this);
    // `self` may be the last reference: this object is destroyed on return.
    std::shared_ptr<HeartbeatReactor> self = std::move(self_);
  }

  void HandleHeartbeat(const HeartbeatRequest& req) {
    if (req.agent_id().empty()) return;
    if (req.agent_id() != agent_id_) {
      grpc::Status refused = AdmitNode(svc_->access_, names_, req.agent_id(), peer_, "Heartbeat");
      if (!refused.ok()) return Close(refused);
    }
    if (agent_id_.empty()) {
      agent_id_ = req.agent_id();
      svc_->hub_->Attach(agent_id_, self_);
    }
    if (!req.log_chunks().empty()) {
      // Answers to log reads; such a message carries nothing else.
      if (LogRelay* relay = svc_->hub_->log_relay()) {
        for (const auto& chunk : req.log_chunks()) relay->Deliver(agent_id_, chunk);
      }
      return;
    }
    Caller caller{Caller::Transport::kGrpc, peer_, {}};
    if (!req.started().empty()) {
      svc_->app_->ReportStarts(caller, ToStarts(req), [self = self_](const Result<Done>& r) {
        if (!r.ok()) self->Close(ToGrpc(r.error()));
      });
      return;
    }
    svc_->app_->Heartbeat(
        caller, ToReport(req),
        [self = self_, id = agent_id_, hub = svc_->hub_](const Result<HeartbeatAnswer>& r) {
          if (!r.ok()) return self->Close(ToGrpc(r.error()));
          HeartbeatResponse resp;
          resp.set_epoch(r.value().epoch);
          resp.set_reregister(r.value().reregister);
          for (const auto& tid : r.value().stop_tasks) {
            AddStop(&resp, tid, core::StopReason::kReconcile, -1);
          }
          hub->Send(id, std::move(resp));
        });
  }

  AgentService* svc_;
  const std::string peer_;
  const std::vector<std::string> names_;  // of the client certificate, if any
  HeartbeatRequest req_;
  std::string agent_id_;  // Reactor callbacks only.
  // Set in Begin, released in StreamDone (both reactor callbacks, never concurrent).
  std::shared_ptr<HeartbeatReactor> self_;
};

// ----------------------------------------------------------------------------------------------
// AgentHub

void AgentHub::Attach(const std::string& agent_id,
                      const std::shared_ptr<HeartbeatReactor>& stream) {
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

void AgentHub::BeginSession(const std::string& agent_id) {
  std::shared_ptr<HeartbeatReactor> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    backlog_.erase(agent_id);
    auto it = streams_.find(agent_id);
    if (it != streams_.end()) {
      // A process that died (or restarted quickly) leaves its stream open until gRPC notices;
      // orders sent on it would be lost.
      previous = std::move(it->second);
      streams_.erase(it);
    }
  }
  if (previous) {
    previous->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "agent registered again"));
  }
}

void AgentHub::OrderStops(const std::string& agent_id, const std::vector<std::string>& task_ids,
                          core::StopReason reason) {
  HeartbeatResponse stop;
  stop.set_epoch(leader_->epoch());
  for (const auto& t : task_ids) AddStop(&stop, t, reason, -1);
  Send(agent_id, std::move(stop));
}

bool AgentHub::Send(const std::string& agent_id, HeartbeatResponse msg,
                    std::function<void()> written) {
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
  stream->Send(std::move(msg), std::numeric_limits<size_t>::max(), std::move(written));
  return true;
}

bool AgentHub::SendIfOpen(const std::string& agent_id, HeartbeatResponse msg) {
  std::shared_ptr<HeartbeatReactor> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(agent_id);
    if (it == streams_.end()) return false;
    stream = it->second;
  }
  msg.set_epoch(leader_->epoch());
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
  // Submission times of the first runs among the starts, by node.
  std::map<std::string, std::vector<core::TimeMicros>> submitted;
  for (const auto& d : decisions) {
    auto& msg = by_node[d.node_id];
    msg.set_epoch(leader_->epoch());
    if (d.kind == core::Decision::Kind::kStop) {
      AddStop(&msg, core::FormatTaskId(d.task), d.reason, d.grace_seconds, d.preempted_by);
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
    a->set_user(t->spec.user);
    const int run = core::RunNumber(*t);
    a->set_run(run);
    if (const int member = core::RunningMemberOn(t->allocation, d.node_id); member >= 0) {
      a->set_cpus_milli(t->allocation[static_cast<size_t>(member)].cpus_milli);
      a->set_memory_mb(t->allocation[static_cast<size_t>(member)].memory_mb);
    }
    if (run == 1 && metrics_ != nullptr) submitted[d.node_id].push_back(t->created_at);
    if (t->spec.array_size > 0) {
      a->set_array_index(t->spec.array_index);
      a->set_array_size(t->spec.array_size);
    }
    if (t->spec.nodes > 1) {
      // A gang's member: its rank is its place in the allocation; rank 0's node hosts the
      // rendezvous.
      auto* g = a->mutable_gang();
      g->set_nnodes(t->spec.nodes);
      g->set_master_port(t->master_port);
      g->set_gpus_per_node(core::GpusPerNode(t->spec));
      for (size_t rank = 0; rank < t->allocation.size(); ++rank) {
        const std::string& node = t->allocation[rank].node_id;
        if (node == d.node_id) g->set_node_rank(static_cast<int32_t>(rank));
        const std::optional<core::NodeView> view = core.FindNode(node);
        const std::string address = view && !view->address.empty() ? view->address : node;
        if (rank == 0) g->set_master_addr(address);
        g->add_hosts(address);
      }
    }
  }
  for (auto& [node, msg] : by_node) {
    std::function<void()> written;
    auto since = submitted.find(node);
    if (since != submitted.end()) {
      written = [metrics = metrics_, times = std::move(since->second)] {
        const core::TimeMicros now = common::NowMicros();
        for (core::TimeMicros t : times) {
          metrics->dispatch_latency().Observe(static_cast<double>(now - t) / 1e6);
        }
      };
    }
    Send(node, std::move(msg), std::move(written));
  }
}

// ----------------------------------------------------------------------------------------------
// AgentService

AgentService::AgentService(Application* app, AgentHub* hub, int heartbeat_interval_seconds,
                           GrpcAccess access)
    : app_(app),
      hub_(hub),
      heartbeat_interval_seconds_(heartbeat_interval_seconds),
      access_(std::move(access)) {}

grpc::ServerUnaryReactor* AgentService::RegisterAgent(grpc::CallbackServerContext* ctx,
                                                      const dgpu::v1::RegisterAgentRequest* req,
                                                      dgpu::v1::RegisterAgentResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  grpc::Status refused = AdmitGrpcPeer(access_, ctx, "RegisterAgent");
  if (refused.ok()) {
    refused = AdmitNode(access_, NodeCertificateNames(access_, ctx), req->agent_id(), ctx->peer(),
                        "RegisterAgent");
  }
  if (!refused.ok()) {
    reactor->Finish(refused);
    return reactor;
  }
  RegisterRequest r;
  r.agent_id = req->agent_id();
  r.instance_id = req->instance_id();
  r.node_group = req->node_group();
  r.resources = {req->cpus_milli(), req->memory_mb(), req->isolation()};
  r.labels.insert(req->labels().begin(), req->labels().end());
  r.address = req->address();
  r.epoch = req->epoch();
  for (const auto& g : req->gpus()) {
    r.gpus.push_back({g.index(), g.model(), g.memory_mb(), g.uuid(), !g.unhealthy(),
                      g.health_reason(),
                      g.has_nvlink_group() ? g.nvlink_group() : core::kNoLinkGroup});
  }
  for (const auto& t : req->running()) {
    r.running.push_back({t.task_id(), {t.gpu_indices().begin(), t.gpu_indices().end()}, t.run()});
  }
  for (const auto& f : req->finished()) {
    r.finished.push_back({f.task_id(), f.success(), f.exit_code(), f.error(),
                          f.finished_at_unix_micros(), f.run(), UsageOf(f)});
  }
  app_->RegisterNode(GrpcCaller(ctx), std::move(r),
                     FinishWith<Registered>(reactor, [this, resp](const Registered& done) {
                       for (const auto& id : done.acknowledged_finishes) {
                         resp->add_acknowledged_finishes(id);
                       }
                       resp->set_epoch(done.epoch);
                       resp->set_heartbeat_interval_seconds(heartbeat_interval_seconds_);
                     }));
  return reactor;
}

grpc::ServerBidiReactor<HeartbeatRequest, HeartbeatResponse>* AgentService::Heartbeat(
    grpc::CallbackServerContext* ctx) {
  if (grpc::Status refused = AdmitGrpcPeer(access_, ctx, "Heartbeat"); !refused.ok()) {
    return new RefusedStream<HeartbeatRequest, HeartbeatResponse>(refused);
  }
  auto reactor =
      std::make_shared<HeartbeatReactor>(this, ctx->peer(), NodeCertificateNames(access_, ctx));
  HeartbeatReactor* raw = reactor.get();
  raw->Begin(std::move(reactor));
  return raw;
}

grpc::ServerUnaryReactor* AgentService::TaskFinished(grpc::CallbackServerContext* ctx,
                                                     const dgpu::v1::TaskFinishedRequest* req,
                                                     dgpu::v1::TaskFinishedResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  grpc::Status refused = AdmitGrpcPeer(access_, ctx, "TaskFinished");
  if (refused.ok()) {
    refused = AdmitNode(access_, NodeCertificateNames(access_, ctx), req->agent_id(), ctx->peer(),
                        "TaskFinished");
  }
  if (!refused.ok()) {
    reactor->Finish(refused);
    return reactor;
  }
  const auto& result = req->result();
  FinishRequest r{req->agent_id(),
                  req->epoch(),
                  result.task_id(),
                  result.success(),
                  result.exit_code(),
                  result.error(),
                  result.finished_at_unix_micros(),
                  result.run(),
                  UsageOf(result)};
  app_->ReportFinish(GrpcCaller(ctx), r,
                     FinishWith<FinishRecorded>(reactor, [resp](const FinishRecorded& done) {
                       resp->set_epoch(done.epoch);
                     }));
  return reactor;
}

}  // namespace dgpu::scheduler
