#include "scheduler/rest_transport.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <restinio/tls.hpp>
#include <set>
#include <thread>

#include "common/time_util.h"
#include "scheduler/api_json.h"

namespace dgpu::scheduler::rest {
namespace {

using Endpoint = restinio::asio_ns::ip::tcp::endpoint;

}  // namespace

// A deadline for TLS handshakes. RESTinio starts a connection's read time limit only once its
// handshake is done, so a client that connects and sends nothing (or half a ClientHello) would
// hold a socket, and a slot under server.max_connections, for ever. Each accepted socket is
// noted by its kernel cookie (SO_COOKIE, unique for the life of the system); once a second the
// sockets past server.read_timeout whose handshake has not finished are found among this
// process's descriptors and shut down, which fails their pending handshake and frees them.
class HandshakeWatch {
 public:
  explicit HandshakeWatch(std::chrono::milliseconds timeout)
      : timeout_(timeout), thread_([this] { Run(); }) {}
  ~HandshakeWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // From the acceptor, before the handshake starts.
  void Accepted(restinio::socket_options_t& options) {
    Cookie cookie;
    restinio::asio_ns::error_code ec;
    options.get_option(cookie, ec);
    if (ec) return;
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back({cookie.value, std::chrono::steady_clock::now() + timeout_});
  }
  // The connection state listener: handshake done, connection closed.
  void Established(const Endpoint& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    established_.insert(peer);
  }
  void Closed(const Endpoint& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    established_.erase(peer);
  }

 private:
  // getsockopt(SOL_SOCKET, SO_COOKIE) in asio's option form.
  struct Cookie {
    uint64_t value = 0;
    template <typename P>
    int level(const P&) const {
      return SOL_SOCKET;
    }
    template <typename P>
    int name(const P&) const {
      return SO_COOKIE;
    }
    template <typename P>
    uint64_t* data(const P&) {
      return &value;
    }
    template <typename P>
    size_t size(const P&) const {
      return sizeof(value);
    }
    template <typename P>
    void resize(const P&, size_t) {}
  };

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
      std::set<uint64_t> expired;
      const auto now = std::chrono::steady_clock::now();
      while (!pending_.empty() && pending_.front().deadline <= now) {
        expired.insert(pending_.front().cookie);
        pending_.pop_front();
      }
      if (expired.empty()) continue;
      const std::set<Endpoint> established = established_;
      lock.unlock();
      const size_t closed = ShutDownStalled(expired, established);
      if (closed > 0) {
        spdlog::warn(
            "closed {} REST connection(s) whose TLS handshake did not finish within "
            "server.read_timeout ({} ms)",
            closed, timeout_.count());
      }
      lock.lock();
    }
  }

  // Shuts down this process's sockets whose cookie is in `expired` and whose peer has no
  // finished handshake.
  static size_t ShutDownStalled(const std::set<uint64_t>& expired,
                                const std::set<Endpoint>& established) {
    size_t closed = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      int fd = -1;
      const std::string name = entry.path().filename().string();
      if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
      uint64_t cookie = 0;
      socklen_t len = sizeof(cookie);
      if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) continue;
      if (expired.count(cookie) == 0) continue;
      Endpoint peer;
      socklen_t peer_len = static_cast<socklen_t>(peer.capacity());
      if (getpeername(fd, peer.data(), &peer_len) == 0) {
        peer.resize(peer_len);
        if (established.count(peer) != 0) continue;
      }
      if (shutdown(fd, SHUT_RDWR) == 0) ++closed;
    }
    return closed;
  }

  struct Pending {
    uint64_t cookie;
    std::chrono::steady_clock::time_point deadline;
  };
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;               // GUARDED_BY(mu_)
  std::deque<Pending> pending_;     // GUARDED_BY(mu_), by deadline
  std::set<Endpoint> established_;  // GUARDED_BY(mu_)
  std::thread thread_;              // last: starts once the members above exist
};

void ConnectionCounter::state_changed(const restinio::connection_state::notice_t& notice) noexcept {
  const auto cause = notice.cause();
  if (restinio::get_if<restinio::connection_state::accepted_t>(&cause) != nullptr) {
    if (handshakes_) handshakes_->Established(notice.remote_endpoint());
    const size_t now = open_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (now < limit_) return;
    const int64_t t = common::NowMicros();
    int64_t last = last_warning_.load(std::memory_order_relaxed);
    if (t - last >= 60'000'000 && last_warning_.compare_exchange_strong(last, t)) {
      spdlog::warn(
          "{} REST connections are open, the most server.max_connections allows: new ones wait "
          "until one closes (the last accepted came from {})",
          now, notice.remote_endpoint().address().to_string());
    }
  } else if (restinio::get_if<restinio::connection_state::closed_t>(&cause) != nullptr) {
    if (handshakes_) handshakes_->Closed(notice.remote_endpoint());
    open_.fetch_sub(1, std::memory_order_relaxed);
  }
}

namespace {

struct Traits : public restinio::default_traits_t {
  using request_handler_t = Router;
  using connection_state_listener_t = ConnectionCounter;
  static constexpr bool use_connection_count_limiter = true;
};
// The same server over TLS (server.tls): only the socket differs.
struct TlsTraits : public restinio::default_tls_traits_t {
  using request_handler_t = Router;
  using connection_state_listener_t = ConnectionCounter;
  static constexpr bool use_connection_count_limiter = true;
};

// Settings both kinds share.
template <typename T>
restinio::server_settings_t<T> CommonSettings(restinio::server_settings_t<T> settings,
                                              const std::string& host, uint16_t port,
                                              const RestOptions& options,
                                              std::shared_ptr<ConnectionCounter> connections,
                                              std::unique_ptr<Router> router) {
  settings.address(host)
      .port(port)
      // The transport closes connections whose body is far beyond the API limit; between the
      // two limits a request gets a proper 413.
      .incoming_http_msg_limits(
          restinio::incoming_http_msg_limits_t{}.max_body_size(8 * kMaxBodyBytes))
      .max_pipelined_requests(16)
      .read_next_http_message_timelimit(options.read_timeout)
      .max_parallel_connections(options.max_connections)
      .connection_state_listener(std::move(connections))
      .request_handler(std::move(router));
  return settings;
}

// An asio TLS context with the certificate and key of server.tls: TLS 1.2 and later only.
restinio::asio_ns::ssl::context MakeTlsContext(const RestTls& tls) {
  namespace ssl = restinio::asio_ns::ssl;
  ssl::context context(ssl::context::tls_server);
  context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                      ssl::context::single_dh_use);
  context.use_certificate_chain(restinio::asio_ns::buffer(tls.cert_pem));
  context.use_private_key(restinio::asio_ns::buffer(tls.key_pem), ssl::context::pem);
  return context;
}

}  // namespace

RunningServer StartServer(restinio::asio_ns::io_context& io, const std::string& host, uint16_t port,
                          const RestOptions& options,
                          std::shared_ptr<ConnectionCounter> connections,
                          std::unique_ptr<Router> router) {
  if (options.tls) {
    auto settings = CommonSettings(restinio::server_settings_t<TlsTraits>{}, host, port, options,
                                   connections, std::move(router));
    settings.tls_context(MakeTlsContext(*options.tls));
    auto watch = std::make_shared<HandshakeWatch>(options.read_timeout);
    connections->set_handshakes(watch);
    settings.socket_options_setter(
        [watch](restinio::socket_options_t& socket) { watch->Accepted(socket); });
    return RunningServer(restinio::run_async<TlsTraits>(restinio::external_io_context(io),
                                                        std::move(settings), options.threads));
  }
  return RunningServer(restinio::run_async<Traits>(
      restinio::external_io_context(io),
      CommonSettings(restinio::server_settings_t<Traits>{}, host, port, options,
                     std::move(connections), std::move(router)),
      options.threads));
}

}  // namespace dgpu::scheduler::rest
