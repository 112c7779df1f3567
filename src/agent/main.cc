// dgpu-agent: discovers the node's GPUs, runs the tasks the scheduler gives it with exactly
// those GPUs visible, and reports back.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "agent/cgroup.h"
#include "agent/cpu_sets.h"
#include "agent/docker_executor.h"
#include "agent/epoch_file.h"
#include "agent/finish_outbox.h"
#include "agent/gpu_discovery.h"
#include "agent/node_resources.h"
#include "agent/proc_table.h"
#include "agent/process_executor.h"
#include "agent/session.h"
#include "agent/task_shim.h"
#include "common/child_process.h"
#include "common/config.h"
#include "common/flags.h"
#include "common/grpc_runtime.h"
#include "common/logging.h"
#include "common/tls_files.h"

namespace dgpu::agent {
namespace {

int Fail(const std::string& message) {
  std::cerr << "dgpu-agent: " << message << std::endl;
  spdlog::error("{}", message);
  common::FlushLogs();
  return 1;
}

// Processes of tasks a previous agent process left behind that this one did not adopt (their
// shim is gone, or an older release ran them without one): nobody can learn how they end, and
// the scheduler treats them as lost when this agent registers without them, so they are stopped
// before any new work starts. They are found by their working directory
// (work_dir/<task_id>/...) and their DGPU_TASK_ID; the processes of adopted tasks are left be.
int StopLeftoverTasks(const std::string& work_dir, const std::set<std::string>& adopted) {
  std::error_code ec;
  std::string root = std::filesystem::weakly_canonical(work_dir, ec).string();
  if (ec || root.empty()) return 0;
  int stopped = 0;
  for (const auto& p : ListProcesses()) {
    if (p.pid == getpid() || p.zombie()) continue;
    auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(p.pid) + "/cwd", ec);
    if (ec) continue;
    std::string c = cwd.string();
    if (c.size() <= root.size() + 1 || c.compare(0, root.size() + 1, root + "/") != 0) continue;
    std::string task_id = c.substr(root.size() + 1);
    task_id = task_id.substr(0, task_id.find('/'));
    if (adopted.count(task_id) != 0) continue;
    if (!EnvironContains(p.pid, "DGPU_TASK_ID=" + task_id)) continue;
    kill(-p.pgid, SIGKILL);
    kill(p.pid, SIGKILL);
    spdlog::warn("stopped pid {} of {} left by a previous agent process", p.pid, task_id);
    stopped++;
  }
  return stopped;
}

std::string MethodName(common::GpuDetectionMethod m) { return std::string(common::ToString(m)); }

// executor.cpu_binding: cpuset: the CPUs tasks are bound to: those the agent may run on, less
// the reserved ones (the lowest ids, where system daemons usually run), at most the CPUs the
// node offers to tasks.
CpuPool MakeCpuPool(const common::NodeResourcesConfig& resources) {
  std::vector<int> cpus = AllowedCpus();
  const auto reserved = static_cast<size_t>((resources.reserved_cpus_milli + 999) / 1000);
  cpus.erase(cpus.begin(),
             cpus.begin() + static_cast<std::ptrdiff_t>(std::min(reserved, cpus.size())));
  const auto offered =
      static_cast<size_t>((ResolveNodeResources(resources).cpus_milli + 999) / 1000);
  if (cpus.size() > offered) cpus.resize(offered);
  return CpuPool(std::move(cpus), ReadCpuNodes());
}

// The CPUs local to each GPU (its PCI device's local_cpulist); none for fake GPUs.
std::map<int, std::vector<int>> GpuLocalCpus(const std::vector<GpuDevice>& gpus, bool fake) {
  std::map<int, std::vector<int>> local;
  if (fake) return local;
  for (const GpuDevice& g : gpus) {
    if (g.pci_bus_id.empty()) continue;
    std::vector<int> cpus = LocalCpusOfPciDevice(g.pci_bus_id);
    if (!cpus.empty()) local[g.index] = std::move(cpus);
  }
  return local;
}

// The parent of the agent's task cgroups: named after the node and its work_dir, so that two
// agents of one machine (tests, a node with two agents) never take each other's.
std::string CgroupName(const std::string& agent_id, const std::string& work_dir) {
  uint32_t hash = 2166136261U;  // FNV-1a.
  for (unsigned char c : work_dir) hash = (hash ^ c) * 16777619U;
  return fmt::format("dgpu-{}-{:08x}", agent_id, hash);
}

// dgpu-task-shim beside this binary; else this binary itself (it runs as a shim with
// --task-shim, at the cost of a larger program in memory beside each task).
std::string ShimProgram() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::string beside = (self.parent_path() / "dgpu-task-shim").string();
    if (access(beside.c_str(), X_OK) == 0) return beside;
    // An agent upgraded in place runs from a file that is gone: /proc/self/exe still works.
    return self.string().find(" (deleted)") == std::string::npos ? self.string() : "/proc/self/exe";
  }
  return "/proc/self/exe";
}

int Run(int argc, char** argv) {
  common::ConfigureGrpcRuntime();
  common::DaemonFlagsSpec spec{
      "dgpu-agent", "dgpu node agent: runs GPU tasks given by the scheduler.", {}};
  common::DaemonFlags flags = common::ParseDaemonFlagsOrExit(argc, argv, spec);
  // Blocked before any thread exists, so that every thread inherits the mask and these signals
  // reach only the sigwait below. SIGCHLD wakes the session the moment a task exits.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  sigaddset(&signals, SIGHUP);  // Reopens the log file (logrotate).
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  common::AgentConfig cfg;
  if (!flags.config_path.empty()) {
    auto loaded = common::LoadAgentConfig(flags.config_path);
    if (!loaded.ok()) return Fail(loaded.status().message());
    cfg = std::move(*loaded);
  }
  if (Status s = common::SetupLogging(cfg.logging, "agent"); !s.ok()) return Fail(s.message());
  if (!flags.config_path.empty()) {
    spdlog::info("{}: relative paths are resolved against the working directory {}",
                 flags.config_path, std::filesystem::current_path().string());
  }

  std::string agent_id = common::IdOrHostname(cfg.agent.id);
  if (Status id = common::CheckAgentId(agent_id); !id.ok()) {
    return Fail("this node's host name is no agent id: " + id.message() + "; set agent.id");
  }

  std::optional<common::TlsMaterial> tls;
  if (cfg.scheduler.tls.enabled()) {
    auto loaded_tls = common::LoadClientTls(cfg.scheduler.tls, "scheduler.tls");
    if (!loaded_tls.ok()) return Fail(loaded_tls.status().message());
    tls = std::move(*loaded_tls);
    const auto& names = tls->names;
    if (!tls->cert.empty() && std::find(names.begin(), names.end(), agent_id) == names.end()) {
      spdlog::warn(
          "scheduler.tls.cert_file names {}, not this agent's id \"{}\": a scheduler that asks "
          "for client certificates will refuse it; set agent.id to the certificate's name",
          fmt::join(names, ", "), agent_id);
    }
  }

  // GPU discovery: the configured methods in order; the first that works is used.
  DiscoveryOptions opts;
  opts.nvml_library_path = cfg.gpu.nvml_library;
  opts.nvidia_smi_path = cfg.gpu.nvidia_smi_path;
  opts.fake.count = cfg.gpu.fake.count;
  opts.fake.model = cfg.gpu.fake.model;
  opts.fake.memory_mb = cfg.gpu.fake.memory_mb;
  opts.fake.uuid_tag = agent_id;
  opts.fake.fault_file = cfg.gpu.fake.fault_file;
  opts.fake.nvlink_groups = cfg.gpu.fake.nvlink_groups;
  if (!cfg.gpu.health_check_program.empty()) {
    auto program = common::FindExecutable(cfg.gpu.health_check_program);
    if (!program.ok()) return Fail("gpu.health_check_program: " + program.status().message());
  }
  std::unique_ptr<GpuDiscovery> discovery;
  std::string errors;
  for (auto method : cfg.gpu.detection_method) {
    auto d = MakeDiscovery(MethodName(method), opts);
    if (!d.ok()) return Fail(d.status().message());
    Status s = (*d)->Init();
    if (s.ok()) {
      discovery = std::move(*d);
      break;
    }
    spdlog::warn("GPU detection method {} unavailable: {}", MethodName(method), s.message());
    errors += (errors.empty() ? "" : "; ") + MethodName(method) + ": " + s.message();
  }
  if (!discovery) return Fail("no GPU detection method works: " + errors);

  std::error_code ec;
  std::filesystem::create_directories(cfg.executor.work_dir, ec);
  if (ec)
    return Fail("executor.work_dir: cannot create " + cfg.executor.work_dir + ": " + ec.message());
  if (!cfg.executor.run_dir.empty()) {
    std::filesystem::create_directories(cfg.executor.run_dir, ec);
    if (ec) {
      return Fail("executor.run_dir: cannot create " + cfg.executor.run_dir + ": " + ec.message());
    }
  }
  spdlog::info(
      "task directories and logs in {}, run records in {}", cfg.executor.work_dir,
      cfg.executor.run_dir.empty() ? cfg.executor.work_dir + "/.run" : cfg.executor.run_dir);

  const bool run_as_submitter = cfg.executor.run_as == common::RunAs::kSubmitter;
  if (run_as_submitter && geteuid() != 0) {
    return Fail(
        "executor.run_as: submitter needs the agent to run as root (it switches to each task's "
        "user); this agent runs as uid " +
        std::to_string(geteuid()));
  }
  std::unique_ptr<Executor> executor;
  std::string isolation = "none";
  const bool docker = cfg.executor.execution_method == common::ExecutionMethod::kDocker;
  if (docker && cfg.executor.isolation == common::Isolation::kCgroup) {
    return Fail(
        "executor.isolation: cgroup applies to the process executor; the docker executor's "
        "containers are isolated by docker (use auto or none)");
  }
  const bool fake_gpus = discovery->name() == "fake";
  std::vector<GpuDevice> gpus;
  if (auto found = discovery->Discover(); found.ok()) gpus = std::move(*found);
  const bool bind_cpus = cfg.executor.isolation != common::Isolation::kNone &&
                         cfg.executor.cpu_binding == common::CpuBinding::kCpuset;
  if (docker) {
    DockerExecutorOptions o;
    o.work_dir = cfg.executor.work_dir;
    o.run_dir = cfg.executor.run_dir;
    o.kill_grace = cfg.executor.kill_grace_period;
    o.max_log_bytes = cfg.executor.max_log_bytes;
    o.shim = ShimProgram();
    o.docker_binary = cfg.executor.docker.binary;
    o.default_image = cfg.executor.docker.default_image;
    o.socket = cfg.executor.docker.socket;
    o.run_as_submitter = run_as_submitter;
    o.allow_root = cfg.executor.allow_root;
    o.limits = cfg.executor.isolation != common::Isolation::kNone;
    o.max_pids_per_task = cfg.executor.max_pids_per_task;
    if (bind_cpus) {
      o.cpu_pool = MakeCpuPool(cfg.resources);
      o.gpu_local_cpus = GpuLocalCpus(gpus, fake_gpus);
    }
    executor = std::make_unique<DockerExecutor>(std::move(o));
  } else {
    ProcessExecutorOptions o;
    o.work_dir = cfg.executor.work_dir;
    o.run_dir = cfg.executor.run_dir;
    o.kill_grace = cfg.executor.kill_grace_period;
    o.max_log_bytes = cfg.executor.max_log_bytes;
    o.shim = ShimProgram();
    o.run_as_submitter = run_as_submitter;
    o.allow_root = cfg.executor.allow_root;
    if (run_as_submitter) {
      auto setpriv = common::FindExecutable("setpriv");
      if (!setpriv.ok()) {
        return Fail("executor.run_as: submitter needs setpriv (util-linux): " +
                    setpriv.status().message());
      }
      o.setpriv = *setpriv;
    }
    if (cfg.executor.isolation != common::Isolation::kNone) {
      auto cgroups = TaskCgroups::Open(CgroupName(agent_id, cfg.executor.work_dir));
      if (!cgroups.ok()) {
        if (cfg.executor.isolation == common::Isolation::kCgroup) {
          return Fail("executor.isolation: cgroup: " + cgroups.status().message());
        }
        spdlog::warn(
            "executor.isolation auto: no task cgroups ({}); isolation none: tasks share the "
            "node's CPUs, memory and GPU device files",
            cgroups.status().message());
      } else {
        isolation = (*cgroups)->isolation();
        o.cgroups = std::shared_ptr<TaskCgroups>(std::move(*cgroups));
        o.cpu_quota = cfg.executor.cpu_binding != common::CpuBinding::kNone;
        o.max_pids_per_task = cfg.executor.max_pids_per_task;
        o.gpu_devices = GpuDeviceNumbers(gpus, fake_gpus, cfg.gpu.fake.device_dir);
        std::string binding(common::ToString(cfg.executor.cpu_binding));
        if (bind_cpus && !o.cgroups->can_bind_cpus()) {
          spdlog::warn(
              "executor.cpu_binding cpuset: the task cgroups have no cpuset controller; a CPU "
              "quota instead");
          binding = "quota";
        } else if (bind_cpus) {
          o.cpu_pool = MakeCpuPool(cfg.resources);
          o.gpu_local_cpus = GpuLocalCpus(gpus, fake_gpus);
          binding = fmt::format("cpuset of CPUs {}, {} GPU(s) with local CPUs",
                                FormatCpuList(o.cpu_pool->cpus()), o.gpu_local_cpus.size());
        }
        spdlog::info(
            "isolation {}: a cgroup per task under {} (CPU binding {}, at most {} processes per "
            "task, {} GPU device file(s) each kept from the tasks not given its GPU)",
            isolation, o.cgroups->hierarchies().front().parent, binding,
            cfg.executor.max_pids_per_task, o.gpu_devices.size());
      }
    }
    executor = std::make_unique<ProcessExecutor>(std::move(o));
  }

  std::vector<std::string> lost;
  const std::vector<HeldTask> adopted = executor->Reattach(&lost);
  std::set<std::string> adopted_ids;
  for (const auto& t : adopted) adopted_ids.insert(t.task_id);
  StopLeftoverTasks(cfg.executor.work_dir, adopted_ids);

  auto outbox = FinishOutbox::Open(cfg.executor.work_dir);
  if (!outbox.ok()) return Fail(outbox.status().message());
  for (const auto& e : outbox->load_errors()) spdlog::warn("finish outbox: {}", e);

  auto epoch = LoadEpoch(cfg.executor.work_dir);
  if (!epoch.ok()) return Fail(epoch.status().message());

  auto instance = LoadOrCreateInstanceId(cfg.executor.work_dir);
  if (!instance.ok()) return Fail(instance.status().message());

  AgentSession session(cfg, agent_id, std::move(discovery), std::move(executor), std::move(*outbox),
                       *epoch);
  session.SetInstanceId(*instance);
  session.SetIsolation(isolation);
  session.AdoptTasks(adopted);
  session.SetTls(std::move(tls));
  std::thread waiter([&] {
    int sig = 0;
    while (sigwait(&signals, &sig) == 0 && (sig == SIGCHLD || sig == SIGHUP)) {
      if (sig == SIGCHLD) {
        session.Wake();
      } else {
        common::ReopenLogsOnSighup();
      }
    }
    spdlog::info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    session.Stop();
  });
  int rc = session.Run();
  if (rc != 0) {
    // Run failed early: wake the waiter so the process can exit. SIGTERM is blocked in every
    // thread and taken by the waiter's sigwait, so it ends nothing.
    pthread_kill(waiter.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  }
  waiter.join();
  common::FlushLogs();
  return rc;
}

}  // namespace
}  // namespace dgpu::agent

int main(int argc, char** argv) {
  // The shim of one task (task_shim.h), started by the agent itself: no flags, no config.
  if (argc > 1 && (std::string_view(argv[1]) == dgpu::agent::kTaskShimFlag ||
                   std::string_view(argv[1]) == dgpu::agent::kTaskShimServerFlag)) {
    return dgpu::agent::RunTaskShim(argc, argv);
  }
  return dgpu::agent::Run(argc, argv);
}
