// The REST API's handlers: each parses its request (api_json), calls the Application's use case
// and answers with its result. Routes and admission are rest_server.cc's.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/time_util.h"
#include "scheduler/openapi_spec.h"
#include "scheduler/rest_server_impl.h"
#include "scheduler/rest_streams.h"
#include "scheduler/ui_assets.h"

namespace dgpu::scheduler {

using Handling = RestServer::Impl::Handling;
using json = nlohmann::json;

Handling RestServer::Impl::Submit(const req_t& req, const Caller& caller, const params_t&,
                                  const std::string& route) {
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

std::pair<int, std::string> RestServer::Impl::TaskBody(const TaskView& v) {
  return {200, Dump(TaskToJson(*v.task, v.reason, v.pending_detail, v.reserved_for))};
}

Handling RestServer::Impl::GetTask(const req_t& req, const Caller& caller, const params_t& params,
                                   const std::string& route) {
  auto n = TaskIdOf(req, caller, route, params);
  if (!n) return restinio::request_accepted();
  d.app->GetTask(caller, *n, Answer<TaskView>(req, caller, route, TaskBody));
  return restinio::request_accepted();
}

Handling RestServer::Impl::TaskEvents(const req_t& req, const Caller& caller,
                                      const params_t& params, const std::string& route) {
  auto n = TaskIdOf(req, caller, route, params);
  if (!n) return restinio::request_accepted();
  d.app->TaskEvents(caller, *n,
                    Answer<std::vector<core::TaskEventRecord>>(
                        req, caller, route, [](const std::vector<core::TaskEventRecord>& events) {
                          return std::pair(200, Dump(TaskEventsToJson(events)));
                        }));
  return restinio::request_accepted();
}

Handling RestServer::Impl::Watch(const req_t& req, const Caller& caller, const params_t&,
                                 const std::string& route) {
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

Handling RestServer::Impl::TaskLog(const req_t& req, const Caller& caller, const params_t& params,
                                   const std::string& route) {
  auto n = TaskIdOf(req, caller, route, params);
  if (!n) return restinio::request_accepted();
  LogQuery query;
  if (auto e = ParseLogQuery(req->header().query(), &query)) {
    SendError(req, caller, route, *e);
    return restinio::request_accepted();
  }
  std::make_shared<LogStream>(this, req, caller, route, query)->Start(*n);
  return restinio::request_accepted();
}

Handling RestServer::Impl::UiFile(const req_t& req, const Caller& caller, const std::string& route,
                                  const std::string& name) {
  std::optional<UiAsset> asset = FindUiAsset(name);
  if (!asset) {
    SendError(req, caller, route, ApiError{404, "not_found", "the dashboard has no file " + name});
    return restinio::request_accepted();
  }
  auto resp = StartResponse(req, caller, route, 200, asset->content_type);
  // Compiled into this binary: revalidated on each load, so an upgrade is seen at once.
  resp.append_header(restinio::http_field::cache_control, "no-cache");
  resp.append_header("X-Content-Type-Options", "nosniff");
  resp.append_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                     "frame-ancestors 'none'");
  resp.set_body(std::string(asset->body));
  resp.done();
  return restinio::request_accepted();
}

Handling RestServer::Impl::Usage(const req_t& req, const Caller& caller, const params_t&,
                                 const std::string& route) {
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

Handling RestServer::Impl::ListTasks(const req_t& req, const Caller& caller, const params_t&,
                                     const std::string& route) {
  ListTasksRequest request;
  if (auto e = ParseListQuery(req->header().query(), &request)) {
    SendError(req, caller, route, *e);
    return restinio::request_accepted();
  }
  d.app->ListTasks(
      caller, request, Answer<TaskPage>(req, caller, route, [](const TaskPage& page) {
        json tasks = json::array();
        for (const auto& v : page.tasks) {
          tasks.push_back(TaskToJson(*v.task, v.reason, {}, v.reserved_for));
        }
        return std::pair(
            200,
            Dump({{"tasks", std::move(tasks)},
                  {"total", page.total},
                  {"next", page.next == 0 ? json(nullptr) : json(core::FormatTaskId(page.next))}}));
      }));
  return restinio::request_accepted();
}

// The whole database as one SQLite file: taken on the background pool, sent from the file with
// sendfile(2), unlinked as soon as it is open so that nothing is left behind whatever happens to
// the connection.
Handling RestServer::Impl::Snapshot(const req_t& req, const Caller& caller, const params_t&,
                                    const std::string& route) {
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

Handling RestServer::Impl::Cancel(const req_t& req, const Caller& caller, const params_t& params,
                                  const std::string& route) {
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

Handling RestServer::Impl::Teams(const req_t& req, const Caller& caller, const params_t&,
                                 const std::string& route) {
  d.app->ListTeams(caller, Answer<std::vector<core::TeamView>>(
                               req, caller, route, [](const std::vector<core::TeamView>& all) {
                                 json teams = json::array();
                                 for (const auto& t : all) teams.push_back(TeamToJson(t));
                                 return std::pair(200, Dump({{"teams", std::move(teams)}}));
                               }));
  return restinio::request_accepted();
}

Handling RestServer::Impl::GetTeam(const req_t& req, const Caller& caller, const params_t& params,
                                   const std::string& route) {
  d.app->GetTeam(caller, std::string(params["name"]),
                 Answer<core::TeamView>(req, caller, route, [](const core::TeamView& t) {
                   return std::pair(200, Dump(TeamToJson(t)));
                 }));
  return restinio::request_accepted();
}

Handling RestServer::Impl::PutTeam(const req_t& req, const Caller& caller, const params_t& params,
                                   const std::string& route) {
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

Handling RestServer::Impl::DeleteTeam(const req_t& req, const Caller& caller,
                                      const params_t& params, const std::string& route) {
  std::string name(params["name"]);
  d.app->DeleteTeam(caller, name, Answer<Done>(req, caller, route, [name](const Done&) {
                      return std::pair(200, Dump({{"name", name}, {"deleted", true}}));
                    }));
  return restinio::request_accepted();
}

Handling RestServer::Impl::Gpus(const req_t& req, const Caller& caller, const params_t&,
                                const std::string& route) {
  auto body = [utilization = d.metrics->GpuUtilizations()](const std::vector<core::GpuView>& all) {
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
  d.app->ListGpus(caller, Answer<std::vector<core::GpuView>>(req, caller, route, std::move(body)));
  return restinio::request_accepted();
}

Handling RestServer::Impl::GetQuota(const req_t& req, const Caller& caller, const params_t&,
                                    const std::string& route) {
  d.app->GetQuota(caller, Answer<QuotaState>(req, caller, route, [](const QuotaState& q) {
                    return std::pair(200, Dump(QuotaStateToJson(q)));
                  }));
  return restinio::request_accepted();
}

Handling RestServer::Impl::PutQuota(const req_t& req, const Caller& caller, const params_t&,
                                    const std::string& route) {
  if (req->body().size() > kMaxBodyBytes) {
    SendError(req, caller, route, ApiError{413, "payload_too_large", "request body is over 1 MiB"});
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

Handling RestServer::Impl::Agents(const req_t& req, const Caller& caller, const params_t&,
                                  const std::string& route) {
  auto body = [](const std::vector<core::NodeView>& nodes) {
    json agents = json::array();
    for (const auto& n : nodes) agents.push_back(AgentToJson(n));
    return std::pair(200, Dump({{"agents", std::move(agents)}}));
  };
  d.app->ListAgents(caller,
                    Answer<std::vector<core::NodeView>>(req, caller, route, std::move(body)));
  return restinio::request_accepted();
}

Handling RestServer::Impl::Autoscale(const req_t& req, const Caller& caller, const params_t&,
                                     const std::string& route) {
  d.app->GetAutoscale(
      caller, Answer<AutoscaleStatus>(req, caller, route, [](const AutoscaleStatus& status) {
        return std::pair(200, Dump(AutoscaleToJson(status)));
      }));
  return restinio::request_accepted();
}

// POST /agents/{id}/cordon | uncordon | drain: answered with the agent as it is then and the
// stops a drain ordered.
Handling RestServer::Impl::SetNodeMode(const req_t& req, const Caller& caller,
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
        return std::pair(200, Dump({{"agent", AgentToJson(done.node)}, {"evicted", done.evicted}}));
      }));
  return restinio::request_accepted();
}

Handling RestServer::Impl::Ready(const req_t& req, const Caller& caller, const params_t&,
                                 const std::string& route) {
  const Readiness r = d.app->Ready();
  json body = {{"role", r.leader ? "leader" : "standby"}, {"epoch", r.epoch}};
  body["storage"] = r.storage.ok() ? "ok" : r.storage.message();
  if (!r.detail.empty()) body["detail"] = r.detail;
  body["status"] = r.ready() ? "ready" : "not_ready";
  Send(req, caller, route, r.ready() ? 200 : 503, Dump(body));
  return restinio::request_accepted();
}

Handling RestServer::Impl::MetricsPage(const req_t& req, const Caller& caller, const params_t&,
                                       const std::string& route) {
  d.app->Gauges(caller, [this, req, caller, route](const Result<GaugeSnapshot>& g) {
    if (!g.ok()) return SendError(req, caller, route, g.error());
    Send(req, caller, route, 200, d.metrics->Render(g.value()), "text/plain; version=0.0.4");
  });
  return restinio::request_accepted();
}

Handling RestServer::Impl::Cordon(const req_t& req, const Caller& caller, const params_t& params,
                                  const std::string& route) {
  return SetNodeMode(req, caller, params, core::NodeMode::kCordoned, route);
}

Handling RestServer::Impl::Uncordon(const req_t& req, const Caller& caller, const params_t& params,
                                    const std::string& route) {
  return SetNodeMode(req, caller, params, core::NodeMode::kSchedulable, route);
}

Handling RestServer::Impl::Drain(const req_t& req, const Caller& caller, const params_t& params,
                                 const std::string& route) {
  return SetNodeMode(req, caller, params, core::NodeMode::kDraining, route);
}

Handling RestServer::Impl::OpenApi(const req_t& req, const Caller& caller, const params_t&,
                                   const std::string& route) {
  Send(req, caller, route, 200, std::string(OpenApiYaml()), "application/yaml");
  return restinio::request_accepted();
}

Handling RestServer::Impl::Healthz(const req_t& req, const Caller& caller, const params_t&,
                                   const std::string& route) {
  Send(req, caller, route, 200, R"({"status":"ok"})");
  return restinio::request_accepted();
}

Handling RestServer::Impl::UiRedirect(const req_t& req, const Caller& caller, const params_t&,
                                      const std::string& route) {
  auto resp = StartResponse(req, caller, route, 301, "text/plain; charset=utf-8");
  resp.append_header(restinio::http_field::location, "/ui/");
  resp.set_body("the dashboard is at /ui/\n");
  resp.done();
  return restinio::request_accepted();
}

Handling RestServer::Impl::UiIndex(const req_t& req, const Caller& caller, const params_t&,
                                   const std::string& route) {
  return UiFile(req, caller, route, "");
}

Handling RestServer::Impl::UiPage(const req_t& req, const Caller& caller, const params_t& params,
                                  const std::string& route) {
  return UiFile(req, caller, route, std::string(params["file"]));
}

}  // namespace dgpu::scheduler
