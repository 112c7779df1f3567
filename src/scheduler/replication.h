// High availability: replication of the change log to a standby, failure detection, promotion
// with a higher epoch, and stepping down when a higher epoch is seen.
//
// Leader side: the ReplicationService accepts one standby's SyncState stream. The owner thread
// only notes the stream, between two batches; from then on every batch it publishes is kept for
// the stream. A background thread flushes the journal (so the database holds everything
// appended before the note), reads a full snapshot from one read transaction (at the database's
// sequence number S) and sends it, then the kept batches above S follow and the stream receives
// every later batch directly: no batch is missed or sent twice. In sync mode a write is
// acknowledged once the standby has acknowledged its batch; a write waits at most
// replication.sync_timeout, then the leader continues alone and says so (/readyz detail, logs).
//
// Standby side: a follower thread keeps a SyncState stream to the peer and applies what it
// receives to the local database; a monitor thread pings the peer every heartbeat_interval. After
// heartbeat_timeout without the leader it consults the arbiter (a lease file in
// storage.shared_storage, when set) and promotes itself with epoch + 1: it rebuilds the core from
// its database and starts leading. Agents find it by themselves.
//
// Fencing: every message carries an epoch; a leader that sees a higher one (peer, agent, lease
// file) stops acting at once, becomes standby and resyncs from the new leader. With a lease
// file, a leader acts only while its lease is fresh, so a paused leader never acts after its
// lease could have been taken over.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/tls_files.h"
#include "dgpu/v1/replication.grpc.pb.h"
#include "scheduler/agent_service.h"
#include "scheduler/core_bootstrap.h"
#include "scheduler/core_loop.h"
#include "scheduler/etcd_election.h"
#include "scheduler/grpc_access.h"
#include "scheduler/leader_state.h"
#include "scheduler/replication_codec.h"
#include "scheduler/worker_pool.h"
#include "store/database.h"
#include "store/journal.h"

namespace dgpu::scheduler {

struct HaOptions {
  std::string id;            // This scheduler's name.
  std::string http_address;  // Where clients reach this scheduler's REST API.
  common::ReplicationConfig replication;
  std::string lease_dir;  // storage.shared_storage; empty: no lease arbiter.
  // ha.election: etcd: leadership is an etcd lease (the peer is still the replication source).
  bool etcd = false;
  std::vector<std::string> etcd_endpoints;
  std::chrono::milliseconds lease_ttl{10000};
  std::string etcd_prefix = "/dgpu/leader";
  GrpcAccess access;  // Which peers may call (grpc_access.h).
  // replication.tls, checked: the link to the peer speaks TLS; nullopt: plain text.
  std::optional<common::TlsMaterial> peer_tls;
  common::ClientTlsConfig etcd_tls;  // ha.etcd_tls
};

class SyncStreamReactor;

class HaController final : public ReplicationSink,
                           public dgpu::v1::ReplicationService::CallbackService {
 public:
  HaController(HaOptions options, const common::SchedulerConfig& cfg, LeaderState* leader,
               store::Database* db, store::Journal* journal, CoreLoop* loop, AgentHub* hub,
               WorkerPool* background);
  ~HaController() override;

  // Decides the starting role (asks the peer and the lease first) and starts the threads.
  void Start(bool configured_leader);
  void Stop();

  // ReplicationSink (owner thread).
  void Publish(uint64_t seq, const std::vector<core::Change>& changes) override;
  void WhenReplicated(uint64_t seq, std::function<void(Status)> cb) override;

  // ReplicationService.
  grpc::ServerBidiReactor<dgpu::v1::SyncRequest, dgpu::v1::SyncResponse>* SyncState(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx, const dgpu::v1::PingRequest* req,
                                 dgpu::v1::PingResponse* resp) override;

  // A higher epoch was seen somewhere: step down (thread-safe, returns at once).
  void StepDown(uint64_t seen_epoch, const std::string& why);

 private:
  friend class SyncStreamReactor;
  void MonitorLoop();
  void FollowLoop();
  bool Promote(const std::string& why);
  void BecomeStandby(uint64_t epoch, const std::string& why);
  bool LeaseIsStale(int64_t now_wall) const;
  bool RenewLease(int64_t now_wall);
  void FireReplicated(uint64_t acked);
  // A standby's stream: the owner thread notes it (BeginAttach), `background_` reads and sends
  // the snapshot (SendSnapshot), then the batches published meanwhile follow and the stream
  // becomes the standby's (CompleteAttach).
  void BeginAttach(std::shared_ptr<SyncStreamReactor> r);
  void SendSnapshot(SyncStreamReactor& r);
  void FailAttach(SyncStreamReactor& r, const Status& why);
  void CompleteAttach(SyncStreamReactor& r, uint64_t seq, size_t tasks);
  void Detach(SyncStreamReactor* r);
  bool PingPeer(dgpu::v1::PingResponse* resp);

  HaOptions opt_;
  common::SchedulerConfig cfg_;
  LeaderState* leader_;
  store::Database* db_;
  store::Journal* journal_;
  CoreLoop* loop_;
  AgentHub* hub_;
  WorkerPool* background_;
  std::shared_ptr<grpc::Channel> peer_channel_;
  std::unique_ptr<dgpu::v1::ReplicationService::Stub> peer_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                 // GUARDED_BY(mu_)
  SyncStreamReactor* standby_ = nullptr;  // GUARDED_BY(mu_)
  // The stream whose snapshot is being read, the last seq appended when it was noted, and the
  // batches published since.
  struct Attaching {
    SyncStreamReactor* stream = nullptr;
    uint64_t noted_seq = 0;
    std::vector<dgpu::v1::SyncResponse> batches;
  };
  Attaching attaching_;     // GUARDED_BY(mu_)
  uint64_t acked_seq_ = 0;  // GUARDED_BY(mu_)
  bool degraded_ = false;   // GUARDED_BY(mu_)
  struct Waiter {
    int64_t deadline_mono;
    std::function<void(Status)> cb;
  };
  std::multimap<uint64_t, Waiter> waiting_;    // GUARDED_BY(mu_)
  int64_t last_contact_mono_ = 0;              // GUARDED_BY(mu_) last sign of the leader (standby)
  bool step_down_requested_ = false;           // GUARDED_BY(mu_)
  uint64_t step_down_epoch_ = 0;               // GUARDED_BY(mu_)
  std::string step_down_why_;                  // GUARDED_BY(mu_)
  grpc::ClientContext* follow_ctx_ = nullptr;  // GUARDED_BY(mu_)

  std::unique_ptr<EtcdElection> election_;
  std::thread monitor_;
  std::thread follower_;
};

}  // namespace dgpu::scheduler
