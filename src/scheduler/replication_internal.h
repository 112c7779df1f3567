// What the high-availability files share (replication.cc: start, stop, lease and role changes;
// replication_leader.cc: the leader's side of a standby's stream; replication_follower.cc: the
// standby's side). Private to them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/time_util.h"
#include "scheduler/queued_bidi_reactor.h"
#include "scheduler/replication.h"

namespace dgpu::scheduler {
namespace replication_internal {

inline constexpr size_t kSnapshotChunk = 2000;        // Tasks per snapshot message.
inline constexpr size_t kMaxQueuedMessages = 200000;  // A standby this far behind is resynced.
inline constexpr char kLeaseFile[] = "dgpu-leader.lease";

inline int64_t Mono() { return common::SystemClock::Instance().MonotonicMicros(); }
inline int64_t Micros(std::chrono::milliseconds d) { return d.count() * 1000; }

}  // namespace replication_internal

using dgpu::v1::SyncRequest;
using dgpu::v1::SyncResponse;

// Leader side: one standby's SyncState stream.
class SyncStreamReactor : public QueuedBidiReactor<SyncRequest, SyncResponse> {
 public:
  explicit SyncStreamReactor(HaController* ha) : ha_(ha) {}
  void Begin(std::shared_ptr<SyncStreamReactor> self) {
    self_ = std::move(self);
    Read(&req_);
  }

  // A standby this far behind is dropped; it reconnects and resyncs from a snapshot.
  void Send(SyncResponse m) {
    QueuedBidiReactor::Send(std::move(m), replication_internal::kMaxQueuedMessages);
  }

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

}  // namespace dgpu::scheduler
