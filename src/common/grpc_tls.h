// gRPC credentials from checked TLS material (tls_files.h), for the clients of a scheduler's
// gRPC port (agents, the standby) and for that port itself.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <optional>

#include "common/tls_files.h"

namespace dgpu::common {

// TLS when `tls` holds material, plain text otherwise.
inline std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const std::optional<TlsMaterial>& tls) {
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->ca;
  options.pem_private_key = tls->key;
  options.pem_cert_chain = tls->cert;
  return grpc::SslCredentials(options);
}

// TLS when `tls` holds material; with a client CA, every call must come with a client
// certificate that CA signed (checked in the handshake, before any call).
inline std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<TlsMaterial>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      tls->ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                      : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls->ca;
  options.pem_key_cert_pairs.push_back({tls->key, tls->cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace dgpu::common
