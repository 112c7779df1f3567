#include "scheduler/rest_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/time_util.h"
#include "scheduler/rest_server_impl.h"

namespace dgpu::scheduler {
namespace {

using Impl = RestServer::Impl;
using Access = Impl::Access;

restinio::http_method_id_t MethodId(std::string_view method) {
  if (method == "GET") return restinio::http_method_get();
  if (method == "POST") return restinio::http_method_post();
  if (method == "PUT") return restinio::http_method_put();
  return restinio::http_method_delete();
}

// OpenAPI's "{name}" parameters are RESTinio's ":name".
std::string RouterPath(std::string_view path) {
  std::string out;
  for (char c : path) {
    if (c == '{') {
      out += ':';
    } else if (c != '}') {
      out += c;
    }
  }
  return out;
}

// Matches the methods a path does not serve: its 405 answer.
class NoneOf final : public restinio::router::method_matcher_t {
 public:
  explicit NoneOf(std::vector<restinio::http_method_id_t> methods) : methods_(std::move(methods)) {}
  bool match(const restinio::http_method_id_t& method) const noexcept override {
    return std::find(methods_.begin(), methods_.end(), method) == methods_.end();
  }

 private:
  std::vector<restinio::http_method_id_t> methods_;
};

}  // namespace

const std::vector<Impl::Route>& Impl::RouteTable() {
  static const std::vector<Route> kRoutes = {
      {"POST", "/api/v1/tasks", Access::kAuthenticated, &Impl::Submit},
      {"GET", "/api/v1/tasks", Access::kAuthenticated, &Impl::ListTasks},
      {"GET", "/api/v1/tasks/{id}", Access::kAuthenticated, &Impl::GetTask},
      {"DELETE", "/api/v1/tasks/{id}", Access::kAuthenticated, &Impl::Cancel},
      {"GET", "/api/v1/tasks/{id}/events", Access::kAuthenticated, &Impl::TaskEvents},
      {"GET", "/api/v1/tasks/{id}/logs", Access::kAuthenticated, &Impl::TaskLog},
      {"GET", "/api/v1/gpus", Access::kAuthenticated, &Impl::Gpus},
      {"GET", "/api/v1/quota", Access::kAuthenticated, &Impl::GetQuota},
      {"PUT", "/api/v1/quota", Access::kAuthenticated, &Impl::PutQuota},
      {"GET", "/api/v1/teams", Access::kAuthenticated, &Impl::Teams},
      {"GET", "/api/v1/teams/{name}", Access::kAuthenticated, &Impl::GetTeam},
      {"PUT", "/api/v1/teams/{name}", Access::kAuthenticated, &Impl::PutTeam},
      {"DELETE", "/api/v1/teams/{name}", Access::kAuthenticated, &Impl::DeleteTeam},
      {"GET", "/api/v1/agents", Access::kAuthenticated, &Impl::Agents},
      {"POST", "/api/v1/agents/{id}/cordon", Access::kAuthenticated, &Impl::Cordon},
      {"POST", "/api/v1/agents/{id}/uncordon", Access::kAuthenticated, &Impl::Uncordon},
      {"POST", "/api/v1/agents/{id}/drain", Access::kAuthenticated, &Impl::Drain},
      {"GET", "/api/v1/watch", Access::kAuthenticated, &Impl::Watch},
      {"GET", "/api/v1/usage", Access::kAuthenticated, &Impl::Usage},
      {"GET", "/api/v1/autoscale", Access::kAuthenticated, &Impl::Autoscale},
      {"GET", "/api/v1/snapshot", Access::kAuthenticated, &Impl::Snapshot},
      {"GET", "/api/v1/openapi.yaml", Access::kPublic, &Impl::OpenApi},
      {"GET", "/healthz", Access::kPublic, &Impl::Healthz, {"/api/v1/healthz"}},
      {"GET", "/readyz", Access::kPublic, &Impl::Ready, {"/api/v1/readyz"}},
      {"GET", "/metrics", Access::kMetrics, &Impl::MetricsPage, {"/api/v1/metrics"}},
      // The web dashboard: its files are public (they hold no data; the API calls they make are
      // authenticated like any other).
      {"GET", "/ui", Access::kPublic, &Impl::UiRedirect, {}, /*strict=*/true},
      {"GET", "/ui/", Access::kPublic, &Impl::UiIndex, {}, /*strict=*/true},
      {"GET", "/ui/{file}", Access::kPublic, &Impl::UiPage},
  };
  return kRoutes;
}

std::unique_ptr<rest::Router> Impl::MakeRouter() {
  auto r = std::make_unique<rest::Router>();
  struct PathMethods {
    std::string label;  // The 405's metric label: the path, an alias's route's path.
    bool strict = false;
    std::vector<restinio::http_method_id_t> methods;
  };
  std::vector<std::pair<std::string, PathMethods>> paths;  // In table order.
  auto methods_of = [&](const std::string& path) -> PathMethods& {
    for (auto& [p, m] : paths) {
      if (p == path) return m;
    }
    return paths.emplace_back(path, PathMethods{}).second;
  };
  for (const Route& route : RouteTable()) {
    std::vector<std::string> served{route.path};
    served.insert(served.end(), route.aliases.begin(), route.aliases.end());
    for (const std::string& path : served) {
      PathMethods& m = methods_of(path);
      m.label = route.path;
      m.strict = route.strict;
      m.methods.push_back(MethodId(route.method));
      r->add_handler(MethodId(route.method), RouterPath(path),
                     restinio::path2regex::options_t{}.strict(route.strict),
                     [this, &route, label = std::string(route.method) + " " + route.path](
                         const req_t& q, params_t p) {
                       Caller caller;
                       if (!Admit(q, route.access, label, &caller)) {
                         return restinio::request_accepted();
                       }
                       return (this->*route.handler)(q, caller, p, label);
                     });
    }
  }
  for (auto& [path, m] : paths) {
    r->add_handler(NoneOf(std::move(m.methods)), RouterPath(path),
                   restinio::path2regex::options_t{}.strict(m.strict),
                   [this, label = m.label](const req_t& req, params_t) {
                     SendError(
                         req, Anonymous(req), label,
                         ApiError{405, "method_not_allowed",
                                  std::string(req->header().method().c_str()) +
                                      " is not allowed on " + std::string(req->header().path())});
                     return restinio::request_accepted();
                   });
  }
  r->non_matched_request_handler([this](const req_t& q) {
    SendError(q, Anonymous(q), "unmatched",
              {404, "not_found", "no such endpoint: " + std::string(q->header().path())});
    return restinio::request_accepted();
  });
  return r;
}

void RestServer::Impl::LogRemoteRefusal(const std::string& peer) {
  const int64_t count = remote_refusals.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t now = common::NowMicros();
  int64_t last = last_refusal_log.load(std::memory_order_relaxed);
  if (now - last < 60'000'000 || !last_refusal_log.compare_exchange_strong(last, now)) return;
  spdlog::warn(
      "refused a REST request from {}: not a loopback peer, and auth.mode is none without "
      "auth.allow_insecure_remote ({} such requests refused so far)",
      peer, count);
}

bool RestServer::Impl::Admit(const req_t& req, Access access, const std::string& route,
                             Caller* caller) {
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

const char* RestServer::Impl::ReasonPhrase(int status) {
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

RestServer::RestServer(RestDeps deps) : impl_(std::make_unique<Impl>()) { impl_->d = deps; }

RestServer::~RestServer() { Stop(); }

Status RestServer::Start(const std::string& host, uint16_t port, const RestOptions& options) {
  impl_->connections->set_limit(options.max_connections);
  try {
    impl_->server.emplace(rest::StartServer(*impl_->io, host, port, options, impl_->connections,
                                            impl_->MakeRouter()));
  } catch (const std::exception& e) {
    return Unavailable("cannot listen for HTTP on " + host + ":" + std::to_string(port) + ": " +
                       e.what());
  }
  return OkStatus();
}

size_t RestServer::connections() const { return impl_->connections->open(); }

std::vector<RestRoute> RestServer::Routes() {
  std::vector<RestRoute> routes;
  for (const Impl::Route& route : Impl::RouteTable()) {
    routes.push_back({route.method, route.path});
    for (const char* alias : route.aliases) routes.push_back({route.method, alias});
  }
  return routes;
}

void RestServer::Stop() {
  if (impl_) impl_->stopping = true;
  if (impl_ && impl_->server) {
    impl_->server->StopAndWait();
    impl_->server.reset();
  }
}

}  // namespace dgpu::scheduler
