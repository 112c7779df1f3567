// The gRPC SchedulerService that agents talk to, and the hub of their Heartbeat streams.
//
// Callback API throughout: thousands of agent streams need no thread each. Every request is
// turned into a plain request and handed to the Application's agent use cases; unary answers are
// sent when the use case answers (for a change, once it is durable). Decisions are pushed on the
// agent's stream the moment they are made.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dgpu/v1/scheduler.grpc.pb.h"
#include "scheduler/application.h"
#include "scheduler/core_loop.h"
#include "scheduler/grpc_access.h"
#include "scheduler/leader_state.h"
#include "scheduler/metrics.h"

namespace dgpu::scheduler {

class HeartbeatReactor;
class LogRelay;

// Open Heartbeat streams by agent id; thread-safe. Implements Dispatcher and AgentChannel.
class AgentHub : public Dispatcher, public AgentChannel {
 public:
  // `metrics` (may be null) gets each first run's submission-to-written time.
  explicit AgentHub(LeaderState* leader, Metrics* metrics = nullptr)
      : leader_(leader), metrics_(metrics) {}
  void Dispatch(const core::SchedulerCore& core,
                const std::vector<core::Decision>& decisions) override;
  // Sends a message on the agent's stream; false if it has none open (it is kept until one
  // opens). `written` as in QueuedBidiReactor::Send; not called for a message kept.
  bool Send(const std::string& agent_id, dgpu::v1::HeartbeatResponse msg,
            std::function<void()> written = nullptr);
  // Sends on the agent's open stream, stamped with the leader's epoch; false (and nothing kept)
  // when it has none.
  bool SendIfOpen(const std::string& agent_id, dgpu::v1::HeartbeatResponse msg);
  // Where the agents' answers to log reads go (LogChunk); set before the server starts.
  void set_log_relay(LogRelay* relay) { log_relay_ = relay; }
  LogRelay* log_relay() const { return log_relay_; }
  void Attach(const std::string& agent_id, const std::shared_ptr<HeartbeatReactor>& stream);
  void Detach(const std::string& agent_id, const HeartbeatReactor* stream);
  void BeginSession(const std::string& agent_id) override;
  void OrderStops(const std::string& agent_id, const std::vector<std::string>& task_ids,
                  core::StopReason reason) override;
  size_t open_streams() const;
  // Ends every stream (shutdown).
  void CloseAll();

 private:
  LeaderState* leader_;
  Metrics* metrics_;
  LogRelay* log_relay_ = nullptr;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<HeartbeatReactor>> streams_;        // GUARDED_BY(mu_)
  std::map<std::string, std::deque<dgpu::v1::HeartbeatResponse>> backlog_;  // GUARDED_BY(mu_)
};

class AgentService final : public dgpu::v1::SchedulerService::CallbackService {
 public:
  // `access` decides which peers may call, and as which node (grpc_access.h).
  AgentService(Application* app, AgentHub* hub, int heartbeat_interval_seconds,
               GrpcAccess access = {});

  grpc::ServerUnaryReactor* RegisterAgent(grpc::CallbackServerContext* ctx,
                                          const dgpu::v1::RegisterAgentRequest* req,
                                          dgpu::v1::RegisterAgentResponse* resp) override;
  grpc::ServerBidiReactor<dgpu::v1::HeartbeatRequest, dgpu::v1::HeartbeatResponse>* Heartbeat(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* TaskFinished(grpc::CallbackServerContext* ctx,
                                         const dgpu::v1::TaskFinishedRequest* req,
                                         dgpu::v1::TaskFinishedResponse* resp) override;

 private:
  friend class HeartbeatReactor;
  Application* app_;
  AgentHub* hub_;
  int heartbeat_interval_seconds_;
  const GrpcAccess access_;
};

}  // namespace dgpu::scheduler
