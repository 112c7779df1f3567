// TLS material read from the PEM files the configuration names, checked before anything uses
// it: gRPC and asio only say "handshake failed" or refuse to start without a reason, so each
// problem (a missing file, a key that does not match its certificate, an expired certificate)
// is found here and named by its configuration key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "common/config.h"

namespace dgpu::common {

struct TlsMaterial {
  std::string ca;    // PEM bundle: server side, the client CA (may be empty); client side, the
                     // CA that verifies the server
  std::string cert;  // PEM certificate chain (may be empty on a client without one)
  std::string key;   // PEM private key
  // The leaf certificate's names (CN, then DNS and IP SANs) and its expiry, for logs.
  std::vector<std::string> names;
  int64_t not_after_unix = 0;
};

// `prefix` is the section's key ("server.tls", "scheduler.tls"): errors read
// "server.tls.key_file: does not match server.tls.cert_file".
StatusOr<TlsMaterial> LoadServerTls(const ServerTlsConfig& config, std::string_view prefix);
StatusOr<TlsMaterial> LoadClientTls(const ClientTlsConfig& config, std::string_view prefix);

// The names of the first certificate of a PEM chain: its subject CN, then its DNS and IP subject
// alternative names, in order. Empty when it does not parse.
std::vector<std::string> CertificateNames(std::string_view pem);

}  // namespace dgpu::common
