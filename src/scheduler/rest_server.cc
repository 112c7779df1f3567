#include "scheduler/rest_server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <restinio/all.hpp>

#include "common/logging.h"
#include "scheduler/api_json.h"
#include "scheduler/openapi_spec.h"

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

  // A response with its status line, content type and, on a standby, the headers that say so.
  auto StartResponse(const req_t& req, const std::string& route, int status,
                     const char* content_type) {
    d.metrics->HttpRequest(route, status);
    auto resp = req->create_response(restinio::http_status_line_t{
        restinio::http_status_code_t{static_cast<std::uint16_t>(status)}, ReasonPhrase(status)});
    resp.append_header(restinio::http_field::content_type, content_type);
    if (!d.leader->is_leader()) {
      resp.append_header("X-Dgpu-Stale", "true");
      std::string leader = d.leader->leader_http();
      if (!leader.empty()) resp.append_header("X-Leader", leader);
    }
    return resp;
  }

  void Send(const req_t& req, const std::string& route, int status, std::string body,
            const char* content_type = "application/json") {
    auto resp = StartResponse(req, route, status, content_type);
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

  void SendError(const req_t& req, const std::string& route, const Error& e) {
    SendError(req, route, ToApiError(e));
  }

  static Caller CallerOf(const req_t& req) {
    const auto& peer = req->remote_endpoint();
    return {Caller::Transport::kRest,
            peer.address().to_string() + ":" + std::to_string(peer.port())};
  }

  static std::string Dump(const json& body) {
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  // Answers `req` with `ok(value)` (status and body), or with the error.
  template <typename T, typename Ok>
  Reply<T> Answer(const req_t& req, const std::string& route, Ok ok) {
    return [this, req, route, ok = std::move(ok)](const Result<T>& r) {
      if (!r.ok()) return SendError(req, route, r.error());
      auto [status, body] = ok(r.value());
      Send(req, route, status, std::move(body));
    };
  }

  std::string Header(const req_t& req, restinio::http_field_t f) {
    return req->header().get_field_or(f, "");
  }

  // A task id of the path; else not found.
  std::optional<core::TaskNumber> TaskIdOf(const req_t& req, const std::string& route,
                                           const params_t& params) {
    std::string id_text(params["id"]);
    auto n = core::ParseTaskId(id_text);
    if (!n) SendError(req, route, ApiError{404, "not_found", "task " + id_text + " not found"});
    return n;
  }

  // --- Handlers --------------------------------------------------------------------------------

  restinio::request_handling_status_t Submit(const req_t& req) {
    const std::string route = "POST /api/v1/tasks";
    if (req->body().size() > kMaxBodyBytes) {
      SendError(req, route,
                ApiError{413, "payload_too_large",
                         "request body is " + std::to_string(req->body().size()) +
                             " bytes; the limit is " + std::to_string(kMaxBodyBytes)});
      return restinio::request_accepted();
    }
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    SubmitRequest request;
    if (auto e = ParseSubmitRequest(req->body(), &request.spec)) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    d.app->Submit(
        CallerOf(req), std::move(request), Answer<Submitted>(req, route, [](const Submitted& s) {
          return std::pair(201, Dump({{"task_id", core::FormatTaskId(s.task)},
                                      {"status", "pending"},
                                      {"created_at", common::FormatRfc3339(s.created_at)}}));
        }));
    return restinio::request_accepted();
  }

  static std::pair<int, std::string> TaskBody(const TaskView& v) {
    return {200, Dump(TaskToJson(*v.task, v.reason))};
  }

  restinio::request_handling_status_t GetTask(const req_t& req, const params_t& params) {
    const std::string route = "GET /api/v1/tasks/{id}";
    auto n = TaskIdOf(req, route, params);
    if (!n) return restinio::request_accepted();
    d.app->GetTask(CallerOf(req), *n, Answer<TaskView>(req, route, TaskBody));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t ListTasks(const req_t& req) {
    const std::string route = "GET /api/v1/tasks";
    ListTasksRequest request;
    if (auto e = ParseListQuery(req->header().query(), &request)) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    d.app->ListTasks(
        CallerOf(req), request, Answer<TaskPage>(req, route, [](const TaskPage& page) {
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
  restinio::request_handling_status_t Snapshot(const req_t& req) {
    const std::string route = "GET /api/v1/snapshot";
    d.app->Snapshot(CallerOf(req), [this, req, route](const Result<store::SnapshotFile>& r) {
      if (!r.ok()) return SendError(req, route, r.error());
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
        return SendError(req, route,
                         ApiError{500, "internal", "cannot open the snapshot file: " + failed});
      }
      // A slow reader gets a minute plus a second per MiB before the server gives up on it.
      body->timelimit(std::chrono::seconds(60 + file.bytes / (1 << 20)));
      auto resp = StartResponse(req, route, 200, "application/vnd.sqlite3");
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

  restinio::request_handling_status_t Cancel(const req_t& req, const params_t& params) {
    const std::string route = "DELETE /api/v1/tasks/{id}";
    auto n = TaskIdOf(req, route, params);
    if (!n) return restinio::request_accepted();
    CancelRequest request{*n, std::nullopt};
    if (auto error = ParseCancelQuery(req->header().query(), &request.grace_seconds)) {
      SendError(req, route, *error);
      return restinio::request_accepted();
    }
    d.app->Cancel(CallerOf(req), request, Answer<Done>(req, route, [](const Done&) {
                    return std::pair(200, Dump({{"message", "Task cancelled"}}));
                  }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Teams(const req_t& req) {
    d.app->ListTeams(CallerOf(req),
                     Answer<std::vector<core::TeamView>>(
                         req, "GET /api/v1/teams", [](const std::vector<core::TeamView>& all) {
                           json teams = json::array();
                           for (const auto& t : all) teams.push_back(TeamToJson(t));
                           return std::pair(200, Dump({{"teams", std::move(teams)}}));
                         }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t GetTeam(const req_t& req, const params_t& params) {
    d.app->GetTeam(
        CallerOf(req), std::string(params["name"]),
        Answer<core::TeamView>(req, "GET /api/v1/teams/{name}", [](const core::TeamView& t) {
          return std::pair(200, Dump(TeamToJson(t)));
        }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t PutTeam(const req_t& req, const params_t& params) {
    const std::string route = "PUT /api/v1/teams/{name}";
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    TeamRequest request;
    request.name = std::string(params["name"]);
    if (auto e = ParseTeamRequest(req->body(), &request)) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    d.app->SetTeam(CallerOf(req), request,
                   Answer<core::TeamView>(req, route, [](const core::TeamView& t) {
                     return std::pair(200, Dump(TeamToJson(t)));
                   }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t DeleteTeam(const req_t& req, const params_t& params) {
    const std::string route = "DELETE /api/v1/teams/{name}";
    std::string name(params["name"]);
    d.app->DeleteTeam(CallerOf(req), name, Answer<Done>(req, route, [name](const Done&) {
                        return std::pair(200, Dump({{"name", name}, {"deleted", true}}));
                      }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Gpus(const req_t& req) {
    auto body = [](const std::vector<core::GpuView>& all) {
      json gpus = json::array();
      int idle = 0, busy = 0, offline = 0;
      for (const auto& g : all) {
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
      return std::pair(200, Dump({{"total", gpus.size()},
                                  {"idle", idle},
                                  {"busy", busy},
                                  {"offline", offline},
                                  {"gpus", std::move(gpus)}}));
    };
    d.app->ListGpus(CallerOf(req),
                    Answer<std::vector<core::GpuView>>(req, "GET /api/v1/gpus", std::move(body)));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t GetQuota(const req_t& req) {
    d.app->GetQuota(CallerOf(req),
                    Answer<QuotaState>(req, "GET /api/v1/quota", [](const QuotaState& q) {
                      json body = QuotaToJson(q.quota);
                      AddQuotaTeams(q.teams, &body);
                      body["online_percent"] = q.online_percent;
                      body["batch_percent"] = 1.0 - q.online_percent;
                      return std::pair(200, Dump(body));
                    }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t PutQuota(const req_t& req) {
    const std::string route = "PUT /api/v1/quota";
    if (req->body().size() > kMaxBodyBytes) {
      SendError(req, route, ApiError{413, "payload_too_large", "request body is over 1 MiB"});
      return restinio::request_accepted();
    }
    if (auto e = CheckJsonContentType(Header(req, restinio::http_field::content_type))) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    QuotaRequest request;
    if (auto e = ParseQuotaRequest(req->body(), &request.online_percent)) {
      SendError(req, route, *e);
      return restinio::request_accepted();
    }
    d.app->SetQuota(CallerOf(req), request, Answer<Done>(req, route, [](const Done&) {
                      return std::pair(200, Dump({{"message", "Quota updated"}}));
                    }));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Agents(const req_t& req) {
    auto body = [](const std::vector<core::NodeView>& nodes) {
      json agents = json::array();
      for (const auto& n : nodes) {
        agents.push_back({{"id", n.id},
                          {"address", n.address},
                          {"status", n.online ? "online" : "offline"},
                          {"gpus", n.gpu_count},
                          {"free_gpus", n.free_gpus},
                          {"last_heartbeat", n.last_heartbeat == 0
                                                 ? json(nullptr)
                                                 : json(common::FormatRfc3339(n.last_heartbeat))}});
      }
      return std::pair(200, Dump({{"agents", std::move(agents)}}));
    };
    d.app->ListAgents(CallerOf(req), Answer<std::vector<core::NodeView>>(req, "GET /api/v1/agents",
                                                                         std::move(body)));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t Ready(const req_t& req) {
    const Readiness r = d.app->Ready();
    json body = {{"role", r.leader ? "leader" : "standby"}, {"epoch", r.epoch}};
    body["storage"] = r.storage.ok() ? "ok" : r.storage.message();
    if (!r.detail.empty()) body["detail"] = r.detail;
    body["status"] = r.ready() ? "ready" : "not_ready";
    Send(req, "GET /readyz", r.ready() ? 200 : 503, Dump(body));
    return restinio::request_accepted();
  }

  restinio::request_handling_status_t MetricsPage(const req_t& req) {
    d.app->Gauges(CallerOf(req), [this, req](const Result<GaugeSnapshot>& g) {
      if (!g.ok()) return SendError(req, "GET /metrics", g.error());
      Send(req, "GET /metrics", 200, d.metrics->Render(g.value()), "text/plain; version=0.0.4");
    });
    return restinio::request_accepted();
  }

  // Every route goes through Route(), which also records it in `routes`: the table that
  // --print-routes prints and the contract test compares with api/openapi.yaml.
  std::vector<RestRoute> routes;

  template <typename Handler>
  void Route(router_t& r, restinio::http_method_id_t method, const std::string& path,
             Handler handler) {
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
    r.add_handler(method, path, std::move(handler));
  }

  std::unique_ptr<router_t> MakeRouter() {
    auto r = std::make_unique<router_t>();
    routes.clear();
    auto not_allowed = [this](const char* route) {
      return [this, route](const req_t& req, params_t) {
        SendError(req, route,
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

    Route(*r, http_method_post(), "/api/v1/tasks",
          [this](const req_t& q, params_t) { return Submit(q); });
    Route(*r, http_method_get(), "/api/v1/tasks",
          [this](const req_t& q, params_t) { return ListTasks(q); });
    r->add_handler(none_of_methods(http_method_get(), http_method_post()), "/api/v1/tasks",
                   not_allowed("/api/v1/tasks"));
    Route(*r, http_method_get(), "/api/v1/tasks/:id",
          [this](const req_t& q, params_t p) { return GetTask(q, p); });
    Route(*r, http_method_delete(), "/api/v1/tasks/:id",
          [this](const req_t& q, params_t p) { return Cancel(q, p); });
    r->add_handler(none_of_methods(http_method_get(), http_method_delete()), "/api/v1/tasks/:id",
                   not_allowed("/api/v1/tasks/{id}"));
    Route(*r, http_method_get(), "/api/v1/gpus",
          [this](const req_t& q, params_t) { return Gpus(q); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/gpus", not_allowed("/api/v1/gpus"));
    Route(*r, http_method_get(), "/api/v1/quota",
          [this](const req_t& q, params_t) { return GetQuota(q); });
    Route(*r, http_method_put(), "/api/v1/quota",
          [this](const req_t& q, params_t) { return PutQuota(q); });
    r->add_handler(none_of_methods(http_method_get(), http_method_put()), "/api/v1/quota",
                   not_allowed("/api/v1/quota"));
    Route(*r, http_method_get(), "/api/v1/teams",
          [this](const req_t& q, params_t) { return Teams(q); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/teams",
                   not_allowed("/api/v1/teams"));
    Route(*r, http_method_get(), "/api/v1/teams/:name",
          [this](const req_t& q, params_t p) { return GetTeam(q, p); });
    Route(*r, http_method_put(), "/api/v1/teams/:name",
          [this](const req_t& q, params_t p) { return PutTeam(q, p); });
    Route(*r, http_method_delete(), "/api/v1/teams/:name",
          [this](const req_t& q, params_t p) { return DeleteTeam(q, p); });
    r->add_handler(none_of_methods(http_method_get(), http_method_put(), http_method_delete()),
                   "/api/v1/teams/:name", not_allowed("/api/v1/teams/{name}"));
    Route(*r, http_method_get(), "/api/v1/agents",
          [this](const req_t& q, params_t) { return Agents(q); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/agents",
                   not_allowed("/api/v1/agents"));
    Route(*r, http_method_get(), "/api/v1/snapshot",
          [this](const req_t& q, params_t) { return Snapshot(q); });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/snapshot",
                   not_allowed("/api/v1/snapshot"));
    Route(*r, http_method_get(), "/api/v1/openapi.yaml", [this](const req_t& q, params_t) {
      Send(q, "GET /api/v1/openapi.yaml", 200, std::string(OpenApiYaml()), "application/yaml");
      return restinio::request_accepted();
    });
    r->add_handler(none_of_methods(http_method_get()), "/api/v1/openapi.yaml",
                   not_allowed("/api/v1/openapi.yaml"));
    for (const char* p : {"/healthz", "/api/v1/healthz"}) {
      Route(*r, http_method_get(), p, [this](const req_t& q, params_t) {
        Send(q, "GET /healthz", 200, R"({"status":"ok"})");
        return restinio::request_accepted();
      });
    }
    for (const char* p : {"/readyz", "/api/v1/readyz"}) {
      Route(*r, http_method_get(), p, [this](const req_t& q, params_t) { return Ready(q); });
    }
    for (const char* p : {"/metrics", "/api/v1/metrics"}) {
      Route(*r, http_method_get(), p, [this](const req_t& q, params_t) { return MetricsPage(q); });
    }
    r->non_matched_request_handler([this](const req_t& q) {
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

std::vector<RestRoute> RestServer::Routes() {
  Impl impl;
  impl.MakeRouter();
  return impl.routes;
}

void RestServer::Stop() {
  if (impl_ && impl_->server) {
    impl_->server->stop();
    impl_->server->wait();
    impl_->server.reset();
  }
}

}  // namespace dgpu::scheduler
