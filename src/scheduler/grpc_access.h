// Who may call the scheduler's gRPC port. Without client certificates, the protected mode:
// agents and the standby reach it from loopback only unless auth.allow_insecure_remote is true
// (auth.h). With client certificates (server.tls.client_ca_file), every call comes with one the
// CA signed (gRPC checks it in the handshake), from any host, and it binds the caller: an agent
// acts only for the node its certificate names, and the replication calls take only the peer
// scheduler's certificate. A refused call ends with PERMISSION_DENIED and a message that says
// what to change; the scheduler logs the peer.
#pragma once

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/auth.h"

namespace dgpu::scheduler {

struct GrpcAccess {
  const Authenticator* auth = nullptr;  // nullptr: every peer (tests)
  bool client_certificates = false;     // server.tls.client_ca_file is set
  // The host of replication.peer_address: the name the peer scheduler's certificate carries
  // (the name this scheduler checks when it connects to the peer as a standby).
  std::string peer_scheduler_name;
};

// Refused before it began: ends the stream at once.
template <typename Request, typename Response>
class RefusedStream final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RefusedStream(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// The names of the caller's verified client certificate: its CN, then its DNS subject
// alternative names (`kDnsNames`, what names a node) or all of them, IP addresses included
// (`kAllNames`, what names a scheduler host). Empty without one.
enum class CertificateNames { kDnsNames, kAllNames };
inline std::vector<std::string> PeerCertificateNames(
    const grpc::ServerContextBase* ctx, CertificateNames which = CertificateNames::kDnsNames) {
  std::vector<std::string> names;
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return names;
  const char* sans = which == CertificateNames::kDnsNames ? GRPC_PEER_DNS_PROPERTY_NAME
                                                          : GRPC_X509_SAN_PROPERTY_NAME;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, sans}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      std::string name(value.data(), value.size());
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

// The names that may bind the caller to a node: its certificate's with client certificates on;
// none (nothing read) otherwise, when AdmitNode admits every id.
inline std::vector<std::string> NodeCertificateNames(const GrpcAccess& access,
                                                     const grpc::ServerContextBase* ctx) {
  if (!access.client_certificates) return {};
  return PeerCertificateNames(ctx);
}

inline std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out.empty() ? "nothing" : out;
}

// OK when `access` admits the peer of `ctx`; else the status to end with.
inline grpc::Status AdmitGrpcPeer(const GrpcAccess& access, const grpc::CallbackServerContext* ctx,
                                  std::string_view service) {
  // With client certificates, the handshake admitted the caller already.
  if (access.client_certificates || access.auth == nullptr) return grpc::Status::OK;
  const std::string peer = ctx->peer();
  if (access.auth->AdmitsGrpcPeer(peer)) return grpc::Status::OK;
  spdlog::warn(
      "refused {} call from {}: not a loopback peer, and auth.allow_insecure_remote is "
      "false",
      service, peer);
  return {grpc::StatusCode::PERMISSION_DENIED,
          "insecure_remote_access: this scheduler answers gRPC from loopback peers only; give "
          "agents and the standby client certificates (server.tls.client_ca_file), or set "
          "auth.allow_insecure_remote: true on the scheduler"};
}

// OK when a caller whose certificate names `names` may act as agent `agent_id`.
inline grpc::Status AdmitNode(const GrpcAccess& access, const std::vector<std::string>& names,
                              std::string_view agent_id, std::string_view peer,
                              std::string_view service) {
  if (!access.client_certificates) return grpc::Status::OK;
  if (std::find(names.begin(), names.end(), agent_id) != names.end()) return grpc::Status::OK;
  spdlog::warn("refused {} for node \"{}\" from {}: its client certificate names {}", service,
               agent_id, peer, JoinNames(names));
  return {grpc::StatusCode::PERMISSION_DENIED,
          "certificate_mismatch: the client certificate names " + JoinNames(names) +
              "; an agent may act only as the node its certificate names (CN or DNS name), "
              "not as \"" +
              std::string(agent_id) +
              "\": set agent.id to the certificate's name, or issue a certificate for this node"};
}

// OK when the caller may use the replication service: with client certificates, only the peer
// scheduler (a certificate naming peer_scheduler_name), not an agent.
inline grpc::Status AdmitPeerScheduler(const GrpcAccess& access,
                                       const grpc::CallbackServerContext* ctx,
                                       std::string_view service) {
  if (grpc::Status s = AdmitGrpcPeer(access, ctx, service); !s.ok()) return s;
  if (!access.client_certificates) return grpc::Status::OK;
  const std::vector<std::string> names = PeerCertificateNames(ctx, CertificateNames::kAllNames);
  if (std::find(names.begin(), names.end(), access.peer_scheduler_name) != names.end()) {
    return grpc::Status::OK;
  }
  spdlog::warn(
      "refused {} call from {}: its client certificate names {}, not the peer "
      "scheduler \"{}\" (replication.peer_address)",
      service, ctx->peer(), JoinNames(names), access.peer_scheduler_name);
  return {grpc::StatusCode::PERMISSION_DENIED,
          "certificate_mismatch: replication takes the peer scheduler's certificate (one naming "
          "\"" +
              access.peer_scheduler_name +
              "\", the host of replication.peer_address); this one names " + JoinNames(names)};
}

}  // namespace dgpu::scheduler
