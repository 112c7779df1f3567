#include "scheduler/rest_server.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <restinio/all.hpp>

#include "common/logging.h"
#include "common/number.h"
#include "scheduler/api_json.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;
using router_t = restinio::router::express_router_t<>;
using req_t = restinio::request_handle_t;
using params_t = restinio::router::route_params_t;

struct Traits : public restinio::default_traits_t {
  using request_handler_t = router_t;
};
using RunningServer = restinio::running_server_handle_t<Traits>;

// The transport closes connections whose body is far beyond the API limit; between the two
// limits a request gets a proper 413.
constexpr uint64_t kTransportBodyLimit = 8 * kMaxBodyBytes;

}  // namespace

struct RestServer::Impl {
  RestDeps d;
  // Outlives `server`: the core loop and the journal's writer thread may still hold requests
  // (answered after Stop, or their last reference dropped there), and a connection released
  // on such a thread must find its io_context alive, else it crashes on a dead reactor
  // (SIGSEGV on SIGTERM under load). Destroyed with the Impl, after the daemon stopped both.
  std::shared_ptr<restinio::asio_ns::io_context> io =
      std::make_shared<restinio::asio_ns::io_context>();
  RunningServer server;

  void Send(const req_t& req, const std::string& route, int status, std::string body,
            const char* content_type = "application/json") {
    d.metrics->HttpRequest(route, status);
    auto resp = req->create_response(restinio::http_status_line_t{
        restinio::http_status_code_t{static_cast<std::uint16_t>(status)}, ReasonPhrase(status)});
    resp.append_header(restinio::http_field::content_type, content_type);
    if (!d.leader->is_leader()) {
      resp.append_header("X-Dgpu-Stale", "true");
      std::string leader = d.leader->leader_http();
      if (!leader.empty()) resp.append_header("X-Leader", leader);
    }
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
      case 500:
        return "Internal Server Error";
      case 503:
        return "Service Unavailable";
      default:
        return "Unknown";
    }
  }

  void SendError(const req_t& req, const std::string& route, const ApiError& e) {
    Send(req, route, e.http_status, e.Body());
  }

  // Writes need the leader and working storage.
  bool RefuseWrite(const req_t& req, const std::string& route) {
    if (!d.leader->is_leader()) {
      std::string leader = d.leader->leader_http();
      SendError(req, route,
                {503, "not_leader",
                 "this scheduler is a standby" +
                     (leader.empty() ? std::string() : "; the leader is at " + leader)});
      return true;
    }
    Status h = d.journal->health();
    if (!h.ok()) {
      SendError(req, route, {503, "storage_unavailable", h.message()});
      return true;
    }
    return false;
  }

  std::string Header(const req_t& req, restinio::http_field_t f) {
    return req->header().get_field_or(f, "");
  }

  // --- Handlers --------------------------------------------------------------------------------

  restinio::request_handling_status_t Submit(req_t req) {
    const std::string route = "POST /api/v1/tasks";
    if (req->body().size() > kMaxBodyBytes) {
      SendError(req, route,
                {413, "payload_too_large",
                 "request body is " + std::to_string(req->body().size()) + " bytes; the limit is " +
                     std::to_string(kMaxBodyBytes)});
      return restinio::request_accepted();
    }
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    core::TaskSpec spec;
    if (auto e = ParseSubmitRequest(req->body(), &spec)) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    if (RefuseWrite(req, route)) return restinio::request_accepted();
    d.loop->Post([this, req, route, spec = std::move(spec)](CoreLoop::Context& c) {
      if (Status h = c.journal().health(); !h.ok()) {
        SendError(req, route, {503, "storage_unavailable", h.message()});
        return;
      }
      auto id = c.core.Submit(spec, c.now);
      if (!id.ok()) {
        SendError(req, route, FromStatus(id.status()));
        return;
      }
      std::string task_id = core::FormatTaskId(*id);
      json body = {{"task_id", task_id},
                   {"status", "pending"},
                   {"created_at", common::FormatRfc3339(c.now)}};
      core::TaskNumber n = *id;
      c.OnDurable(
          [this, req, route, n,
           body = body.dump(-1, ' ', false, json::error_handler_t::replace)](Status s) mutable {
            if (s.ok()) {
              Send(req, route, 201, std::move(body));
              return;
            }
            // Not durable: tell the client, and make sure the task does not run.
            SendError(req, route,
                      {503, "storage_unavailable",
                       "the task could not be stored (" + s.message() + "); it was not accepted"});
            d.loop->Post([n](CoreLoop::Context& cc) {
              if (Status cancelled = cc.core.Cancel(n, cc.now); !cancelled.ok()) {
                spdlog::warn("cannot withdraw {}, which could not be stored: {}",
                             core::FormatTaskId(n), cancelled.message());
              }
            });
          });
    });
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t GetTask(req_t req, const params_t& params) {
    const std::string route = "GET /api/v1/tasks/{id}";
    std::string id_text(params["id"]);
    auto n = core::ParseTaskId(id_text);
    if (!n) {
      SendError(req, route, {404, "not_found", "task " + id_text + " not found"});
      return restinio::request_accepted();
    }
    d.loop->Post([this, req, route, n = *n, id_text](CoreLoop::Context& c) {
      if (const core::Task* t = c.core.FindTask(n)) {
        Send(req, route, 200,
             TaskToJson(*t, c.core.ReasonOf(*t))
                 .dump(-1, ' ', false, json::error_handler_t::replace));
        return;
      }
      // Not in memory: finished and durable (a task leaves memory only then), or unknown.
      d.readers->Post([this, req, route, n, id_text] { SendStoredTask(req, route, n, id_text); });
    });
    return restinio::request_accepted();
  }

  // Reader thread: the task as the database holds it.
  void SendStoredTask(const req_t& req, const std::string& route, core::TaskNumber n,
                      const std::string& id_text) {
    auto stored = d.db->GetTask(n);
    if (!stored.ok()) {
      SendError(req, route, FromStatus(stored.status()));
    } else if (!stored->has_value()) {
      SendError(req, route, {404, "not_found", "task " + id_text + " not found"});
    } else {
      Send(req, route, 200,
           TaskToJson(**stored, core::PendingReason::kNone)
               .dump(-1, ' ', false, json::error_handler_t::replace));
    }
  }

  restinio::request_handling_status_t ListTasks(req_t req) {
    const std::string route = "GET /api/v1/tasks";
    std::optional<core::TaskStatus> status;
    std::optional<core::Priority> priority;
    int64_t limit = 50, offset = 0;
    try {
      const auto qp = restinio::parse_query(req->header().query());
      for (const auto& [key, value] : qp) {
        std::string k(key.data(), key.size());
        std::string v(value.data(), value.size());
        auto parse_int = [&](int64_t lo, int64_t hi, int64_t* out) -> bool {
          StatusOr<int64_t> x = common::ParseInt64(v, k);
          if (!x.ok() || *x < lo || *x > hi) return false;
          *out = *x;
          return true;
        };
        if (k == "status") {
          if (v.empty()) continue;
          status = core::ParseTaskStatus(v);
          if (!status) {
            SendError(req, route,
                      InvalidField("status must be one of pending, running, success, failed, "
                                   "cancelled; got \"" +
                                   v + "\""));
            return restinio::request_accepted();
          }
        } else if (k == "priority") {
          if (v.empty()) continue;
          priority = core::ParsePriority(v);
          if (!priority) {
            SendError(req, route, InvalidField("priority must be high or low; got \"" + v + "\""));
            return restinio::request_accepted();
          }
        } else if (k == "limit") {
          if (!parse_int(1, 1000, &limit)) {
            SendError(req, route, InvalidField("limit must be an integer from 1 to 1000"));
            return restinio::request_accepted();
          }
        } else if (k == "offset") {
          if (!parse_int(0, INT64_MAX / 2, &offset)) {
            SendError(req, route, InvalidField("offset must be a non-negative integer"));
            return restinio::request_accepted();
          }
        } else {
          SendError(req, route, {400, "unknown_field", "unknown query parameter \"" + k + "\""});
          return restinio::request_accepted();
        }
      }
    } catch (const std::exception& e) {
      SendError(req, route, InvalidField(std::string("malformed query string: ") + e.what()));
      return restinio::request_accepted();
    }
    // An offset past INT_MAX is past every task: clamp it rather than let the cast wrap it.
    auto page = d.db->ListTasks(status, priority, static_cast<int>(limit),
                                static_cast<int>(std::min<int64_t>(offset, INT32_MAX)));
    if (!page.ok()) {
      SendError(req, route, FromStatus(page.status()));
      return restinio::request_accepted();
    }
    // Overlay what the core holds now (pending reasons, fresher states).
    d.loop->Post([this, req, route, page = std::move(*page)](CoreLoop::Context& c) {
      json tasks = json::array();
      for (const auto& t : page.tasks) {
        const core::Task* live = c.core.FindTask(t.id);
        tasks.push_back(live != nullptr ? TaskToJson(*live, c.core.ReasonOf(*live))
                                        : TaskToJson(t, core::PendingReason::kNone));
      }
      Send(req, route, 200,
           json{{"tasks", std::move(tasks)}, {"total", page.total}}.dump(
               -1, ' ', false, json::error_handler_t::replace));
    });
    return restinio::request_accepted();
  }

  // The query of a cancellation: only grace_seconds, an integer from 0 to 86400 (seconds between
  // SIGTERM and SIGKILL); without it the agent's own grace period (-1).
  static std::optional<ApiError> ParseCancelQuery(std::string_view query, int32_t* grace) {
    constexpr int32_t kMaxGraceSeconds = 86400;
    try {
      for (const auto& [key, value] : restinio::parse_query(query)) {
        std::string k(key.data(), key.size());
        if (k != "grace_seconds") {
          return ApiError{400, "unknown_field", "unknown query parameter \"" + k + "\""};
        }
        int32_t x = -1;
        const char* end = value.data() + value.size();
        auto [ptr, ec] = std::from_chars(value.data(), end, x);
        if (ec != std::errc() || ptr != end || x < 0 || x > kMaxGraceSeconds) {
          return InvalidField("grace_seconds must be an integer from 0 to 86400");
        }
        *grace = x;
      }
    } catch (const std::exception& e) {
      return InvalidField(std::string("malformed query string: ") + e.what());
    }
    return std::nullopt;
  }

  restinio::request_handling_status_t Cancel(req_t req, const params_t& params) {
    const std::string route = "DELETE /api/v1/tasks/{id}";
    std::string id_text(params["id"]);
    auto n = core::ParseTaskId(id_text);
    if (!n) {
      SendError(req, route, {404, "not_found", "task " + id_text + " not found"});
      return restinio::request_accepted();
    }
    int32_t grace = -1;
    if (auto error = ParseCancelQuery(req->header().query(), &grace)) {
      SendError(req, route, *error);
      return restinio::request_accepted();
    }
    if (RefuseWrite(req, route)) return restinio::request_accepted();
    d.loop->Post([this, req, route, n = *n, id_text, grace](CoreLoop::Context& c) {
      Status s = c.core.Cancel(n, c.now, grace);
      if (s.code() == StatusCode::kNotFound) {
        d.readers->Post([this, req, route, n, id_text] { RefuseCancel(req, route, n, id_text); });
        return;
      }
      if (!s.ok()) {
        SendError(req, route, FromStatus(s));
        return;
      }
      c.OnDurable([this, req, route](Status st) {
        if (st.ok()) {
          Send(req, route, 200,
               json{{"message", "Task cancelled"}}.dump(-1, ' ', false,
                                                        json::error_handler_t::replace));
        } else {
          SendError(req, route, {503, "storage_unavailable", st.message()});
        }
      });
    });
    return restinio::request_accepted();
  }

  // Reader thread: a task the core does not hold cannot be cancelled; 409 if it finished.
  void RefuseCancel(const req_t& req, const std::string& route, core::TaskNumber n,
                    const std::string& id_text) {
    auto stored = d.db->GetTask(n);
    if (stored.ok() && stored->has_value()) {
      SendError(req, route,
                {409, "conflict",
                 id_text + " already finished with status " +
                     std::string(core::ToString((*stored)->status))});
    } else {
      SendError(req, route, {404, "not_found", "task " + id_text + " not found"});
    }
  }

  restinio::request_handling_status_t Gpus(req_t req) {
    d.loop->Post([this, req](CoreLoop::Context& c) {
      json gpus = json::array();
      int idle = 0, busy = 0, offline = 0;
      for (const auto& g : c.core.Gpus()) {
        (g.status == core::GpuStatus::kIdle   ? idle
         : g.status == core::GpuStatus::kBusy ? busy
                                              : offline)++;
        gpus.push_back(
            {{"id", GpuId(g.node_id, g.index)},
             {"node_id", g.node_id},
             {"index", g.index},
             {"model", g.model},
             {"memory_mb", g.memory_mb},
             {"status", core::ToString(g.status)},
             {"current_task",
              g.current_task == 0 ? json(nullptr) : json(core::FormatTaskId(g.current_task))}});
      }
      json body = {{"total", gpus.size()},
                   {"idle", idle},
                   {"busy", busy},
                   {"offline", offline},
                   {"gpus", std::move(gpus)}};
      Send(req, "GET /api/v1/gpus", 200, body.dump(-1, ' ', false, json::error_handler_t::replace));
    });
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t GetQuota(req_t req) {
    d.loop->Post([this, req](CoreLoop::Context& c) {
      json body = QuotaToJson(c.core.Quota());
      body["online_percent"] = c.core.online_percent();
      body["batch_percent"] = 1.0 - c.core.online_percent();
      Send(req, "GET /api/v1/quota", 200,
           body.dump(-1, ' ', false, json::error_handler_t::replace));
    });
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t PutQuota(req_t req) {
    const std::string route = "PUT /api/v1/quota";
    if (req->body().size() > kMaxBodyBytes) {
      SendError(req, route, {413, "payload_too_large", "request body is over 1 MiB"});
      return restinio::request_accepted();
    }
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    double online = 0;
    if (auto e = ParseQuotaRequest(req->body(), &online)) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    if (RefuseWrite(req, route)) return restinio::request_accepted();
    d.loop->Post([this, req, route, online](CoreLoop::Context& c) {
      Status s = c.core.SetOnlinePercent(online, c.now);
      if (!s.ok()) {
        SendError(req, route, FromStatus(s));
        return;
      }
      c.OnDurable([this, req, route](Status st) {
        if (st.ok()) {
          Send(req, route, 200,
               json{{"message", "Quota updated"}}.dump(-1, ' ', false,
                                                       json::error_handler_t::replace));
        } else {
          SendError(req, route, {503, "storage_unavailable", st.message()});
        }
      });
    });
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Agents(req_t req) {
    d.loop->Post([this, req](CoreLoop::Context& c) {
      json agents = json::array();
      for (const auto& n : c.core.Nodes()) {
        agents.push_back({{"id", n.id},
                          {"address", n.address},
                          {"status", n.online ? "online" : "offline"},
                          {"gpus", n.gpu_count},
                          {"free_gpus", n.free_gpus},
                          {"last_heartbeat", n.last_heartbeat == 0
                                                 ? json(nullptr)
                                                 : json(common::FormatRfc3339(n.last_heartbeat))}});
      }
      Send(
          req, "GET /api/v1/agents", 200,
          json{{"agents", std::move(agents)}}.dump(-1, ' ', false, json::error_handler_t::replace));
    });
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Ready(req_t req) {
    json body = {{"role", d.leader->is_leader() ? "leader" : "standby"},
                 {"epoch", d.leader->epoch()}};
    Status h = d.journal->health();
    body["storage"] = h.ok() ? "ok" : h.message();
    std::string detail = d.leader->detail();
    if (!detail.empty()) body["detail"] = detail;
    bool ready = d.leader->is_leader() && h.ok();
    body["status"] = ready ? "ready" : "not_ready";
    Send(req, "GET /readyz", ready ? 200 : 503,
         body.dump(-1, ' ', false, json::error_handler_t::replace));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t MetricsPage(req_t req) {
    d.loop->Post([this, req](CoreLoop::Context& c) {
      GaugeSnapshot g = TakeGaugeSnapshot(c.core);
      g.is_leader = d.leader->is_leader();
      g.epoch = d.leader->epoch();
      auto js = d.journal->stats();
      g.journal_batches = js.batches_committed;
      g.journal_mean_batch = js.MeanBatchSize();
      Send(req, "GET /metrics", 200, d.metrics->Render(g), "text/plain; version=0.0.4");
    });
    return restinio::request_accepted();
  }

  std::unique_ptr<router_t> MakeRouter() {
    auto r = std::make_unique<router_t>();
    auto not_allowed = [this](const char* route) {
      return [this, route](req_t req, params_t) {
        SendError(req, route,
                  ApiError{405, "method_not_allowed",
                           std::string(req->header().method().c_str()) + " is not allowed on " +
                               std::string(req->header().path())});
        return restinio::request_accepted();
      };
    };
    using restinio::http_method_delete;
    using restinio::http_method_get;
    using restinio::http_method_head;
    using restinio::http_method_post;
    using restinio::http_method_put;
    using restinio::router::none_of_methods;

    r->http_post("/api/v1/tasks", [this](req_t q, params_t) { return Submit(q); });
    r->http_get("/api/v1/tasks", [this](req_t q, params_t) { return ListTasks(q); });
    r->add_handler(none_of_methods(http_method_get(), http_method_post()), "/api/v1/tasks",
                   not_allowed("/api/v1/tasks"));
    r->http_get("/api/v1/tasks/:id", [this](req_t q, params_t p) { return GetTask(q, p); });
    r->http_delete("/api/v1/tasks/:id", [this](req_t q, params_t p) { return Cancel(q, p); });
    r->add_handler(none_of_methods(http_method_get(), http_method_delete()), "/api/v1/tasks/:id",
                   not_allowed("/api/v1/tasks/{id}"));
    r->http_get("/api/v1/gpus", [this](req_t q, params_t) { return Gpus(q); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/gpus", not_allowed("/api/v1/gpus"));
    r->http_get("/api/v1/quota", [this](req_t q, params_t) { return GetQuota(q); });
    r->http_put("/api/v1/quota", [this](req_t q, params_t) { return PutQuota(q); });
    r->add_handler(none_of_methods(http_method_get(), http_method_put()), "/api/v1/quota",
                   not_allowed("/api/v1/quota"));
    r->http_get("/api/v1/agents", [this](req_t q, params_t) { return Agents(q); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/agents",
                   not_allowed("/api/v1/agents"));
    for (const char* p : {"/healthz", "/api/v1/healthz"}) {
      r->http_get(p, [this](req_t q, params_t) {
        Send(q, "GET /healthz", 200, R"({"status":"ok"})");
        return restinio::request_accepted();
      });
    }
    for (const char* p : {"/readyz", "/api/v1/readyz"}) {
      r->http_get(p, [this](req_t q, params_t) { return Ready(q); });
    }
    for (const char* p : {"/metrics", "/api/v1/metrics"}) {
      r->http_get(p, [this](req_t q, params_t) { return MetricsPage(q); });
    }
    r->non_matched_request_handler([this](req_t q) {
      SendError(q, "unmatched",
                {404, "not_found", "no such endpoint: " + std::string(q->header().path())});
      return restinio::request_accepted();
    });
    return r;
  }
};

RestServer::RestServer(RestDeps deps) : impl_(std::make_unique<Impl>()) { impl_->d = deps; }

RestServer::~RestServer() { Stop(); }

Status RestServer::Start(const std::string& host, uint16_t port, size_t threads) {
  try {
    impl_->server = restinio::run_async<Traits>(
        restinio::external_io_context(*impl_->io),
        restinio::server_settings_t<Traits>{}
            .address(host)
            .port(port)
            .incoming_http_msg_limits(
                restinio::incoming_http_msg_limits_t{}.max_body_size(kTransportBodyLimit))
            .max_pipelined_requests(16)
            .request_handler(impl_->MakeRouter()),
        threads);
  } catch (const std::exception& e) {
    return Unavailable("cannot listen for HTTP on " + host + ":" + std::to_string(port) + ": " +
                       e.what());
  }
  return OkStatus();
}

void RestServer::Stop() {
  if (impl_ && impl_->server) {
    impl_->server->stop();
    impl_->server->wait();
    impl_->server.reset();
  }
}

}  // namespace dgpu::scheduler
