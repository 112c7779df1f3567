// dgpuctl commands: each one talks to the scheduler's REST API through an HttpClient, writes its
// result to the context's streams and returns the process exit code.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ctl/http_client.h"

namespace dgpu::ctl {

// Exit codes of dgpuctl (documented in docs/dgpuctl.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitTaskFailed = 1,   // wait: the task finished as failed or cancelled
  kExitUsage = 2,        // bad command line or flag value
  kExitApiError = 3,     // scheduler unreachable, API error, unexpected response, logs unavailable
  kExitWaitTimeout = 4,  // wait: the task was still not finished when --timeout expired
};

enum class OutputFormat { kTable, kWide, kJson };

inline constexpr char kDefaultServer[] = "http://127.0.0.1:8080";
inline constexpr char kDefaultAgentWorkDir[] = "/var/lib/dgpu-agent/tasks";

struct CtlContext {
  HttpClient* http = nullptr;
  std::string server = kDefaultServer;  // base URL, without /api/v1
  OutputFormat output = OutputFormat::kTable;
  bool no_headers = false;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // Wall clock, for ages and timestamps (may be pinned, see DGPUCTL_NOW).
  std::function<std::chrono::system_clock::time_point()> now;
  // Monotonic clock and sleep, for polling intervals and timeouts.
  std::function<std::chrono::steady_clock::time_point()> monotonic_now;
  std::function<void(std::chrono::milliseconds)> sleep;
};

// Why an API call did not produce a usable 2xx JSON answer.
struct ApiFailure {
  bool transport = false;  // no HTTP response at all
  std::string detail;      // transport error, or what was wrong with the response
  long status = 0;         // HTTP status when there was a response
  std::string code;        // error.code of the contract's error body, when present
  std::string message;     // error.message of the contract's error body, when present
  std::string leader;      // X-Leader header of a 503 from a standby
};

// One line (without "error: " and newline) describing the failure for humans.
std::string DescribeFailure(const ApiFailure& failure, const std::string& server);

// Calls `method` on server + "/api/v1" + `path`. Returns the parsed JSON of a 2xx response (null
// JSON for an empty body); otherwise fills `failure` and returns nullopt.
std::optional<nlohmann::json> CallApi(const CtlContext& ctx, HttpMethod method,
                                      const std::string& path, const nlohmann::json* body,
                                      ApiFailure* failure);

struct SubmitOptions {
  std::optional<int> gpus;           // GPUs in all; required unless gpus_per_node is given
  std::optional<int> nodes;          // a gang of this many members, one per node
  std::optional<int> gpus_per_node;  // GPUs of each member
  std::string cpus;                  // CPUs of each member ("" : its GPUs' share)
  std::string memory;                // memory of each member: MiB, or 16G, 512M ("" : the share)
  std::string priority;
  std::string model;
  std::string name;
  std::string image;
  std::vector<std::string> env;         // KEY=VALUE
  std::vector<std::string> selector;    // KEY=VALUE: node labels the task asks for
  std::string timeout;                  // empty: none
  std::string team;                     // empty: the server's default team
  bool no_preempt = false;              // sends "preemptible": false
  std::optional<int> preemption_grace;  // seconds; nullopt: the scheduler's default
  std::optional<int> array;             // a job array of this many tasks
  std::optional<int> max_retries;       // retries of a failed run
  std::optional<int> retry_backoff;     // seconds before the first retry
  // Tasks to wait for (ids, repeatable or comma-separated), by condition.
  std::vector<std::string> after_ok, after_not_ok, after_any, after;
  std::vector<std::string> command;
};

// Builds the POST /tasks body; on invalid options writes the reason to `error` and returns
// nullopt.
std::optional<nlohmann::json> BuildSubmitBody(const SubmitOptions& options, std::string* error);
// --memory: MiB, or a size with a unit K, M, G, T (powers of 1024): "16G" is 16384. Nullopt
// for anything else, or less than 1 MiB, or not a whole number of MiB.
std::optional<int64_t> ParseMemoryMb(std::string_view text);

struct ListTasksOptions {
  std::string status;
  std::string priority;
  std::optional<int> limit;
  std::optional<int> offset;
  std::string after;   // A task id: only older tasks (keyset paging).
  std::string team;    // Only tasks of this team.
  bool watch = false;  // Then follow GET /watch: a line per change of a matching task.
};

// `dgpuctl team set NAME ...`: the values as typed (nullopt: not given, left unchanged).
struct TeamOptions {
  std::string name;
  std::optional<std::string> online;      // GPUs guaranteed in the online class, >= 0
  std::optional<std::string> batch;       // GPUs guaranteed in the batch class, >= 0
  std::optional<std::string> max_gpus;    // a cap >= 0, or "none" (no cap)
  std::optional<std::string> weight;      // fair-share weight > 0
  std::optional<std::string> time_limit;  // a duration of whole seconds, or "none"
};

// Builds the PUT /teams/{name} body from the options given; on invalid options (or none) writes
// the reason to `error` and returns nullopt.
std::optional<nlohmann::json> BuildTeamBody(const TeamOptions& options, std::string* error);

struct WaitOptions {
  std::optional<std::chrono::milliseconds> timeout;  // nullopt: wait forever
  std::chrono::milliseconds interval{2000};
};

struct LogsOptions {
  bool follow = false;
  std::optional<int> tail;  // The last N lines only.
  int rank = 0;             // The member of a multi-node task.
};

int Submit(const CtlContext& ctx, const SubmitOptions& options);
int GetTasks(const CtlContext& ctx, const ListTasksOptions& options);
int GetTask(const CtlContext& ctx, const std::string& id);
// A task's history (GET /tasks/{id}/events): time, type, node, message, oldest first.
int Events(const CtlContext& ctx, const std::string& id);
// GPU time by team or user (GET /usage): the range, then name, GPU-hours, tasks.
struct UsageOptions {
  std::string from;  // RFC 3339; empty: the server's default (24 hours before `to`).
  std::string to;    // RFC 3339; empty: now.
  std::string by = "team";
};
int Usage(const CtlContext& ctx, const UsageOptions& options);
int GetGpus(const CtlContext& ctx);
// GPU use per node from GET /gpus: counts, the agents' reported utilization, one mark per GPU.
int Top(const CtlContext& ctx);
int GetAgents(const CtlContext& ctx);
// `dgpuctl get autoscale`: GET /autoscale, one row per node group.
int GetAutoscale(const CtlContext& ctx);
int ShowQuota(const CtlContext& ctx);
int SetQuota(const CtlContext& ctx, double online_percent);
int GetTeams(const CtlContext& ctx);
int GetTeam(const CtlContext& ctx, const std::string& name);
int SetTeam(const CtlContext& ctx, const TeamOptions& options);
int DeleteTeam(const CtlContext& ctx, const std::string& name);
// grace_seconds: sent as ?grace_seconds=N (the stop's SIGTERM-to-SIGKILL time); nullopt: the
// agent's own.
int Cancel(const CtlContext& ctx, const std::vector<std::string>& ids,
           std::optional<int> grace_seconds = std::nullopt);
int Wait(const CtlContext& ctx, const std::string& id, const WaitOptions& options);
// `dgpuctl cordon|uncordon|drain NODE`: POST /agents/{node}/{verb}.
struct NodeModeOptions {
  std::string verb;  // "cordon", "uncordon" or "drain".
  std::string node;
  bool evict = false;                // drain: stop its tasks (requeued elsewhere).
  std::optional<int> grace_seconds;  // drain --evict: SIGTERM to SIGKILL; nullopt: each task's.
};
int SetNodeMode(const CtlContext& ctx, const NodeModeOptions& options);
// Saves GET /api/v1/snapshot (the whole database as one SQLite file) to `path`: downloaded to
// `<path>.part`, checked to be a SQLite database, fsynced and renamed over `path`. An existing
// `path` is refused unless `force`.
struct SnapshotOptions {
  std::string path;
  bool force = false;
};
int Snapshot(const CtlContext& ctx, const SnapshotOptions& options);
int Logs(const CtlContext& ctx, const std::string& id, const LogsOptions& options);

// Renders a task as the multi-line description printed by `get task ID`.
std::string DescribeTask(const nlohmann::json& task, std::chrono::system_clock::time_point now);

// Renders a team as the multi-line description printed by `get team NAME` and `team set`.
std::string DescribeTeam(const nlohmann::json& team);

}  // namespace dgpu::ctl
