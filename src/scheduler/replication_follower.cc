#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "common/time_util.h"
#include "scheduler/replication.h"
#include "scheduler/replication_internal.h"
#include "store/snapshot.h"

namespace dgpu::scheduler {

using replication_internal::Mono;

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
