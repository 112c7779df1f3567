#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "common/time_util.h"
#include "scheduler/replication.h"
#include "scheduler/replication_internal.h"
#include "store/snapshot.h"

namespace dgpu::scheduler {

using replication_internal::kMaxQueuedMessages;
using replication_internal::kSnapshotChunk;
using replication_internal::Micros;
using replication_internal::Mono;

namespace {

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

}  // namespace

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

}  // namespace dgpu::scheduler
