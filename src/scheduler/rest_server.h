// The REST API on RESTinio (asio, keep-alive, a small thread pool). Handlers parse the request on
// the HTTP threads (api_json), call the Application's use case and map its result onto an HTTP
// status and body; they answer asynchronously, from whichever thread the use case answers on.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "scheduler/application.h"
#include "scheduler/auth.h"
#include "scheduler/leader_state.h"
#include "scheduler/metrics.h"

namespace dgpu::scheduler {

class AuditLog;

struct RestDeps {
  Application* app = nullptr;
  LeaderState* leader = nullptr;        // For the X-Dgpu-Stale and X-Leader headers.
  Metrics* metrics = nullptr;           // Counts requests by route and HTTP status.
  const Authenticator* auth = nullptr;  // Who the caller is; nullptr: everyone, as an admin.
  AuditLog* audit = nullptr;            // Write requests are recorded there; may be nullptr.
};

// server.tls for REST: HTTPS with this certificate chain and key (PEM text, checked).
struct RestTls {
  std::string cert_pem;
  std::string key_pem;
};

struct RestOptions {
  size_t threads = 2;
  std::chrono::milliseconds read_timeout{10'000};  // server.read_timeout
  size_t max_connections = 10000;                  // server.max_connections
  std::optional<RestTls> tls;                      // nullopt: plain HTTP
};

// One (method, path) the router serves; the path in OpenAPI form ("/api/v1/tasks/{id}").
struct RestRoute {
  std::string method;
  std::string path;
};

class RestServer {
 public:
  // The routes served, from the route table the router is built from (rest_server.cc). Other
  // methods on these paths answer 405; other paths 404.
  static std::vector<RestRoute> Routes();

  explicit RestServer(RestDeps deps);
  ~RestServer();
  // Binds host:port and starts the HTTP threads. Unavailable if it cannot listen.
  Status Start(const std::string& host, uint16_t port, const RestOptions& options);
  // Open connections now.
  size_t connections() const;
  void Stop();

  // The inside, shared by the REST server's own files (rest_server_impl.h).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgpu::scheduler
