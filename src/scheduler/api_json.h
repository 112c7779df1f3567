// The REST API's JSON: request validation and response bodies, as pure functions.
//
// Every validation error names the field and the reason, and maps onto an HTTP status through
// ApiError. Nothing here touches the core or the network, so all of it is unit-tested directly.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "core/scheduler_core.h"
#include "core/types.h"
#include "scheduler/application.h"
#include "scheduler/autoscale_runner.h"

namespace dgpu::scheduler {

inline constexpr size_t kMaxBodyBytes = 1 << 20;               // 1 MiB: larger bodies get 413.
inline constexpr int64_t kMaxLogTailLines = 1000000;           // GET /tasks/{id}/logs?tail=
inline constexpr size_t kMaxCommandBytes = size_t{64} * 1024;  // 64 KiB.
inline constexpr int kMaxGpuCount = 1024;
inline constexpr size_t kMaxEnvEntries = 256;
inline constexpr size_t kMaxShortField = 256;  // name, gpu_model, env keys.
inline constexpr int64_t kMaxTimeoutSeconds = core::kMaxTimeLimitSeconds;
inline constexpr int64_t kMaxArraySize = core::kMaxArraySize;  // Tasks of one job array.
inline constexpr int64_t kMaxRetries = 100;                    // max_retries of a task.
inline constexpr int kMaxCpus = 4096;                          // cpus of a task's member.
inline constexpr int64_t kMaxMemoryMb = int64_t{64} << 20;     // memory_mb: 64 TiB.

// An API error: HTTP status, machine word and sentence.
struct ApiError {
  int http_status = 400;
  std::string code;
  std::string message;
  std::string Body() const;  // {"error":{"code":...,"message":...}}
};

ApiError InvalidField(std::string message);

// Content-Type check: absent or application/json (any parameters) is fine; else 415.
std::optional<ApiError> CheckJsonContentType(std::string_view content_type);

// Parses and validates a POST /tasks body: syntax, types and sizes (what a task may ask for is
// checked by the application, ValidateTaskSpec). `array` gets the body's "array" (1 to
// kMaxArraySize) when it has one; without `array`, the field is refused.
std::optional<ApiError> ParseSubmitRequest(std::string_view body, core::TaskSpec* spec,
                                           int* array = nullptr);

// Parses a PUT /quota body: {"online_percent": x} with x in [0, 1].
std::optional<ApiError> ParseQuotaRequest(std::string_view body, double* online_percent);

// Parses the query of GET /tasks: status, priority, limit (1 to 1000) and offset, into `out`
// (which holds the defaults).
std::optional<ApiError> ParseListQuery(std::string_view query, ListTasksRequest* out);
// GET /usage?from=&to=&group_by=: RFC 3339 times (from default: 24 hours before to; to default:
// now) and team or user (default team).
std::optional<ApiError> ParseUsageQuery(std::string_view query, core::TimeMicros now,
                                        UsageRequest* out);
// {from, to, group_by, groups: [{name, gpu_seconds, tasks}]}.
nlohmann::json UsageToJson(const UsageReport& report);

// Parses the query of DELETE /tasks/{id}: only grace_seconds, an integer (the application
// checks its bounds); left unset without it.
std::optional<ApiError> ParseCancelQuery(std::string_view query, std::optional<int32_t>* grace);

// GET /watch: `since` (a sequence number), else the Last-Event-ID header; neither: *since stays
// unset. 400 naming the parameter when it is not a number.
std::optional<ApiError> ParseWatchQuery(std::string_view query, std::string_view last_event_id,
                                        std::optional<uint64_t>* since);

// Whether an Accept-Encoding header takes "deflate" (a q-value of 0 refuses it).
bool AcceptsDeflate(std::string_view accept_encoding);

// GET /tasks/{id}/logs: tail (lines; 0: only what comes next), follow, rank (a gang's member)
// and offset (a byte of the log to start at; not with tail).
struct LogQuery {
  std::optional<int32_t> tail;
  bool follow = false;
  int rank = 0;
  int64_t offset = 0;
};
std::optional<ApiError> ParseLogQuery(std::string_view query, LogQuery* out);

// The contract's HTTP status and error word for an application error.
ApiError ToApiError(const Error& e);

// `<node_id>-gpu-<index>`.
std::string GpuId(const std::string& node_id, int index);

// The task object of the contract: every field of the task table (core/task_fields.h) the API
// shows, and kTaskApiKeys. `pending_detail`: why a pending task's nodes cannot take it (GET
// /tasks/{id} only; null when empty).
// A pending task held back by another's planned start (reason kReservedFor, `reserved_for` its
// number) shows pending_reason "reserved_for:<task_id>".
nlohmann::json TaskToJson(const core::Task& task, core::PendingReason reason,
                          std::string_view pending_detail = {}, core::TaskNumber reserved_for = 0);
// The task object's keys that are no field of the task table.
inline constexpr std::string_view kTaskApiKeys[] = {
    "task_id",       "node_id", "allocated_gpus", "pending_reason", "pending_detail",
    "gpus_per_node", "cpus",    "usage",          "cpu_set"};
// GET /tasks/{id}/events: {events: [{time, type, node_id (when there is one), message}]}.
nlohmann::json TaskEventsToJson(const std::vector<core::TaskEventRecord>& events);

nlohmann::json QuotaToJson(const core::QuotaView& quota);
// GET /quota with teams: each class of `quota` (QuotaToJson's) gains `teams`, by name, the
// guaranteed, used and borrowed GPUs of every team that holds a guarantee or GPUs in it.
void AddQuotaTeams(const std::vector<core::TeamView>& teams, nlohmann::json* quota);
// GET /quota's object: the quota, the teams and the configured shares.
nlohmann::json QuotaStateToJson(const QuotaState& state);

// A team of GET /teams: {name, configured, online: {guaranteed, used, borrowed}, batch: {...},
// max_gpus (null: no cap), weight, default_time_limit (seconds, null: none), pending,
// usage_gpu_seconds}.
nlohmann::json TeamToJson(const core::TeamView& team);

// Parses a PUT /teams/{name} body: {online?, batch?, max_gpus? (null: no cap), weight?,
// default_time_limit? (seconds; null or 0: none)}.
std::optional<ApiError> ParseTeamRequest(std::string_view body, TeamRequest* out);

// Parses a POST /agents/{id}/drain body: {evict?: bool, grace_seconds?: 0..86400}; an empty
// body drains without evicting.
std::optional<ApiError> ParseDrainRequest(std::string_view body, NodeModeRequest* out);

// An agent of GET /agents: {id, address, status (online, cordoned, draining, offline), gpus,
// free_gpus, tasks, labels, last_heartbeat}.
nlohmann::json AgentToJson(const core::NodeView& node);
// GET /api/v1/autoscale.
nlohmann::json AutoscaleToJson(const AutoscaleStatus& status);

}  // namespace dgpu::scheduler
