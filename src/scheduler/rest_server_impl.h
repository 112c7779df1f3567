// The REST server's inside, shared by its files: the state, the response helpers, the handlers
// (rest_handlers.cc), the streams (rest_streams.cc) and the route table with admission and the
// router (rest_server.cc). Private to the REST server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <restinio/all.hpp>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/api_json.h"
#include "scheduler/audit_log.h"
#include "scheduler/rest_server.h"
#include "scheduler/rest_transport.h"

namespace dgpu::scheduler {

struct RestServer::Impl {
  using json = nlohmann::json;
  using req_t = restinio::request_handle_t;
  using params_t = restinio::router::route_params_t;
  using Handling = restinio::request_handling_status_t;

  RestDeps d;
  // Outlives `server`: the core loop and the journal's writer thread may still hold requests
  // (answered after Stop, or their last reference dropped there), and a connection released
  // on such a thread must find its io_context alive, else it crashes on a dead reactor
  // (SIGSEGV on SIGTERM under load). Destroyed with the Impl, after the daemon stopped both.
  std::shared_ptr<restinio::asio_ns::io_context> io =
      std::make_shared<restinio::asio_ns::io_context>();
  std::shared_ptr<rest::ConnectionCounter> connections =
      std::make_shared<rest::ConnectionCounter>();
  std::optional<rest::RunningServer> server;
  // Set first by Stop: a log follow ends instead of waiting to read again.
  std::atomic<bool> stopping{false};

  // --- The routes (rest_server.cc)

  // Who may reach a route: anyone (health, the API description), anyone when
  // auth.metrics_public (metrics), or authenticated callers (the rest).
  enum class Access { kPublic, kMetrics, kAuthenticated };

  // A route's handler. `route` is its label ("GET /api/v1/tasks/{id}"): metrics, audit, errors.
  using Handler = Handling (Impl::*)(const req_t& req, const Caller& caller, const params_t& params,
                                     const std::string& route);

  // One (method, path) of the API, with the paths that serve it too (counted under `path`).
  struct Route {
    const char* method;  // "GET", "POST", "PUT" or "DELETE"
    const char* path;    // OpenAPI form: "/api/v1/tasks/{id}"
    Access access;
    Handler handler;
    std::vector<const char*> aliases = {};
    bool strict = false;  // A trailing slash is part of the path ("/ui" and "/ui/" differ).
  };

  // Every route the server has: the router, its 405 answers (every path, for the methods it
  // lacks), --print-routes and the metric labels all come from it.
  static const std::vector<Route>& RouteTable();
  std::unique_ptr<rest::Router> MakeRouter();

  // Protected mode refusals: the first one, then at most one line a minute with the count.
  std::atomic<int64_t> remote_refusals{0};
  std::atomic<int64_t> last_refusal_log{-60'000'000};
  void LogRemoteRefusal(const std::string& peer);
  // The caller of `req`, or false once it has been answered with 401 or 403.
  bool Admit(const req_t& req, Access access, const std::string& route, Caller* caller);
  static Caller Anonymous(const req_t& req) { return {Caller::Transport::kRest, PeerOf(req), {}}; }

  // --- Responses

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

  static const char* ReasonPhrase(int status);

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

  // --- Handlers (rest_handlers.cc)

  Handling Submit(const req_t& req, const Caller& caller, const params_t& params,
                  const std::string& route);
  Handling ListTasks(const req_t& req, const Caller& caller, const params_t& params,
                     const std::string& route);
  Handling GetTask(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling Cancel(const req_t& req, const Caller& caller, const params_t& params,
                  const std::string& route);
  Handling TaskEvents(const req_t& req, const Caller& caller, const params_t& params,
                      const std::string& route);
  Handling TaskLog(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling Watch(const req_t& req, const Caller& caller, const params_t& params,
                 const std::string& route);
  Handling Usage(const req_t& req, const Caller& caller, const params_t& params,
                 const std::string& route);
  Handling Snapshot(const req_t& req, const Caller& caller, const params_t& params,
                    const std::string& route);
  Handling Teams(const req_t& req, const Caller& caller, const params_t& params,
                 const std::string& route);
  Handling GetTeam(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling PutTeam(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling DeleteTeam(const req_t& req, const Caller& caller, const params_t& params,
                      const std::string& route);
  Handling Gpus(const req_t& req, const Caller& caller, const params_t& params,
                const std::string& route);
  Handling GetQuota(const req_t& req, const Caller& caller, const params_t& params,
                    const std::string& route);
  Handling PutQuota(const req_t& req, const Caller& caller, const params_t& params,
                    const std::string& route);
  Handling Agents(const req_t& req, const Caller& caller, const params_t& params,
                  const std::string& route);
  Handling Cordon(const req_t& req, const Caller& caller, const params_t& params,
                  const std::string& route);
  Handling Uncordon(const req_t& req, const Caller& caller, const params_t& params,
                    const std::string& route);
  Handling Drain(const req_t& req, const Caller& caller, const params_t& params,
                 const std::string& route);
  Handling Autoscale(const req_t& req, const Caller& caller, const params_t& params,
                     const std::string& route);
  Handling OpenApi(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling Healthz(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling Ready(const req_t& req, const Caller& caller, const params_t& params,
                 const std::string& route);
  Handling MetricsPage(const req_t& req, const Caller& caller, const params_t& params,
                       const std::string& route);
  Handling UiRedirect(const req_t& req, const Caller& caller, const params_t& params,
                      const std::string& route);
  Handling UiIndex(const req_t& req, const Caller& caller, const params_t& params,
                   const std::string& route);
  Handling UiPage(const req_t& req, const Caller& caller, const params_t& params,
                  const std::string& route);

  static std::pair<int, std::string> TaskBody(const TaskView& v);
  Handling UiFile(const req_t& req, const Caller& caller, const std::string& route,
                  const std::string& name);
  // POST /agents/{id}/cordon | uncordon | drain: answered with the agent as it is then and the
  // stops a drain ordered.
  Handling SetNodeMode(const req_t& req, const Caller& caller, const params_t& params,
                       core::NodeMode mode, const std::string& route);

  // --- Streams (rest_streams.cc)

  class LogStream;  // GET /tasks/{id}/logs
};

}  // namespace dgpu::scheduler
