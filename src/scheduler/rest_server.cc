#include "scheduler/rest_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <restinio/all.hpp>
#include <restinio/tls.hpp>
#include <set>
#include <thread>

#include "common/logging.h"
#include "common/time_util.h"
#include "scheduler/api_json.h"
#include "scheduler/audit_log.h"
#include "scheduler/openapi_spec.h"
#include "scheduler/ui_assets.h"
#include "scheduler/watch_hub.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;
using router_t = restinio::router::express_router_t<>;
using req_t = restinio::request_handle_t;
using params_t = restinio::router::route_params_t;

using Endpoint = restinio::asio_ns::ip::tcp::endpoint;

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

// Counts open connections, and says once a minute at most when the limit holds new ones back
// (they wait in the listen backlog until one closes). Over TLS, tells the handshake watch.
class ConnectionCounter {
 public:
  void set_limit(size_t limit) { limit_ = limit; }
  void set_handshakes(std::shared_ptr<HandshakeWatch> watch) { handshakes_ = std::move(watch); }
  size_t open() const { return open_.load(std::memory_order_relaxed); }

  void state_changed(const restinio::connection_state::notice_t& notice) noexcept {
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

 private:
  size_t limit_ = SIZE_MAX;
  std::shared_ptr<HandshakeWatch> handshakes_;  // set before the server starts
  std::atomic<size_t> open_{0};
  std::atomic<int64_t> last_warning_{-60'000'000};
};

struct Traits : public restinio::default_traits_t {
  using request_handler_t = router_t;
  using connection_state_listener_t = ConnectionCounter;
  static constexpr bool use_connection_count_limiter = true;
};
// The same server over TLS (server.tls): only the socket differs.
struct TlsTraits : public restinio::default_tls_traits_t {
  using request_handler_t = router_t;
  using connection_state_listener_t = ConnectionCounter;
  static constexpr bool use_connection_count_limiter = true;
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

// Settings both kinds share.
template <typename T>
restinio::server_settings_t<T> CommonSettings(restinio::server_settings_t<T> settings,
                                              const std::string& host, uint16_t port,
                                              const RestOptions& options,
                                              std::shared_ptr<ConnectionCounter> connections,
                                              std::unique_ptr<router_t> router) {
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

// A watcher's connection (GET /watch): a chunked response that stays open. The hub's thread
// writes to it; RESTinio hands each write to the connection's own executor. A client that reads
// too slowly (more than kMaxBuffered bytes written but not yet sent) is dropped: it resumes with
// `since`, from the hub's history.
class SseSink final : public WatchSink, public std::enable_shared_from_this<SseSink> {
 public:
  using Response = restinio::response_builder_t<restinio::chunked_output_t>;
  static constexpr size_t kMaxBuffered = 8 << 20;

  explicit SseSink(bool deflate) : deflate_(deflate) {}
  bool deflate() const override { return deflate_; }

  // The response, once the watch is admitted: what was sent before waits for it.
  void Begin(Response response) {
    std::lock_guard<std::mutex> lock(mu_);
    response_.emplace(std::move(response));
    if (closed_) {
      response_->done();
      return;
    }
    for (const auto& text : std::exchange(early_, {})) Write(text);
    response_->flush();
  }

  bool Send(const std::shared_ptr<const std::string>& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load() || buffered_.load() > kMaxBuffered) return false;
    if (!response_) {
      early_.push_back(text);
      return true;
    }
    Write(text);
    return true;
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    if (response_) response_->done();
  }

 private:
  void Write(const std::shared_ptr<const std::string>& text) {
    const size_t n = text->size();
    buffered_ += n;
    response_->append_chunk(text);
    response_->flush([self = shared_from_this(), n](const restinio::asio_ns::error_code& ec) {
      self->buffered_ -= n;
      if (ec) self->broken_ = true;
    });
  }

  const bool deflate_;
  std::mutex mu_;  // Begin (an HTTP thread) and the hub's thread.
  std::optional<Response> response_;
  std::vector<std::shared_ptr<const std::string>> early_;
  bool closed_ = false;
  std::atomic<bool> broken_{false};
  std::atomic<size_t> buffered_{0};
};

struct RestServer::Impl {
  RestDeps d;
  // Outlives `server`: the core loop and the journal's writer thread may still hold requests
  // (answered after Stop, or their last reference dropped there), and a connection released
  // on such a thread must find its io_context alive, else it crashes on a dead reactor
  // (SIGSEGV on SIGTERM under load). Destroyed with the Impl, after the daemon stopped both.
  std::shared_ptr<restinio::asio_ns::io_context> io =
      std::make_shared<restinio::asio_ns::io_context>();
  std::shared_ptr<ConnectionCounter> connections = std::make_shared<ConnectionCounter>();
  std::optional<RunningServer> server;
  // Set first by Stop: a log follow ends instead of waiting to read again.
  std::atomic<bool> stopping{false};

  // A response with its status line, content type and, on a standby, the headers that say so.
  template <typename Output = restinio::restinio_controlled_output_t>
  auto StartResponse(const req_t& req, const Caller& caller, const std::string& route, int status,
                     const char* content_type, const std::string& task_id = {}) {
    d.metrics->HttpRequest(route, status);
    if (d.audit != nullptr) {
      d.audit->Record(caller, req->header().method().c_str(), req->header().path(), status,
                      task_id);
    }
    auto resp = req->template create_response<Output>(restinio::http_status_line_t{
        restinio::http_status_code_t{static_cast<std::uint16_t>(status)}, ReasonPhrase(status)});
    resp.append_header(restinio::http_field::content_type, content_type);
    if (!d.leader->is_leader()) {
      resp.append_header("X-Dgpu-Stale", "true");
      std::string leader = d.leader->leader_http();
      if (!leader.empty()) resp.append_header("X-Leader", leader);
    }
    return resp;
  }

  void Send(const req_t& req, const Caller& caller, const std::string& route, int status,
            std::string body, const char* content_type = "application/json",
            const std::string& task_id = {}) {
    auto resp = StartResponse(req, caller, route, status, content_type, task_id);
    resp.set_body(std::move(body));
    resp.done();
  }

  static const char* ReasonPhrase(int status) {
    switch (status) {
      case 200:
        return "OK";
      case 201:
        return "Created";
      case 400:
        return "Bad Request";
      case 401:
        return "Unauthorized";
      case 403:
        return "Forbidden";
      case 404:
        return "Not Found";
      case 405:
        return "Method Not Allowed";
      case 409:
        return "Conflict";
      case 413:
        return "Payload Too Large";
      case 415:
        return "Unsupported Media Type";
      case 429:
        return "Too Many Requests";
      case 500:
        return "Internal Server Error";
      case 503:
        return "Service Unavailable";
      default:
        return "Unknown";
    }
  }

  void SendError(const req_t& req, const Caller& caller, const std::string& route,
                 const ApiError& e, const std::string& task_id = {}) {
    Send(req, caller, route, e.http_status, e.Body(), "application/json", task_id);
  }

  void SendError(const req_t& req, const Caller& caller, const std::string& route, const Error& e,
                 const std::string& task_id = {}) {
    SendError(req, caller, route, ToApiError(e), task_id);
  }

  static std::string PeerOf(const req_t& req) {
    const auto& peer = req->remote_endpoint();
    const auto address = peer.address();
    return (address.is_v6() ? "[" + address.to_string() + "]" : address.to_string()) + ":" +
           std::to_string(peer.port());
  }

  static std::string Dump(const json& body) {
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  // Answers `req` with `ok(value)` (status and body), or with the error.
  // `task_id` names the task in the audit log.
  template <typename T, typename Ok>
  Reply<T> Answer(const req_t& req, const Caller& caller, const std::string& route, Ok ok,
                  const std::string& task_id = {}) {
    return [this, req, caller, route, task_id, ok = std::move(ok)](const Result<T>& r) {
      if (!r.ok()) return SendError(req, caller, route, r.error(), task_id);
      auto [status, body] = ok(r.value());
      Send(req, caller, route, status, std::move(body), "application/json", task_id);
    };
  }

  std::string Header(const req_t& req, restinio::http_field_t f) {
    return req->header().get_field_or(f, "");
  }

  // A task id of the path; else not found.
  std::optional<core::TaskNumber> TaskIdOf(const req_t& req, const Caller& caller,
                                           const std::string& route, const params_t& params) {
    std::string id_text(params["id"]);
    auto n = core::ParseTaskId(id_text);
    if (!n) {
      SendError(req, caller, route, ApiError{404, "not_found", "task " + id_text + " not found"});
    }
    return n;
  }

  // --- Handlers --------------------------------------------------------------------------------

  restinio::request_handling_status_t Submit(const req_t& req, const Caller& caller) {
    const std::string route = "POST /api/v1/tasks";
    if (req->body().size() > kMaxBodyBytes) {
      SendError(req, caller, route,
                ApiError{413, "payload_too_large",
                         "request body is " + std::to_string(req->body().size()) +
                             " bytes; the limit is " + std::to_string(kMaxBodyBytes)});
      return restinio::request_accepted();
    }
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    SubmitRequest request;
    if (auto e = ParseSubmitRequest(req->body(), &request.spec, &request.array)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    const int request_array = request.array;
    d.app->Submit(caller, std::move(request),
                  [this, req, caller, route, request_array](const Result<Submitted>& r) {
                    if (!r.ok()) return SendError(req, caller, route, r.error());
                    const Submitted& done = r.value();
                    const std::string id = core::FormatTaskId(done.task);
                    json body = {{"task_id", id},
                                 {"status", "pending"},
                                 {"created_at", common::FormatRfc3339(done.created_at)}};
                    if (request_array > 0) {
                      // An array: every id, in index order (its first is task_id).
                      json ids = json::array();
                      for (int i = 0; i < done.count; ++i) {
                        ids.push_back(core::FormatTaskId(done.task + static_cast<uint64_t>(i)));
                      }
                      body["task_ids"] = std::move(ids);
                    }
                    Send(req, caller, route, 201, Dump(body), "application/json", id);
                  });
    return restinio::request_accepted();
  }

  static std::pair<int, std::string> TaskBody(const TaskView& v) {
    return {200, Dump(TaskToJson(*v.task, v.reason))};
  }

  restinio::request_handling_status_t GetTask(const req_t& req, const Caller& caller,
                                              const params_t& params) {
    const std::string route = "GET /api/v1/tasks/{id}";
    auto n = TaskIdOf(req, caller, route, params);
    if (!n) return restinio::request_accepted();
    d.app->GetTask(caller, *n, Answer<TaskView>(req, caller, route, TaskBody));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t TaskEvents(const req_t& req, const Caller& caller,
                                                 const params_t& params) {
    const std::string route = "GET /api/v1/tasks/{id}/events";
    auto n = TaskIdOf(req, caller, route, params);
    if (!n) return restinio::request_accepted();
    d.app->TaskEvents(caller, *n,
                      Answer<std::vector<core::TaskEventRecord>>(
                          req, caller, route, [](const std::vector<core::TaskEventRecord>& events) {
                            return std::pair(200, Dump(TaskEventsToJson(events)));
                          }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Watch(const req_t& req, const Caller& caller) {
    const std::string route = "GET /api/v1/watch";
    std::optional<uint64_t> since;
    if (auto e = ParseWatchQuery(req->header().query(),
                                 req->header().get_field_or("Last-Event-ID", ""), &since)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    // The response starts only once the watch is admitted; an error is a plain JSON answer.
    const bool deflate = AcceptsDeflate(req->header().get_field_or("Accept-Encoding", ""));
    auto sink = std::make_shared<SseSink>(deflate);
    if (auto e = d.app->Watch(caller, sink, since)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    auto resp =
        StartResponse<restinio::chunked_output_t>(req, caller, route, 200, "text/event-stream");
    resp.append_header(restinio::http_field::cache_control, "no-cache");
    resp.append_header("X-Accel-Buffering", "no");  // Proxies must not hold events back.
    resp.append_header(restinio::http_field::vary, "Accept-Encoding");
    if (deflate) resp.append_header(restinio::http_field::content_encoding, "deflate");
    sink->Begin(std::move(resp));
    return restinio::request_accepted();
  }

  // GET /tasks/{id}/logs: the log read from its agent piece by piece, each piece written as a
  // chunk and the next read once it is sent (a slow reader slows the reads). With follow, the
  // end of the log is read again every kLogPollInterval until the task has ended and what it
  // wrote last is sent. An error before the first piece is the answer; after it, the response
  // ends (or, when following, reads are tried again until the task ends).
  class LogStream : public std::enable_shared_from_this<LogStream> {
   public:
    static constexpr int32_t kPieceBytes = 512 << 10;
    static constexpr auto kPollInterval = std::chrono::milliseconds(250);

    LogStream(Impl* impl, req_t req, Caller caller, LogQuery query)
        : impl_(impl),
          req_(std::move(req)),
          caller_(std::move(caller)),
          query_(query),
          offset_(query.offset),
          timer_(*impl->io) {}

    void Start(core::TaskNumber task) {
      task_ = task;
      Locate([](LogStream& self) { self.Read(); });
    }

   private:
    using Response = restinio::response_builder_t<restinio::chunked_output_t>;

    // Where the log is now; `then` runs with source_ set. A failure is the answer, or ends it.
    void Locate(void (*then)(LogStream&)) {
      impl_->d.app->LocateLog(
          caller_, task_, query_.rank,
          [self = shared_from_this(), then](const Result<LogSource>& r) {
            if (!r.ok()) return self->Fail(r.error());
            if (!self->source_.node_id.empty() && r.value().node_id != self->source_.node_id) {
              self->offset_ = 0;  // Run again on another node: its log there starts anew.
            }
            self->source_ = r.value();
            then(*self);
          });
    }

    void Read() {
      LogRead read{source_.node_id, source_.task_id, offset_, 0, kPieceBytes};
      if (!read_once_ && query_.tail) {
        // The last lines; tail=0: none, only what comes next (the end of the log).
        if (*query_.tail > 0) {
          read.tail_lines = *query_.tail;
        } else {
          read.offset = INT64_MAX / 2;
        }
      }
      impl_->d.app->ReadLog(caller_, read, [self = shared_from_this()](const Result<LogPiece>& r) {
        self->OnPiece(r);
      });
    }

    void OnPiece(const Result<LogPiece>& r) {
      if (!r.ok()) {
        // A follow of a task that has not ended waits for its agent (reconnecting, or not yet
        // attached when the task was just dispatched).
        if (!query_.follow || source_.finished) return Fail(r.error());
        if (!response_) Begin()->flush();
        return Wait();
      }
      const LogPiece& piece = r.value();
      if (!piece.missing.empty() && source_.finished) {
        return Fail(Error{ErrorCode::kLogUnavailable, "", piece.missing, StatusCode::kNotFound});
      }
      // A task that has not ended but has no log yet (dispatched a moment ago): an empty log.
      if (piece.missing.empty()) read_once_ = true;
      offset_ = piece.offset + static_cast<int64_t>(piece.data.size());
      const bool more = offset_ < piece.size && !piece.data.empty();
      Begin();
      if (!piece.data.empty()) response_->append_chunk(piece.data);
      response_->flush([self = shared_from_this(), more](const restinio::asio_ns::error_code& ec) {
        if (ec) return;  // The client is gone.
        if (more) return self->Read();
        if (!self->query_.follow || self->source_.finished) return self->End();
        self->Wait();
      });
    }

    // The response's status line and headers, once.
    Response* Begin() {
      if (!response_) {
        response_.emplace(impl_->StartResponse<restinio::chunked_output_t>(
            req_, caller_, kRoute, 200, "text/plain; charset=utf-8", source_.task_id));
        response_->append_header(restinio::http_field::cache_control, "no-cache");
        response_->append_header("X-Accel-Buffering", "no");
        response_->append_header("X-Dgpu-Node", source_.node_id);
      }
      return &*response_;
    }

    // Reads again after the poll interval, from where the task runs now.
    void Wait() {
      if (impl_->stopping.load()) return End();
      timer_.expires_after(kPollInterval);
      timer_.async_wait([self = shared_from_this()](const restinio::asio_ns::error_code& ec) {
        if (ec) return;
        if (self->impl_->stopping.load()) return self->End();
        self->Locate([](LogStream& s) { s.Read(); });
      });
    }

    void Fail(const Error& e) {
      if (!response_) return impl_->SendError(req_, caller_, kRoute, e, core::FormatTaskId(task_));
      spdlog::warn("log of {} from {}: {}; its response ends here", source_.task_id,
                   source_.node_id, e.message);
      End();
    }

    void End() { response_->done(); }

    static constexpr const char* kRoute = "GET /api/v1/tasks/{id}/logs";
    Impl* impl_;
    const req_t req_;
    const Caller caller_;
    const LogQuery query_;
    core::TaskNumber task_ = 0;
    // One step at a time (a read, a write, a wait), each started by the one before, so these
    // are never used by two threads at once.
    LogSource source_;
    int64_t offset_;
    bool read_once_ = false;  // A piece of the log came (a tail applies to the first only).
    std::optional<Response> response_;
    restinio::asio_ns::steady_timer timer_;
  };

  restinio::request_handling_status_t TaskLog(const req_t& req, const Caller& caller,
                                              const params_t& params) {
    const std::string route = "GET /api/v1/tasks/{id}/logs";
    auto n = TaskIdOf(req, caller, route, params);
    if (!n) return restinio::request_accepted();
    LogQuery query;
    if (auto e = ParseLogQuery(req->header().query(), &query)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    std::make_shared<LogStream>(this, req, caller, query)->Start(*n);
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t UiFile(const req_t& req, const Caller& caller,
                                             const std::string& route, const std::string& name) {
    std::optional<UiAsset> asset = FindUiAsset(name);
    if (!asset) {
      SendError(req, caller, route,
                ApiError{404, "not_found", "the dashboard has no file " + name});
      return restinio::request_accepted();
    }
    auto resp = StartResponse(req, caller, route, 200, asset->content_type);
    // Compiled into this binary: revalidated on each load, so an upgrade is seen at once.
    resp.append_header(restinio::http_field::cache_control, "no-cache");
    resp.append_header("X-Content-Type-Options", "nosniff");
    resp.append_header(
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "frame-ancestors 'none'");
    resp.set_body(std::string(asset->body));
    resp.done();
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Usage(const req_t& req, const Caller& caller) {
    const std::string route = "GET /api/v1/usage";
    UsageRequest request;
    if (auto e = ParseUsageQuery(req->header().query(), common::NowMicros(), &request)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    d.app->Usage(caller, request, Answer<UsageReport>(req, caller, route, [](const UsageReport& r) {
                   return std::pair(200, Dump(UsageToJson(r)));
                 }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t ListTasks(const req_t& req, const Caller& caller) {
    const std::string route = "GET /api/v1/tasks";
    ListTasksRequest request;
    if (auto e = ParseListQuery(req->header().query(), &request)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    d.app->ListTasks(
        caller, request, Answer<TaskPage>(req, caller, route, [](const TaskPage& page) {
          json tasks = json::array();
          for (const auto& v : page.tasks) tasks.push_back(TaskToJson(*v.task, v.reason));
          return std::pair(
              200, Dump({{"tasks", std::move(tasks)},
                         {"total", page.total},
                         {"next",
                          page.next == 0 ? json(nullptr) : json(core::FormatTaskId(page.next))}}));
        }));
    return restinio::request_accepted();
  }

  // The whole database as one SQLite file: taken on the background pool, sent from the file with
  // sendfile(2), unlinked as soon as it is open so that nothing is left behind whatever happens to
  // the connection.
  restinio::request_handling_status_t Snapshot(const req_t& req, const Caller& caller) {
    const std::string route = "GET /api/v1/snapshot";
    d.app->Snapshot(caller, [this, req, caller, route](const Result<store::SnapshotFile>& r) {
      if (!r.ok()) return SendError(req, caller, route, r.error());
      const store::SnapshotFile& file = r.value();
      std::optional<restinio::sendfile_t> body;
      std::string failed;
      try {
        body.emplace(restinio::sendfile(file.path));
      } catch (const std::exception& e) {
        failed = e.what();
      }
      ::unlink(file.path.c_str());  // Open or not, the name is gone; an open file stays readable.
      if (!body) {
        spdlog::error("cannot send the snapshot {}: {}", file.path, failed);
        return SendError(req, caller, route,
                         ApiError{500, "internal", "cannot open the snapshot file: " + failed});
      }
      // A slow reader gets a minute plus a second per MiB before the server gives up on it.
      body->timelimit(std::chrono::seconds(60 + file.bytes / (1 << 20)));
      auto resp = StartResponse(req, caller, route, 200, "application/vnd.sqlite3");
      resp.append_header(restinio::http_field::content_disposition,
                         "attachment; filename=\"dgpu-snapshot-" +
                             std::to_string(file.meta.last_applied_seq) + ".db\"");
      resp.append_header("X-Dgpu-Snapshot-Tasks", std::to_string(file.tasks));
      resp.append_header("X-Dgpu-Snapshot-Seq", std::to_string(file.meta.last_applied_seq));
      resp.append_header("X-Dgpu-Snapshot-Epoch", std::to_string(file.meta.epoch));
      resp.set_body(std::move(*body));
      resp.done();
    });
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Cancel(const req_t& req, const Caller& caller,
                                             const params_t& params) {
    const std::string route = "DELETE /api/v1/tasks/{id}";
    auto n = TaskIdOf(req, caller, route, params);
    if (!n) return restinio::request_accepted();
    CancelRequest request{*n, std::nullopt};
    if (auto error = ParseCancelQuery(req->header().query(), &request.grace_seconds)) {
      SendError(req, caller, route, *error);
      return restinio::request_accepted();
    }
    d.app->Cancel(caller, request,
                  Answer<Done>(
                      req, caller, route,
                      [](const Done&) {
                        return std::pair(200, Dump({{"message", "Task cancelled"}}));
                      },
                      core::FormatTaskId(*n)));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Teams(const req_t& req, const Caller& caller) {
    d.app->ListTeams(
        caller, Answer<std::vector<core::TeamView>>(
                    req, caller, "GET /api/v1/teams", [](const std::vector<core::TeamView>& all) {
                      json teams = json::array();
                      for (const auto& t : all) teams.push_back(TeamToJson(t));
                      return std::pair(200, Dump({{"teams", std::move(teams)}}));
                    }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t GetTeam(const req_t& req, const Caller& caller,
                                              const params_t& params) {
    d.app->GetTeam(caller, std::string(params["name"]),
                   Answer<core::TeamView>(req, caller, "GET /api/v1/teams/{name}",
                                          [](const core::TeamView& t) {
                                            return std::pair(200, Dump(TeamToJson(t)));
                                          }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t PutTeam(const req_t& req, const Caller& caller,
                                              const params_t& params) {
    const std::string route = "PUT /api/v1/teams/{name}";
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    TeamRequest request;
    request.name = std::string(params["name"]);
    if (auto e = ParseTeamRequest(req->body(), &request)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    d.app->SetTeam(caller, request,
                   Answer<core::TeamView>(req, caller, route, [](const core::TeamView& t) {
                     return std::pair(200, Dump(TeamToJson(t)));
                   }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t DeleteTeam(const req_t& req, const Caller& caller,
                                                 const params_t& params) {
    const std::string route = "DELETE /api/v1/teams/{name}";
    std::string name(params["name"]);
    d.app->DeleteTeam(caller, name, Answer<Done>(req, caller, route, [name](const Done&) {
                        return std::pair(200, Dump({{"name", name}, {"deleted", true}}));
                      }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Gpus(const req_t& req, const Caller& caller) {
    auto body = [utilization =
                     d.metrics->GpuUtilizations()](const std::vector<core::GpuView>& all) {
      json gpus = json::array();
      int idle = 0, busy = 0, offline = 0, unhealthy = 0;
      for (const auto& g : all) {
        (g.status == core::GpuStatus::kIdle        ? idle
         : g.status == core::GpuStatus::kBusy      ? busy
         : g.status == core::GpuStatus::kUnhealthy ? unhealthy
                                                   : offline)++;
        gpus.push_back(
            {{"id", GpuId(g.node_id, g.index)},
             {"node_id", g.node_id},
             {"index", g.index},
             {"model", g.model},
             {"memory_mb", g.memory_mb},
             {"status", core::ToString(g.status)},
             {"current_task",
              g.current_task == 0 ? json(nullptr) : json(core::FormatTaskId(g.current_task))},
             {"health_reason", g.health_reason.empty() ? json(nullptr) : json(g.health_reason)}});
        auto u = utilization.find(gpus.back()["id"].get_ref<const std::string&>());
        gpus.back()["utilization"] = u == utilization.end() ? json(nullptr) : json(u->second);
      }
      return std::pair(200, Dump({{"total", gpus.size()},
                                  {"idle", idle},
                                  {"busy", busy},
                                  {"offline", offline},
                                  {"unhealthy", unhealthy},
                                  {"gpus", std::move(gpus)}}));
    };
    d.app->ListGpus(caller, Answer<std::vector<core::GpuView>>(req, caller, "GET /api/v1/gpus",
                                                               std::move(body)));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t GetQuota(const req_t& req, const Caller& caller) {
    d.app->GetQuota(caller,
                    Answer<QuotaState>(req, caller, "GET /api/v1/quota", [](const QuotaState& q) {
                      return std::pair(200, Dump(QuotaStateToJson(q)));
                    }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t PutQuota(const req_t& req, const Caller& caller) {
    const std::string route = "PUT /api/v1/quota";
    if (req->body().size() > kMaxBodyBytes) {
      SendError(req, caller, route,
                ApiError{413, "payload_too_large", "request body is over 1 MiB"});
      return restinio::request_accepted();
    }
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    QuotaRequest request;
    if (auto e = ParseQuotaRequest(req->body(), &request.online_percent)) {
      SendError(req, caller, route, *e);
      return restinio::request_accepted();
    }
    d.app->SetQuota(caller, request, Answer<Done>(req, caller, route, [](const Done&) {
                      return std::pair(200, Dump({{"message", "Quota updated"}}));
                    }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Agents(const req_t& req, const Caller& caller) {
    auto body = [](const std::vector<core::NodeView>& nodes) {
      json agents = json::array();
      for (const auto& n : nodes) agents.push_back(AgentToJson(n));
      return std::pair(200, Dump({{"agents", std::move(agents)}}));
    };
    d.app->ListAgents(caller, Answer<std::vector<core::NodeView>>(req, caller, "GET /api/v1/agents",
                                                                  std::move(body)));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Autoscale(const req_t& req, const Caller& caller) {
    d.app->GetAutoscale(caller, Answer<AutoscaleStatus>(req, caller, "GET /api/v1/autoscale",
                                                        [](const AutoscaleStatus& status) {
                                                          return std::pair(
                                                              200, Dump(AutoscaleToJson(status)));
                                                        }));
    return restinio::request_accepted();
  }

  // POST /agents/{id}/cordon | uncordon | drain: answered with the agent as it is then and the
  // stops a drain ordered.
  restinio::request_handling_status_t SetNodeMode(const req_t& req, const Caller& caller,
                                                  const params_t& params, core::NodeMode mode,
                                                  const std::string& route) {
    NodeModeRequest request;
    request.node_id = std::string(params["id"]);
    request.mode = mode;
    if (mode == core::NodeMode::kDraining) {
      if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
        SendError(req, caller, route, *e);
        return restinio::request_accepted();
      }
      if (auto e = ParseDrainRequest(req->body(), &request)) {
        SendError(req, caller, route, *e);
        return restinio::request_accepted();
      }
    }
    d.app->SetNodeMode(
        caller, request, Answer<NodeModeSet>(req, caller, route, [](const NodeModeSet& done) {
          return std::pair(200,
                           Dump({{"agent", AgentToJson(done.node)}, {"evicted", done.evicted}}));
        }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Ready(const req_t& req, const Caller& caller) {
    const Readiness r = d.app->Ready();
    json body = {{"role", r.leader ? "leader" : "standby"}, {"epoch", r.epoch}};
    body["storage"] = r.storage.ok() ? "ok" : r.storage.message();
    if (!r.detail.empty()) body["detail"] = r.detail;
    body["status"] = r.ready() ? "ready" : "not_ready";
    Send(req, caller, "GET /readyz", r.ready() ? 200 : 503, Dump(body));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t MetricsPage(const req_t& req, const Caller& caller) {
    d.app->Gauges(caller, [this, req, caller](const Result<GaugeSnapshot>& g) {
      if (!g.ok()) return SendError(req, caller, "GET /metrics", g.error());
      Send(req, caller, "GET /metrics", 200, d.metrics->Render(g.value()),
           "text/plain; version=0.0.4");
    });
    return restinio::request_accepted();
  }

  // Every route goes through Route(), which also records it in `routes`: the table that
  // --print-routes prints and the contract test compares with api/openapi.yaml.
  std::vector<RestRoute> routes;

  // Who may reach a route: anyone (health, the API description), anyone when
  // auth.metrics_public (metrics), or authenticated callers (the rest).
  enum class Access { kPublic, kMetrics, kAuthenticated };

  // Protected mode refusals: the first one, then at most one line a minute with the count.
  std::atomic<int64_t> remote_refusals{0};
  std::atomic<int64_t> last_refusal_log{-60'000'000};
  void LogRemoteRefusal(const std::string& peer) {
    const int64_t count = remote_refusals.fetch_add(1, std::memory_order_relaxed) + 1;
    const int64_t now = common::NowMicros();
    int64_t last = last_refusal_log.load(std::memory_order_relaxed);
    if (now - last < 60'000'000 || !last_refusal_log.compare_exchange_strong(last, now)) return;
    spdlog::warn(
        "refused a REST request from {}: not a loopback peer, and auth.mode is none without "
        "auth.allow_insecure_remote ({} such requests refused so far)",
        peer, count);
  }

  // The caller of `req`, or false once it has been answered with 401 or 403.
  bool Admit(const req_t& req, Access access, const std::string& route, Caller* caller) {
    caller->peer = PeerOf(req);
    if (d.auth == nullptr || access == Access::kPublic) return true;
    if (access == Access::kMetrics && d.auth->metrics_public()) return true;
    auto who = d.auth->Authenticate(Header(req, restinio::http_field::authorization), caller->peer);
    if (auto* identity = std::get_if<Identity>(&who)) {
      caller->identity = std::move(*identity);
      return true;
    }
    const AuthRefusal& refusal = std::get<AuthRefusal>(who);
    if (refusal.kind == AuthRefusal::Kind::kInsecureRemote) {
      LogRemoteRefusal(caller->peer);
      SendError(req, *caller, route, ApiError{403, "insecure_remote_access", refusal.message});
      return false;
    }
    auto resp = StartResponse(req, *caller, route, 401, "application/json");
    resp.append_header(restinio::http_field::www_authenticate,
                       Header(req, restinio::http_field::authorization).empty()
                           ? std::string("Bearer realm=\"dgpu\"")
                           : std::string("Bearer realm=\"dgpu\", error=\"invalid_token\""));
    resp.set_body(ApiError{401, "unauthenticated", refusal.message}.Body());
    resp.done();
    return false;
  }

  static Caller Anonymous(const req_t& req) { return {Caller::Transport::kRest, PeerOf(req), {}}; }

  // `strict`: a trailing slash is part of the path ("/ui" and "/ui/" are two routes).
  template <typename Handler>
  void Route(router_t& r, restinio::http_method_id_t method, const std::string& path, Access access,
             Handler handler, bool strict = false) {
    // RESTinio's ":name" parameters are OpenAPI's "{name}".
    std::string described;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] != ':') {
        described += path[i];
        continue;
      }
      size_t end = path.find('/', i);
      if (end == std::string::npos) end = path.size();
      described += "{" + path.substr(i + 1, end - i - 1) + "}";
      i = end - 1;
    }
    routes.push_back({method.c_str(), described});
    r.add_handler(method, path, restinio::path2regex::options_t{}.strict(strict),
                  [this, access, route = std::string(method.c_str()) + " " + described,
                   handler = std::move(handler)](const req_t& q, params_t p) {
                    Caller caller;
                    if (!Admit(q, access, route, &caller)) return restinio::request_accepted();
                    return handler(q, caller, std::move(p));
                  });
  }

  std::unique_ptr<router_t> MakeRouter() {
    auto r = std::make_unique<router_t>();
    routes.clear();
    auto not_allowed = [this](std::string route) {
      return [this, route = std::move(route)](const req_t& req, params_t) {
        SendError(req, Anonymous(req), route,
                  ApiError{405, "method_not_allowed",
                           std::string(req->header().method().c_str()) + " is not allowed on " +
                               std::string(req->header().path())});
        return restinio::request_accepted();
      };
    };
    using restinio::http_method_delete;
    using restinio::http_method_get;
    using restinio::http_method_post;
    using restinio::http_method_put;
    using restinio::router::none_of_methods;

    Route(*r, http_method_post(), "/api/v1/tasks", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Submit(q, c); });
    Route(*r, http_method_get(), "/api/v1/tasks", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return ListTasks(q, c); });
    r->add_handler(none_of_methods(http_method_get(), http_method_post()), "/api/v1/tasks",
                   not_allowed("/api/v1/tasks"));
    Route(*r, http_method_get(), "/api/v1/tasks/:id", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return GetTask(q, c, p); });
    Route(*r, http_method_delete(), "/api/v1/tasks/:id", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return Cancel(q, c, p); });
    r->add_handler(none_of_methods(http_method_get(), http_method_delete()), "/api/v1/tasks/:id",
                   not_allowed("/api/v1/tasks/{id}"));
    Route(*r, http_method_get(), "/api/v1/tasks/:id/events", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return TaskEvents(q, c, p); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/tasks/:id/events",
                   not_allowed("/api/v1/tasks/{id}/events"));
    Route(*r, http_method_get(), "/api/v1/tasks/:id/logs", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return TaskLog(q, c, p); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/tasks/:id/logs",
                   not_allowed("/api/v1/tasks/{id}/logs"));
    Route(*r, http_method_get(), "/api/v1/gpus", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Gpus(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/gpus", not_allowed("/api/v1/gpus"));
    Route(*r, http_method_get(), "/api/v1/quota", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return GetQuota(q, c); });
    Route(*r, http_method_put(), "/api/v1/quota", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return PutQuota(q, c); });
    r->add_handler(none_of_methods(http_method_get(), http_method_put()), "/api/v1/quota",
                   not_allowed("/api/v1/quota"));
    Route(*r, http_method_get(), "/api/v1/teams", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Teams(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/teams",
                   not_allowed("/api/v1/teams"));
    Route(*r, http_method_get(), "/api/v1/teams/:name", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return GetTeam(q, c, p); });
    Route(*r, http_method_put(), "/api/v1/teams/:name", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return PutTeam(q, c, p); });
    Route(*r, http_method_delete(), "/api/v1/teams/:name", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t p) { return DeleteTeam(q, c, p); });
    r->add_handler(none_of_methods(http_method_get(), http_method_put(), http_method_delete()),
                   "/api/v1/teams/:name", not_allowed("/api/v1/teams/{name}"));
    Route(*r, http_method_get(), "/api/v1/agents", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Agents(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/agents",
                   not_allowed("/api/v1/agents"));
    Route(*r, http_method_get(), "/api/v1/watch", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Watch(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/watch",
                   not_allowed("/api/v1/watch"));
    Route(*r, http_method_get(), "/api/v1/usage", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Usage(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/usage",
                   not_allowed("/api/v1/usage"));
    Route(*r, http_method_get(), "/api/v1/autoscale", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Autoscale(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/autoscale",
                   not_allowed("/api/v1/autoscale"));
    for (const auto& verb_mode : {std::pair("cordon", core::NodeMode::kCordoned),
                                  std::pair("uncordon", core::NodeMode::kSchedulable),
                                  std::pair("drain", core::NodeMode::kDraining)}) {
      const std::string path = std::string("/api/v1/agents/:id/") + verb_mode.first;
      const std::string described = std::string("/api/v1/agents/{id}/") + verb_mode.first;
      Route(*r, http_method_post(), path, Access::kAuthenticated,
            [this, mode = verb_mode.second, route = "POST " + described](
                const req_t& q, const Caller& c, params_t p) {
              return SetNodeMode(q, c, p, mode, route);
            });
      r->add_handler(none_of_methods(http_method_post()), path, not_allowed(described));
    }
    Route(*r, http_method_get(), "/api/v1/snapshot", Access::kAuthenticated,
          [this](const req_t& q, const Caller& c, params_t) { return Snapshot(q, c); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/snapshot",
                   not_allowed("/api/v1/snapshot"));
    Route(*r, http_method_get(), "/api/v1/openapi.yaml", Access::kPublic,
          [this](const req_t& q, const Caller& c, params_t) {
            Send(q, c, "GET /api/v1/openapi.yaml", 200, std::string(OpenApiYaml()),
                 "application/yaml");
            return restinio::request_accepted();
          });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/openapi.yaml",
                   not_allowed("/api/v1/openapi.yaml"));
    for (const char* p : {"/healthz", "/api/v1/healthz"}) {
      Route(*r, http_method_get(), p, Access::kPublic,
            [this](const req_t& q, const Caller& c, params_t) {
              Send(q, c, "GET /healthz", 200, R"({"status":"ok"})");
              return restinio::request_accepted();
            });
    }
    for (const char* p : {"/readyz", "/api/v1/readyz"}) {
      Route(*r, http_method_get(), p, Access::kPublic,
            [this](const req_t& q, const Caller& c, params_t) { return Ready(q, c); });
    }
    for (const char* p : {"/metrics", "/api/v1/metrics"}) {
      Route(*r, http_method_get(), p, Access::kMetrics,
            [this](const req_t& q, const Caller& c, params_t) { return MetricsPage(q, c); });
    }
    // The web dashboard: its files are public (they hold no data; the API calls they make are
    // authenticated like any other).
    Route(
        *r, http_method_get(), "/ui", Access::kPublic,
        [this](const req_t& q, const Caller& c, params_t) {
          auto resp = StartResponse(q, c, "GET /ui", 301, "text/plain; charset=utf-8");
          resp.append_header(restinio::http_field::location, "/ui/");
          resp.set_body("the dashboard is at /ui/\n");
          resp.done();
          return restinio::request_accepted();
        },
        /*strict=*/true);
    Route(
        *r, http_method_get(), "/ui/", Access::kPublic,
        [this](const req_t& q, const Caller& c, params_t) { return UiFile(q, c, "GET /ui/", ""); },
        /*strict=*/true);
    Route(*r, http_method_get(), "/ui/:file", Access::kPublic,
          [this](const req_t& q, const Caller& c, params_t p) {
            return UiFile(q, c, "GET /ui/{file}", std::string(p["file"]));
          });
    const auto strict = restinio::path2regex::options_t{}.strict(true);
    r->add_handler(none_of_methods(http_method_get()), "/ui", strict, not_allowed("/ui"));
    r->add_handler(none_of_methods(http_method_get()), "/ui/", strict, not_allowed("/ui/"));
    r->add_handler(none_of_methods(http_method_get()), "/ui/:file", not_allowed("/ui/{file}"));
    r->non_matched_request_handler([this](const req_t& q) {
      SendError(q, Anonymous(q), "unmatched",
                {404, "not_found", "no such endpoint: " + std::string(q->header().path())});
      return restinio::request_accepted();
    });
    return r;
  }
};

RestServer::RestServer(RestDeps deps) : impl_(std::make_unique<Impl>()) { impl_->d = deps; }

RestServer::~RestServer() { Stop(); }

Status RestServer::Start(const std::string& host, uint16_t port, const RestOptions& options) {
  impl_->connections->set_limit(options.max_connections);
  try {
    if (options.tls) {
      auto settings = CommonSettings(restinio::server_settings_t<TlsTraits>{}, host, port, options,
                                     impl_->connections, impl_->MakeRouter());
      settings.tls_context(MakeTlsContext(*options.tls));
      auto watch = std::make_shared<HandshakeWatch>(options.read_timeout);
      impl_->connections->set_handshakes(watch);
      settings.socket_options_setter(
          [watch](restinio::socket_options_t& socket) { watch->Accepted(socket); });
      impl_->server.emplace(restinio::run_async<TlsTraits>(
          restinio::external_io_context(*impl_->io), std::move(settings), options.threads));
    } else {
      impl_->server.emplace(restinio::run_async<Traits>(
          restinio::external_io_context(*impl_->io),
          CommonSettings(restinio::server_settings_t<Traits>{}, host, port, options,
                         impl_->connections, impl_->MakeRouter()),
          options.threads));
    }
  } catch (const std::exception& e) {
    return Unavailable("cannot listen for HTTP on " + host + ":" + std::to_string(port) + ": " +
                       e.what());
  }
  return OkStatus();
}

size_t RestServer::connections() const { return impl_->connections->open(); }

std::vector<RestRoute> RestServer::Routes() {
  Impl impl;
  impl.MakeRouter();
  return impl.routes;
}

void RestServer::Stop() {
  if (impl_) impl_->stopping = true;
  if (impl_ && impl_->server) {
    impl_->server->StopAndWait();
    impl_->server.reset();
  }
}

}  // namespace dgpu::scheduler
