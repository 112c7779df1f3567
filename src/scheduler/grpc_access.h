// The protected mode on gRPC: agents and the standby reach the scheduler from loopback only,
// unless auth.allow_insecure_remote is true (auth.h). A refused call ends with
// PERMISSION_DENIED and a message that says what to change; the scheduler logs the peer.
#pragma once

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

#include "scheduler/auth.h"

namespace dgpu::scheduler {

// Refused before it began: ends the stream at once.
template <typename Request, typename Response>
class RefusedStream final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedStream(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// OK when `auth` admits the peer of `ctx` (or there is no auth); else the status to end with.
inline grpc::Status AdmitGrpcPeer(const Authenticator* auth, const grpc::CallbackServerContext* ctx,
                                  std::string_view service) {
  const std::string peer = ctx->peer();
  if (auth == nullptr || auth->AdmitsGrpcPeer(peer)) return grpc::Status::OK;
  spdlog::warn(
      "refused {} call from {}: not a loopback peer, and auth.allow_insecure_remote is "
      "false",
      service, peer);
  return {grpc::StatusCode::PERMISSION_DENIED,
          "insecure_remote_access: this scheduler answers gRPC from loopback peers only; set "
          "auth.allow_insecure_remote: true on the scheduler to accept agents and a standby on "
          "other hosts"};
}

}  // namespace dgpu::scheduler
