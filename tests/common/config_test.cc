#include "common/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace dgpu::common {

// Readable failures: found by argument-dependent lookup, so in the struct's namespace.
static void PrintTo(const TeamConfig& t, std::ostream* os) {
  *os << "{online " << t.online << ", batch " << t.batch << ", max_gpus " << t.max_gpus
      << ", weight " << t.weight << ", default_time_limit " << t.default_time_limit_seconds << "}";
}

namespace {

using std::chrono::milliseconds;

template <typename T>
void ExpectError(const StatusOr<T>& result, StatusCode code, const std::string& message) {
  ASSERT_FALSE(result.ok()) << "expected error: " << message;
  EXPECT_EQ(result.status().code(), code);
  EXPECT_EQ(result.status().message(), message);
}

void ExpectSchedulerError(const std::string& yaml, const std::string& message) {
  SCOPED_TRACE(yaml);
  ExpectError(LoadSchedulerConfigFromString(yaml), StatusCode::kInvalidArgument, message);
}

void ExpectAgentError(const std::string& yaml, const std::string& message) {
  SCOPED_TRACE(yaml);
  ExpectError(LoadAgentConfigFromString(yaml), StatusCode::kInvalidArgument, message);
}

SchedulerConfig MustLoadScheduler(const std::string& yaml) {
  StatusOr<SchedulerConfig> config = LoadSchedulerConfigFromString(yaml);
  EXPECT_TRUE(config.ok()) << yaml << "\n-> " << config.status().ToString();
  return config.ok() ? *config : SchedulerConfig{};
}

AgentConfig MustLoadAgent(const std::string& yaml) {
  StatusOr<AgentConfig> config = LoadAgentConfigFromString(yaml);
  EXPECT_TRUE(config.ok()) << yaml << "\n-> " << config.status().ToString();
  return config.ok() ? *config : AgentConfig{};
}

// ---------------------------------------------------------------------------------------------
// Defaults.

TEST(SchedulerConfigTest, DefaultsAreTheDocumentedValues) {
  const SchedulerConfig c;
  EXPECT_EQ(c.server.grpc_address, ":9090");
  EXPECT_EQ(c.server.http_address, ":8080");
  EXPECT_EQ(c.scheduler.role, SchedulerRole::kMaster);
  EXPECT_EQ(c.scheduler.schedule_interval, milliseconds{5'000});
  EXPECT_EQ(c.scheduler.snapshot_interval, milliseconds{30'000});
  EXPECT_EQ(c.scheduler.max_attempts, 3);
  EXPECT_EQ(c.scheduler.max_bypass, 16);
  EXPECT_EQ(c.scheduler.task_log_lines_per_second, 100);
  EXPECT_EQ(c.scheduler.shutdown_timeout, milliseconds{5'000});
  EXPECT_EQ(c.scheduler.id, "");
  EXPECT_FALSE(c.replication.enabled);
  EXPECT_EQ(c.replication.peer_address, "");
  EXPECT_EQ(c.replication.heartbeat_interval, milliseconds{2'000});
  EXPECT_EQ(c.replication.heartbeat_timeout, milliseconds{6'000});
  EXPECT_EQ(c.replication.mode, ReplicationMode::kSync);
  EXPECT_EQ(c.replication.sync_timeout, milliseconds{2'000});
  EXPECT_DOUBLE_EQ(c.quota.online_percent, 0.7);
  EXPECT_DOUBLE_EQ(c.quota.batch_percent, 0.3);
  EXPECT_FALSE(c.quota.borrowing);
  EXPECT_EQ(c.quota.fairshare_half_life, milliseconds{7LL * 86'400'000});
  EXPECT_TRUE(c.quota.teams.empty());
  EXPECT_EQ(c.preemption.grace_period, milliseconds{30'000});
  EXPECT_EQ(c.preemption.min_runtime, milliseconds{0});
  EXPECT_EQ(c.agent.heartbeat_timeout, milliseconds{15'000});
  EXPECT_EQ(c.storage.snapshot_dir, "/var/lib/dgpu-scheduler/state");
  EXPECT_EQ(c.storage.shared_storage, "");
  EXPECT_EQ(c.storage.retention, milliseconds{7LL * 86'400'000});
  EXPECT_TRUE(c.storage.fsync);
  EXPECT_EQ(c.ha.election, ElectionMethod::kNone);
  EXPECT_TRUE(c.ha.etcd_endpoints.empty());
  EXPECT_EQ(c.ha.lease_ttl, milliseconds{10'000});
  EXPECT_EQ(c.ha.etcd_prefix, "/dgpu/leader");
  EXPECT_EQ(c.logging.level, LogLevel::kInfo);
  EXPECT_EQ(c.logging.format, LogFormat::kJson);
  EXPECT_EQ(c.logging.output, "stdout");
}

TEST(AgentConfigTest, DefaultsAreTheDocumentedValues) {
  const AgentConfig c;
  EXPECT_EQ(c.agent.id, "");
  EXPECT_EQ(c.agent.heartbeat_interval, milliseconds{5'000});
  EXPECT_EQ(c.scheduler.master_address, "127.0.0.1:9090");
  EXPECT_EQ(c.scheduler.standby_address, "");
  EXPECT_EQ(c.scheduler.connection_timeout, milliseconds{10'000});
  EXPECT_EQ(c.scheduler.retry_interval, milliseconds{2'000});
  EXPECT_EQ(c.scheduler.max_retry_interval, milliseconds{30'000});
  EXPECT_EQ(c.gpu.detection_method, std::vector<GpuDetectionMethod>{GpuDetectionMethod::kNvml});
  EXPECT_EQ(c.gpu.health_check_interval, milliseconds{30'000});
  EXPECT_EQ(c.gpu.nvidia_smi_path, "nvidia-smi");
  EXPECT_EQ(c.gpu.nvml_library, "libnvidia-ml.so.1");
  EXPECT_EQ(c.gpu.fake.count, 4);
  EXPECT_EQ(c.gpu.fake.model, "Tesla V100-SXM2-32GB");
  EXPECT_EQ(c.gpu.fake.memory_mb, 32768);
  EXPECT_EQ(c.executor.execution_method, ExecutionMethod::kProcess);
  EXPECT_EQ(c.executor.work_dir, "/var/lib/dgpu-agent/tasks");
  EXPECT_EQ(c.executor.run_dir, "");
  EXPECT_EQ(c.executor.kill_grace_period, milliseconds{10'000});
  EXPECT_FALSE(c.executor.keep_tasks_on_exit);
  EXPECT_EQ(c.executor.max_log_bytes, int64_t{1} << 30);
  EXPECT_EQ(c.executor.retention, milliseconds{int64_t{7} * 24 * 3600 * 1000});
  EXPECT_EQ(c.executor.isolation, Isolation::kAuto);
  EXPECT_EQ(c.executor.cpu_binding, CpuBinding::kCpuset);
  EXPECT_EQ(c.executor.max_pids_per_task, 32768);
  EXPECT_EQ(c.gpu.fake.device_dir, "");
  EXPECT_EQ(c.executor.docker.socket, "/var/run/docker.sock");
  EXPECT_EQ(c.executor.docker.default_image, "nvidia/cuda:12.0-runtime-ubuntu22.04");
  EXPECT_EQ(c.executor.docker.binary, "docker");
  EXPECT_EQ(c.logging, LoggingConfig{});
}

TEST(SchedulerConfigTest, EmptyDocumentsAndSectionsGiveDefaults) {
  for (const char* yaml : {"", "\n", "# only a comment\n", "~", "{}", "---\n",
                           "server:\nscheduler:\nreplication: {}\nquota: ~\nlogging:\n",
                           "scheduler:\n  role: ~\n  schedule_interval:\n"}) {
    EXPECT_EQ(MustLoadScheduler(yaml), SchedulerConfig{}) << yaml;
  }
}

TEST(AgentConfigTest, EmptyDocumentsAndSectionsGiveDefaults) {
  for (const char* yaml : {"", "# nothing\n", "gpu:\n  fake:\nexecutor:\n  docker: {}\n"}) {
    EXPECT_EQ(MustLoadAgent(yaml), AgentConfig{}) << yaml;
  }
}

// ---------------------------------------------------------------------------------------------
// Every key.

TEST(SchedulerConfigTest, ParsesEveryKey) {
  const SchedulerConfig c = MustLoadScheduler(R"(
server:
  grpc_address: "10.0.0.1:19090"
  http_address: "[::1]:18080"
scheduler:
  role: standby
  schedule_interval: 1.5
  snapshot_interval: "2m"
  max_attempts: 5
  max_bypass: 0
  id: sched-a
  task_log_lines_per_second: 0
  shutdown_timeout: 750ms
replication:
  enabled: true
  peer_address: "sched-b:9090"
  heartbeat_interval: 500ms
  heartbeat_timeout: 3
  mode: async
  sync_timeout: 250ms
quota:
  online_percent: 0.6
  batch_percent: 0.4
agent:
  heartbeat_timeout: 20s
storage:
  snapshot_dir: /tmp/state
  shared_storage: /mnt/shared
  retention: 30d
  fsync: false
ha:
  election: etcd
  etcd_endpoints: ["http://e1:2379", "https://e2:2379/"]
  lease_ttl: 15
  etcd_prefix: /custom/leader
logging:
  level: debug
  format: text
  output: /tmp/sched.log
)");
  EXPECT_EQ(c.server.grpc_address, "10.0.0.1:19090");
  EXPECT_EQ(c.server.http_address, "[::1]:18080");
  EXPECT_EQ(c.scheduler.role, SchedulerRole::kStandby);
  EXPECT_EQ(c.scheduler.schedule_interval, milliseconds{1'500});
  EXPECT_EQ(c.scheduler.snapshot_interval, milliseconds{120'000});
  EXPECT_EQ(c.scheduler.max_attempts, 5);
  EXPECT_EQ(c.scheduler.max_bypass, 0);
  EXPECT_EQ(c.scheduler.id, "sched-a");
  EXPECT_EQ(c.scheduler.task_log_lines_per_second, 0);
  EXPECT_EQ(c.scheduler.shutdown_timeout, milliseconds{750});
  EXPECT_TRUE(c.replication.enabled);
  EXPECT_EQ(c.replication.peer_address, "sched-b:9090");
  EXPECT_EQ(c.replication.heartbeat_interval, milliseconds{500});
  EXPECT_EQ(c.replication.heartbeat_timeout, milliseconds{3'000});
  EXPECT_EQ(c.replication.mode, ReplicationMode::kAsync);
  EXPECT_EQ(c.replication.sync_timeout, milliseconds{250});
  EXPECT_DOUBLE_EQ(c.quota.online_percent, 0.6);
  EXPECT_DOUBLE_EQ(c.quota.batch_percent, 0.4);
  EXPECT_EQ(c.agent.heartbeat_timeout, milliseconds{20'000});
  EXPECT_EQ(c.storage.snapshot_dir, "/tmp/state");
  EXPECT_EQ(c.storage.shared_storage, "/mnt/shared");
  EXPECT_EQ(c.storage.retention, milliseconds{30LL * 86'400'000});
  EXPECT_FALSE(c.storage.fsync);
  EXPECT_EQ(c.ha.election, ElectionMethod::kEtcd);
  EXPECT_EQ(c.ha.etcd_endpoints, (std::vector<std::string>{"http://e1:2379", "https://e2:2379/"}));
  EXPECT_EQ(c.ha.lease_ttl, milliseconds{15'000});
  EXPECT_EQ(c.ha.etcd_prefix, "/custom/leader");
  EXPECT_EQ(c.logging.level, LogLevel::kDebug);
  EXPECT_EQ(c.logging.format, LogFormat::kText);
  EXPECT_EQ(c.logging.output, "/tmp/sched.log");
}

TEST(SchedulerConfigTest, AcceptsFlowStyleSectionsOfTheOriginalDocs) {
  const SchedulerConfig c = MustLoadScheduler(R"(
server:      { grpc_address: ":9090", http_address: ":8080" }
scheduler:   { role: primary, schedule_interval: 5, snapshot_interval: 30 }
replication: { enabled: true, peer_address: "host:9090", heartbeat_interval: 2, heartbeat_timeout: 6 }
quota:       { online_percent: 0.7, batch_percent: 0.3 }
agent:       { heartbeat_timeout: 15 }
storage:     { snapshot_dir: "/var/lib/dgpu-scheduler/state", shared_storage: "" }
logging:     { level: info, format: json, output: stdout }
)");
  SchedulerConfig expected;
  expected.replication.enabled = true;
  expected.replication.peer_address = "host:9090";
  EXPECT_EQ(c, expected);
}

TEST(SchedulerConfigTest, RoleAcceptsPrimaryAndIgnoresCase) {
  EXPECT_EQ(MustLoadScheduler("scheduler: {role: primary}").scheduler.role, SchedulerRole::kMaster);
  EXPECT_EQ(MustLoadScheduler("scheduler: {role: Standby}").scheduler.role,
            SchedulerRole::kStandby);
  EXPECT_EQ(MustLoadScheduler("logging: {level: WARNING}").logging.level, LogLevel::kWarn);
}

TEST(AgentConfigTest, ParsesEveryKey) {
  const AgentConfig c = MustLoadAgent(R"(
agent:
  id: node-7
  heartbeat_interval: 2.5
scheduler:
  master_address: "sched-a:9090"
  standby_address: "sched-b:9090"
  connection_timeout: 3s
  retry_interval: 500ms
  max_retry_interval: 1m
gpu:
  detection_method: [nvidia-smi, fake]
  health_check_interval: 10
  nvidia_smi_path: /usr/bin/nvidia-smi
  nvml_library: /opt/libnvidia-ml.so
  fake:
    count: 8
    model: "NVIDIA A100-SXM4-80GB"
    memory_mb: 81920
    device_dir: /dev/fake
    nvlink_groups: [[0, 1, 2, 3], [4, 5, 6, 7]]
executor:
  execution_method: docker
  isolation: none
  cpu_binding: none
  max_pids_per_task: 4096
  work_dir: /tmp/tasks
  run_dir: /run/dgpu-agent
  kill_grace_period: 0
  keep_tasks_on_exit: true
  max_log_bytes: 512MiB
  retention: 3d
  docker:
    socket: /run/docker.sock
    default_image: "ubuntu:22.04"
    binary: /usr/local/bin/docker
logging:
  level: error
  format: text
  output: stderr
)");
  EXPECT_EQ(c.agent.id, "node-7");
  EXPECT_EQ(c.agent.heartbeat_interval, milliseconds{2'500});
  EXPECT_EQ(c.scheduler.master_address, "sched-a:9090");
  EXPECT_EQ(c.scheduler.standby_address, "sched-b:9090");
  EXPECT_EQ(c.scheduler.connection_timeout, milliseconds{3'000});
  EXPECT_EQ(c.scheduler.retry_interval, milliseconds{500});
  EXPECT_EQ(c.scheduler.max_retry_interval, milliseconds{60'000});
  EXPECT_EQ(c.gpu.detection_method, (std::vector<GpuDetectionMethod>{GpuDetectionMethod::kNvidiaSmi,
                                                                     GpuDetectionMethod::kFake}));
  EXPECT_EQ(c.gpu.health_check_interval, milliseconds{10'000});
  EXPECT_EQ(c.gpu.nvidia_smi_path, "/usr/bin/nvidia-smi");
  EXPECT_EQ(c.gpu.nvml_library, "/opt/libnvidia-ml.so");
  EXPECT_EQ(c.gpu.fake.count, 8);
  EXPECT_EQ(c.gpu.fake.model, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(c.gpu.fake.memory_mb, 81920);
  EXPECT_EQ(c.gpu.fake.nvlink_groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(c.executor.execution_method, ExecutionMethod::kDocker);
  EXPECT_EQ(c.executor.work_dir, "/tmp/tasks");
  EXPECT_EQ(c.executor.run_dir, "/run/dgpu-agent");
  EXPECT_EQ(c.executor.kill_grace_period, milliseconds{0});
  EXPECT_TRUE(c.executor.keep_tasks_on_exit);
  EXPECT_EQ(c.executor.max_log_bytes, int64_t{512} << 20);
  EXPECT_EQ(c.executor.retention, milliseconds{int64_t{3} * 24 * 3600 * 1000});
  EXPECT_EQ(c.executor.isolation, Isolation::kNone);
  EXPECT_EQ(c.executor.cpu_binding, CpuBinding::kNone);
  EXPECT_EQ(c.executor.max_pids_per_task, 4096);
  EXPECT_EQ(c.gpu.fake.device_dir, "/dev/fake");
  EXPECT_EQ(c.executor.docker.socket, "/run/docker.sock");
  EXPECT_EQ(c.executor.docker.default_image, "ubuntu:22.04");
  EXPECT_EQ(c.executor.docker.binary, "/usr/local/bin/docker");
  EXPECT_EQ(c.logging.level, LogLevel::kError);
  EXPECT_EQ(c.logging.format, LogFormat::kText);
  EXPECT_EQ(c.logging.output, "stderr");
}

// ---------------------------------------------------------------------------------------------
// Unknown and duplicate keys.

TEST(SchedulerConfigTest, UnknownKeysAreNamedWithTheirDottedPath) {
  ExpectSchedulerError("schedular: {}", "unknown key \"schedular\" (did you mean \"scheduler\"?)");
  ExpectSchedulerError("extra: 1", "unknown key \"extra\"");
  ExpectSchedulerError("scheduler:\n  schedul_interval: 5\n",
                       "unknown key \"scheduler.schedul_interval\" (did you mean "
                       "\"schedule_interval\"?)");
  ExpectSchedulerError("logging: {level: info, colour: true}", "unknown key \"logging.colour\"");
  ExpectSchedulerError("ha: {etcd_endpoint: []}",
                       "unknown key \"ha.etcd_endpoint\" (did you mean \"etcd_endpoints\"?)");
}

TEST(AgentConfigTest, UnknownKeysAreNamedWithTheirDottedPath) {
  ExpectAgentError("gpu:\n  fake:\n    colour: red\n", "unknown key \"gpu.fake.colour\"");
  ExpectAgentError("executor:\n  docker:\n    sockett: /x\n",
                   "unknown key \"executor.docker.sockett\" (did you mean \"socket\"?)");
  // Too far from every known key for a hint.
  ExpectAgentError("agent: {heartbeat_timeout: 5}", "unknown key \"agent.heartbeat_timeout\"");
  // The scheduler's sections are not the agent's.
  ExpectAgentError("quota: {online_percent: 0.5}", "unknown key \"quota\"");
}

TEST(SchedulerConfigTest, DuplicateKeysAreErrors) {
  ExpectSchedulerError("scheduler:\n  role: master\n  role: standby\n",
                       "duplicate key \"scheduler.role\"");
}

// ---------------------------------------------------------------------------------------------
// Types and ranges.

TEST(SchedulerConfigTest, WrongTypesAndRangesAreExplained) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"hello", "top level: must be a mapping, got \"hello\""},
      {"- a\n- b\n", "top level: must be a mapping, got a list"},
      {"scheduler: [1, 2]", "scheduler: must be a mapping, got a list"},
      {"scheduler: fast", "scheduler: must be a mapping, got \"fast\""},
      {"agent: {max_gpus_per_node: 0}",
       "agent.max_gpus_per_node: must be an integer in [1, 1024], got \"0\""},
      {"scheduler: {schedule_interval: abc}",
       "scheduler.schedule_interval: must be a positive duration, got \"abc\""},
      {"scheduler: {schedule_interval: [5]}",
       "scheduler.schedule_interval: must be a positive duration, got a list"},
      {"scheduler: {role: leader}",
       "scheduler.role: must be one of master, standby; got \"leader\""},
      {"scheduler: {max_attempts: 1.5}",
       "scheduler.max_attempts: must be an integer in [1, 1000], got \"1.5\""},
      {"scheduler: {max_attempts: 0}",
       "scheduler.max_attempts: must be an integer in [1, 1000], got \"0\""},
      {"scheduler: {max_bypass: -1}",
       "scheduler.max_bypass: must be an integer in [0, 1000000], got \"-1\""},
      {"scheduler: {id: {a: 1}}", "scheduler.id: must be a string, got a mapping"},
      {"scheduler: {shutdown_timeout: 0}",
       "scheduler.shutdown_timeout: must be a positive duration, got \"0\""},
      {"scheduler: {task_log_lines_per_second: 2000000}",
       "scheduler.task_log_lines_per_second: must be an integer in [0, 1000000], got "
       "\"2000000\""},
      {"server: {grpc_address: \"9090\"}",
       "server.grpc_address: must be \"host:port\" or \":port\", got \"9090\""},
      {"server: {http_address: \":99999\"}",
       "server.http_address: must be \"host:port\" or \":port\", got \":99999\""},
      {"server: {http_address: \"\"}", "server.http_address: must not be empty"},
      {"replication: {enabled: maybe}",
       "replication.enabled: must be true or false, got \"maybe\""},
      {"replication: {mode: semi}", "replication.mode: must be one of sync, async; got \"semi\""},
      {"quota: {online_percent: 1.5}",
       "quota.online_percent: must be a number in [0, 1], got \"1.5\""},
      {"quota: {batch_percent: 30%}",
       "quota.batch_percent: must be a number in [0, 1], got \"30%\""},
      {"storage: {fsync: 1}", "storage.fsync: must be true or false, got \"1\""},
      {"storage: {snapshot_dir: \"\"}", "storage.snapshot_dir: must not be empty"},
      {"ha: {election: raft}", "ha.election: must be one of none, lease, etcd; got \"raft\""},
      {"ha: {etcd_prefix: dgpu}", "ha.etcd_prefix: must start with '/', got \"dgpu\""},
      {"logging: {level: verbose}",
       "logging.level: must be one of debug, info, warn, error; got \"verbose\""},
      {"logging: {format: xml}", "logging.format: must be one of json, text; got \"xml\""},
      {"logging: {output: \"\"}", "logging.output: must not be empty"},
  };
  for (const Case& c : cases) ExpectSchedulerError(c.yaml, c.message);
}

TEST(AgentConfigTest, WrongTypesAndRangesAreExplained) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"scheduler: {master_address: \"\"}", "scheduler.master_address: must not be empty"},
      {"scheduler: {standby_address: nohost}",
       "scheduler.standby_address: must be \"host:port\" or \":port\", got \"nohost\""},
      {"scheduler: {retry_interval: 10, max_retry_interval: 5}",
       "scheduler.max_retry_interval: must be at least scheduler.retry_interval (10s), got 5s"},
      {"gpu: {fake: {count: 2000}}",
       "gpu.fake.count: must be an integer in [0, 1024], got \"2000\""},
      {"gpu: {fake: {count: 4, nvlink_groups: [[0, 4]]}}",
       "gpu.fake.nvlink_groups: group 0: GPU 4 is not one of the node's GPUs (0 to 3) "
       "(gpu.fake.count is 4)"},
      {"gpu: {fake: {count: 4, nvlink_groups: [[0, 1], [1, 2]]}}",
       "gpu.fake.nvlink_groups: group 1: GPU 1 is in a group already (gpu.fake.count is 4)"},
      {"gpu: {fake: {nvlink_groups: [[3]]}}",
       "gpu.fake.nvlink_groups: group 0: a group has at least 2 GPUs (gpu.fake.count is 4)"},
      {"gpu: {fake: {nvlink_groups: [[0, x]]}}",
       "gpu.fake.nvlink_groups[0][1]: must be a GPU index, got \"x\""},
      {"gpu: {fake: {nvlink_groups: [0, 1]}}",
       "gpu.fake.nvlink_groups[0]: must be a list of GPU indices, got \"0\""},
      {"gpu: {fake: {nvlink_groups: \"0,1\"}}",
       "gpu.fake.nvlink_groups: must be a list of lists of GPU indices ([[0, 1], [2, 3]]), got "
       "\"0,1\""},
      {"agent: {id: \"a/b\"}",
       "agent.id: an agent id is 1 to 63 letters, digits, '.', '_' and '-', starting with a "
       "letter or a digit ([A-Za-z0-9][A-Za-z0-9._-]{0,62}), got \"a/b\""},
      {"gpu: {fake: {memory_mb: 0}}",
       "gpu.fake.memory_mb: must be an integer in [1, 1099511627776], got \"0\""},
      {"gpu: {fake: {model: \"\"}}", "gpu.fake.model: must not be empty"},
      {"executor: {execution_method: podman}",
       "executor.execution_method: must be one of process, docker; got \"podman\""},
      {"executor: {kill_grace_period: -1}",
       "executor.kill_grace_period: must be a non-negative duration, got \"-1\""},
      {"executor: {max_log_bytes: 1.5G}",
       "executor.max_log_bytes: must be a size in bytes (a whole number, or with a unit: 512MiB, "
       "1G), got \"1.5G\""},
      {"executor: {max_log_bytes: -1}",
       "executor.max_log_bytes: must be a size in bytes (a whole number, or with a unit: 512MiB, "
       "1G), got \"-1\""},
      {"executor: {isolation: strict}",
       "executor.isolation: must be one of auto, cgroup, none; got \"strict\""},
      {"executor: {cpu_binding: pinned}",
       "executor.cpu_binding: must be one of cpuset, quota, none; got \"pinned\""},
      {"executor: {max_pids_per_task: -1}",
       "executor.max_pids_per_task: must be an integer in [0, 4194304], got \"-1\""},
      {"executor: {retention: forever}",
       "executor.retention: must be a non-negative duration, got \"forever\""},
      {"executor: {keep_tasks_on_exit: sometimes}",
       "executor.keep_tasks_on_exit: must be true or false, got \"sometimes\""},
      {"executor: {docker: []}", "executor.docker: must be a mapping, got a list"},
  };
  for (const Case& c : cases) ExpectAgentError(c.yaml, c.message);
}

// ---------------------------------------------------------------------------------------------
// Durations.

TEST(SchedulerConfigTest, DurationsAcceptSecondsAndUnits) {
  struct Case {
    const char* value;
    int64_t expected_ms;
  };
  const Case cases[] = {{"\"1.5\"", 1'500}, {"1.5", 1'500},      {"2", 2'000},
                        {"\"500ms\"", 500}, {"7d", 604'800'000}, {"\"10s\"", 10'000},
                        {"5m", 300'000},    {"2h", 7'200'000},   {"0.001", 1}};
  for (const Case& c : cases) {
    const SchedulerConfig config =
        MustLoadScheduler(std::string("scheduler: {schedule_interval: ") + c.value + "}");
    EXPECT_EQ(config.scheduler.schedule_interval, milliseconds{c.expected_ms}) << c.value;
  }
}

TEST(SchedulerConfigTest, DurationsRejectNegativeZeroAndGarbage) {
  ExpectSchedulerError("scheduler: {schedule_interval: -1}",
                       "scheduler.schedule_interval: must be a positive duration, got \"-1\"");
  ExpectSchedulerError("scheduler: {schedule_interval: \"-1\"}",
                       "scheduler.schedule_interval: must be a positive duration, got \"-1\"");
  ExpectSchedulerError("scheduler: {snapshot_interval: 0}",
                       "scheduler.snapshot_interval: must be a positive duration, got \"0\"");
  ExpectSchedulerError("storage: {retention: 5 days}",
                       "storage.retention: must be a positive duration, got \"5 days\"");
  ExpectSchedulerError("agent: {heartbeat_timeout: 10x}",
                       "agent.heartbeat_timeout: must be a positive duration, got \"10x\"");
  ExpectSchedulerError("ha: {lease_ttl: true}",
                       "ha.lease_ttl: must be a positive duration, got \"true\"");
}

// ---------------------------------------------------------------------------------------------
// Cross-field rules.

TEST(SchedulerConfigTest, QuotaMustSumToOneAndDerivesTheMissingShare) {
  QuotaConfig both = MustLoadScheduler("quota: {online_percent: 0.25, batch_percent: 0.75}").quota;
  EXPECT_DOUBLE_EQ(both.online_percent, 0.25);
  EXPECT_DOUBLE_EQ(both.batch_percent, 0.75);

  QuotaConfig online_only = MustLoadScheduler("quota: {online_percent: 0.8}").quota;
  EXPECT_DOUBLE_EQ(online_only.online_percent, 0.8);
  EXPECT_DOUBLE_EQ(online_only.batch_percent, 0.2);

  QuotaConfig batch_only = MustLoadScheduler("quota: {batch_percent: 1}").quota;
  EXPECT_DOUBLE_EQ(batch_only.online_percent, 0.0);
  EXPECT_DOUBLE_EQ(batch_only.batch_percent, 1.0);

  // 0.1 + 0.2 is not exactly 0.3 in binary; the tolerance absorbs it.
  QuotaConfig inexact = MustLoadScheduler("quota: {online_percent: 0.9, batch_percent: 0.1}").quota;
  EXPECT_DOUBLE_EQ(inexact.online_percent, 0.9);

  ExpectSchedulerError("quota: {online_percent: 0.6, batch_percent: 0.3}",
                       "quota.batch_percent: online_percent + batch_percent must equal 1, got "
                       "0.6 + 0.3");
  ExpectSchedulerError("quota: {online_percent: 0.7, batch_percent: 0.30001}",
                       "quota.batch_percent: online_percent + batch_percent must equal 1, got "
                       "0.7 + 0.30001");
}

TEST(SchedulerConfigTest, ReplicationRules) {
  ExpectSchedulerError("replication: {enabled: true}",
                       "replication.peer_address: required when replication.enabled is true");
  ExpectSchedulerError("replication: {heartbeat_interval: 2, heartbeat_timeout: 2}",
                       "replication.heartbeat_timeout: must be greater than "
                       "replication.heartbeat_interval (2s), got 2s");
  ExpectSchedulerError("replication: {heartbeat_interval: 3s, heartbeat_timeout: 2500ms}",
                       "replication.heartbeat_timeout: must be greater than "
                       "replication.heartbeat_interval (3s), got 2500ms");
}

TEST(SchedulerConfigTest, ElectionDefaultsFromSharedStorage) {
  EXPECT_EQ(MustLoadScheduler("").ha.election, ElectionMethod::kNone);
  EXPECT_EQ(MustLoadScheduler("storage: {shared_storage: /mnt/dgpu}").ha.election,
            ElectionMethod::kLease);
  EXPECT_EQ(
      MustLoadScheduler("storage: {shared_storage: /mnt/dgpu}\nha: {election: none}").ha.election,
      ElectionMethod::kNone);
  ExpectSchedulerError("ha: {election: lease}",
                       "ha.election: \"lease\" requires storage.shared_storage to be set");
  ExpectSchedulerError("ha: {election: etcd}",
                       "ha.etcd_endpoints: must list at least one endpoint when ha.election is "
                       "\"etcd\"");
}

TEST(SchedulerConfigTest, EtcdEndpointsAcceptAListOrACommaSeparatedString) {
  EXPECT_EQ(MustLoadScheduler("ha: {election: etcd, etcd_endpoints: \"http://a:2379, "
                              "http://b:2379\"}")
                .ha.etcd_endpoints,
            (std::vector<std::string>{"http://a:2379", "http://b:2379"}));
  ExpectSchedulerError("ha: {etcd_endpoints: [\"http://a:2379\", \"b:2379\"]}",
                       "ha.etcd_endpoints[1]: must look like \"http://host:port\", got "
                       "\"b:2379\"");
  ExpectSchedulerError("ha: {etcd_endpoints: [\"http://:2379\"]}",
                       "ha.etcd_endpoints[0]: must look like \"http://host:port\", got "
                       "\"http://:2379\"");
  ExpectSchedulerError("ha: {etcd_endpoints: {a: 1}}",
                       "ha.etcd_endpoints: must be a list of \"http://host:port\", got a mapping");
}

TEST(AgentConfigTest, DetectionMethodIsANameOrAnOrderedList) {
  EXPECT_EQ(MustLoadAgent("gpu: {detection_method: fake}").gpu.detection_method,
            std::vector<GpuDetectionMethod>{GpuDetectionMethod::kFake});
  EXPECT_EQ(MustLoadAgent("gpu: {detection_method: nvidia-smi}").gpu.detection_method,
            std::vector<GpuDetectionMethod>{GpuDetectionMethod::kNvidiaSmi});
  EXPECT_EQ(
      MustLoadAgent("gpu:\n  detection_method:\n    - nvml\n    - nvidia-smi\n    - fake\n")
          .gpu.detection_method,
      (std::vector<GpuDetectionMethod>{GpuDetectionMethod::kNvml, GpuDetectionMethod::kNvidiaSmi,
                                       GpuDetectionMethod::kFake}));
  EXPECT_EQ(
      MustLoadAgent("gpu: {detection_method: \"nvml, fake\"}").gpu.detection_method,
      (std::vector<GpuDetectionMethod>{GpuDetectionMethod::kNvml, GpuDetectionMethod::kFake}));

  ExpectAgentError("gpu: {detection_method: cuda}",
                   "gpu.detection_method: must be one of nvml, nvidia-smi, fake; got \"cuda\"");
  ExpectAgentError("gpu: {detection_method: [nvml, cuda]}",
                   "gpu.detection_method[1]: must be one of nvml, nvidia-smi, fake; got \"cuda\"");
  ExpectAgentError("gpu: {detection_method: [fake, nvml, fake]}",
                   "gpu.detection_method: \"fake\" is listed twice");
  ExpectAgentError("gpu: {detection_method: []}",
                   "gpu.detection_method: must name at least one method");
  ExpectAgentError("gpu: {detection_method: [[nvml]]}",
                   "gpu.detection_method[0]: must be one of nvml, nvidia-smi, fake; got a list");
}

// ---------------------------------------------------------------------------------------------
// Teams, borrowing, preemption.

TEST(SchedulerConfigTest, TeamsBorrowingAndPreemptionDefaultToV1) {
  const SchedulerConfig c = MustLoadScheduler("quota: {online_percent: 0.7}\npreemption:\n");
  EXPECT_FALSE(c.quota.borrowing);
  EXPECT_EQ(c.quota.fairshare_half_life, milliseconds{604'800'000});
  EXPECT_EQ(c.quota.teams, (std::map<std::string, TeamConfig>{}));
  EXPECT_EQ(c.preemption.grace_period, milliseconds{30'000});
  EXPECT_EQ(c.preemption.min_runtime, milliseconds{0});
  // Explicit nulls keep the defaults too.
  EXPECT_EQ(MustLoadScheduler("quota: {borrowing: ~, fairshare_half_life: ~, teams: ~}\n"
                              "preemption: {grace_period: ~, min_runtime: ~}"),
            SchedulerConfig{});
}

TEST(SchedulerConfigTest, ParsesTheContractsTeamsExample) {
  const SchedulerConfig c = MustLoadScheduler(R"(
quota:
  online_percent: 0.7
  borrowing: true
  fairshare_half_life: 12h
  teams:
    vision: { online: 16, batch: 8, max_gpus: 64, weight: 1 }
    nlp:    { batch: 32 }
    speech-2_b: { weight: 0.25, max_gpus: 0 }
preemption: { grace_period: 45, min_runtime: 1.5 }
)");
  EXPECT_TRUE(c.quota.borrowing);
  EXPECT_EQ(c.quota.fairshare_half_life, milliseconds{12LL * 3'600'000});
  const std::map<std::string, TeamConfig> expected = {
      {"vision", TeamConfig{16, 8, 64, 1.0}},
      {"nlp", TeamConfig{0, 32, -1, 1.0}},
      {"speech-2_b", TeamConfig{0, 0, 0, 0.25}},
  };
  EXPECT_EQ(c.quota.teams, expected);
  EXPECT_EQ(c.preemption.grace_period, milliseconds{45'000});
  EXPECT_EQ(c.preemption.min_runtime, milliseconds{1'500});
  // The rest is untouched.
  EXPECT_DOUBLE_EQ(c.quota.online_percent, 0.7);
  EXPECT_DOUBLE_EQ(c.quota.batch_percent, 0.3);
}

TEST(SchedulerConfigTest, TeamEntriesTakeDefaultsForMissingKeysAndNullMaxGpusMeansNoCap) {
  const SchedulerConfig c = MustLoadScheduler(
      "quota:\n  teams:\n    a: ~\n    b: {}\n    c: {max_gpus: ~, online: 2}\n"
      "    0lead-digit: {max_gpus: 3, online: 1, batch: 2}\n");
  const std::map<std::string, TeamConfig> expected = {
      {"a", TeamConfig{}},
      {"b", TeamConfig{}},
      {"c", TeamConfig{2, 0, -1, 1.0}},
      {"0lead-digit", TeamConfig{1, 2, 3, 1.0}},
  };
  EXPECT_EQ(c.quota.teams, expected);
  EXPECT_EQ(TeamConfig{}, (TeamConfig{0, 0, -1, 1.0}));
  // The longest name: 63 characters.
  const std::string longest = "a" + std::string(62, 'z');
  EXPECT_EQ(MustLoadScheduler("quota: {teams: {" + longest + ": {}}}").quota.teams.count(longest),
            1u);
}

TEST(SchedulerConfigTest, KillInvalidDependenciesIsOnByDefault) {
  EXPECT_TRUE(MustLoadScheduler("").scheduler.kill_invalid_dependencies);
  EXPECT_FALSE(MustLoadScheduler("scheduler: {kill_invalid_dependencies: false}")
                   .scheduler.kill_invalid_dependencies);
  ExpectSchedulerError("scheduler: {kill_invalid_dependencies: sometimes}",
                       "scheduler.kill_invalid_dependencies: must be true or false, got "
                       "\"sometimes\"");
}

TEST(SchedulerConfigTest, BackfillIsOffByDefaultAndItsDepthIsBounded) {
  const SchedulerConfig plain = MustLoadScheduler("");
  EXPECT_EQ(std::make_pair(plain.scheduler.backfill, plain.scheduler.backfill_depth),
            std::make_pair(false, 100));
  const SchedulerConfig on = MustLoadScheduler("scheduler: {backfill: true, backfill_depth: 20}");
  EXPECT_EQ(std::make_pair(on.scheduler.backfill, on.scheduler.backfill_depth),
            std::make_pair(true, 20));
  ExpectSchedulerError("scheduler: {backfill_depth: 0}",
                       "scheduler.backfill_depth: must be an integer in [1, 100000], got \"0\"");
}

TEST(SchedulerConfigTest, DefaultTimeLimitsTakeDurationsOfWholeSeconds) {
  EXPECT_EQ(MustLoadScheduler("").scheduler.default_time_limit_seconds, 0);
  EXPECT_EQ(
      MustLoadScheduler("scheduler: {default_time_limit: 2h}").scheduler.default_time_limit_seconds,
      7200);
  EXPECT_EQ(
      MustLoadScheduler("scheduler: {default_time_limit: 90}").scheduler.default_time_limit_seconds,
      90);
  const SchedulerConfig c = MustLoadScheduler(
      "quota: {teams: {vision: {batch: 2, default_time_limit: 7d}, nlp: {default_time_limit: 0}}}");
  EXPECT_EQ(c.quota.teams.at("vision").default_time_limit_seconds, 7 * 86400);
  EXPECT_EQ(c.quota.teams.at("nlp").default_time_limit_seconds, 0);
  for (const auto& [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"scheduler: {default_time_limit: 1500ms}",
            "scheduler.default_time_limit: must be whole seconds up to 10 years (such as 90m, 2h, "
            "7d), got \"1500ms\""},
           {"scheduler: {default_time_limit: 3660d}",
            "scheduler.default_time_limit: must be whole seconds up to 10 years (such as 90m, 2h, "
            "7d), got \"3660d\""},
           {"scheduler: {default_time_limit: -1}",
            "scheduler.default_time_limit: must be a non-negative duration, got \"-1\""},
           {"quota: {teams: {vision: {default_time_limit: soon}}}",
            "quota.teams.vision.default_time_limit: must be a non-negative duration, got "
            "\"soon\""},
       }) {
    ExpectSchedulerError(yaml, error);
  }
}

TEST(SchedulerConfigTest, PreemptionDurationsAcceptUnitsAndZero) {
  PreemptionConfig p =
      MustLoadScheduler("preemption: {grace_period: 0, min_runtime: \"1h30m\"}").preemption;
  EXPECT_EQ(p.grace_period, milliseconds{0});
  EXPECT_EQ(p.min_runtime, milliseconds{5'400'000});
  p = MustLoadScheduler("preemption: {grace_period: 2m, min_runtime: 250ms}").preemption;
  EXPECT_EQ(p.grace_period, milliseconds{120'000});
  EXPECT_EQ(p.min_runtime, milliseconds{250});
  // The longest grace a task may ask for (preemption_grace_seconds) is the longest here too.
  EXPECT_EQ(MustLoadScheduler("preemption: {grace_period: 1d}").preemption.grace_period,
            milliseconds{86'400'000});
}

TEST(SchedulerConfigTest, TeamsBorrowingAndPreemptionErrorsNameTheKey) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::string kNameRule =
      " is not valid: 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
      "digit";
  const Case cases[] = {
      {"quota: {borrowing: sometimes}",
       "quota.borrowing: must be true or false, got \"sometimes\""},
      {"quota: {borrowing: [true]}", "quota.borrowing: must be true or false, got a list"},
      {"quota: {fairshare_half_life: 0}",
       "quota.fairshare_half_life: must be a positive duration, got \"0\""},
      {"quota: {fairshare_half_life: -7d}",
       "quota.fairshare_half_life: must be a positive duration, got \"-7d\""},
      {"quota: {fairshare_half_life: week}",
       "quota.fairshare_half_life: must be a positive duration, got \"week\""},
      {"quota: {borowing: true}", "unknown key \"quota.borowing\" (did you mean \"borrowing\"?)"},
      {"quota: {team: {}}", "unknown key \"quota.team\" (did you mean \"teams\"?)"},
      // quota.teams itself.
      {"quota: {teams: [vision, nlp]}", "quota.teams: must be a mapping of team names, got a list"},
      {"quota: {teams: vision}", "quota.teams: must be a mapping of team names, got \"vision\""},
      {"quota:\n  teams:\n    ? [a, b]\n    : {online: 1}\n",
       "quota.teams: team names must be strings"},
      // Team names.
      {"quota: {teams: {Vision: {}}}", "quota.teams: team name \"Vision\"" + kNameRule},
      {"quota: {teams: {-vision: {}}}", "quota.teams: team name \"-vision\"" + kNameRule},
      {"quota: {teams: {_vision: {}}}", "quota.teams: team name \"_vision\"" + kNameRule},
      {"quota: {teams: {vis.ion: {}}}", "quota.teams: team name \"vis.ion\"" + kNameRule},
      {"quota: {teams: {\"\": {}}}", "quota.teams: team name \"\"" + kNameRule},
      {"quota: {teams: {" + std::string(64, 'a') + ": {}}}",
       "quota.teams: team name \"" + std::string(64, 'a') + "\"" + kNameRule},
      // One line, whatever the name holds.
      {"quota: {teams: {\"a\\nb\": {}}}", "quota.teams: team name \"a\\nb\"" + kNameRule},
      {"quota:\n  teams:\n    vision: {online: 1}\n    nlp: {}\n    vision: {batch: 2}\n",
       "quota.teams.vision: is listed twice"},
      // A team's entry.
      {"quota: {teams: {vision: 16}}", "quota.teams.vision: must be a mapping, got \"16\""},
      {"quota: {teams: {vision: [16, 8]}}", "quota.teams.vision: must be a mapping, got a list"},
      {"quota: {teams: {vision: {gpus: 4}}}", "unknown key \"quota.teams.vision.gpus\""},
      {"quota: {teams: {vision: {wieght: 2}}}",
       "unknown key \"quota.teams.vision.wieght\" (did you mean \"weight\"?)"},
      {"quota: {teams: {vision: {max_gpu: 2}}}",
       "unknown key \"quota.teams.vision.max_gpu\" (did you mean \"max_gpus\"?)"},
      {"quota:\n  teams:\n    vision:\n      online: 1\n      online: 2\n",
       "duplicate key \"quota.teams.vision.online\""},
      // Numbers.
      {"quota: {teams: {vision: {online: -1}}}",
       "quota.teams.vision.online: must be an integer in [0, 16777216], got \"-1\""},
      {"quota: {teams: {vision: {batch: -8}}}",
       "quota.teams.vision.batch: must be an integer in [0, 16777216], got \"-8\""},
      {"quota: {teams: {vision: {batch: 1.5}}}",
       "quota.teams.vision.batch: must be an integer in [0, 16777216], got \"1.5\""},
      {"quota: {teams: {vision: {online: 16777217}}}",
       "quota.teams.vision.online: must be an integer in [0, 16777216], got \"16777217\""},
      {"quota: {teams: {vision: {online: many}}}",
       "quota.teams.vision.online: must be an integer in [0, 16777216], got \"many\""},
      // No cap is written by leaving max_gpus out (or null), not -1.
      {"quota: {teams: {vision: {max_gpus: -1}}}",
       "quota.teams.vision.max_gpus: must be an integer in [0, 16777216], got \"-1\""},
      {"quota: {teams: {vision: {weight: 0}}}",
       "quota.teams.vision.weight: must be a number above 0, got \"0\""},
      {"quota: {teams: {vision: {weight: -1}}}",
       "quota.teams.vision.weight: must be a number above 0, got \"-1\""},
      {"quota: {teams: {vision: {weight: .nan}}}",
       "quota.teams.vision.weight: must be a number above 0, got \".nan\""},
      {"quota: {teams: {vision: {weight: inf}}}",
       "quota.teams.vision.weight: must be a number above 0, got \"inf\""},
      {"quota: {teams: {vision: {weight: 1e400}}}",
       "quota.teams.vision.weight: must be a number above 0, got \"1e400\""},
      {"quota: {teams: {vision: {weight: heavy}}}",
       "quota.teams.vision.weight: must be a number above 0, got \"heavy\""},
      {"quota: {teams: {vision: {weight: {a: 1}}}}",
       "quota.teams.vision.weight: must be a number above 0, got a mapping"},
      {"quota: {teams: {vision: {online: 16, batch: 8, max_gpus: 23}}}",
       "quota.teams.vision.max_gpus: must be at least online + batch (24), got 23"},
      {"quota: {teams: {nlp: {batch: 1, max_gpus: 0}}}",
       "quota.teams.nlp.max_gpus: must be at least online + batch (1), got 0"},
      // preemption.
      {"preemption: 30", "preemption: must be a mapping, got \"30\""},
      {"preemption: {grace: 30}", "unknown key \"preemption.grace\""},
      {"preemption: {grace_periods: 30}",
       "unknown key \"preemption.grace_periods\" (did you mean \"grace_period\"?)"},
      {"preemption: {grace_period: -1}",
       "preemption.grace_period: must be a non-negative duration, got \"-1\""},
      {"preemption: {grace_period: soon}",
       "preemption.grace_period: must be a non-negative duration, got \"soon\""},
      {"preemption: {grace_period: 1.5}",
       "preemption.grace_period: must be whole seconds, got 1500ms"},
      {"preemption: {grace_period: 500ms}",
       "preemption.grace_period: must be whole seconds, got 500ms"},
      {"preemption: {grace_period: 86401}",
       "preemption.grace_period: must be at most 1d, got 86401s"},
      {"preemption: {grace_period: 30000d}",
       "preemption.grace_period: must be at most 1d, got 30000d"},
      {"preemption: {min_runtime: -5}",
       "preemption.min_runtime: must be a non-negative duration, got \"-5\""},
      {"preemption: {min_runtime: [1]}",
       "preemption.min_runtime: must be a non-negative duration, got a list"},
  };
  for (const Case& c : cases) ExpectSchedulerError(c.yaml, c.message);
}

// The sum of team guarantees in a class may not exceed the class quota, but the class quota is
// a share of the GPUs online, which the configuration cannot know: the core checks the sum when
// the API sets a team (while GPUs are online), and scales configured guarantees down while they
// add up to more than the quota. So the configuration takes any sum.
TEST(SchedulerConfigTest, TeamGuaranteesAreNotCheckedAgainstTheClassQuotaHere) {
  const SchedulerConfig c = MustLoadScheduler(
      "quota:\n  online_percent: 0\n  teams:\n    a: {online: 16777216}\n    b: {online: "
      "16777216, batch: 16777216}\n");
  EXPECT_EQ(c.quota.teams.at("a").online, 16'777'216);
  EXPECT_EQ(c.quota.teams.at("b").online, 16'777'216);
  EXPECT_EQ(c.quota.teams.at("b").batch, 16'777'216);
  EXPECT_DOUBLE_EQ(c.quota.online_percent, 0.0);
}

TEST(SchedulerConfigTest, AuthLimitsAndServerTimeouts) {
  const SchedulerConfig d;
  EXPECT_EQ(d.auth.mode, AuthMode::kNone);
  EXPECT_FALSE(d.auth.allow_insecure_remote);
  EXPECT_TRUE(d.auth.metrics_public);
  EXPECT_EQ(d.limits.max_pending_per_user, 100000);
  EXPECT_EQ(d.server.read_timeout, milliseconds{10'000});
  EXPECT_EQ(d.server.max_connections, 10000);
  const SchedulerConfig c = MustLoadScheduler(
      "server: {read_timeout: 2s, max_connections: 50}\n"
      "auth:\n  mode: jwt\n  jwt: {issuer: https://idp, audience: dgpu, rs256_public_key_file: "
      "/k.pem, default_role: viewer, clock_skew: 0}\n"
      "limits: {max_pending_per_user: 7}\nlogging: {audit_file: /var/log/dgpu/audit.log}\n");
  EXPECT_EQ(c.server.read_timeout, milliseconds{2'000});
  EXPECT_EQ(c.server.max_connections, 50);
  EXPECT_EQ(c.auth.mode, AuthMode::kJwt);
  EXPECT_EQ(c.auth.jwt.issuer, "https://idp");
  EXPECT_EQ(c.auth.jwt.rs256_public_key_file, "/k.pem");
  EXPECT_EQ(c.auth.jwt.default_role, "viewer");
  EXPECT_EQ(c.auth.jwt.clock_skew, milliseconds{0});
  EXPECT_EQ(c.limits.max_pending_per_user, 7);
  EXPECT_EQ(c.audit_file, "/var/log/dgpu/audit.log");
  EXPECT_EQ(MustLoadScheduler("auth: {mode: token, tokens_file: /t.yaml}").auth.tokens_file,
            "/t.yaml");

  struct Case {
    std::string yaml, message;
  };
  const std::vector<Case> cases = {
      {"auth: {mode: ldap}", "auth.mode: must be one of none, token, jwt; got \"ldap\""},
      {"auth: {mode: token}", "auth.tokens_file: is required when auth.mode is \"token\""},
      {"auth: {mode: jwt, jwt: {audience: a, hs256_secret_file: /s}}",
       "auth.jwt.issuer: is required when auth.mode is \"jwt\""},
      {"auth: {mode: jwt, jwt: {issuer: i, hs256_secret_file: /s}}",
       "auth.jwt.audience: is required when auth.mode is \"jwt\""},
      {"auth: {mode: jwt, jwt: {issuer: i, audience: a}}",
       "auth.jwt: needs exactly one of hs256_secret_file and rs256_public_key_file"},
      {"auth: {mode: jwt, jwt: {issuer: i, audience: a, hs256_secret_file: /s, "
       "rs256_public_key_file: /k}}",
       "auth.jwt: needs exactly one of hs256_secret_file and rs256_public_key_file"},
      {"auth: {jwt: {default_role: root}}",
       "auth.jwt.default_role: must be one of viewer, user, operator, admin; got \"root\""},
      {"auth: {allow_insecure_remote: maybe}", "auth.allow_insecure_remote: must be true or false"},
      {"auth: {token_file: x}", "unknown key \"auth.token_file\" (did you mean \"tokens_file\"?)"},
      {"limits: {max_pending_per_user: 0}", "limits.max_pending_per_user: must be an integer in"},
      {"server: {read_timeout: 0}", "server.read_timeout: must be a positive duration"},
      {"server: {max_connections: 0}", "server.max_connections: must be an integer in [1, "},
  };
  for (const Case& c : cases) {
    auto loaded = LoadSchedulerConfigFromString(c.yaml);
    ASSERT_FALSE(loaded.ok()) << c.yaml;
    EXPECT_EQ(loaded.status().message().rfind(c.message, 0), 0u)
        << c.yaml << " -> " << loaded.status().message();
  }
  auto agent = LoadAgentConfigFromString("logging: {audit_file: /x}");
  ASSERT_FALSE(agent.ok());
  EXPECT_EQ(agent.status().message().rfind("unknown key \"logging.audit_file\"", 0), 0u);
}

TEST(SchedulerConfigTest, Tls) {
  EXPECT_FALSE(SchedulerConfig{}.server.tls.enabled());
  const SchedulerConfig c = MustLoadScheduler(
      "server: {tls: {cert_file: /c/s.crt, key_file: /c/s.key, client_ca_file: /c/ca.crt}}\n"
      "replication: {enabled: true, peer_address: 'b:9090',\n"
      "  tls: {ca_file: /c/ca.crt, cert_file: /c/s.crt, key_file: /c/s.key}}\n"
      "ha: {election: etcd, etcd_endpoints: ['https://e:2379'],\n"
      "  etcd_tls: {ca_file: /c/ca.crt, cert_file: /c/e.crt, key_file: /c/e.key}}\n");
  EXPECT_TRUE(c.server.tls.enabled());
  EXPECT_EQ(c.server.tls.client_ca_file, "/c/ca.crt");
  EXPECT_EQ(c.replication.tls.cert_file, "/c/s.crt");
  EXPECT_EQ(c.ha.etcd_tls.key_file, "/c/e.key");
  // HTTPS alone: no client certificates, no replication.
  EXPECT_TRUE(MustLoadScheduler("server: {tls: {cert_file: /s.crt, key_file: /s.key}}")
                  .server.tls.client_ca_file.empty());

  struct Case {
    std::string yaml, message;
  };
  const std::vector<Case> cases = {
      {"server: {tls: {cert_file: /s.crt}}",
       "server.tls.key_file: is required with server.tls.cert_file"},
      {"server: {tls: {key_file: /s.key}}",
       "server.tls.cert_file: is required with server.tls.key_file"},
      {"server: {tls: {client_ca_file: /ca.crt}}",
       "server.tls.client_ca_file: needs server.tls.cert_file and key_file"},
      {"server: {tls: {cert_fle: /s.crt}}",
       "unknown key \"server.tls.cert_fle\" (did you mean \"cert_file\"?)"},
      {"server: {tls: {cert_file: /s.crt, key_file: /s.key}}\n"
       "replication: {enabled: true, peer_address: 'b:9090'}",
       "replication.tls.ca_file: is required when server.tls is set"},
      {"server: {tls: {cert_file: /s.crt, key_file: /s.key, client_ca_file: /ca.crt}}\n"
       "replication: {enabled: true, peer_address: 'b:9090', tls: {ca_file: /ca.crt}}",
       "replication.tls.cert_file: is required when server.tls.client_ca_file is set"},
      {"replication: {tls: {cert_file: /s.crt, key_file: /s.key}}",
       "replication.tls.ca_file: is required with a client certificate"},
      {"ha: {etcd_tls: {ca_file: /ca.crt, cert_file: /e.crt}}",
       "ha.etcd_tls.key_file: is required with ha.etcd_tls.cert_file"},
      {"ha: {etcd_endpoints: ['http://e:2379'], etcd_tls: {ca_file: /ca.crt}}",
       "ha.etcd_endpoints[0]: must be https:// when ha.etcd_tls is set"},
  };
  for (const Case& k : cases) {
    auto loaded = LoadSchedulerConfigFromString(k.yaml);
    ASSERT_FALSE(loaded.ok()) << k.yaml;
    EXPECT_EQ(loaded.status().message().rfind(k.message, 0), 0u)
        << k.yaml << " -> " << loaded.status().message();
  }
}

TEST(AgentConfigTest, Tls) {
  EXPECT_FALSE(AgentConfig{}.scheduler.tls.enabled());
  const AgentConfig c = MustLoadAgent(
      "scheduler: {tls: {ca_file: /c/ca.crt, cert_file: /c/n1.crt, key_file: /c/n1.key}}");
  EXPECT_TRUE(c.scheduler.tls.enabled());
  EXPECT_EQ(c.scheduler.tls.cert_file, "/c/n1.crt");
  auto bad = LoadAgentConfigFromString("scheduler: {tls: {cert_file: /c/n1.crt}}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "scheduler.tls.key_file: is required with scheduler.tls.cert_file (a client "
            "certificate needs its key)");
}

TEST(SchedulerConfigTest, TopologyKeyIsANodeLabelKey) {
  EXPECT_EQ(SchedulerConfig{}.scheduler.topology_key, "");
  EXPECT_EQ(MustLoadScheduler("scheduler: {topology_key: rack}").scheduler.topology_key, "rack");
  EXPECT_EQ(
      MustLoadScheduler("scheduler: {topology_key: example.com/block}").scheduler.topology_key,
      "example.com/block");
  ExpectSchedulerError("scheduler: {topology_key: 'my rack'}",
                       "scheduler.topology_key: must be a node label key (such as rack): \"my "
                       "rack\" is not valid: a label key is 1 to 63 letters, digits, '-', '_' or "
                       "'.', beginning and ending with a letter or digit (optionally after a DNS "
                       "prefix and '/')");
}

TEST(SchedulerConfigTest, AutoscaleNodeGroups) {
  const AutoscaleConfig off = SchedulerConfig{}.autoscale;
  EXPECT_FALSE(off.enabled);
  EXPECT_EQ(std::make_tuple(off.scale_up_delay, off.idle_timeout, off.boot_timeout,
                            off.program_timeout, off.retry_delay),
            std::make_tuple(milliseconds{30'000}, milliseconds{600'000}, milliseconds{600'000},
                            milliseconds{120'000}, milliseconds{30'000}));
  const AutoscaleConfig a = MustLoadScheduler(R"(
autoscale:
  enabled: true
  scale_up_delay: 0
  idle_timeout: 10m
  node_groups:
    - {name: a100, model: "A100", gpus_per_node: 8, min_nodes: 1, max_nodes: 20,
       scale_up_program: /usr/local/bin/dgpu-up, scale_down_program: /usr/local/bin/dgpu-down}
    - {name: v100-spot, model: V100, max_nodes: 4, scale_up_program: /bin/up,
       scale_down_program: /bin/down}
)")
                                .autoscale;
  EXPECT_TRUE(a.enabled);
  EXPECT_EQ(a.scale_up_delay, milliseconds{0});
  EXPECT_EQ(a.idle_timeout, milliseconds{600'000});
  ASSERT_EQ(a.node_groups.size(), 2u);
  const NodeGroupConfig& g = a.node_groups[0];
  EXPECT_EQ(std::make_tuple(g.name, g.model, g.gpus_per_node, g.min_nodes, g.max_nodes,
                            g.scale_up_program, g.scale_down_program),
            std::make_tuple(std::string("a100"), std::string("A100"), 8, 1, 20,
                            std::string("/usr/local/bin/dgpu-up"),
                            std::string("/usr/local/bin/dgpu-down")));
  EXPECT_EQ(std::make_tuple(a.node_groups[1].gpus_per_node, a.node_groups[1].min_nodes),
            std::make_tuple(8, 0));

  const std::string kGroup =
      "{name: g, model: m, max_nodes: 2, scale_up_program: /u, "
      "scale_down_program: /d";
  const std::pair<std::string, std::string> bad[] = {
      {"autoscale: {enabled: true}",
       "autoscale.node_groups: must list at least one group when enabled is true"},
      {"autoscale: {idle_timeout: 0}",
       "autoscale.idle_timeout: must be a positive duration, got \"0\""},
      {"autoscale: {scale_up_delay: -1}",
       "autoscale.scale_up_delay: must be a non-negative duration, got \"-1\""},
      {"autoscale: {node_groups: {g: 1}}",
       "autoscale.node_groups: must be a list of groups, got a mapping"},
      {"autoscale: {node_groups: [" + kGroup + ", min_nodes: 3}]}",
       "autoscale.node_groups[0].min_nodes: must be an integer in [0, 2], got \"3\""},
      {"autoscale: {node_groups: [" + kGroup + ", gpus_per_node: 0}]}",
       "autoscale.node_groups[0].gpus_per_node: must be an integer in [1, 1024], got \"0\""},
      {"autoscale: {node_groups: [{name: g, model: m, max_nodes: 2, scale_up_program: up, "
       "scale_down_program: /d}]}",
       "autoscale.node_groups[0].scale_up_program: must be an absolute path, got \"up\""},
      {"autoscale: {node_groups: [{name: g, model: m, max_nodes: 2, scale_up_program: /u}]}",
       "autoscale.node_groups[0].scale_down_program: must not be empty"},
      {"autoscale: {node_groups: [" + kGroup + "}, " + kGroup + "}]}",
       "autoscale.node_groups[1].name: \"g\" is listed twice"},
      {"autoscale: {node_groups: [{name: G, model: m, max_nodes: 2}]}",
       "autoscale.node_groups[0].name: must be 1 to 63 characters of a-z, 0-9, '_' and '-', "
       "starting with a letter or digit, got \"G\""},
      {"autoscale: {node_groups: [" + kGroup + ", max: 2}]}",
       "unknown key \"autoscale.node_groups[0].max\""},
  };
  for (const auto& [yaml, message] : bad) {
    auto r = LoadSchedulerConfigFromString(yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_EQ(r.status().message(), message) << yaml;
  }
}

TEST(AgentConfigTest, NodeGroup) {
  EXPECT_EQ(AgentConfig{}.agent.node_group, "");
  EXPECT_EQ(MustLoadAgent("agent: {node_group: a100}").agent.node_group, "a100");
  auto bad = LoadAgentConfigFromString("agent: {node_group: A100}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "agent.node_group: must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting "
            "with a letter or digit, got \"A100\"");
}

TEST(AgentConfigTest, LabelsAreAMappingOfValidKeysAndValues) {
  EXPECT_TRUE(AgentConfig{}.agent.labels.empty());
  EXPECT_EQ(
      MustLoadAgent("agent: {labels: {rack: r1, example.com/ib: 'yes', gpu: ''}}").agent.labels,
      (std::map<std::string, std::string>{{"example.com/ib", "yes"}, {"gpu", ""}, {"rack", "r1"}}));
  ExpectAgentError("agent: {labels: [rack]}",
                   "agent.labels: must be a mapping of label keys to values (rack: r1), got a "
                   "list");
  ExpectAgentError("agent: {labels: {'-rack': r1}}",
                   "agent.labels: key \"-rack\" is not valid: a label key is 1 to 63 letters, "
                   "digits, '-', '_' or '.', beginning and ending with a letter or digit "
                   "(optionally after a DNS prefix and '/')");
  ExpectAgentError("agent: {labels: {rack: 'r 1'}}",
                   "agent.labels.rack: \"r 1\" is not valid: a label value is at most 63 "
                   "letters, digits, '-', '_' or '.', beginning and ending with a letter or digit");
  ExpectAgentError("agent: {labels: {rack: [r1]}}",
                   "agent.labels.rack: must be a string, got a list");
}

TEST(AgentConfigTest, ResourcesAreAutoOrNumbersWithReserves) {
  const NodeResourcesConfig defaults;
  EXPECT_EQ(std::make_tuple(defaults.cpus_milli, defaults.memory_mb, defaults.reserved_cpus_milli,
                            defaults.reserved_memory_mb),
            std::make_tuple(NodeResourcesConfig::kAuto, NodeResourcesConfig::kAuto, int64_t{0},
                            int64_t{0}));
  const NodeResourcesConfig r = MustLoadAgent(
                                    "resources: {cpus: 15.5, memory_mb: 64000, reserved_cpus: 0.5, "
                                    "reserved_memory_mb: 2048}")
                                    .resources;
  EXPECT_EQ(std::make_tuple(r.cpus_milli, r.memory_mb, r.reserved_cpus_milli, r.reserved_memory_mb),
            std::make_tuple(int64_t{15500}, int64_t{64000}, int64_t{500}, int64_t{2048}));
  const NodeResourcesConfig a = MustLoadAgent("resources: {cpus: auto, memory_mb: auto}").resources;
  EXPECT_EQ(std::make_pair(a.cpus_milli, a.memory_mb),
            std::make_pair(NodeResourcesConfig::kAuto, NodeResourcesConfig::kAuto));
  ExpectAgentError("resources: {cpus: 0}",
                   "resources.cpus: must be auto or a number of CPUs (at most 3 decimals), got "
                   "\"0\"");
  ExpectAgentError("resources: {cpus: 1.0001}",
                   "resources.cpus: must be auto or a number of CPUs (at most 3 decimals), got "
                   "\"1.0001\"");
  ExpectAgentError("resources: {reserved_cpus: auto}",
                   "resources.reserved_cpus: must be a number of CPUs (at most 3 decimals), got "
                   "\"auto\"");
  ExpectAgentError("resources: {memory_mb: 0}",
                   "resources.memory_mb: must be an integer in [1, 68719476736], got \"0\"");
  ExpectAgentError("resources: {gpus: 2}",
                   "unknown key \"resources.gpus\" (did you mean \"cpus\"?)");
}

TEST(AgentConfigTest, StopTasksAfterDisconnect) {
  EXPECT_EQ(AgentConfig{}.agent.stop_tasks_after_disconnect, milliseconds{0});
  EXPECT_EQ(
      MustLoadAgent("agent: {stop_tasks_after_disconnect: 5s}").agent.stop_tasks_after_disconnect,
      milliseconds{5'000});
  auto bad = LoadAgentConfigFromString("agent: {stop_tasks_after_disconnect: -1}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "agent.stop_tasks_after_disconnect: must be a non-negative duration, got \"-1\"");
}

TEST(AgentConfigTest, RunAsSubmitter) {
  EXPECT_EQ(AgentConfig{}.executor.run_as, RunAs::kAgent);
  EXPECT_FALSE(AgentConfig{}.executor.allow_root);
  const AgentConfig c = MustLoadAgent("executor: {run_as: submitter, allow_root: true}");
  EXPECT_EQ(c.executor.run_as, RunAs::kSubmitter);
  EXPECT_TRUE(c.executor.allow_root);
  auto bad = LoadAgentConfigFromString("executor: {run_as: nobody}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "executor.run_as: must be one of agent, submitter; got \"nobody\"");
}

// ---------------------------------------------------------------------------------------------
// YAML syntax and files.

TEST(SchedulerConfigTest, YamlSyntaxErrorsGiveTheLine) {
  const StatusOr<SchedulerConfig> result =
      LoadSchedulerConfigFromString("scheduler:\n  role: master\n  max_bypass: [1, 2\n");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(),
            "invalid YAML at line 4, column 1: end of sequence flow not found");

  const StatusOr<AgentConfig> agent =
      LoadAgentConfigFromString("agent:\n  id: a\n   heartbeat_interval: 5\n");
  ASSERT_FALSE(agent.ok());
  EXPECT_EQ(agent.status().message(), "invalid YAML at line 3, column 22: illegal map value");
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("dgpu_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << contents;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigFileTest, LoadsFromAFile) {
  const std::string path = Write("s.yaml", "scheduler:\n  max_attempts: 7\n");
  StatusOr<SchedulerConfig> config = LoadSchedulerConfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->scheduler.max_attempts, 7);
}

TEST_F(ConfigFileTest, FileErrorsArePrefixedWithThePath) {
  const std::string path = Write("bad.yaml", "scheduler:\n  schedul_interval: 5\n");
  ExpectError(LoadSchedulerConfig(path), StatusCode::kInvalidArgument,
              path +
                  ": unknown key \"scheduler.schedul_interval\" (did you mean "
                  "\"schedule_interval\"?)");
  const std::string agent_path = Write("bad_agent.yaml", "gpu: {fake: {count: x}}\n");
  ExpectError(LoadAgentConfig(agent_path), StatusCode::kInvalidArgument,
              agent_path + ": gpu.fake.count: must be an integer in [0, 1024], got \"x\"");
}

TEST_F(ConfigFileTest, MissingFileIsNotFound) {
  const std::string path = (dir_ / "absent.yaml").string();
  ExpectError(LoadSchedulerConfig(path), StatusCode::kNotFound,
              path + ": cannot open: No such file or directory");
  ExpectError(LoadAgentConfig(path), StatusCode::kNotFound,
              path + ": cannot open: No such file or directory");
}

TEST_F(ConfigFileTest, DirectoryIsNotAConfigFile) {
  ExpectError(LoadSchedulerConfig(dir_.string()), StatusCode::kInvalidArgument,
              dir_.string() + ": cannot read: Is a directory");
}

// Relative paths are read from the working directory, once, when the file is loaded; programs
// without a '/' stay names to look up; absolute paths and stdout are kept as written.
TEST_F(ConfigFileTest, RelativePathsAreResolvedAgainstTheWorkingDirectory) {
  const std::string cwd = std::filesystem::current_path().string();
  const std::string agent_path = Write(
      "agent.yaml",
      "gpu: {nvidia_smi_path: ./test-local/nvidia-smi, nvml_library: libnvidia-ml.so.1,\n"
      "      fake: {fault_file: faults.txt}}\n"
      "executor: {work_dir: ./var/../var/agent, run_dir: run, docker: {binary: docker}}\n"
      "scheduler: {tls: {ca_file: tls/ca.pem, cert_file: /etc/dgpu/a.pem, key_file: tls/a.key}}\n"
      "logging: {output: stdout}\n");
  StatusOr<AgentConfig> agent = LoadAgentConfig(agent_path);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  EXPECT_EQ(agent->executor.work_dir, cwd + "/var/agent");
  EXPECT_EQ(agent->executor.run_dir, cwd + "/run");
  EXPECT_EQ(agent->gpu.nvidia_smi_path, cwd + "/test-local/nvidia-smi");
  EXPECT_EQ(agent->gpu.nvml_library, "libnvidia-ml.so.1");
  EXPECT_EQ(agent->gpu.fake.fault_file, cwd + "/faults.txt");
  EXPECT_EQ(agent->executor.docker.binary, "docker");
  EXPECT_EQ(agent->executor.docker.socket, "/var/run/docker.sock");
  EXPECT_EQ(agent->scheduler.tls.ca_file, cwd + "/tls/ca.pem");
  EXPECT_EQ(agent->scheduler.tls.cert_file, "/etc/dgpu/a.pem");
  EXPECT_EQ(agent->scheduler.tls.key_file, cwd + "/tls/a.key");
  EXPECT_EQ(agent->logging.output, "stdout");

  const std::string scheduler_path =
      Write("scheduler.yaml",
            "storage: {snapshot_dir: var/state}\n"
            "auth: {mode: token, tokens_file: tokens.yaml}\n"
            "logging: {output: var/scheduler.log, audit_file: var/audit.log}\n");
  StatusOr<SchedulerConfig> scheduler = LoadSchedulerConfig(scheduler_path);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  EXPECT_EQ(scheduler->storage.snapshot_dir, cwd + "/var/state");
  EXPECT_EQ(scheduler->storage.shared_storage, "");
  EXPECT_EQ(scheduler->auth.tokens_file, cwd + "/tokens.yaml");
  EXPECT_EQ(scheduler->logging.output, cwd + "/var/scheduler.log");
  EXPECT_EQ(scheduler->audit_file, cwd + "/var/audit.log");

  // The string loaders leave paths as written; the resolution names what it changed.
  StatusOr<AgentConfig> raw = LoadAgentConfigFromString("executor: {work_dir: w}\n");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->executor.work_dir, "w");
  EXPECT_EQ(ResolveRelativePaths(&*raw, "/base"), std::vector<std::string>{"executor.work_dir"});
  EXPECT_EQ(raw->executor.work_dir, "/base/w");
}

TEST(ShippedConfigTest, SchedulerYamlLoadsAndEqualsTheDefaults) {
  StatusOr<SchedulerConfig> config =
      LoadSchedulerConfig(std::string(DGPU_SOURCE_DIR) + "/configs/scheduler.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, SchedulerConfig{});
}

TEST(ShippedConfigTest, AgentYamlLoadsAndEqualsTheDefaults) {
  StatusOr<AgentConfig> config =
      LoadAgentConfig(std::string(DGPU_SOURCE_DIR) + "/configs/agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, AgentConfig{});
}

// ---------------------------------------------------------------------------------------------
// Helpers.

TEST(AddressTest, ParseHostPort) {
  EXPECT_EQ(ParseHostPort(":9090"), (HostPort{"", 9090}));
  EXPECT_EQ(ParseHostPort("127.0.0.1:80"), (HostPort{"127.0.0.1", 80}));
  EXPECT_EQ(ParseHostPort("sched-a:0"), (HostPort{"sched-a", 0}));
  EXPECT_EQ(ParseHostPort("[::1]:65535"), (HostPort{"::1", 65535}));
  for (const char* bad : {"", "9090", "host:", "host:65536", "host:-1", "host:80x", "::1:80",
                          "[::1]", "[]:80", "[::1]80"}) {
    EXPECT_EQ(ParseHostPort(bad), std::nullopt) << bad;
  }
}

TEST(AddressTest, BindAndConnectForms) {
  EXPECT_EQ(ToBindAddress(":9090"), "0.0.0.0:9090");
  EXPECT_EQ(ToBindAddress("10.1.2.3:9090"), "10.1.2.3:9090");
  EXPECT_EQ(ToConnectAddress(":9090"), "127.0.0.1:9090");
  EXPECT_EQ(ToConnectAddress("0.0.0.0:8080"), "127.0.0.1:8080");
  EXPECT_EQ(ToConnectAddress("[::]:8080"), "[::1]:8080");
  EXPECT_EQ(ToConnectAddress("sched-a:9090"), "sched-a:9090");
}

TEST(IdTest, EmptyIdMeansTheHostName) {
  EXPECT_EQ(IdOrHostname("node-1"), "node-1");
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(IdOrHostname(""), host);
}

TEST(EnumNamesTest, AreTheYamlSpellings) {
  EXPECT_EQ(ToString(LogLevel::kWarn), "warn");
  EXPECT_EQ(ToString(LogFormat::kText), "text");
  EXPECT_EQ(ToString(SchedulerRole::kMaster), "master");
  EXPECT_EQ(ToString(ReplicationMode::kAsync), "async");
  EXPECT_EQ(ToString(ElectionMethod::kEtcd), "etcd");
  EXPECT_EQ(ToString(GpuDetectionMethod::kNvidiaSmi), "nvidia-smi");
  EXPECT_EQ(ToString(ExecutionMethod::kDocker), "docker");
}

}  // namespace
}  // namespace dgpu::common
