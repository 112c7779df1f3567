#include "agent/task_supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>
#include <utility>

#include "agent/proc_table.h"
#include "agent/task_shim.h"
#include "common/child_process.h"

namespace dgpu::agent {
namespace {

constexpr int64_t kMicrosPerMilli = 1000;
constexpr int64_t kMicrosPerSecond = 1000000;
// A stop/kill helper (docker stop/kill) still running after this is killed.
constexpr int64_t kHelperLimitMicros = 60 * kMicrosPerSecond;
// How long StopAll waits for processes after SIGKILL before giving up on them.
constexpr auto kStopAllKillWait = std::chrono::seconds(5);
// Run records this agent reads (task_shim.h: the protocol of the shims it adopts).
// Run records: 1; 2 adds the task's cgroup when it is a slot's ("cgroup", "oom_base"), which an
// agent that knows only 1 would take for a leftover and kill (records without stay 1).
constexpr int kRunRecordVersion = 1;
constexpr int kSlotRunRecordVersion = 2;
// The largest request a kept shim takes in one message (shim_runtime.c's MAX_REQUEST).
constexpr size_t kMaxShimRequest = 256 << 10;

// The shim's handshake line, from its pipe or its socket (one message), read until a newline or
// `deadline`; nullopt when none came (nothing, the end, the deadline) or it is malformed.
std::optional<ShimHello> ReadHello(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string line;
  char buffer[4096];
  while (line.find('\n') == std::string::npos && line.size() < 4096) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const ssize_t r = read(fd, buffer, sizeof(buffer));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    line.append(buffer, static_cast<size_t>(r));
  }
  const size_t newline = line.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  return ParseShimHello(line.substr(0, newline));
}

int64_t SystemClockMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status MakeDirs(const std::string& path) {
  if (path.empty()) return InvalidArgument("empty directory path");
  // A task's directory: its parent exists (the work directory), so one call makes it.
  if (mkdir(path.c_str(), 0755) == 0) return OkStatus();
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    std::string prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Internal("cannot create directory '" + prefix + "': " + strerror(errno));
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Internal("'" + path + "' is not a directory");
  }
  return OkStatus();
}

// Whole seconds, rounded up: a stop command's timeout never ends before the grace period.
int64_t CeilSeconds(std::chrono::milliseconds d) {
  return (std::max<int64_t>(d.count(), 0) + 999) / 1000;
}

void AppendLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  ssize_t ignored = write(fd, text.data(), text.size());
  (void)ignored;
}

// Writes `text` as the whole of `path`, in place and not synced; 0, or the errno of the failure.
int WriteInPlace(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written =
      fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  if (fd >= 0) close(fd);
  return written ? 0 : (saved != 0 ? saved : EIO);
}

}  // namespace

TaskSupervisor::TaskSupervisor(SupervisorOptions options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = SystemClockMicros;
  if (!options_.work_dir.empty()) {
    if (Status s = MakeDirs(RunDir()); !s.ok()) spdlog::error("executor: {}", s.message());
  }
  if (options_.child_subreaper) {
    subreaper_active_ = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  }
  if (options_.cpu_pool.has_value()) {
    node_cpus_ = AllowedCpus();
    shared_cpus_ = SharedCpus();
  }
}

TaskSupervisor::~TaskSupervisor() {
  if (!detached_ &&
      (!tasks_.empty() || !helpers_.empty() || !idle_shims_.empty() || !stale_cgroups_.empty())) {
    StopAll(std::chrono::milliseconds(0));
  }
}

void TaskSupervisor::WaitForHelpers(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!helpers_.empty() && std::chrono::steady_clock::now() < deadline) {
    ReapHelpers(options_.clock(), /*force=*/false);
    if (!helpers_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void TaskSupervisor::EndIdleShims() {
  // Their sockets' end ends them (they wait for a request); then they are reaped as helpers.
  std::vector<std::string> slots;
  for (const KeptShim& shim : idle_shims_) {
    close(shim.control);
    helpers_.push_back({shim.pid, "", options_.clock()});
    if (!shim.slot.empty()) slots.push_back(shim.slot);
  }
  idle_shims_.clear();
  // Removed once their shims have left them.
  if (!slots.empty()) RemoveCgroups(std::move(slots));
}

std::string TaskSupervisor::LogPath(const std::string& task_id) const {
  return options_.work_dir + "/" + task_id + ".log";
}

std::string TaskSupervisor::RunRecordPath(const std::string& task_id) const {
  return RecordPrefix(task_id) + ".task";
}

std::string TaskSupervisor::ExitRecordPath(const std::string& task_id) const {
  return RecordPrefix(task_id) + ".exit";
}

std::string TaskSupervisor::RecordPrefix(const std::string& task_id) const {
  return RunDir() + "/" + task_id;
}

void TaskSupervisor::RemoveRecords(const std::string& task_id) const {
  for (const char* suffix : {".task", ".pids", ".exit"}) {
    unlink((RecordPrefix(task_id) + suffix).c_str());
  }
}

void TaskSupervisor::WriteRunRecord(const Task& task) const {
  const TaskLaunch& l = task.launch;
  nlohmann::json j = {{"version", kRunRecordVersion},
                      {"task_id", l.task_id},
                      {"run", l.run},
                      {"command", l.command},
                      {"image", l.image},
                      {"user", l.user},
                      {"gpu_indices", l.gpu_indices},
                      {"timeout_seconds", l.timeout_seconds},
                      {"array_index", l.array_index},
                      {"array_size", l.array_size},
                      {"cpus_milli", l.cpus_milli},
                      {"memory_mb", l.memory_mb},
                      {"cpu_set", task.cpus},
                      {"started_at", task.started_micros}};
  if (task.cgroup && task.cgroup_name != l.task_id) {
    // A slot's (kept from task to task): its name, and its out-of-memory kills before.
    j["version"] = kSlotRunRecordVersion;
    j["cgroup"] = task.cgroup_name;
    j["oom_base"] = task.oom_base;
  }
  // Not synced: the record has to outlive the agent process, not the machine (a task does not
  // outlive its machine either). Written in place, at once: a record cut short by the agent's
  // death was written before its shim started, so its task never ran.
  const std::string path = RunRecordPath(l.task_id);
  if (const int saved = WriteInPlace(path, j.dump() + "\n"); saved != 0) {
    spdlog::error(
        "cannot write the run record {} ({}): {} will not be adopted after an agent "
        "restart",
        path, strerror(saved), l.task_id);
    unlink(path.c_str());
  }
}

std::optional<core::ResourceUsage> TaskSupervisor::Usage(const std::string& task_id) const {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() || !it->second.cgroup) return std::nullopt;
  return options_.cgroups->Usage(it->second.cgroup_name);
}

Status TaskSupervisor::CheckAccept(const TaskLaunch& launch) const {
  if (detached_) return FailedPrecondition("executor is detached; no new tasks are accepted");
  bool pending = std::any_of(pending_exits_.begin(), pending_exits_.end(),
                             [&](const TaskExit& e) { return e.task_id == launch.task_id; });
  if (pending || tasks_.count(launch.task_id) > 0) {
    return AlreadyExists("task '" + launch.task_id + "' is already known to this executor");
  }
  for (int index : launch.gpu_indices) {
    for (const auto& [id, task] : tasks_) {
      const auto& held = task.launch.gpu_indices;
      if (std::find(held.begin(), held.end(), index) != held.end()) {
        return FailedPrecondition("GPU " + std::to_string(index) + " is held by task '" + id + "'");
      }
    }
  }
  return OkStatus();
}

bool TaskSupervisor::BindCpus(const TaskLaunch& launch, LaunchPlan* plan) {
  if (!options_.cpu_pool.has_value() || launch.cpus_milli <= 0) return false;
  const int count = static_cast<int>((launch.cpus_milli + 999) / 1000);
  std::vector<int> preferred;
  for (int gpu : launch.gpu_indices) {
    auto local = options_.gpu_local_cpus.find(gpu);
    if (local != options_.gpu_local_cpus.end()) {
      preferred.insert(preferred.end(), local->second.begin(), local->second.end());
    }
  }
  std::optional<std::vector<int>> cpus = options_.cpu_pool->Take(count, preferred);
  if (!cpus.has_value()) {
    plan->notes.push_back(
        fmt::format("dgpu: {} CPU(s) to bind the task to and {} free: a CPU quota of {} instead",
                    count, options_.cpu_pool->free_count(), core::CpusOfMilli(launch.cpus_milli)));
    return false;
  }
  plan->cpus = std::move(*cpus);
  return true;
}

std::vector<int> TaskSupervisor::CpuSet(const std::string& task_id) const {
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? std::vector<int>{} : it->second.cpus;
}

void TaskSupervisor::GiveCpus(const std::vector<int>& cpus) {
  if (!options_.cpu_pool.has_value() || cpus.empty()) return;
  options_.cpu_pool->Give(cpus);
  UpdateSharedCpus();
}

std::vector<int> TaskSupervisor::UnboundCpus() const {
  std::vector<int> unbound;
  if (options_.cpu_pool.has_value()) {
    std::ranges::set_difference(node_cpus_, options_.cpu_pool->Taken(),
                                std::back_inserter(unbound));
  }
  return unbound;
}

std::vector<int> TaskSupervisor::SharedCpus() const {
  std::vector<int> unbound = UnboundCpus();
  return unbound.empty() ? node_cpus_ : unbound;
}

void TaskSupervisor::UpdateSharedCpus(bool force) {
  if (!options_.cpu_pool.has_value()) return;
  std::vector<int> unbound = UnboundCpus();
  const bool all_bound = unbound.empty();
  if (all_bound) unbound = node_cpus_;
  if (unbound == shared_cpus_ && !force) return;
  if (all_bound) {
    spdlog::warn(
        "every CPU is bound to a task: the tasks not bound to CPUs of their own share them all "
        "until one ends");
  }
  shared_cpus_ = std::move(unbound);
  for (auto& [id, task] : tasks_) {
    if (!task.shares_cpus) continue;
    if (!task.cgroup) {
      // docker update: best effort, after the fact (it runs beside the agent).
      if (task.plan.set_cpus_argv && !task.leader_status.has_value()) {
        RunHelper(task, task.plan.set_cpus_argv(shared_cpus_), options_.clock(), /*quiet=*/true);
      }
      continue;
    }
    if (Status s = options_.cgroups->SetCpus(task.cgroup_name, shared_cpus_); s.ok()) {
      // A slot's next task gets its limits from these.
      if (task.plan.cgroup.has_value()) task.plan.cgroup->cpus = shared_cpus_;
    } else {
      // Gone with its task, or made without a cpuset (an adopted task of an earlier agent).
      if (s.code() != StatusCode::kNotFound) {
        spdlog::warn("{}: cannot give it the shared CPUs {}: {}", id, FormatCpuList(shared_cpus_),
                     s.message());
      }
      task.shares_cpus = false;
    }
  }
}

Status TaskSupervisor::Start(const TaskLaunch& launch, const LaunchPlan& plan) {
  // The plan's CPUs are this task's from here: given back unless it starts.
  const std::vector<int>& cpus = plan.cpus;
  Status accept = CheckAccept(launch);
  if (!accept.ok()) {
    GiveCpus(cpus);
    return accept;
  }
  // The tasks that share CPUs leave this one's before it starts.
  if (!cpus.empty()) UpdateSharedCpus();
  const int64_t now = options_.clock();
  auto start_failed = [&](const std::string& reason) {
    GiveCpus(cpus);
    TaskExit exit;
    exit.task_id = launch.task_id;
    exit.run = launch.run;
    exit.error = "start_failed: " + reason;
    exit.finished_at_unix_micros = now;
    pending_exits_.push_back(std::move(exit));
    return OkStatus();
  };

  const std::string task_dir = options_.work_dir + "/" + launch.task_id;
  Status dirs = MakeDirs(task_dir);
  if (!dirs.ok()) return start_failed(dirs.message());
  const std::string log_path = LogPath(launch.task_id);
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return start_failed("cannot open log '" + log_path + "': " + strerror(errno));
  }
  for (const std::string& note : plan.notes) AppendLine(log_fd, note);
  if (!plan.refused.empty()) {
    GiveCpus(cpus);
    AppendLine(log_fd, "dgpu: task did not start: " + plan.refused);
    close(log_fd);
    TaskExit exit;
    exit.task_id = launch.task_id;
    exit.run = launch.run;
    exit.error = plan.refused;
    exit.finished_at_unix_micros = now;
    pending_exits_.push_back(std::move(exit));
    return OkStatus();
  }
  if (plan.owner) {
    const auto [uid, gid] = *plan.owner;
    if (chown(task_dir.c_str(), uid, gid) != 0 || fchown(log_fd, uid, gid) != 0) {
      const std::string why = std::string("cannot give the task's directory and log to uid ") +
                              std::to_string(uid) + ": " + strerror(errno);
      AppendLine(log_fd, "dgpu: task did not start: " + why);
      close(log_fd);
      return start_failed(why);
    }
  }
  if (launch.gang.has_value()) {
    const std::string hostfile = GangHostfilePath(options_.work_dir, launch.task_id);
    if (const int saved = WriteInPlace(hostfile, GangHostfile(*launch.gang)); saved != 0) {
      const std::string why =
          "cannot write the gang's hostfile '" + hostfile + "': " + strerror(saved);
      AppendLine(log_fd, "dgpu: task did not start: " + why);
      close(log_fd);
      return start_failed(why);
    }
  }
  Task task;
  task.launch = launch;
  task.plan = plan;
  task.started_micros = now;
  task.cpus = cpus;
  task.shares_cpus = plan.shares_cpus;
  // A record of an earlier run of this id is not this run's.
  RemoveRecords(launch.task_id);
  collected_.erase(std::remove(collected_.begin(), collected_.end(), launch.task_id),
                   collected_.end());
  // The run record is written (by StartShim) before the shim starts its command: that runs only
  // once the shim has noted who runs it, so an agent started later finds both records for every
  // command that ran.
  Status started = StartShim(task, task_dir, log_fd);
  if (!started.ok()) AppendLine(log_fd, "dgpu: task did not start: " + started.message());
  close(log_fd);
  if (!started.ok()) {
    RemoveRecords(launch.task_id);
    // A slot went back to the idle ones, or to be removed, with its shim.
    if (task.cgroup && !task.in_slot) RemoveCgroups({task.cgroup_name});
    return start_failed(started.message());
  }
  ObservePid(task.leader);  // A pid just handed out is itself a reading of the counter.
  task.pid_epoch = pid_epoch_;
  if (launch.timeout_seconds > 0) {
    task.deadline_micros = now + launch.timeout_seconds * kMicrosPerSecond;
  }
  tasks_.emplace(launch.task_id, std::move(task));
  return OkStatus();
}

Status TaskSupervisor::Stop(const std::string& task_id, const StopOrder& order) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    bool failed_to_start = std::any_of(pending_exits_.begin(), pending_exits_.end(),
                                       [&](const TaskExit& e) { return e.task_id == task_id; });
    if (failed_to_start) return OkStatus();  // Its start_failed exit is reported anyway.
    return NotFound("task '" + task_id + "' is not running here");
  }
  BeginStop(it->second, order, options_.clock());
  return OkStatus();
}

std::vector<std::string> TaskSupervisor::Running() const {
  std::vector<std::string> ids;
  for (const auto& exit : pending_exits_) ids.push_back(exit.task_id);
  for (const auto& [id, task] : tasks_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool TaskSupervisor::IsGpuBusy(int index) const {
  for (const auto& [id, task] : tasks_) {
    const auto& held = task.launch.gpu_indices;
    if (std::find(held.begin(), held.end(), index) != held.end()) return true;
  }
  return false;
}

void TaskSupervisor::ObservePids() {
  std::optional<pid_t> last = LastAllocatedPid();
  if (!last.has_value()) {
    pid_tracking_ = false;
    return;
  }
  ObservePid(*last);
}

void TaskSupervisor::ObservePid(pid_t allocated) {
  if (allocated < last_pid_seen_) ++pid_epoch_;
  last_pid_seen_ = allocated;
}

std::optional<pid_t> TaskSupervisor::PartialScanFloor() const {
  if (!pid_tracking_ || tasks_.empty()) return std::nullopt;
  pid_t floor = tasks_.begin()->second.leader;
  for (const auto& [id, task] : tasks_) {
    if (task.pid_epoch != pid_epoch_) return std::nullopt;
    floor = std::min(floor, task.leader);
  }
  return floor;
}

void TaskSupervisor::Scan(bool partial) {
  const pid_t self = getpid();
  std::optional<pid_t> floor = partial ? PartialScanFloor() : std::nullopt;
  std::vector<ProcStat> procs;
  if (floor.has_value()) {
    // Known processes are read whatever their pid, so that none is mistaken for gone.
    std::vector<pid_t> known;
    for (const auto& [id, task] : tasks_) {
      known.push_back(task.leader);
      if (task.shim != 0) known.push_back(task.shim);
      for (const auto& [pid, start] : task.members) known.push_back(pid);
    }
    for (const auto& [pid, start] : foreign_orphans_) known.push_back(pid);
    procs = ListProcessesFrom(*floor, known);
  } else {
    procs = ListProcesses();
  }
  std::unordered_map<pid_t, const ProcStat*> by_pid;
  std::unordered_map<pid_t, std::vector<pid_t>> children;
  for (const auto& p : procs) {
    by_pid[p.pid] = &p;
    children[p.ppid].push_back(p.pid);
  }
  auto alive = [&](pid_t pid) {
    auto it = by_pid.find(pid);
    return it != by_pid.end() && !it->second->zombie();
  };

  // Each task's live leader, which belongs to its task alone: a kept shim runs one task after
  // another, so after a restart an earlier task that had ended (its records not yet removed)
  // names the shim that now runs the next one, whose leader is that shim's child.
  std::unordered_map<pid_t, const Task*> leaders;
  for (const auto& [id, task] : tasks_) {
    const auto p = by_pid.find(task.leader);
    if (!task.leader_status.has_value() && p != by_pid.end() &&
        p->second->start_time == task.leader_start_time) {
      leaders.emplace(task.leader, &task);
    }
  }
  auto others_leader = [&](const Task& task, pid_t pid) {
    const auto l = leaders.find(pid);
    return l != leaders.end() && l->second != &task;
  };

  std::set<pid_t> attributed;
  std::vector<std::pair<Task*, pid_t>> added;  // New members, to signal if the task is stopping.
  auto add_tree = [&](Task& task, pid_t root) {
    std::deque<pid_t> queue{root};
    std::set<pid_t> visited{root};
    while (!queue.empty()) {
      pid_t pid = queue.front();
      queue.pop_front();
      if (others_leader(task, pid)) continue;  // Neither it nor its tree.
      if (pid != task.leader && alive(pid)) {
        attributed.insert(pid);
        auto [it, inserted] = task.members.emplace(pid, by_pid[pid]->start_time);
        if (inserted) added.emplace_back(&task, pid);
      }
      if (auto c = children.find(pid); c != children.end()) {
        for (pid_t child : c->second) {
          if (visited.insert(child).second) queue.push_back(child);
        }
      }
    }
  };

  for (auto& [id, task] : tasks_) {
    // Forget members that are gone, recycled or dead; reap the dead ones adopted by the agent.
    for (auto it = task.members.begin(); it != task.members.end();) {
      auto p = by_pid.find(it->first);
      if (p == by_pid.end() || p->second->start_time != it->second) {
        it = task.members.erase(it);
      } else if (p->second->zombie()) {
        if (p->second->ppid == self) common::ReapAdoptedChild(it->first);
        it = task.members.erase(it);
      } else {
        attributed.insert(it->first);
        ++it;
      }
    }
    std::vector<pid_t> roots;
    if (!task.leader_status.has_value()) roots.push_back(task.leader);
    for (const auto& [pid, start] : task.members) roots.push_back(pid);
    // The task's shim, while it is the process it was (its pid may be another's once it ended,
    // a shim this agent started for another task, say).
    const auto shim = by_pid.find(task.shim);
    const bool shim_alive =
        task.shim != 0 && !task.shim_done && shim != by_pid.end() && !shim->second->zombie() &&
        (task.shim_start_time == 0 || shim->second->start_time == task.shim_start_time);
    // The session and group keep the leader's pid as id even after the leader is reaped, and
    // the kernel does not recycle a pid while a session or group uses it. So a process that has
    // the leader's pid and another start time means the task's session and group are gone: ids
    // equal to that pid now name the new process's (another task's shell, say).
    const auto holder = by_pid.find(task.leader);
    const bool ids_are_ours =
        holder == by_pid.end() || holder->second->start_time == task.leader_start_time;
    for (const auto& p : procs) {
      if (p.pid == task.leader) continue;
      // The shim's children other than the leader are orphans of the task it adopted.
      if ((ids_are_ours && (p.sid == task.leader || p.pgid == task.leader)) ||
          (shim_alive && p.ppid == task.shim)) {
        roots.push_back(p.pid);
      }
    }
    for (pid_t root : roots) add_tree(task, root);
  }

  // Processes adopted by the agent: task processes that escaped their session, or foreign ones.
  for (auto it = foreign_orphans_.begin(); it != foreign_orphans_.end();) {
    auto p = by_pid.find(it->first);
    it = (p == by_pid.end() || p->second->start_time != it->second) ? foreign_orphans_.erase(it)
                                                                    : std::next(it);
  }
  for (const auto& p : procs) {
    if (p.ppid != self) continue;
    if (p.zombie()) {
      common::ReapAdoptedChild(p.pid);  // No-op for the agent's own registered children.
      continue;
    }
    if (attributed.count(p.pid) || foreign_orphans_.count({p.pid, p.start_time}) ||
        common::IsRegisteredChild(p.pid)) {
      continue;
    }
    bool claimed = false;
    for (auto& [id, task] : tasks_) {
      if (EnvironContains(p.pid, "DGPU_TASK_ID=" + id)) {
        add_tree(task, p.pid);
        claimed = true;
        break;
      }
    }
    if (!claimed) foreign_orphans_.insert({p.pid, p.start_time});
  }

  for (auto [task, pid] : added) {
    if (task->member_signal != 0) kill(pid, task->member_signal);
  }
}

void TaskSupervisor::Signal(Task& task, int sig) {
  if (!task.leader_status.has_value() && LeaderAlive(task)) {
    // While the leader lives its group id cannot belong to anyone else.
    killpg(task.leader, sig);
    kill(task.leader, sig);
  }
  for (const auto& [pid, start] : task.members) {
    auto stat = ReadProcStat(pid);
    if (stat && stat->start_time == start && !stat->zombie()) kill(pid, sig);
  }
}

bool TaskSupervisor::RunHelper(const Task& task, const std::vector<std::string>& argv,
                               int64_t now_micros, bool quiet) {
  int log_fd =
      open(LogPath(task.launch.task_id).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = quiet ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
  common::SpawnOptions spawn;
  spawn.argv = argv;
  if (!task.plan.helper_env.empty()) spawn.env = task.plan.helper_env;
  spawn.stdout_fd = quiet ? null_fd : log_fd;
  spawn.stderr_fd = log_fd;
  StatusOr<pid_t> pid = common::SpawnChild(spawn);
  if (!pid.ok() && log_fd >= 0) AppendLine(log_fd, "dgpu: " + pid.status().message());
  if (log_fd >= 0) close(log_fd);
  if (null_fd >= 0) close(null_fd);
  if (!pid.ok()) return false;
  helpers_.push_back({*pid, task.launch.task_id, now_micros});
  return true;
}

void TaskSupervisor::SendTerm(Task& task, int64_t now_micros, bool use_plan,
                              std::chrono::milliseconds grace) {
  task.term_sent = true;
  if (use_plan && task.plan.stop_argv &&
      RunHelper(task, task.plan.stop_argv(CeilSeconds(grace)), now_micros)) {
    return;
  }
  task.member_signal = SIGTERM;
  Signal(task, SIGTERM);
}

void TaskSupervisor::SendKill(Task& task, int64_t now_micros) {
  task.kill_sent = true;
  task.member_signal = SIGKILL;
  Scan();
  Signal(task, SIGKILL);
  // Every process in the task's cgroup, also those that escaped the tracking.
  if (task.cgroup) options_.cgroups->Kill(task.cgroup_name, task.shim);
  if (!task.plan.kill_argv.empty() && !task.leader_status.has_value()) {
    RunHelper(task, task.plan.kill_argv, now_micros);
  }
}

void TaskSupervisor::BeginStop(Task& task, const StopOrder& order, int64_t now_micros) {
  const std::chrono::milliseconds grace =
      order.grace.count() < 0 ? options_.kill_grace : order.grace;
  const int64_t kill_at = now_micros + grace.count() * kMicrosPerMilli;
  if (task.phase == Phase::kRunning) {
    task.phase = Phase::kStopping;
    task.stop_reason = order.reason;
    AppendToLog(task, StopLogLine(order.reason, grace, order.preempted_by));
    Scan();
    SendTerm(task, now_micros, /*use_plan=*/true, grace);
    task.kill_at_micros = kill_at;
    return;
  }
  // Already stopping: an order that ends sooner brings the SIGKILL forward, none postpones it.
  if (task.kill_sent || !task.kill_at_micros.has_value() || kill_at >= *task.kill_at_micros) {
    return;
  }
  task.kill_at_micros = kill_at;
  AppendToLog(task, StopLogLine(order.reason, grace, order.preempted_by));
}

void TaskSupervisor::AppendToLog(const Task& task, const std::string& line) const {
  int log_fd =
      open(LogPath(task.launch.task_id).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return;
  AppendLine(log_fd, line);
  close(log_fd);
}

void TaskSupervisor::ReapHelpers(int64_t now_micros, bool force) {
  for (auto it = helpers_.begin(); it != helpers_.end();) {
    if (common::TryReapChild(it->pid).has_value()) {
      it = helpers_.erase(it);
      continue;
    }
    if (force || now_micros - it->started_micros > kHelperLimitMicros) killpg(it->pid, SIGKILL);
    ++it;
  }
}

Status TaskSupervisor::StartShim(Task& task, const std::string& task_dir, int log_fd) {
  // Found here, on the agent's PATH, so that a missing program is named as the agent names it.
  if (task.plan.argv.empty()) return InvalidArgument("empty argv");
  StatusOr<std::string> program = common::FindExecutable(task.plan.argv[0]);
  if (!program.ok()) return program.status();
  std::vector<std::string> argv = task.plan.argv;
  argv[0] = *program;
  if (options_.max_idle_shims > 0) {
    if (std::optional<Status> started = StartOnKeptShim(task, task_dir, log_fd, argv)) {
      return *started;
    }
  }
  if (Status made = MakeTaskCgroup(task); !made.ok()) return made;
  WriteRunRecord(task);
  int hello[2];
  if (pipe2(hello, O_CLOEXEC) != 0) {
    return Internal(std::string("cannot make the shim's pipe: ") + strerror(errno));
  }
  common::SpawnOptions spawn;
  spawn.argv = {options_.shim, kTaskShimFlag, std::to_string(kTaskShimStartProtocol),
                RecordPrefix(task.launch.task_id), std::to_string(options_.max_log_bytes)};
  const std::vector<std::string> cgroups = CgroupArguments(task);
  spawn.argv.push_back(std::to_string(cgroups.size() / 2));
  spawn.argv.insert(spawn.argv.end(), cgroups.begin(), cgroups.end());
  spawn.argv.push_back("--");
  spawn.argv.insert(spawn.argv.end(), argv.begin(), argv.end());
  spawn.env = task.plan.env;
  spawn.working_dir = task_dir;
  spawn.stdin_fd = hello[1];
  spawn.stdout_fd = log_fd;
  spawn.stderr_fd = log_fd;
  StatusOr<pid_t> pid = common::SpawnChild(spawn);
  close(hello[1]);
  if (!pid.ok()) {
    close(hello[0]);
    return Status(pid.status().code(), "cannot start the task's shim: " + pid.status().message());
  }
  // One line, written once the shim has started the leader and noted it.
  std::optional<ShimHello> parsed =
      ReadHello(hello[0], std::chrono::steady_clock::now() + options_.shim_answer_timeout);
  close(hello[0]);
  if (!parsed.has_value() || !parsed->ok) {
    // It exits by itself after an error; one that did not answer is made to.
    if (!parsed.has_value()) kill(*pid, SIGKILL);
    helpers_.push_back({*pid, task.launch.task_id, options_.clock()});
    if (parsed.has_value()) return FailedPrecondition(parsed->error);
    return Unavailable("the task's shim (" + options_.shim + ") did not answer within " +
                       std::to_string(options_.shim_answer_timeout.count()) + " ms");
  }
  task.shim = *pid;
  if (auto stat = ReadProcStat(*pid)) task.shim_start_time = stat->start_time;
  task.leader = parsed->leader;
  task.leader_start_time = parsed->leader_start_time;
  return OkStatus();
}

Status TaskSupervisor::MakeTaskCgroup(Task& task) {
  if (task.cgroup || options_.cgroups == nullptr || !task.plan.cgroup.has_value()) {
    return OkStatus();
  }
  Status made = options_.cgroups->Create(task.launch.task_id, *task.plan.cgroup);
  if (!made.ok()) {
    return Status(made.code(), "cannot make the task's cgroup: " + made.message());
  }
  task.cgroup = true;
  task.cgroup_name = task.launch.task_id;
  task.in_slot = false;
  task.oom_base = 0;
  LogCgroup(task);
  return OkStatus();
}

void TaskSupervisor::LogCgroup(const Task& task) const {
  const TaskCgroupLimits& limits = *task.plan.cgroup;
  spdlog::info("{}: cgroup {} (memory {}, pids {}, CPU quota {}, CPUs {}, {} GPU device(s) denied)",
               task.launch.task_id, options_.cgroups->PathOf(task.cgroup_name),
               limits.memory_bytes > 0 ? std::to_string(limits.memory_bytes >> 20) + " MiB"
                                       : std::string("unlimited"),
               limits.pids_max > 0 ? std::to_string(limits.pids_max) : "unlimited",
               limits.cpu_quota_milli > 0
                   ? fmt::format("{} CPUs", core::CpusOfMilli(limits.cpu_quota_milli))
                   : std::string("none"),
               limits.cpus.empty() ? std::string("any") : FormatCpuList(limits.cpus),
               limits.denied_devices.size());
}

std::optional<TaskSupervisor::KeptShim> TaskSupervisor::SpawnKeptShim(bool resident) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return std::nullopt;
  common::SpawnOptions spawn;
  spawn.argv = {options_.shim, kTaskShimServerFlag, std::to_string(kTaskShimStartProtocol)};
  if (resident) spawn.argv.push_back(kTaskShimResidentFlag);
  // An empty environment: each task brings its own, and nothing of the agent's (its
  // credentials, say) sits in a process that runs other users' tasks.
  spawn.env = std::vector<std::string>{};
  spawn.working_dir = options_.work_dir;
  spawn.stdin_fd = sv[1];
  StatusOr<pid_t> pid = common::SpawnChild(spawn);
  close(sv[1]);
  if (!pid.ok()) {
    close(sv[0]);
    spdlog::warn("cannot start a shim server ({}): tasks get a shim of their own",
                 pid.status().message());
    return std::nullopt;
  }
  KeptShim shim{*pid, sv[0], 0, {}, std::nullopt};
  if (auto stat = ReadProcStat(*pid)) shim.start_time = stat->start_time;
  return shim;
}

StatusOr<TaskSupervisor::KeptShim> TaskSupervisor::TakeSlot(const TaskCgroupLimits& limits,
                                                            bool* fresh) {
  *fresh = false;
  // An idle slot, the one whose last task had these limits first (nothing to write then).
  std::optional<size_t> pick;
  for (size_t i = idle_shims_.size(); i-- > 0;) {
    if (idle_shims_[i].slot.empty()) continue;
    if (!pick.has_value()) pick = i;
    if (idle_shims_[i].limits == limits) {
      pick = i;
      break;
    }
  }
  if (pick.has_value()) {
    KeptShim shim = std::move(idle_shims_[*pick]);
    idle_shims_.erase(idle_shims_.begin() + static_cast<std::ptrdiff_t>(*pick));
    Status applied = options_.cgroups->Apply(shim.slot, limits, shim.limits);
    if (applied.ok()) {
      shim.limits = limits;
      return shim;
    }
    // Its limits are not known any more: a new slot instead.
    spdlog::warn("cannot give the cgroup {} its next task's limits ({}): a new one instead",
                 options_.cgroups->PathOf(shim.slot), applied.message());
    ReleaseShim(shim, /*reusable=*/false, options_.clock());
  }
  std::string name;
  do {
    name = "slot-" + std::to_string(next_slot_++);
  } while (options_.cgroups->Exists(name));
  if (Status made = options_.cgroups->CreateSlot(name); !made.ok()) return made;
  std::optional<KeptShim> shim = SpawnKeptShim(/*resident=*/true);
  if (!shim.has_value()) {
    (void)options_.cgroups->Remove(name);
    return Unavailable("no shim server starts");
  }
  shim->slot = name;
  // Its one move: every task it runs starts where it lives.
  Status ready = options_.cgroups->Enter(name, shim->pid);
  if (ready.ok()) ready = options_.cgroups->Apply(name, limits, std::nullopt);
  if (!ready.ok()) {
    ReleaseShim(*shim, /*reusable=*/false, options_.clock());
    return ready;
  }
  shim->limits = limits;
  *fresh = true;
  return *shim;
}

void TaskSupervisor::ReleaseShim(const KeptShim& shim, bool reusable, int64_t now_micros) {
  if (reusable && idle_shims_.size() < options_.max_idle_shims && !detached_) {
    idle_shims_.push_back(shim);
    if (!shim.slot.empty()) options_.cgroups->Recycle(shim.slot);
    return;
  }
  close(shim.control);  // Its end: the shim exits, and is reaped as a helper.
  helpers_.push_back({shim.pid, "", now_micros});
  // Its slot goes once the shim has left it.
  if (!shim.slot.empty()) RemoveCgroups({shim.slot});
}

std::optional<Status> TaskSupervisor::StartOnKeptShim(Task& task, const std::string& task_dir,
                                                      int log_fd,
                                                      const std::vector<std::string>& argv) {
  // With cgroup v1, the task's cgroup is a slot's whose shim lives in it (the request names no
  // cgroup); otherwise (v2) one of its own, which the shim starts the task in.
  const bool in_slot =
      options_.cgroups != nullptr && task.plan.cgroup.has_value() && options_.cgroups->slots();
  if (!in_slot) {
    if (Status made = MakeTaskCgroup(task); !made.ok()) return made;
  }
  // The request (shim_runtime.c): "2", RECORDS, MAX_LOG_BYTES, CWD, NCGROUPS, the cgroup paths,
  // ARGC, the arguments, the environment, each NUL-terminated; the log passed with it.
  std::string request;
  auto field = [&request](const std::string& f) {
    request += f;
    request.push_back('\0');
  };
  field(std::to_string(kTaskShimStartProtocol));
  field(RecordPrefix(task.launch.task_id));
  field(std::to_string(options_.max_log_bytes));
  field(task_dir);
  const std::vector<std::string> cgroups =
      in_slot ? std::vector<std::string>{} : CgroupArguments(task);
  field(std::to_string(cgroups.size() / 2));
  for (const auto& c : cgroups) field(c);
  field(std::to_string(argv.size()));
  for (const auto& a : argv) field(a);
  for (const auto& e : task.plan.env) field(e);
  if (request.size() > kMaxShimRequest) return std::nullopt;
  const int64_t now = options_.clock();
  // An idle shim may have died since its last task: then the next one (at most one new one).
  while (true) {
    std::optional<KeptShim> shim;
    bool fresh = false;
    if (in_slot) {
      StatusOr<KeptShim> slot = TakeSlot(*task.plan.cgroup, &fresh);
      if (!slot.ok()) {
        return Status(slot.status().code(),
                      "cannot make the task's cgroup: " + slot.status().message());
      }
      shim = std::move(*slot);
      task.cgroup = true;
      task.in_slot = true;
      task.cgroup_name = shim->slot;
      task.oom_base = options_.cgroups->OomKills(shim->slot);
      LogCgroup(task);
    } else if (auto idle = std::find_if(idle_shims_.rbegin(), idle_shims_.rend(),
                                        [](const KeptShim& k) { return k.slot.empty(); });
               idle != idle_shims_.rend()) {
      shim = *idle;
      idle_shims_.erase(std::next(idle).base());
    } else {
      shim = SpawnKeptShim();
      fresh = true;
      if (!shim.has_value()) return std::nullopt;
    }
    WriteRunRecord(task);
    iovec iov{request.data(), request.size()};
    union {
      cmsghdr header;
      char space[CMSG_SPACE(sizeof(int))];
    } control{};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.space;
    msg.msg_controllen = sizeof(control.space);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &log_fd, sizeof(int));
    ssize_t sent;
    do {
      sent = sendmsg(shim->control, &msg, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    // A shim done with the task at once: its slot is no longer the task's.
    auto leave = [&](bool reusable) {
      ReleaseShim(*shim, reusable, now);
      if (in_slot) task.cgroup = false;
    };
    if (sent != static_cast<ssize_t>(request.size())) {
      const int error = errno;
      leave(/*reusable=*/false);
      if (error == EMSGSIZE || fresh) return std::nullopt;
      continue;  // It died while idle.
    }
    std::optional<ShimHello> parsed =
        ReadHello(shim->control, std::chrono::steady_clock::now() + options_.shim_answer_timeout);
    if (!parsed.has_value()) {
      // Dead, or stuck: it may have started the command, so the task does not start elsewhere.
      kill(shim->pid, SIGKILL);
      leave(/*reusable=*/false);
      return Unavailable("the task's shim (" + options_.shim + ", pid " +
                         std::to_string(shim->pid) + ") did not answer within " +
                         std::to_string(options_.shim_answer_timeout.count()) + " ms");
    }
    if (!parsed->ok) {
      leave(/*reusable=*/true);
      return FailedPrecondition(parsed->error);
    }
    task.shim = shim->pid;
    task.shim_start_time = shim->start_time;
    task.shim_control = shim->control;
    task.leader = parsed->leader;
    task.leader_start_time = parsed->leader_start_time;
    return OkStatus();
  }
}

std::map<std::string, TaskSupervisor::Task>::iterator TaskSupervisor::Erase(
    std::map<std::string, Task>::iterator it) {
  // Out of the map first: its cgroup is no task's from here (RemoveCgroups, CgroupInUse).
  Task task = std::move(it->second);
  auto next = tasks_.erase(it);
  if (task.shim_pidfd >= 0) close(task.shim_pidfd);
  const bool slot = task.in_slot && task.cgroup;
  if (task.shim_control >= 0 && task.shim_done) {
    // Done with the task: it (and its slot) can take the next one.
    ReleaseShim(
        KeptShim{task.shim, task.shim_control, task.shim_start_time,
                 slot ? task.cgroup_name : std::string(), slot ? task.plan.cgroup : std::nullopt},
        task.shim_reusable && (slot || !task.in_slot), options_.clock());
  } else {
    // Still busy with the task, its socket closed, it exits once the task has ended; an adopted
    // task's was an earlier agent process's and ends with it. Its slot goes after it.
    if (task.shim_control >= 0) close(task.shim_control);
    if (slot) RemoveCgroups({task.cgroup_name});
  }
  GiveCpus(task.cpus);
  return next;
}

std::vector<int> TaskSupervisor::WakeFds() const {
  std::vector<int> fds;
  if (detached_) return fds;
  for (const auto& [id, task] : tasks_) {
    if (task.shim_pidfd >= 0 && !task.shim_done) fds.push_back(task.shim_pidfd);
    if (task.shim_control >= 0 && !task.shim_done) fds.push_back(task.shim_control);
  }
  return fds;
}

int64_t TaskSupervisor::NextPollMicros(int64_t now_micros) const {
  if (detached_) return INT64_MAX;
  if (!pending_exits_.empty() || !collected_.empty() || (force_scan_ && !tasks_.empty())) {
    return now_micros;
  }
  int64_t next = INT64_MAX;
  for (const auto& [id, task] : tasks_) {
    if (task.phase == Phase::kRunning && task.deadline_micros > 0) {
      next = std::min(next, task.deadline_micros);
    }
    if (task.kill_at_micros.has_value() && !task.kill_sent) {
      next = std::min(next, *task.kill_at_micros);
    }
    // A stopping or ended task is followed closely (its processes are being signalled).
    if (task.phase != Phase::kRunning || task.shim_done) {
      next = std::min(next, now_micros + 50 * kMicrosPerMilli);
    }
  }
  // While tasks run: the periodic scan (new processes, the pid counter), which also finds a
  // leader that ended while its shim waits for the rest of the task.
  if (!tasks_.empty()) {
    next = std::min(next, last_scan_micros_ + options_.scan_interval.count() * kMicrosPerMilli);
  }
  for (const auto& h : helpers_) next = std::min(next, h.started_micros + kHelperLimitMicros);
  if (!helpers_.empty()) next = std::min(next, now_micros + kMicrosPerSecond);
  return next;
}

bool TaskSupervisor::ShimDone(Task& task) {
  if (task.shim_done) return true;
  if (task.shim_control >= 0) {
    // A kept shim says "1 done" once every process of the task has ended; its socket's end
    // (it died) ends the task too.
    char buffer[64];
    ssize_t r;
    do {
      r = recv(task.shim_control, buffer, sizeof(buffer), MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    const std::string done = std::to_string(kTaskShimProtocol) + " done\n";
    // Handed back once the task is forgotten (Erase): its slot is the task's until then.
    task.shim_reusable = r > 0 && std::string_view(buffer, static_cast<size_t>(r)) == done;
    task.shim_done = true;
    return true;
  }
  if (task.own_shim) {
    task.shim_done = common::TryReapChild(task.shim).has_value();
  } else {
    auto stat = ReadProcStat(task.shim);
    task.shim_done = !stat || stat->start_time != task.shim_start_time || stat->zombie();
  }
  return task.shim_done;
}

bool TaskSupervisor::LeaderAlive(const Task& task) const {
  auto stat = ReadProcStat(task.leader);
  return stat && stat->start_time == task.leader_start_time && !stat->zombie();
}

std::vector<HeldTask> TaskSupervisor::Reattach(
    const std::function<LaunchPlan(const TaskLaunch&)>& plan, std::vector<std::string>* lost) {
  std::vector<HeldTask> held;
  std::error_code ec;
  std::vector<std::string> records;
  for (const auto& entry : std::filesystem::directory_iterator(RunDir(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".task") == 0) {
      records.push_back(name.substr(0, name.size() - 5));
    }
  }
  std::sort(records.begin(), records.end());
  ObservePids();
  for (const std::string& id : records) {
    Task task;
    try {
      std::FILE* f = std::fopen(RunRecordPath(id).c_str(), "re");
      if (f == nullptr) continue;
      nlohmann::json j = nlohmann::json::parse(f);
      std::fclose(f);
      if (const int version = j.at("version").get<int>();
          version != kRunRecordVersion && version != kSlotRunRecordVersion) {
        throw std::runtime_error("version " + j.at("version").dump() + " is not known");
      }
      TaskLaunch& l = task.launch;
      l.task_id = j.at("task_id").get<std::string>();
      if (l.task_id != id) throw std::runtime_error("it names task " + l.task_id);
      l.run = j.at("run").get<int>();
      l.command = j.at("command").get<std::string>();
      l.image = j.at("image").get<std::string>();
      l.user = j.at("user").get<std::string>();
      l.gpu_indices = j.at("gpu_indices").get<std::vector<int>>();
      l.timeout_seconds = j.at("timeout_seconds").get<int64_t>();
      l.array_index = j.at("array_index").get<int>();
      l.array_size = j.at("array_size").get<int>();
      // Absent from the records of older agents.
      l.cpus_milli = j.value("cpus_milli", int64_t{0});
      l.memory_mb = j.value("memory_mb", int64_t{0});
      task.cpus = j.value("cpu_set", std::vector<int>{});
      task.started_micros = j.at("started_at").get<int64_t>();
      // A slot's cgroup (absent: one named by the task's id).
      task.cgroup_name = j.value("cgroup", id);
      task.in_slot = task.cgroup_name != id;
      task.oom_base = j.value("oom_base", int64_t{0});
    } catch (const std::exception& e) {
      spdlog::error("run record {} cannot be read ({}): removed; the task is not adopted",
                    RunRecordPath(id), e.what());
      RemoveRecords(id);
      if (lost != nullptr) lost->push_back(id);
      continue;
    }
    task.own_shim = false;
    auto pids = ReadShimPidsRecord(RecordPrefix(id) + ".pids");
    if (!pids.has_value()) {
      // The agent died before the shim noted its leader: the task's command never ran (the
      // leader waits for that note).
      spdlog::warn("{} had not started when the previous agent process ended: not adopted", id);
      RemoveRecords(id);
      if (lost != nullptr) lost->push_back(id);
      continue;
    }
    task.shim = pids->shim;
    task.shim_start_time = pids->shim_start_time;
    task.leader = pids->leader;
    task.leader_start_time = pids->leader_start_time;
    // pidfd first, then the start time check: the descriptor is then surely the shim's.
    task.shim_pidfd = static_cast<int>(syscall(SYS_pidfd_open, task.shim, 0));
    if (task.shim_pidfd >= 0) fcntl(task.shim_pidfd, F_SETFD, FD_CLOEXEC);
    // Its end first, then its record: a shim writes the record before it ends, so one that has
    // ended and left none never will.
    const bool shim_done = ShimDone(task);
    auto record = ReadShimExitRecord(ExitRecordPath(id));
    if (shim_done && !record.has_value()) {
      if (task.shim_pidfd >= 0) close(task.shim_pidfd);
      spdlog::warn(
          "the shim of {} (pid {}) has ended without recording how its task ended "
          "(the node restarted, or it was killed): the task is not adopted",
          id, task.shim);
      RemoveRecords(id);
      if (lost != nullptr) lost->push_back(id);
      continue;
    }
    if (record.has_value()) {
      task.leader_status = record->wait_status;
      if (task.shim_done) task.finished_at_micros = record->unix_micros;
    }
    task.plan = plan(task.launch);
    task.cgroup = options_.cgroups != nullptr && options_.cgroups->Exists(task.cgroup_name);
    task.pid_epoch = pid_epoch_ + 1;  // Unknown: only full scans find its processes.
    if (task.launch.timeout_seconds > 0) {
      task.deadline_micros = task.started_micros + task.launch.timeout_seconds * kMicrosPerSecond;
    }
    if (options_.cpu_pool.has_value() && !options_.cpu_pool->Hold(task.cpus)) {
      spdlog::warn("{}: CPUs {} are another adopted task's too", id, FormatCpuList(task.cpus));
    }
    // Not bound: its CPUs follow the shared ones (its cgroup's, or through docker update;
    // written below, once all are held).
    task.shares_cpus = options_.cpu_pool.has_value() && task.cpus.empty() &&
                       (task.cgroup || static_cast<bool>(task.plan.set_cpus_argv));
    held.push_back({id, task.launch.gpu_indices, task.launch.run, task.started_micros});
    tasks_.emplace(id, std::move(task));
  }
  // A kept shim runs one task after another, and takes the next only once every process of the
  // last one has ended. So of the adopted tasks that name one shim (an earlier task whose exit
  // the previous agent had not handed over yet), only the one started last is still its (one
  // whose leader runs is surely the last; start times in clock ticks can tie, the run records'
  // microseconds do not); the others are done with it, whatever the shim does now.
  auto later = [](const Task& a, const Task& b) {
    if (a.leader_status.has_value() != b.leader_status.has_value()) {
      return !a.leader_status.has_value();
    }
    return a.started_micros > b.started_micros;
  };
  std::map<std::pair<pid_t, uint64_t>, Task*> current;
  for (auto& [id, task] : tasks_) {
    if (task.shim_done) continue;
    auto [it, inserted] = current.emplace(std::pair{task.shim, task.shim_start_time}, &task);
    if (inserted) continue;
    Task* earlier = &task;
    if (later(task, *it->second)) std::swap(earlier, it->second);
    earlier->shim_done = true;
    if (auto record = ReadShimExitRecord(ExitRecordPath(earlier->launch.task_id))) {
      earlier->finished_at_micros = record->unix_micros;
    }
  }
  // Of the adopted tasks that name one slot (an earlier task whose exit had not been handed
  // over, and the one after it there), only the one started last owns what is in it now: its
  // counters were reset at its start, and out-of-memory kills after it are its own.
  std::map<std::string, Task*> in_slot;
  for (auto& [id, task] : tasks_) {
    if (!task.in_slot || !task.cgroup) continue;
    auto [it, inserted] = in_slot.emplace(task.cgroup_name, &task);
    if (inserted) continue;
    Task* earlier = &task;
    if (task.started_micros > it->second->started_micros) std::swap(earlier, it->second);
    earlier->cgroup = false;
  }
  force_scan_ = !tasks_.empty();
  if (options_.cgroups != nullptr) {
    // Cgroups no adopted task owns: their processes (if any) are stopped, the cgroups removed.
    std::vector<std::string> leftovers;
    for (const std::string& name : options_.cgroups->List()) {
      if (CgroupInUse(name)) continue;
      const size_t processes = options_.cgroups->Pids(name).size();
      spdlog::warn("cgroup {} was left by an earlier agent process with {} process(es): {}",
                   options_.cgroups->PathOf(name), processes,
                   processes > 0 ? "killed and removed" : "removed");
      options_.cgroups->Kill(name);
      leftovers.push_back(name);
    }
    RemoveCgroups(std::move(leftovers));
  }
  // The adopted tasks that share CPUs get those left by the adopted bound ones.
  UpdateSharedCpus(/*force=*/true);
  return held;
}

bool TaskSupervisor::CgroupEmpty(Task& task) {
  if (!task.cgroup) return true;
  const std::string& name = task.cgroup_name;
  std::vector<pid_t> pids = options_.cgroups->Pids(name);
  // The shim lives there (a slot's), or has left (it may fail to, and then stays until its task
  // is done).
  pids.erase(std::remove(pids.begin(), pids.end(), task.shim), pids.end());
  if (pids.empty()) return true;
  // Processes of the task that nothing else found: they end with the task.
  options_.cgroups->Kill(name, task.shim);
  return false;
}

bool TaskSupervisor::CgroupInUse(const std::string& name) const {
  for (const auto& [id, task] : tasks_) {
    if (task.cgroup && task.cgroup_name == name) return true;
  }
  return std::any_of(idle_shims_.begin(), idle_shims_.end(),
                     [&](const KeptShim& k) { return k.slot == name; });
}

void TaskSupervisor::RemoveCgroups(std::vector<std::string> names) {
  for (std::string& name : names) {
    if (std::find(stale_cgroups_.begin(), stale_cgroups_.end(), name) == stale_cgroups_.end()) {
      stale_cgroups_.push_back(std::move(name));
    }
  }
  for (auto it = stale_cgroups_.begin(); it != stale_cgroups_.end();) {
    // A task started again under the same id owns the cgroup now.
    if (CgroupInUse(*it)) {
      it = stale_cgroups_.erase(it);
      continue;
    }
    Status removed = options_.cgroups->Remove(*it);
    if (removed.ok()) {
      it = stale_cgroups_.erase(it);
    } else {
      spdlog::debug("{}: retried at the next poll", removed.message());
      ++it;
    }
  }
}

std::vector<std::string> TaskSupervisor::CgroupArguments(const Task& task) const {
  std::vector<std::string> args;
  if (!task.cgroup || !task.plan.cgroup.has_value()) return args;  // Adopted: started already.
  for (auto& [join, home] : options_.cgroups->JoinFiles(task.cgroup_name, *task.plan.cgroup)) {
    args.push_back(join);
    args.push_back(home);
  }
  return args;
}

TaskExit TaskSupervisor::MakeExit(const Task& task, int64_t now_micros) const {
  TaskExit exit;
  exit.task_id = task.launch.task_id;
  exit.run = task.launch.run;
  exit.finished_at_unix_micros = task.finished_at_micros.value_or(now_micros);
  if (task.cgroup) exit.usage = options_.cgroups->Usage(task.cgroup_name);
  if (!task.lost.empty()) {
    exit.error = task.lost;
    return exit;
  }
  if (task.leader_status.has_value()) {
    const int status = *task.leader_status;
    if (WIFEXITED(status)) {
      exit.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      exit.signal = WTERMSIG(status);
      exit.exit_code = 128 + exit.signal;
    }
  }
  if (task.stop_reason.has_value()) {
    exit.error = StopErrorOf(*task.stop_reason);
  } else if (exit.exit_code != 0 && task.cgroup &&
             options_.cgroups->OomKills(task.cgroup_name) > task.oom_base) {
    exit.error = "out_of_memory: killed at its memory limit of " +
                 std::to_string(task.launch.memory_mb) + " MiB (memory_mb)";
  } else if (exit.signal != 0) {
    exit.error = "signal:" + std::to_string(exit.signal);
  } else {
    exit.success = task.leader_status.has_value() && exit.exit_code == 0;
  }
  return exit;
}

std::vector<TaskExit> TaskSupervisor::Step(int64_t now_micros, bool apply_deadlines) {
  for (const auto& id : collected_) {
    if (tasks_.count(id) == 0) RemoveRecords(id);
  }
  collected_.clear();
  std::vector<TaskExit> exits = std::move(pending_exits_);
  pending_exits_.clear();
  bool changed = force_scan_;
  for (auto& [id, task] : tasks_) {
    if (!task.leader_status.has_value()) {
      // Its end first, then its record: a shim writes the record before it ends, so one that
      // has ended and left none never will (read the other way round, a shim that wrote its
      // record and ended between the two looks would read as lost).
      const bool shim_done = ShimDone(task);
      if (auto record = ReadShimExitRecord(ExitRecordPath(id))) {
        task.leader_status = record->wait_status;
        changed = true;
      } else if (shim_done) {
        // Killed before its leader ended (or before it could say so): nobody can learn how the
        // task ends. Its processes are stopped.
        task.lost = "supervisor_lost: the task's shim (pid " + std::to_string(task.shim) +
                    ") ended before the task";
        task.leader_status = -1;
        // Without its shim nobody reaps the leader but the agent (its subreaper) or init: it is
        // followed as a member, so that the exit is reported once it is gone and reaped, and no
        // zombie is left behind when this was the node's last task.
        if (auto stat = ReadProcStat(task.leader);
            stat && stat->start_time == task.leader_start_time) {
          if (!stat->zombie()) {
            killpg(task.leader, SIGKILL);
            kill(task.leader, SIGKILL);
          }
          task.members.emplace(task.leader, task.leader_start_time);
        }
        task.member_signal = SIGKILL;
        changed = true;
      }
    }
    if (task.phase != Phase::kRunning) changed = true;
  }
  const bool scan_due =
      now_micros - last_scan_micros_ >= options_.scan_interval.count() * kMicrosPerMilli ||
      now_micros < last_scan_micros_;
  if (!tasks_.empty() && (changed || scan_due)) {
    // A leader's exit needs only the processes created since the oldest leader: a partial scan
    // keeps the cost of a task's end independent of how many processes the node runs. The
    // periodic full scan still catches everything else (e.g. foreign orphans to reap). The pid
    // counter is read at every scan, so at least once a second while tasks run: a wrap cannot
    // go unnoticed (that would take more than pid_max forks between two readings).
    ObservePids();
    Scan(/*partial=*/!scan_due);
    if (scan_due) last_scan_micros_ = now_micros;
    force_scan_ = false;
  }
  const int64_t grace_micros = options_.kill_grace.count() * kMicrosPerMilli;
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    Task& task = it->second;
    if (apply_deadlines && task.phase == Phase::kRunning && !task.leader_status.has_value() &&
        task.deadline_micros > 0 && now_micros >= task.deadline_micros) {
      BeginStop(task, StopOrder{core::StopReason::kTimeout, std::chrono::milliseconds(-1), {}},
                now_micros);
    }
    if (task.leader_status.has_value() && task.phase != Phase::kDraining) {
      task.phase = Phase::kDraining;
      // Processes left behind by a finished leader get the same treatment as a stop.
      if (!task.members.empty() && !task.term_sent) {
        SendTerm(task, now_micros, /*use_plan=*/false);
      }
      if (!task.members.empty() && !task.kill_at_micros.has_value()) {
        task.kill_at_micros = now_micros + grace_micros;
      }
    }
    if (apply_deadlines && task.kill_at_micros.has_value() && now_micros >= *task.kill_at_micros &&
        !task.kill_sent) {
      SendKill(task, now_micros);
    }
    if (task.leader_status.has_value() && task.members.empty() && ShimDone(task) &&
        CgroupEmpty(task)) {
      exits.push_back(MakeExit(task, now_micros));
      if (exits.back().error.rfind("out_of_memory", 0) == 0) {
        AppendToLog(task, "dgpu: task failed: " + exits.back().error);
      }
      collected_.push_back(it->first);
      // A cgroup of its own goes; a slot's stays for the next task (Erase hands it back).
      const bool cgroup = task.cgroup && !task.in_slot;
      const std::string name = task.cgroup_name;
      it = Erase(it);
      if (cgroup) RemoveCgroups({name});
    } else {
      ++it;
    }
  }
  if (!stale_cgroups_.empty()) RemoveCgroups({});
  ReapHelpers(now_micros, /*force=*/false);
  return exits;
}

std::vector<TaskExit> TaskSupervisor::Poll(int64_t now_micros) {
  if (detached_) return {};
  return Step(now_micros, /*apply_deadlines=*/true);
}

std::vector<TaskExit> TaskSupervisor::StopAll(std::chrono::milliseconds grace) {
  if (detached_) return {};
  for (auto& [id, task] : tasks_) {
    BeginStop(task, StopOrder{core::StopReason::kCancel, grace, {}}, options_.clock());
  }
  std::vector<TaskExit> exits;
  const auto term_deadline = std::chrono::steady_clock::now() + grace;
  std::optional<std::chrono::steady_clock::time_point> give_up;
  while (true) {
    std::vector<TaskExit> done = Step(options_.clock(), /*apply_deadlines=*/false);
    exits.insert(exits.end(), done.begin(), done.end());
    if (tasks_.empty()) break;
    const auto now = std::chrono::steady_clock::now();
    if (!give_up.has_value() && now >= term_deadline) {
      for (auto& [id, task] : tasks_) SendKill(task, options_.clock());
      give_up = now + kStopAllKillWait;
    }
    if (give_up.has_value() && now >= *give_up) {
      // Processes that survive SIGKILL this long are stuck in the kernel; report them anyway.
      for (auto it = tasks_.begin(); it != tasks_.end();) {
        exits.push_back(MakeExit(it->second, options_.clock()));
        collected_.push_back(it->first);
        const bool cgroup = it->second.cgroup && !it->second.in_slot;
        const std::string name = it->second.cgroup_name;
        it = Erase(it);
        if (cgroup) RemoveCgroups({name});
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EndIdleShims();
  WaitForHelpers(std::chrono::seconds(2));
  ReapHelpers(options_.clock(), /*force=*/true);
  if (!stale_cgroups_.empty()) RemoveCgroups({});
  for (const auto& id : collected_) RemoveRecords(id);
  collected_.clear();
  return exits;
}

void TaskSupervisor::Detach() {
  for (const auto& id : collected_) RemoveRecords(id);
  collected_.clear();
  detached_ = true;
  for (auto it = tasks_.begin(); it != tasks_.end();) it = Erase(it);
  // The idle shims end with their sockets; they are reaped (briefly waited for) so that none is
  // left a zombie of a process that goes on. Helpers (stop commands) are left to run.
  helpers_.clear();
  EndIdleShims();
  WaitForHelpers(std::chrono::seconds(1));
  helpers_.clear();
  // The idle slots (those of tasks left running stay: the next agent process adopts them).
  if (!stale_cgroups_.empty()) RemoveCgroups({});
  pending_exits_.clear();
}

}  // namespace dgpu::agent
