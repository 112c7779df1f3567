// Typed configuration of dgpu-scheduler and dgpu-agent, and its YAML loaders.
//
// Each struct mirrors one YAML section; each field is named after its YAML key and its
// initializer is the documented default, so a value-initialized config IS the default config.
// configs/scheduler.yaml and configs/agent.yaml at the repository root list every key.
//
// Durations are std::chrono::milliseconds. In YAML every duration accepts a number of seconds
// (integer or decimal: `5`, `1.5`) or a string with units (`"500ms"`, `"10s"`, `"5m"`, `"2h"`,
// `"7d"`, `"1h30m"`); see ParseDuration in time_util.h.
//
// Loading rules:
//   - an empty document, a missing section, a missing key or an explicit null (`key: ~` or
//     `key:` with no value) leaves the default;
//   - an unknown or duplicated key anywhere is an error naming the full dotted key, e.g.
//     `unknown key "scheduler.schedul_interval"`;
//   - a wrong type, an out-of-range value or an inconsistent combination is an error naming the
//     key and the reason, e.g. `scheduler.schedule_interval: must be a positive duration, got
//     "abc"`;
//   - malformed YAML is an error with the line and column of the problem.
// Every error is a single line with code kInvalidArgument (kNotFound when the file is missing),
// and nothing is thrown: the loaders catch yaml-cpp's exceptions.
//
// Thread-safety: the loaders are reentrant; the structs are plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgpu::common {

using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------------
// Shared by both daemons.

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kJson, kText };

// Section `logging`.
struct LoggingConfig {
  LogLevel level = LogLevel::kInfo;     // debug | info | warn | error ("warning" is accepted)
  LogFormat format = LogFormat::kJson;  // json | text
  std::string output = "stdout";        // stdout | stderr | a file path (appended to)
  bool operator==(const LoggingConfig&) const = default;
};

// ---------------------------------------------------------------------------------------------
// dgpu-scheduler.

enum class SchedulerRole { kMaster, kStandby };  // "primary" reads as kMaster
enum class ReplicationMode { kSync, kAsync };
enum class ElectionMethod { kNone, kLease, kEtcd };

// Section `server.tls`: REST over HTTPS and gRPC over TLS. Both files or neither; a client CA
// makes gRPC require and verify client certificates (agents, the standby). PEM files.
struct ServerTlsConfig {
  std::string cert_file;       // the server's certificate chain
  std::string key_file;        // its private key
  std::string client_ca_file;  // CA bundle for gRPC client certificates; empty: none asked
  bool enabled() const { return !cert_file.empty(); }
  bool operator==(const ServerTlsConfig&) const = default;
};

// A TLS client's files (agent `scheduler.tls`, `replication.tls`, `ha.etcd_tls`): the CA bundle
// that verifies the server, and the client's own certificate and key (both or neither). TLS is
// on when ca_file is set.
struct ClientTlsConfig {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool enabled() const { return !ca_file.empty(); }
  bool operator==(const ClientTlsConfig&) const = default;
};

// Section `server`. Addresses are "host:port"; ":port" means all interfaces.
struct ServerConfig {
  std::string grpc_address = ":9090";
  std::string http_address = ":8080";
  // The time a client has to send a request's headers and body (and to send the next one on a
  // kept-alive connection) before the scheduler closes the connection.
  std::chrono::milliseconds read_timeout{10'000};  // positive
  int max_connections = 10000;                     // open REST connections; 1..1000000
  ServerTlsConfig tls;
  bool operator==(const ServerConfig&) const = default;
};

enum class AuthMode { kNone, kToken, kJwt };

// What an identity may do over REST (scheduler/auth.h), each role what the one before may too.
// The names: viewer, user, operator, admin (exact spelling, as in tokens files and JWT claims).
enum class Role { kViewer = 0, kUser = 1, kOperator = 2, kAdmin = 3 };
std::optional<Role> ParseRole(std::string_view name);

// Section `auth.jwt`: bearer tokens signed by an identity provider.
struct JwtConfig {
  std::string issuer;                 // required: the `iss` every token must carry
  std::string audience;               // required: must be in the token's `aud`
  std::string hs256_secret_file;      // exactly one of the two key files
  std::string rs256_public_key_file;  // PEM
  std::string user_claim = "sub";
  std::string teams_claim = "teams";             // a string or an array of strings; may be absent
  std::string role_claim = "role";               // viewer | user | operator | admin
  std::string default_role = "user";             // the role of a token without the role claim
  std::chrono::milliseconds clock_skew{60'000};  // allowed on exp and nbf; non-negative
  bool operator==(const JwtConfig&) const = default;
};

// Section `auth`.
struct AuthConfig {
  AuthMode mode = AuthMode::kNone;
  // With mode none, peers other than loopback are refused unless this is true.
  bool allow_insecure_remote = false;
  std::string tokens_file;     // required with mode token
  JwtConfig jwt;               // required with mode jwt
  bool metrics_public = true;  // /metrics without a token
  bool operator==(const AuthConfig&) const = default;
};

// Section `limits`.
struct LimitsConfig {
  int max_pending_per_user = 100000;  // 1..100000000
  bool operator==(const LimitsConfig&) const = default;
};

// Section `scheduler`.
struct SchedulingConfig {
  SchedulerRole role = SchedulerRole::kMaster;
  milliseconds schedule_interval{5'000};   // safety-net pass period; > 0
  milliseconds snapshot_interval{30'000};  // JSON snapshot period; > 0
  int max_attempts = 3;                    // runs of a task before it fails for good; 1..1000
  int max_bypass = 16;  // times a queue head may be overtaken by smaller tasks; 0..1000000
  std::string id;       // empty: the host name (see IdOrHostname)
  // Per-task log lines (task_submitted, task_scheduled, ...) written a second at most; the
  // rest are summed up in one line a second. 0: no limit. 0..1000000.
  int task_log_lines_per_second = 100;
  // SIGTERM to exit at most, whatever the queue: durable writes in flight finish; the final
  // state.json is skipped when it does not fit (the database holds everything). > 0.
  milliseconds shutdown_timeout{5'000};
  // `gang_port_range: 29500-29999`: a gang's rendezvous port (DGPU_MASTER_PORT) is the lowest
  // of these that no other running gang uses on its rank 0's node. 1 <= low <= high <= 65535.
  int gang_port_low = 29500;
  int gang_port_high = 29999;
  // A node label (such as `rack`): a gang goes to the fewest distinct values of it that can hold
  // it, ties broken by best fit. Empty: gangs by best fit alone.
  std::string topology_key;
  // The time limit (timeout_seconds) of a task submitted without one whose team has no default
  // of its own (whole seconds, at most ten years); 0: none.
  int64_t default_time_limit_seconds = 0;
  // A task whose dependency can no longer be satisfied fails (dependency_never_satisfied);
  // false: it stays pending with that reason until cancelled.
  bool kill_invalid_dependencies = true;
  // Backfill: a head waiting for node room gets a start planned from the running tasks' time
  // limits, and younger tasks use its nodes only if they end before it; at most backfill_depth
  // planned starts a pass (1..100000).
  bool backfill = false;
  int backfill_depth = 100;
  bool operator==(const SchedulingConfig&) const = default;
};

// Section `replication`.
struct ReplicationConfig {
  bool enabled = false;
  std::string peer_address;                // the other scheduler's gRPC address; required
                                           // when enabled
  milliseconds heartbeat_interval{2'000};  // > 0
  milliseconds heartbeat_timeout{6'000};   // > heartbeat_interval
  ReplicationMode mode = ReplicationMode::kSync;
  milliseconds sync_timeout{2'000};  // sync mode: longest wait for the standby's ack; > 0
  // The link to the peer's gRPC port; required when server.tls is set (the peer speaks TLS).
  ClientTlsConfig tls;
  bool operator==(const ReplicationConfig&) const = default;
};

// Section `quota`. Both in [0, 1] and they sum to 1. When only one is given, the other is
// derived from it.
// A team's guarantees inside the classes, its cap and its fair-share weight (quota.teams).
struct TeamConfig {
  int online = 0;     // >= 0
  int batch = 0;      // >= 0
  int max_gpus = -1;  // -1: no cap; else >= online + batch
  double weight = 1;  // > 0
  // The time limit of its tasks submitted without one (whole seconds); 0: the scheduler's.
  int64_t default_time_limit_seconds = 0;
  bool operator==(const TeamConfig&) const = default;
};

struct QuotaConfig {
  double online_percent = 0.7;
  double batch_percent = 0.3;
  // false: quotas and team guarantees are hard caps (v1). true: idle GPUs are lent beyond them
  // and taken back by preemption.
  bool borrowing = false;
  milliseconds fairshare_half_life{7LL * 24 * 3600 * 1000};  // > 0
  std::map<std::string, TeamConfig> teams;                   // by name ([a-z0-9][a-z0-9_-]{0,62})
  bool operator==(const QuotaConfig&) const = default;
};

// Section `preemption`.
struct PreemptionConfig {
  milliseconds grace_period{30'000};  // SIGTERM to SIGKILL for a preempted task; whole seconds,
                                      // at most 1 day
  milliseconds min_runtime{0};        // no task younger than this is preempted
  bool operator==(const PreemptionConfig&) const = default;
};

// Section `agent` of the scheduler: how the scheduler judges agents.
struct AgentTrackingConfig {
  milliseconds heartbeat_timeout{15'000};  // silence after which an agent is offline; > 0
  // The most GPUs one node may register; a registration claiming more is refused. 1..1024
  int max_gpus_per_node = 64;
  bool operator==(const AgentTrackingConfig&) const = default;
};

// Section `storage`.
struct StorageConfig {
  std::string snapshot_dir = "/var/lib/dgpu-scheduler/state";  // non-empty
  std::string shared_storage;  // directory shared by both schedulers (lease file); may be empty
  milliseconds retention{7LL * 24 * 3600 * 1000};  // how long finished tasks are kept; > 0
  bool fsync = true;  // fsync each commit; false trades durability for speed
  bool operator==(const StorageConfig&) const = default;
};

// Section `ha`.
struct HaConfig {
  // Default when the key is absent: kLease if storage.shared_storage is set, else kNone.
  // kLease requires storage.shared_storage; kEtcd requires etcd_endpoints.
  ElectionMethod election = ElectionMethod::kNone;
  std::vector<std::string> etcd_endpoints;   // "http://host:port" or "https://host:port"; a YAML
                                             // list or one comma-separated string
  milliseconds lease_ttl{10'000};            // > 0
  std::string etcd_prefix = "/dgpu/leader";  // starts with '/'
  ClientTlsConfig etcd_tls;                  // for https:// endpoints
  bool operator==(const HaConfig&) const = default;
};

// Section `autoscale`: node groups grown and shrunk by programs (core/autoscale.h).
struct NodeGroupConfig {
  std::string name;       // [a-z0-9][a-z0-9_-]{0,62}, unique; agents join with agent.node_group
  std::string model;      // GPU model of its nodes (matched like a task's gpu_model); non-empty
  int gpus_per_node = 8;  // 1..1024
  int min_nodes = 0;      // 0..max_nodes
  int max_nodes = 1;      // 1..100000
  // Run as `scale_up_program GROUP COUNT` and `scale_down_program GROUP NODE_ID`; required,
  // absolute paths (checked to be executable when the scheduler starts).
  std::string scale_up_program;
  std::string scale_down_program;
  bool operator==(const NodeGroupConfig&) const = default;
};

struct AutoscaleConfig {
  bool enabled = false;                   // true requires at least one node group
  milliseconds scale_up_delay{30'000};    // work waiting for room this long asks for nodes; >= 0
  milliseconds idle_timeout{600'000};     // an idle node above min_nodes is released after; > 0
  milliseconds boot_timeout{600'000};     // a node asked for that has not registered by then is
                                          // given up; > 0
  milliseconds program_timeout{120'000};  // a program still running then is killed; > 0
  milliseconds retry_delay{30'000};       // after a failed program; doubles up to 10 min; > 0
  std::vector<NodeGroupConfig> node_groups;
  bool operator==(const AutoscaleConfig&) const = default;
};

struct SchedulerConfig {
  ServerConfig server;
  SchedulingConfig scheduler;
  ReplicationConfig replication;
  QuotaConfig quota;
  PreemptionConfig preemption;
  AgentTrackingConfig agent;
  StorageConfig storage;
  HaConfig ha;
  AuthConfig auth;
  LimitsConfig limits;
  AutoscaleConfig autoscale;
  LoggingConfig logging;
  // logging.audit_file (dgpu-scheduler only): one JSON line per write request (POST, PUT,
  // DELETE) appended to this file; empty: no audit log.
  std::string audit_file;
  bool operator==(const SchedulerConfig&) const = default;
};

// ---------------------------------------------------------------------------------------------
// dgpu-agent.

enum class GpuDetectionMethod { kNvml, kNvidiaSmi, kFake };
enum class ExecutionMethod { kProcess, kDocker };

// Section `agent` of the agent.
struct AgentIdentityConfig {
  std::string id;                          // empty: the host name (see IdOrHostname)
  milliseconds heartbeat_interval{5'000};  // > 0
  // Reached no scheduler for this long: stop every task (SIGTERM, kill_grace_period, SIGKILL)
  // and report them when a scheduler answers again. 0: never (tasks keep running).
  milliseconds stop_tasks_after_disconnect{0};  // >= 0
  // The autoscale node group this node belongs to (autoscale.node_groups[].name on the
  // scheduler); empty: none.
  std::string node_group;
  // The address other nodes reach this one at: a gang whose rank 0 runs here gives it to its
  // members as DGPU_MASTER_ADDR / MASTER_ADDR. Empty: the host name.
  std::string advertise_address;
  // The node's labels (`rack: r1`), sent at registration: tasks select nodes by them
  // (node_selector). Keys and values as core::CheckLabelKey / CheckLabelValue say.
  std::map<std::string, std::string> labels;
  bool operator==(const AgentIdentityConfig&) const = default;
};

// Section `resources` of the agent: the CPUs and memory the node offers its tasks beside its
// GPUs, after the reserves it keeps for the system.
struct NodeResourcesConfig {
  int64_t cpus_milli = kAuto;  // Thousandths of a CPU; kAuto: the CPUs the agent may run on.
  int64_t memory_mb = kAuto;   // kAuto: the node's memory (MemTotal).
  int64_t reserved_cpus_milli = 0;
  int64_t reserved_memory_mb = 0;
  static constexpr int64_t kAuto = -1;
  bool operator==(const NodeResourcesConfig&) const = default;
};

// Section `scheduler` of the agent: where the schedulers are.
struct SchedulerEndpointsConfig {
  std::string master_address = "127.0.0.1:9090";  // required
  std::string standby_address;                    // may be empty
  milliseconds connection_timeout{10'000};        // > 0
  milliseconds retry_interval{2'000};             // first reconnect delay; > 0
  milliseconds max_retry_interval{30'000};        // backoff cap; >= retry_interval
  ClientTlsConfig tls;                            // gRPC over TLS to both schedulers
  bool operator==(const SchedulerEndpointsConfig&) const = default;
};

// Section `gpu.fake`: the GPUs the `fake` detection method reports.
struct FakeGpuConfig {
  int count = 4;                               // 0..1024
  std::string model = "Tesla V100-SXM2-32GB";  // non-empty
  int64_t memory_mb = 32768;                   // > 0
  // Lines "INDEX [REASON]" name the fake GPUs that are faulty, read at every health check; a
  // missing file: none. Empty: no fault file.
  std::string fault_file;
  // Fake GPU i's device file is DIR/nvidia<i> (made by whoever wants one, e.g. with mknod): a
  // task's cgroup denies the other GPUs' device files. Empty: the fake GPUs have none.
  std::string device_dir;
  // GPUs joined by NVLink, as lists of indices ([[0,1,2,3],[4,5,6,7]]): a group has at least 2
  // GPUs, a GPU is in at most one. Empty: no NVLink (every pair talks over PCIe).
  std::vector<std::vector<int>> nvlink_groups;
  bool operator==(const FakeGpuConfig&) const = default;
};

// Section `gpu`.
struct GpuConfig {
  // Methods tried in order until one succeeds. YAML: one name or a list of distinct names.
  std::vector<GpuDetectionMethod> detection_method = {GpuDetectionMethod::kNvml};
  milliseconds health_check_interval{30'000};  // > 0
  // Run at every health check (no arguments, a timeout of min(interval, 60 s)); a non-zero exit
  // makes every GPU of the node unhealthy, with its first output line as the reason. Empty: none.
  std::string health_check_program;
  std::string nvidia_smi_path = "nvidia-smi";
  std::string nvml_library = "libnvidia-ml.so.1";
  FakeGpuConfig fake;
  bool operator==(const GpuConfig&) const = default;
};

// Section `executor.docker`.
struct DockerConfig {
  std::string socket = "/var/run/docker.sock";
  std::string default_image = "nvidia/cuda:12.0-runtime-ubuntu22.04";
  std::string binary = "docker";
  bool operator==(const DockerConfig&) const = default;
};

// Section `executor`.
enum class RunAs { kAgent, kSubmitter };
// auto: a cgroup per task wherever the agent can make them, else none with a warning; cgroup:
// the agent does not start without them; none: tasks share the node's CPUs, memory and devices.
enum class Isolation { kAuto, kCgroup, kNone };
// With cgroups: cpuset: ceil(cpus) whole CPUs of the task's own (those local to its GPUs first)
// while enough are free, else a quota; quota: a CPU bandwidth of the task's CPUs; none: no CPU
// limit.
enum class CpuBinding { kCpuset, kQuota, kNone };

struct ExecutorConfig {
  ExecutionMethod execution_method = ExecutionMethod::kProcess;
  // submitter: a task runs with the uid, gid and groups of its `user` on this node (the agent
  // must run as root); agent: as the agent's own user.
  RunAs run_as = RunAs::kAgent;
  bool allow_root = false;  // run_as submitter: a task of a user with uid 0 may run
  std::string work_dir = "/var/lib/dgpu-agent/tasks";
  // The records of running tasks (task_shim.h), which must outlive the agent process, not the
  // machine: best on a tmpfs such as /run/dgpu-agent. Empty: <work_dir>/.run.
  std::string run_dir;
  milliseconds kill_grace_period{10'000};  // SIGTERM to SIGKILL; >= 0
  bool keep_tasks_on_exit = false;         // true: tasks outlive the agent process
  // A task's log (<work_dir>/<id>.log) is cut here with a marker line and further output is
  // discarded; 0: no limit (the task then writes to the file itself).
  int64_t max_log_bytes = int64_t{1} << 30;
  // A finished task's directory and log are removed this long after its last output; 0: kept.
  milliseconds retention{int64_t{7} * 24 * 3600 * 1000};
  Isolation isolation = Isolation::kAuto;
  CpuBinding cpu_binding = CpuBinding::kCpuset;
  int64_t max_pids_per_task = 32768;  // 0..4194304; 0: no limit
  DockerConfig docker;
  bool operator==(const ExecutorConfig&) const = default;
};

struct AgentConfig {
  AgentIdentityConfig agent;
  SchedulerEndpointsConfig scheduler;
  NodeResourcesConfig resources;
  GpuConfig gpu;
  ExecutorConfig executor;
  LoggingConfig logging;
  bool operator==(const AgentConfig&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Loaders. `path` errors are prefixed with the path: `<path>: <reason>`.

// The file loaders resolve every relative path of the configuration (ResolveRelativePaths)
// against the working directory the daemon was started in; the *FromString loaders leave paths
// as written.
StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::string& path);
// The whole file that configuration key `key` names (a tokens file, a key, a certificate).
// InvalidArgument "<key>: cannot read <path>: <reason>" when it cannot be read.
StatusOr<std::string> ReadConfiguredFile(const std::string& key, const std::string& path);
StatusOr<SchedulerConfig> LoadSchedulerConfigFromString(std::string_view yaml);
StatusOr<AgentConfig> LoadAgentConfig(const std::string& path);
StatusOr<AgentConfig> LoadAgentConfigFromString(std::string_view yaml);

// Makes every relative path of `config` absolute against `base` (an absolute directory), once,
// so that nothing later depends on the directory a process runs in: a task's shim, for one,
// runs in the task's own directory. Files and directories (TLS files, tokens and key files,
// storage directories, the audit log, logging.output other than stdout and stderr, the fake
// fault file, executor.work_dir, the Docker socket) always; programs and libraries
// (gpu.nvidia_smi_path, gpu.nvml_library, gpu.health_check_program, executor.docker.binary) only
// when they hold a '/', so that a bare name is still looked up on PATH (or by the loader).
// Returns the keys it changed, for the start-up log.
std::vector<std::string> ResolveRelativePaths(SchedulerConfig* config, const std::string& base);
std::vector<std::string> ResolveRelativePaths(AgentConfig* config, const std::string& base);

// ---------------------------------------------------------------------------------------------
// Addresses.

struct HostPort {
  std::string host;  // without IPv6 brackets; empty for ":port"
  uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};

// Splits "host:port", ":port" or "[v6]:port". Returns nullopt when the port is missing, not a
// number or above 65535, or when an unbracketed host contains ':'.
std::optional<HostPort> ParseHostPort(std::string_view address);

// The address to listen on: ":9090" -> "0.0.0.0:9090"; anything else is returned unchanged.
std::string ToBindAddress(std::string_view address);

// The address to connect to: ":9090", "0.0.0.0:9090" -> "127.0.0.1:9090", "[::]:9090" ->
// "[::1]:9090"; anything else is returned unchanged.
std::string ToConnectAddress(std::string_view address);

// ---------------------------------------------------------------------------------------------
// Misc.

// `configured_id` when non-empty, else the host name (gethostname), else "localhost".
std::string IdOrHostname(std::string_view configured_id);
// An agent id (a node's name): [A-Za-z0-9][A-Za-z0-9._-]{0,62}. OK, or InvalidArgument saying the
// rule and quoting the id.
Status CheckAgentId(std::string_view id);

// The YAML spelling of each enum value ("master", "nvidia-smi", ...).
std::string_view ToString(LogLevel value);
std::string_view ToString(LogFormat value);
std::string_view ToString(SchedulerRole value);
std::string_view ToString(ReplicationMode value);
std::string_view ToString(ElectionMethod value);
std::string_view ToString(GpuDetectionMethod value);
std::string_view ToString(ExecutionMethod value);
std::string_view ToString(RunAs value);
std::string_view ToString(Isolation value);
std::string_view ToString(CpuBinding value);
std::string_view ToString(AuthMode value);
std::string_view ToString(Role value);

}  // namespace dgpu::common
