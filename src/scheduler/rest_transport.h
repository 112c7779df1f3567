// The REST server's transport: RESTinio over plain HTTP or TLS (server.tls), the count of open
// connections under server.max_connections, and a deadline for TLS handshakes. What is served is
// rest_server.cc's business.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <restinio/all.hpp>
#include <string>

#include "scheduler/rest_server.h"

namespace dgpu::scheduler::rest {

using Router = restinio::router::express_router_t<>;

class HandshakeWatch;

// Counts open connections, and says once a minute at most when the limit holds new ones back
// (they wait in the listen backlog until one closes). Over TLS, tells the handshake watch.
class ConnectionCounter {
 public:
  void set_limit(size_t limit) { limit_ = limit; }
  void set_handshakes(std::shared_ptr<HandshakeWatch> watch) { handshakes_ = std::move(watch); }
  size_t open() const { return open_.load(std::memory_order_relaxed); }

  void state_changed(const restinio::connection_state::notice_t& notice) noexcept;

 private:
  size_t limit_ = SIZE_MAX;
  std::shared_ptr<HandshakeWatch> handshakes_;  // set before the server starts
  std::atomic<size_t> open_{0};
  std::atomic<int64_t> last_warning_{-60'000'000};
};

// A running server of either kind, stopped the same way.
class RunningServer {
 public:
  template <typename T>
  explicit RunningServer(restinio::running_server_handle_t<T> handle)
      : stop_([h = std::shared_ptr(std::move(handle))] {
          h->stop();
          h->wait();
        }) {}
  void StopAndWait() { stop_(); }

 private:
  std::function<void()> stop_;
};

// Starts serving `router` on host:port with the threads of `options` on `io` (plain HTTP, or TLS
// when options.tls is set). Throws std::exception when it cannot listen.
RunningServer StartServer(restinio::asio_ns::io_context& io, const std::string& host, uint16_t port,
                          const RestOptions& options,
                          std::shared_ptr<ConnectionCounter> connections,
                          std::unique_ptr<Router> router);

}  // namespace dgpu::scheduler::rest
