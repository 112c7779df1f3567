#include "scheduler/replication.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/number.h"
#include "common/time_util.h"
#include "scheduler/replication_internal.h"
#include "store/snapshot.h"

namespace dgpu::scheduler {

using replication_internal::kLeaseFile;
using replication_internal::Micros;
using replication_internal::Mono;

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

}  // namespace dgpu::scheduler
