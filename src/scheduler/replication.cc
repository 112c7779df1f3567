#include "scheduler/replication.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/number.h"
#include "common/time_util.h"
#include "scheduler/grpc_access.h"
#include "scheduler/queued_bidi_reactor.h"
#include "store/snapshot.h"

namespace dgpu::scheduler {
namespace {

using dgpu::v1::SyncRequest;
using dgpu::v1::SyncResponse;

constexpr size_t kSnapshotChunk = 2000;        // Tasks per snapshot message.
constexpr size_t kMaxQueuedMessages = 200000;  // A standby this far behind is resynced.
constexpr char kLeaseFile[] = "dgpu-leader.lease";

int64_t Mono() { return common::SystemClock::Instance().MonotonicMicros(); }
int64_t Micros(std::chrono::milliseconds d) { return d.count() * 1000; }

}  // namespace

core::CoreConfig CoreConfigOf(const common::SchedulerConfig& cfg, const store::StoreMeta& meta) {
  core::CoreConfig core_cfg;
  core_cfg.online_percent = meta.online_percent.value_or(cfg.quota.online_percent);
  core_cfg.max_attempts = cfg.scheduler.max_attempts;
  core_cfg.max_bypass = cfg.scheduler.max_bypass;
  core_cfg.heartbeat_timeout = cfg.agent.heartbeat_timeout.count() * 1000;
  core_cfg.borrowing = cfg.quota.borrowing;
  core_cfg.fairshare_half_life = cfg.quota.fairshare_half_life.count() * 1000;
  core_cfg.preemption_grace_seconds = static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(cfg.preemption.grace_period).count());
  core_cfg.min_runtime = cfg.preemption.min_runtime.count() * 1000;
  for (const auto& [name, team] : cfg.quota.teams) {
    core_cfg.teams[name] = {team.online, team.batch, team.max_gpus, team.weight};
  }
  return core_cfg;
}

std::unique_ptr<core::SchedulerCore> NewCore(const common::SchedulerConfig& cfg,
                                             const store::StoreMeta& meta) {
  auto core = std::make_unique<core::SchedulerCore>(CoreConfigOf(cfg, meta));
  for (const core::TeamRecord& team : meta.teams) {
    // Stored records were checked when they were read.
    (void)core->RestoreTeam(team);
  }
  for (const core::NodeRecord& node : meta.nodes) (void)core->RestoreNodeMode(node);
  return core;
}

StatusOr<std::unique_ptr<core::SchedulerCore>> BuildCoreFromDatabase(
    store::Database* db, const common::SchedulerConfig& cfg, core::TimeMicros now,
    store::StoreMeta* meta) {
  // The tasks go from the database into the core one by one: no vector of them all.
  std::unique_ptr<core::SchedulerCore> core;
  store::StoreMeta state;
  Status s = db->LoadEach(
      [&](core::Task&& t) {
        if (core == nullptr) core = NewCore(cfg, state);
        const core::TaskNumber id = t.id;
        if (Status r = core->Restore(std::move(t), now); !r.ok()) {
          return Internal("cannot restore " + core::FormatTaskId(id) + ": " + r.message());
        }
        return OkStatus();
      },
      &state);
  if (!s.ok()) return s;
  if (core == nullptr) core = NewCore(cfg, state);
  core->SetNextTaskNumber(state.next_task_number);
  core->TakeChanges();                 // Restoring changes nothing on disk.
  if (meta != nullptr) *meta = state;  // The meta values read with the tasks.
  return core;
}

// ------------------------------------------------------------------------------------------------
// Leader side: one standby's SyncState stream.

class SyncStreamReactor : public QueuedBidiReactor<SyncRequest, SyncResponse> {
 public:
  explicit SyncStreamReactor(HaController* ha) : ha_(ha) {}
  void Begin(std::shared_ptr<SyncStreamReactor> self) {
    self_ = std::move(self);
    Read(&req_);
  }

  // A standby this far behind is dropped; it reconnects and resyncs from a snapshot.
  void Send(SyncResponse m) { QueuedBidiReactor::Send(std::move(m), kMaxQueuedMessages); }

  const std::string& standby_id() const { return standby_id_; }

 private:
  void ReadDone(bool ok) override {
    if (!ok) {
      Close(grpc::Status::OK);
      return;
    }
    ha_->leader_->ObserveEpoch(req_.epoch());
    if (first_) {
      first_ = false;
      if (!ha_->leader_->is_leader()) {
        Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader"));
        return;
      }
      standby_id_ = req_.standby_id();
      // The owner thread notes where the stream starts, between two batches; the snapshot is
      // read and sent on a background thread.
      auto self = self_;
      ha_->loop_->Post([self](CoreLoop::Context&) { self->ha_->BeginAttach(self); });
    } else {
      ha_->FireReplicated(req_.acked_seq());
    }
    Read(&req_);
  }

  void StreamDone() override {
    ha_->Detach(this);
    std::shared_ptr<SyncStreamReactor> self = std::move(self_);
  }

  HaController* ha_;
  SyncRequest req_;
  bool first_ = true;
  std::string standby_id_;
  // Set in Begin, released in StreamDone (reactor callbacks); read by the posted Attach, which
  // holds its own reference.
  std::shared_ptr<SyncStreamReactor> self_;
};

// The initial snapshot of a stream, sent in chunks of kSnapshotChunk tasks as rows are read; the
// last chunk (possibly empty) says `more: false`.
class SnapshotSender {
 public:
  SnapshotSender(SyncStreamReactor& stream, uint64_t epoch, const store::StoreMeta& meta)
      : stream_(stream), epoch_(epoch), meta_(meta) {
    Start();
  }
  void Add(const core::Task& t) {
    if (chunk_.snapshot().tasks_size() == static_cast<int>(kSnapshotChunk)) Send(true);
    TaskToRecord(t, chunk_.mutable_snapshot()->add_tasks());
    ++sent_;
  }
  void Finish() { Send(false); }
  size_t tasks_sent() const { return sent_; }

 private:
  void Start() {
    chunk_.Clear();
    chunk_.set_epoch(epoch_);
    auto* snap = chunk_.mutable_snapshot();
    snap->set_seq(meta_.last_applied_seq);
    snap->set_epoch(epoch_);
    snap->set_online_percent(meta_.online_percent.value_or(-1.0));
    snap->set_next_task_number(meta_.next_task_number);
    if (!teams_sent_) {
      for (const core::TeamRecord& team : meta_.teams) TeamToRecord(team, snap->add_teams());
      for (const core::NodeRecord& node : meta_.nodes) NodeToRecord(node, snap->add_nodes());
      teams_sent_ = true;
    }
  }
  void Send(bool more) {
    chunk_.mutable_snapshot()->set_more(more);
    stream_.Send(std::move(chunk_));
    Start();
  }

  SyncStreamReactor& stream_;
  const uint64_t epoch_;
  const store::StoreMeta meta_;
  SyncResponse chunk_;
  size_t sent_ = 0;
  bool teams_sent_ = false;
};

// ------------------------------------------------------------------------------------------------

HaController::HaController(HaOptions options, const common::SchedulerConfig& cfg,
                           LeaderState* leader, store::Database* db, store::Journal* journal,
                           CoreLoop* loop, AgentHub* hub, WorkerPool* background)
    : opt_(std::move(options)),
      cfg_(cfg),
      leader_(leader),
      db_(db),
      journal_(journal),
      loop_(loop),
      hub_(hub),
      background_(background) {
  if (opt_.replication.enabled && !opt_.replication.peer_address.empty()) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(opt_.replication.heartbeat_interval.count()));
    args.SetMaxReceiveMessageSize(64 << 20);
    peer_channel_ =
        grpc::CreateCustomChannel(common::ToConnectAddress(opt_.replication.peer_address),
                                  common::ChannelCredentials(opt_.peer_tls), args);
    peer_ = dgpu::v1::ReplicationService::NewStub(peer_channel_);
  }
}

HaController::~HaController() { Stop(); }

bool HaController::PingPeer(dgpu::v1::PingResponse* resp) {
  if (!peer_) return false;
  dgpu::v1::PingRequest req;
  req.set_id(opt_.id);
  req.set_epoch(leader_->epoch());
  req.set_role(leader_->is_leader() ? "leader" : "standby");
  req.set_http_address(opt_.http_address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + opt_.replication.heartbeat_interval);
  return peer_->Ping(&ctx, req, resp).ok();
}

void HaController::Start(bool configured_leader) {
  if (opt_.etcd) {
    // Leadership is decided by the etcd election; until it is won, this scheduler follows.
    leader_->set_uses_lease(true);
    leader_->Set(false, leader_->epoch());
    loop_->ReplaceCore(NewCore(cfg_, store::StoreMeta{}));
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_contact_mono_ = Mono();
    }
    EtcdElection::Callbacks cb;
    cb.on_elected = [this] { return Promote("won the etcd election"); };
    cb.on_lost = [this](const std::string& why) { StepDown(leader_->epoch(), why); };
    cb.set_act_until = [this](int64_t until) { leader_->set_lease_until(until); };
    election_ = std::make_unique<EtcdElection>(
        EtcdClient(opt_.etcd_endpoints, opt_.etcd_tls), opt_.etcd_prefix + "/election",
        opt_.id + " " + opt_.http_address, opt_.lease_ttl, std::move(cb));
    // The configured master campaigns first, so it normally wins a fresh start.
    election_->Start(configured_leader ? std::chrono::milliseconds(0)
                                       : std::chrono::milliseconds(1000));
    monitor_ = std::thread([this] { MonitorLoop(); });
    if (peer_) follower_ = std::thread([this] { FollowLoop(); });
    return;
  }
  bool lead = configured_leader;
  const uint64_t epoch = leader_->epoch();
  dgpu::v1::PingResponse peer;
  if (PingPeer(&peer) && peer.role() == "leader" && peer.epoch() >= epoch) {
    spdlog::info("peer {} leads with epoch {}: starting as its standby", peer.id(), peer.epoch());
    lead = false;
    // Known at once (not only after the monitor's first ping): writes get X-Leader right away.
    if (!peer.http_address().empty()) leader_->set_leader_http(peer.http_address());
  }
  if (!opt_.lease_dir.empty()) {
    leader_->set_uses_lease(true);
    if (lead && !LeaseIsStale(common::NowMicros())) {
      std::ifstream in(opt_.lease_dir + "/" + kLeaseFile);
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_object() && j.value("id", "") != opt_.id) {
        spdlog::info("the leader lease is held by {}: starting as standby", j.value("id", ""));
        lead = false;
      }
    }
  }
  if (lead) {
    if (!opt_.lease_dir.empty()) RenewLease(common::NowMicros());
    leader_->Set(true, epoch);
    leader_->set_leader_http(opt_.http_address);
    common::LogEvent(common::events::kLeaderElected, {{"epoch", epoch}, {"reason", "role"}});
  } else {
    leader_->Set(false, std::max(epoch, peer.epoch()));
    // A standby serves reads from its database: the core it loaded would go stale.
    loop_->ReplaceCore(NewCore(cfg_, store::StoreMeta{}));
    std::lock_guard<std::mutex> lock(mu_);
    last_contact_mono_ = Mono();
  }
  monitor_ = std::thread([this] { MonitorLoop(); });
  if (peer_) follower_ = std::thread([this] { FollowLoop(); });
}

void HaController::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !monitor_.joinable() && !follower_.joinable()) return;
    stopping_ = true;
    if (follow_ctx_ != nullptr) follow_ctx_->TryCancel();
  }
  cv_.notify_all();
  if (election_) election_->Stop();
  if (monitor_.joinable()) monitor_.join();
  if (follower_.joinable()) follower_.join();
  std::vector<SyncStreamReactor*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (SyncStreamReactor* s : {standby_, attaching_.stream}) {
      if (s != nullptr) streams.push_back(s);
    }
  }
  for (SyncStreamReactor* s : streams) {
    s->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
  }
  FireReplicated(UINT64_MAX);
}

// --- Leader side ---------------------------------------------------------------------------------

void HaController::BeginAttach(std::shared_ptr<SyncStreamReactor> r) {
  // Owner thread, between two batches: every batch from here on is kept for this stream until
  // its snapshot has been sent.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (attaching_.stream != nullptr) {
      attaching_.stream->Close(
          grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer stream"));
    }
    attaching_ = Attaching{r.get(), journal_->stats().last_appended_seq, {}};
  }
  background_->Post([this, r = std::move(r)] { SendSnapshot(*r); });
}

void HaController::SendSnapshot(SyncStreamReactor& r) {
  uint64_t noted_seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (attaching_.stream != &r) return;  // Closed or replaced meanwhile.
    noted_seq = attaching_.noted_seq;
  }
  // Everything appended before the stream was noted becomes durable, so the snapshot holds it.
  Status s = journal_->Flush();
  StatusOr<std::unique_ptr<store::ReadSnapshot>> snapshot =
      s.ok() ? db_->OpenReadSnapshot() : StatusOr<std::unique_ptr<store::ReadSnapshot>>(s);
  if (snapshot.ok() && (*snapshot)->meta().last_applied_seq < noted_seq) {
    snapshot =
        Internal("the database is at seq " + std::to_string((*snapshot)->meta().last_applied_seq) +
                 " after a flush up to seq " + std::to_string(noted_seq));
  }
  if (!snapshot.ok()) {
    FailAttach(r, snapshot.status());
    return;
  }
  const store::StoreMeta& meta = (*snapshot)->meta();
  SnapshotSender sender(r, leader_->epoch(), meta);
  s = (*snapshot)->ForEachTask([&](const core::Task& t) { sender.Add(t); });
  if (!s.ok()) {
    FailAttach(r, s);
    return;
  }
  sender.Finish();
  CompleteAttach(r, meta.last_applied_seq, sender.tasks_sent());
}

void HaController::FailAttach(SyncStreamReactor& r, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (attaching_.stream == &r) attaching_ = Attaching{};
  }
  r.Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, why.message()));
}

void HaController::CompleteAttach(SyncStreamReactor& r, uint64_t seq, size_t tasks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (attaching_.stream != &r) return;  // Closed or replaced meanwhile.
    // The batches the snapshot does not hold yet follow it, in order.
    for (auto& batch : attaching_.batches) {
      if (batch.batch().seq() > seq) r.Send(std::move(batch));
    }
    attaching_ = Attaching{};
    if (standby_ != nullptr && standby_ != &r) {
      standby_->Close(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer stream"));
    }
    standby_ = &r;
    acked_seq_ = std::min(acked_seq_, seq);
    degraded_ = false;
  }
  leader_->set_detail("");
  spdlog::info("standby {} attached: snapshot of {} tasks at seq {}", r.standby_id(), tasks, seq);
}

void HaController::Detach(SyncStreamReactor* r) {
  std::vector<std::function<void(Status)>> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (attaching_.stream == r) attaching_ = Attaching{};
    if (standby_ != r) return;
    standby_ = nullptr;
    // Nobody acknowledges these any more: the leader continues alone at once, as it does for
    // every write while no standby is attached, instead of after `sync_timeout`.
    for (auto& [seq, waiter] : waiting_) released.push_back(std::move(waiter.cb));
    waiting_.clear();
  }
  if (released.empty()) {
    spdlog::warn("standby stream closed");
  } else {
    spdlog::warn("standby stream closed: {} writes waiting for it continue without it",
                 released.size());
  }
  for (auto& cb : released) cb(OkStatus());
}

void HaController::Publish(uint64_t seq, const std::vector<core::Change>& changes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (standby_ == nullptr && attaching_.stream == nullptr) return;
  SyncResponse m;
  m.set_epoch(leader_->epoch());
  auto* b = m.mutable_batch();
  b->set_seq(seq);
  for (const auto& c : changes) ChangeToRecord(c, b->add_changes());
  if (attaching_.stream != nullptr) {
    if (attaching_.batches.size() < kMaxQueuedMessages) {
      attaching_.batches.push_back(m);
    } else {
      attaching_.stream->Close(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "peer too far behind"));
      attaching_ = Attaching{};
    }
  }
  if (standby_ != nullptr) standby_->Send(std::move(m));
}

void HaController::WhenReplicated(uint64_t seq, std::function<void(Status)> cb) {
  // Acknowledge only as a leader still entitled to act: a leader that was paused past its lease
  // (or saw a higher epoch) may have been replaced, and the new leader never sees this write.
  // Without this, a resumed old primary acknowledged a client write or an agent's finish report
  // (the standby's stream was already gone, so nothing waited) and the write was lost.
  cb = [this, cb = std::move(cb)](Status s) {
    if (s.ok() && !leader_->MayAct(Mono())) {
      s = Unavailable("leadership or its lease was lost before the write was acknowledged");
    }
    cb(s);
  };
  if (opt_.replication.mode == common::ReplicationMode::kAsync) {
    cb(OkStatus());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (standby_ != nullptr && !degraded_ && seq > acked_seq_) {
      waiting_.emplace(seq, Waiter{Mono() + Micros(opt_.replication.sync_timeout), std::move(cb)});
      return;
    }
  }
  cb(OkStatus());
}

void HaController::FireReplicated(uint64_t acked) {
  std::vector<std::function<void(Status)>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (acked != UINT64_MAX) acked_seq_ = std::max(acked_seq_, acked);
    if (degraded_ && acked != UINT64_MAX) {
      degraded_ = false;
      spdlog::info("standby caught up at seq {}: replication is synchronous again", acked);
    }
    auto end = waiting_.upper_bound(acked);
    for (auto it = waiting_.begin(); it != end; ++it) ready.push_back(std::move(it->second.cb));
    waiting_.erase(waiting_.begin(), end);
  }
  if (acked != UINT64_MAX) leader_->set_detail("");
  for (auto& cb : ready) cb(OkStatus());
}

grpc::ServerBidiReactor<SyncRequest, SyncResponse>* HaController::SyncState(
    grpc::CallbackServerContext* ctx) {
  if (grpc::Status refused = AdmitPeerScheduler(opt_.access, ctx, "SyncState"); !refused.ok()) {
    return new RefusedStream<SyncRequest, SyncResponse>(refused);
  }
  auto r = std::make_shared<SyncStreamReactor>(this);
  SyncStreamReactor* raw = r.get();
  raw->Begin(std::move(r));
  return raw;
}

grpc::ServerUnaryReactor* HaController::Ping(grpc::CallbackServerContext* ctx,
                                             const dgpu::v1::PingRequest* req,
                                             dgpu::v1::PingResponse* resp) {
  if (grpc::Status refused = AdmitPeerScheduler(opt_.access, ctx, "Ping"); !refused.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(refused);
    return reactor;
  }
  leader_->ObserveEpoch(req->epoch());
  if (!leader_->is_leader() && req->role() == "leader" && req->epoch() >= leader_->epoch()) {
    std::lock_guard<std::mutex> lock(mu_);
    last_contact_mono_ = Mono();
  }
  if (!leader_->is_leader() && req->role() == "leader" && !req->http_address().empty()) {
    leader_->set_leader_http(req->http_address());
  }
  resp->set_id(opt_.id);
  resp->set_epoch(leader_->epoch());
  resp->set_role(leader_->is_leader() ? "leader" : "standby");
  resp->set_http_address(opt_.http_address);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

// --- Lease file ------------------------------------------------------------------------------

bool HaController::LeaseIsStale(int64_t now_wall) const {
  std::ifstream in(opt_.lease_dir + "/" + kLeaseFile);
  if (!in) return true;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return true;
  if (j.value("id", "") == opt_.id) return true;
  int64_t renewed = j.value("renewed_at", int64_t{0});
  return now_wall - renewed > Micros(opt_.replication.heartbeat_timeout);
}

bool HaController::RenewLease(int64_t now_wall) {
  const int64_t start = Mono();
  std::string path = opt_.lease_dir + "/" + kLeaseFile;
  {
    std::ifstream in(path);
    auto j = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (j.is_object() && j.value("id", "") != opt_.id &&
        j.value("epoch", uint64_t{0}) > leader_->epoch()) {
      StepDown(j.value("epoch", uint64_t{0}),
               "the lease is held by " + j.value("id", "") + " with a higher epoch");
      leader_->set_lease_until(0);
      return false;
    }
  }
  nlohmann::json lease = {{"id", opt_.id},
                          {"epoch", leader_->epoch()},
                          {"renewed_at", now_wall},
                          {"http_address", opt_.http_address}};
  Status s = common::WriteFileAtomically(path, lease.dump());
  if (!s.ok()) {
    spdlog::warn("cannot renew the leader lease: {}", s.message());
    return false;
  }
  // Act only while no standby could see the lease as stale: stop a little early.
  int64_t margin = Micros(opt_.replication.heartbeat_interval) / 2;
  leader_->set_lease_until(start + Micros(opt_.replication.heartbeat_timeout) - margin);
  return true;
}

// --- Role changes ------------------------------------------------------------------------------

void HaController::StepDown(uint64_t seen_epoch, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_down_requested_ = true;
    step_down_epoch_ = std::max(step_down_epoch_, seen_epoch);
    step_down_why_ = why;
  }
  // Stop acting at once; the monitor thread finishes the transition.
  leader_->Set(false, std::max(leader_->epoch(), seen_epoch));
  cv_.notify_all();
}

void HaController::BecomeStandby(uint64_t epoch, const std::string& why) {
  uint64_t e = std::max(epoch, leader_->epoch());
  leader_->Set(false, e);
  leader_->set_detail("");
  if (Status s = db_->SetEpoch(e); !s.ok()) {
    // The snapshot this standby resyncs from stores the epoch with the tasks.
    spdlog::error("cannot store epoch {} on stepping down: {}", e, s.message());
  }
  common::LogEvent(common::events::kLeaderLost, {{"epoch", e}, {"reason", why}});
  hub_->CloseAll();
  loop_->ReplaceCore(NewCore(cfg_, store::StoreMeta{}));
  std::vector<std::function<void(Status)>> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [seq, w] : waiting_) waiting.push_back(std::move(w.cb));
    waiting_.clear();
    last_contact_mono_ = Mono();
  }
  for (auto& cb : waiting) cb(Unavailable("leadership lost before the standby acknowledged"));
}

bool HaController::Promote(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (follow_ctx_ != nullptr) follow_ctx_->TryCancel();
  }
  uint64_t epoch = leader_->epoch() + 1;
  if (election_) {
    // Epochs are kept in etcd too, so they keep growing whichever scheduler wins.
    const std::string epoch_key = opt_.etcd_prefix + "/epoch";
    auto stored = election_->client().Get(epoch_key);
    if (!stored.ok()) {
      spdlog::error("cannot promote: {}", stored.status().message());
      return false;
    }
    if (!stored->empty()) {
      StatusOr<uint64_t> highest = common::ParseUint64(*stored, "etcd key " + epoch_key);
      if (highest.ok() && *highest == std::numeric_limits<uint64_t>::max()) {
        highest = InvalidArgument("etcd key " + epoch_key + ": epoch " + *stored +
                                  " leaves no higher epoch");
      }
      if (!highest.ok()) {
        spdlog::error("cannot promote: {}", highest.status().message());
        return false;
      }
      epoch = std::max<uint64_t>(epoch, *highest + 1);
    }
    if (Status s = election_->client().Put(epoch_key, std::to_string(epoch)); !s.ok()) {
      spdlog::error("cannot promote: {}", s.message());
      return false;
    }
  }
  if (Status s = db_->SetEpoch(epoch); !s.ok()) {
    spdlog::error("cannot promote: storing epoch {} failed: {}", epoch, s.message());
    return false;
  }
  leader_->Set(false, epoch);
  if (!opt_.lease_dir.empty() && !RenewLease(common::NowMicros())) {
    spdlog::error("cannot promote: the lease could not be taken");
    return false;
  }
  store::StoreMeta meta;
  auto core = BuildCoreFromDatabase(db_, cfg_, common::NowMicros(), &meta);
  const uint64_t seq = meta.last_applied_seq;
  if (!core.ok()) {
    spdlog::error("cannot promote: {}", core.status().message());
    return false;
  }
  // Task numbers move into this epoch's range, so no number the old leader may have handed
  // out without replicating it (async mode, or a degraded sync leader) is ever given again.
  (*core)->SetNextTaskNumber(epoch << 40);
  // On the owner thread: nothing in flight, numbering continues after the replicated log, and
  // the rebuilt core takes over at the end of this batch (before any later request runs).
  std::unique_ptr<core::SchedulerCore> fresh = std::move(*core);
  Status flushed;
  loop_->RunAndWait([&](CoreLoop::Context&) {
    // Numbering restarts after the replicated log only once nothing of ours is waiting.
    flushed = journal_->Flush();
    if (!flushed.ok()) return;
    journal_->RestartSequence(seq);
    loop_->ReplaceCore(std::move(fresh));
  });
  if (!flushed.ok()) {
    spdlog::error("cannot promote: earlier changes are not durable yet: {}", flushed.message());
    return false;
  }
  leader_->Set(true, epoch);
  leader_->set_leader_http(opt_.http_address);
  common::LogEvent(common::events::kLeaderElected,
                   {{"epoch", epoch}, {"reason", why}, {"seq", seq}});
  return true;
}

void HaController::MonitorLoop() {
  int64_t next_ping = 0;
  int64_t next_lease = 0;
  bool warned_lease = false;
  for (;;) {
    bool step_down = false;
    uint64_t step_epoch = 0;
    std::string why;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50),
                   [&] { return stopping_ || step_down_requested_; });
      if (stopping_) return;
      if (step_down_requested_) {
        step_down = true;
        step_epoch = step_down_epoch_;
        why = step_down_why_;
        step_down_requested_ = false;
      }
    }
    if (step_down) {
      BecomeStandby(step_epoch, why);
      continue;
    }
    const int64_t now = Mono();
    const int64_t hb = Micros(opt_.replication.heartbeat_interval);
    const int64_t timeout = Micros(opt_.replication.heartbeat_timeout);
    if (leader_->is_leader()) {
      // Writes waiting for a silent standby: continue alone.
      std::vector<std::function<void(Status)>> expired;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!waiting_.empty() && waiting_.begin()->second.deadline_mono < now) {
          degraded_ = true;
          for (auto& [seq, w] : waiting_) expired.push_back(std::move(w.cb));
          waiting_.clear();
        }
      }
      if (!expired.empty()) {
        spdlog::warn("standby did not acknowledge within {} ms: continuing alone",
                     opt_.replication.sync_timeout.count());
        leader_->set_detail("standby not acknowledging: replication degraded, leading alone");
      }
      for (auto& cb : expired) cb(OkStatus());
      if (!opt_.lease_dir.empty() && now >= next_lease) {
        next_lease = now + hb;
        RenewLease(common::NowMicros());
      }
      if (peer_ && now >= next_ping) {
        next_ping = now + hb;
        dgpu::v1::PingResponse resp;
        if (PingPeer(&resp) && resp.role() == "leader" && resp.epoch() > leader_->epoch()) {
          StepDown(resp.epoch(), "peer " + resp.id() + " leads with a higher epoch");
        }
        bool attached;
        {
          std::lock_guard<std::mutex> lock(mu_);
          attached = standby_ != nullptr;
        }
        if (!attached && opt_.replication.enabled) {
          leader_->set_detail("no standby attached: leading alone");
        }
      }
      continue;
    }
    // Standby.
    if (peer_ && now >= next_ping) {
      next_ping = now + hb;
      dgpu::v1::PingResponse resp;
      if (PingPeer(&resp) && resp.role() == "leader" && resp.epoch() >= leader_->epoch()) {
        std::lock_guard<std::mutex> lock(mu_);
        last_contact_mono_ = Mono();
        leader_->set_leader_http(resp.http_address());
      }
    }
    int64_t silent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      silent = now - last_contact_mono_;
    }
    if (!peer_ || silent <= timeout || election_) {
      warned_lease = false;
      continue;
    }
    if (!opt_.lease_dir.empty() && !LeaseIsStale(common::NowMicros())) {
      if (!warned_lease) {
        spdlog::warn("leader unreachable for {} ms but its lease is fresh: not promoting",
                     silent / 1000);
        warned_lease = true;
      }
      continue;
    }
    Promote("leader silent for " + std::to_string(silent / 1000) + " ms");
  }
}

void HaController::FollowLoop() {
  // The same failure is logged once a minute with how often it repeated, not at every retry
  // (a standby that cannot attach retries several times a second).
  std::string last_error;
  int64_t last_logged = 0;
  int repeated = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (leader_->is_leader()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; });
      continue;
    }
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      follow_ctx_ = &ctx;
    }
    auto stream = peer_->SyncState(&ctx);
    auto meta = db_->ReadMeta();
    uint64_t applied = meta.ok() ? meta->last_applied_seq : 0;
    SyncRequest hello;
    hello.set_standby_id(opt_.id);
    hello.set_epoch(leader_->epoch());
    hello.set_acked_seq(applied);
    hello.set_http_address(opt_.http_address);
    std::vector<core::Task> snapshot;
    std::vector<core::TeamRecord> snapshot_teams;
    std::vector<core::NodeRecord> snapshot_nodes;
    bool have_snapshot = false;
    // True when the leader ended the stream (its status then says why); false when this side
    // left it, which cancels it.
    bool peer_ended = !stream->Write(hello);
    if (!peer_ended) {
      SyncResponse resp;
      while (true) {
        if (!stream->Read(&resp)) {
          peer_ended = true;
          break;
        }
        if (leader_->is_leader()) break;
        if (resp.epoch() < leader_->epoch()) {
          spdlog::warn("ignoring replication from an older epoch {}", resp.epoch());
          break;
        }
        if (resp.epoch() > leader_->epoch()) {
          leader_->Set(false, resp.epoch());
          if (Status s = db_->SetEpoch(resp.epoch()); !s.ok()) {
            // Acknowledging under an epoch a restart would forget could let this standby
            // promote with an epoch the leader already has: resync, which stores it.
            spdlog::error("cannot store epoch {}: {}; resynchronizing", resp.epoch(), s.message());
            break;
          }
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          last_contact_mono_ = Mono();
        }
        SyncRequest ack;
        if (resp.has_snapshot()) {
          const auto& snap = resp.snapshot();
          for (const auto& r : snap.tasks()) snapshot.push_back(TaskFromRecord(r));
          for (const auto& r : snap.teams()) snapshot_teams.push_back(TeamFromRecord(r));
          for (const auto& r : snap.nodes()) snapshot_nodes.push_back(NodeFromRecord(r));
          if (snap.more()) continue;
          store::StoreMeta m;
          if (snap.online_percent() >= 0) m.online_percent = snap.online_percent();
          m.teams = std::move(snapshot_teams);
          snapshot_teams.clear();
          m.nodes = std::move(snapshot_nodes);
          snapshot_nodes.clear();
          m.epoch = std::max<uint64_t>(snap.epoch(), leader_->epoch());
          m.next_task_number = snap.next_task_number();
          m.last_applied_seq = snap.seq();
          Status s = db_->ReplaceAll(m, snapshot);
          snapshot.clear();
          if (!s.ok()) {
            spdlog::error("cannot store the leader's snapshot: {}", s.message());
            break;
          }
          applied = snap.seq();
          have_snapshot = true;
          spdlog::info("synchronized with the leader at seq {}", applied);
        } else if (resp.has_batch()) {
          const auto& b = resp.batch();
          if (!have_snapshot) break;
          if (b.seq() > applied) {
            if (b.seq() != applied + 1) {
              spdlog::warn("replication gap ({} after {}): resynchronizing", b.seq(), applied);
              break;
            }
            std::vector<core::Change> changes;
            changes.reserve(b.changes_size());
            for (const auto& c : b.changes()) changes.push_back(ChangeFromRecord(c));
            Status s = db_->Apply(changes, b.seq());
            if (!s.ok()) {
              spdlog::error("cannot apply batch {}: {}", b.seq(), s.message());
              break;
            }
            applied = b.seq();
          }
        }
        ack.set_standby_id(opt_.id);
        ack.set_epoch(leader_->epoch());
        ack.set_acked_seq(applied);
        if (!stream->Write(ack)) {
          peer_ended = true;
          break;
        }
      }
    }
    if (!peer_ended) ctx.TryCancel();
    if (grpc::Status finished = stream->Finish();
        !finished.ok() && finished.error_code() != grpc::StatusCode::CANCELLED) {
      const int64_t now = Mono();
      if (have_snapshot || finished.error_message() != last_error ||
          now - last_logged >= 60'000'000) {
        spdlog::info("replication stream ended: {}{}", finished.error_message(),
                     repeated > 0 ? fmt::format(" ({} more failures since the last line)", repeated)
                                  : std::string());
        last_error = finished.error_message();
        last_logged = now;
        repeated = 0;
      } else {
        ++repeated;
      }
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      follow_ctx_ = nullptr;
      cv_.wait_for(lock, opt_.replication.heartbeat_interval / 4, [&] { return stopping_; });
    }
  }
}

}  // namespace dgpu::scheduler
