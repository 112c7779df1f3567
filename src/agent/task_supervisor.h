// TaskSupervisor: the process machinery shared by ProcessExecutor and DockerExecutor.
//
// Each task runs under a shim of its own (task_shim.h), the task's parent, started in a new
// session; the task's first process (the "leader") leads another session and process group.
// The supervisor follows everything the task starts: the leader's session and process group,
// every descendant (by parent pid), and the shim's other children (processes that escaped with
// setsid() and were re-parented to the shim, a child subreaper). Processes are identified by
// (pid, start time), so a recycled pid is never signalled. The leader's exit status comes from
// the shim's exit record; a task has ended when its leader's status is known, no tracked process
// remains and its shim has ended.
//
// Each task also has a run record, <run_dir>/<task_id>.task (its launch; run_dir defaults to
// <work_dir>/.run and is best on a tmpfs: see SupervisorOptions::run_dir), written before
// its shim starts, beside which the shim writes <task_id>.pids (itself and the leader, once the
// task's command has started) and <task_id>.exit; all are removed once the task's exit has been
// returned and the next Poll runs.
// An agent process that starts with the same work_dir calls Reattach(): it adopts every task
// whose shim still runs (same pids, same run, nothing restarted), and the tasks whose shim has
// ended with an exit record (they ended while no agent ran) finish with their real exit status.
//
// Stopping (a stop order, a timeout, or leftovers after the leader exited): SIGTERM to the
// process group and every tracked process (or the plan's stop command, e.g. `docker stop -t N`),
// then SIGKILL to all of them after the grace period: the order's, else the configured one.
//
// Not thread-safe: one owner thread. Children are spawned through SpawnChild (child_process.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/cpu_sets.h"
#include "agent/executor.h"

namespace dgpu::agent {

struct SupervisorOptions {
  std::string work_dir;  // Holds <task_id>/ (working directory) and <task_id>.log.
  std::chrono::milliseconds kill_grace{10000};
  // Make the agent a child subreaper (process-wide, PR_SET_CHILD_SUBREAPER) so that orphaned
  // task processes are re-parented to it and can be followed.
  bool child_subreaper = true;
  // How often a full /proc scan runs while tasks merely run; stopping tasks are scanned at every
  // Poll.
  std::chrono::milliseconds scan_interval{1000};
  // Unix time in microseconds; used for start times (timeouts) and StopAll/start-failure stamps.
  std::function<int64_t()> clock;
  // > 0: the shim copies the task's stdout and stderr to its log and cuts it at this size
  // (log_writer.h); 0: the task writes to its log itself.
  int64_t max_log_bytes = 0;
  std::string shim = "/proc/self/exe";  // Run as `shim --task-shim 1 ...` (task_shim.h).
  // How long Start waits for a shim's handshake before it fails the task.
  std::chrono::milliseconds shim_answer_timeout{10000};
  // executor.run_dir: where the run records are kept; empty: <work_dir>/.run.
  std::string run_dir;
  // Shims kept for the next task once theirs has ended (task_shim.h): a task start then spawns
  // its command only, not a shim too. 0: a shim of its own for every task.
  size_t max_idle_shims = 16;
  // executor.isolation: the task cgroups (cgroup.h), owned by the executor; nullptr: none. A
  // plan with limits gets a cgroup of its own, which its processes join at their start, which
  // kills them all at SIGKILL time, whose out-of-memory kills fail the task with out_of_memory,
  // and which is removed once they are gone. With cgroup v1 and kept shims, the cgroup is a
  // slot's (TaskCgroups::slots): its kept shim lives in it and it is kept for the next task.
  TaskCgroups* cgroups = nullptr;
  // executor.cpu_binding: cpuset: the CPUs tasks are bound to (BindCpus); nullopt: none.
  std::optional<CpuPool> cpu_pool;
  // The CPUs local to each GPU (by index), preferred for the tasks given it.
  std::map<int, std::vector<int>> gpu_local_cpus;
};

// What to run for one task, prepared by the executor.
struct LaunchPlan {
  std::vector<std::string> argv;  // argv[0]: path or name on PATH.
  std::vector<std::string> env;   // Complete environment, "KEY=VALUE".
  // The command run instead of SIGTERM when the task must stop, given the grace period in whole
  // seconds (rounded up), e.g. docker stop -t N; unset = SIGTERM.
  std::function<std::vector<std::string>(int64_t grace_seconds)> stop_argv;
  // Also run when the grace period is over, besides SIGKILL (e.g. docker kill); may be empty.
  std::vector<std::string> kill_argv;
  // Environment for stop/kill commands; empty = the agent's environment.
  std::vector<std::string> helper_env;
  // Not empty: the task is not started and finishes with exactly this error (its log says why),
  // e.g. "unknown_user: ...".
  std::string refused;
  // The task's directory and log belong to this uid:gid (executor.run_as: submitter).
  std::optional<std::pair<uid_t, gid_t>> owner;
  // The limits of the task's cgroup, when the supervisor has cgroups; nullopt: none.
  std::optional<TaskCgroupLimits> cgroup;
  // The CPUs the task is bound to, taken with BindCpus: the pool's again once the task has
  // ended (or when Start refuses it).
  std::vector<int> cpus;
  // Not bound (cpu_binding: cpuset): its CPUs are the shared ones (SharedCpus), and follow
  // them as bound tasks start and end: its cgroup's, or through set_cpus_argv.
  bool shares_cpus = false;
  // The command that moves the task to other CPUs where the agent has no cgroup of it (docker
  // update --cpuset-cpus); empty: none.
  std::function<std::vector<std::string>(const std::vector<int>& cpus)> set_cpus_argv;
  // Lines for the task's log before it starts ("dgpu: ...", without the newline).
  std::vector<std::string> notes;
};

class TaskSupervisor {
 public:
  explicit TaskSupervisor(SupervisorOptions options);
  ~TaskSupervisor();  // Unless detached: SIGKILLs every task process and reaps it (bounded).
  TaskSupervisor(const TaskSupervisor&) = delete;
  TaskSupervisor& operator=(const TaskSupervisor&) = delete;

  // Refusals (duplicate id, busy GPU, detached) are checked here; `launch` is assumed valid.
  Status Start(const TaskLaunch& launch, const LaunchPlan& plan);
  Status Stop(const std::string& task_id, const StopOrder& order);
  std::vector<TaskExit> Poll(int64_t now_micros);
  std::vector<std::string> Running() const;
  bool IsGpuBusy(int index) const;
  // What a task has used so far, from its cgroup; nullopt without one.
  std::optional<core::ResourceUsage> Usage(const std::string& task_id) const;
  // executor.cpu_binding: cpuset: ceil(cpus) CPUs of the pool for the launch, those local to
  // its GPUs first, into plan->cpus. False without a pool or CPUs in the launch, and when too
  // few are free (plan->notes then says so): the caller falls back to a CPU quota.
  bool BindCpus(const TaskLaunch& launch, LaunchPlan* plan);
  // The CPUs a task is bound to; empty when none.
  std::vector<int> CpuSet(const std::string& task_id) const;
  // With a CPU pool: the CPUs of the tasks not bound to CPUs of their own, those the agent may
  // run on less the bound ones (as the Kubernetes CPU manager's shared pool); all of them when
  // every one is bound. Empty without a pool.
  std::vector<int> SharedCpus() const;
  // Returns a refusal (AlreadyExists / FailedPrecondition) or OK without starting anything.
  Status CheckAccept(const TaskLaunch& launch) const;
  std::vector<int> WakeFds() const;
  int64_t NextPollMicros(int64_t now_micros) const;
  std::vector<TaskExit> StopAll(std::chrono::milliseconds grace);
  void Detach();

  // Adopts the tasks of the run records in the run directory (see the file comment); for each,
  // `plan` gives what stopping it needs (stop_argv, kill_argv, helper_env). Returns the tasks
  // adopted, running or ended meanwhile (their exits come from the next Poll), by task id. Records
  // of tasks whose shim is gone without an exit record (a reboot, a killed shim) are removed and
  // named in `lost` (their processes, if any, are the caller's to stop). Call once, before Start.
  std::vector<HeldTask> Reattach(const std::function<LaunchPlan(const TaskLaunch&)>& plan,
                                 std::vector<std::string>* lost);

  // The task's log file path.
  std::string LogPath(const std::string& task_id) const;
  std::string RunDir() const {
    return options_.run_dir.empty() ? options_.work_dir + "/.run" : options_.run_dir;
  }
  std::string RunRecordPath(const std::string& task_id) const;
  // <run dir>/<task_id>: the shim writes <prefix>.pids and <prefix>.exit (task_shim.h).
  std::string RecordPrefix(const std::string& task_id) const;
  std::string ExitRecordPath(const std::string& task_id) const;
  bool child_subreaper_active() const { return subreaper_active_; }

 private:
  enum class Phase { kRunning, kStopping, kDraining };
  struct Task {
    TaskLaunch launch;
    LaunchPlan plan;
    pid_t leader = 0;
    uint64_t pid_epoch = 0;  // pid_epoch_ when the leader was spawned.
    uint64_t leader_start_time = 0;
    int64_t started_micros = 0;
    pid_t shim = 0;
    uint64_t shim_start_time = 0;
    bool own_shim = true;  // Spawned by this process (reaped here), not adopted.
    int shim_pidfd = -1;   // An adopted shim's pidfd (readable once it ends); -1: none.
    // A kept shim's socket: its "done" message (or its end) is the task's end; -1: none.
    int shim_control = -1;
    bool shim_done = false;
    Phase phase = Phase::kRunning;
    std::optional<core::StopReason> stop_reason;  // Set by the first stop order or timeout.
    std::optional<int> leader_status;             // Wait status once the shim recorded it.
    // The exit record's time, for a task that ended while no agent ran.
    std::optional<int64_t> finished_at_micros;
    int64_t deadline_micros = 0;            // 0 = no timeout.
    std::optional<int64_t> kill_at_micros;  // When SIGKILL follows SIGTERM.
    bool term_sent = false;
    bool kill_sent = false;
    // Signal for processes found after the task was signalled (0 while none was sent: a stop
    // command such as docker stop does not signal the task's processes).
    int member_signal = 0;
    std::map<pid_t, uint64_t> members;  // Tracked processes other than the leader.
    // An error that ends the task whatever its leader did ("supervisor_lost: ...").
    std::string lost;
    bool cgroup = false;         // It has a cgroup of its own (SupervisorOptions::cgroups).
    std::string cgroup_name;     // Its directory's name: the task id, or its slot's.
    bool in_slot = false;        // The cgroup is its kept shim's slot (kept after the task).
    int64_t oom_base = 0;        // The cgroup's out-of-memory kills before the task started.
    bool shim_reusable = false;  // Its kept shim said "done": it can take the next task.
    std::vector<int> cpus;       // The CPUs of the pool it holds (cpu_binding: cpuset).
    bool shares_cpus = false;    // Its CPUs follow SharedCpus (its cgroup, or set_cpus_argv).
  };
  struct Helper {
    pid_t pid;
    std::string task_id;
    int64_t started_micros;
  };
  // A shim run with kTaskShimServerFlag: this process's child, its socket, its start time; a
  // resident one lives in its slot (a cgroup, TaskCgroups::slots) with the limits last given.
  struct KeptShim {
    pid_t pid = 0;
    int control = -1;
    uint64_t start_time = 0;
    std::string slot;
    std::optional<TaskCgroupLimits> limits;
  };

  // Reads /proc and updates every task's members. A partial scan reads only processes created
  // since the oldest leader (see PartialScanFloor); a full one reads them all.
  void Scan(bool partial = false);
  // Notes the kernel's last allocated pid (/proc/loadavg, or a pid just allocated); a decrease
  // means pids wrapped around.
  void ObservePids();
  void ObservePid(pid_t allocated);
  // The lowest pid a partial scan must read (the oldest leader's), or nullopt when only a full
  // scan is correct: a task's processes are created after its leader, so within one pid epoch
  // their pids are higher.
  std::optional<pid_t> PartialScanFloor() const;
  // Starts stopping a running task, or brings a stopping one's SIGKILL forward.
  void BeginStop(Task& task, const StopOrder& order, int64_t now_micros);
  // SIGTERM (or, with use_plan, the plan's stop command for `grace`) to the task's processes.
  void SendTerm(Task& task, int64_t now_micros, bool use_plan,
                std::chrono::milliseconds grace = {});
  void SendKill(Task& task, int64_t now_micros);
  void Signal(Task& task, int sig);
  // Appends one line to the task's log (best effort: a log that cannot be opened is skipped).
  void AppendToLog(const Task& task, const std::string& line) const;
  // Spawns a stop/kill command with output appended to the task log (`quiet`: its errors only).
  // False if it cannot start.
  bool RunHelper(const Task& task, const std::vector<std::string>& argv, int64_t now_micros,
                 bool quiet = false);
  void ReapHelpers(int64_t now_micros, bool force);
  TaskExit MakeExit(const Task& task, int64_t now_micros) const;
  // Starts the task's shim and reads its handshake: the leader's pid and start time, or why the
  // task could not start (the error's message).
  Status StartShim(Task& task, const std::string& task_dir, int log_fd);
  // The start on a kept shim (an idle one, else a new one; in a slot when the task's cgroup is
  // one); nullopt when that cannot be tried (the request is too large for one message, no shim
  // server starts), for a shim of its own.
  std::optional<Status> StartOnKeptShim(Task& task, const std::string& task_dir, int log_fd,
                                        const std::vector<std::string>& argv);
  // `resident`: it is to live in a slot (--resident).
  std::optional<KeptShim> SpawnKeptShim(bool resident = false);
  // An idle slot given `limits` (one with the same limits first), else a new one (`fresh`);
  // why not.
  StatusOr<KeptShim> TakeSlot(const TaskCgroupLimits& limits, bool* fresh);
  // The task's cgroup of its own (named by its id), unless it has one: made, and logged.
  Status MakeTaskCgroup(Task& task);
  // Logs the task's cgroup and limits.
  void LogCgroup(const Task& task) const;
  // Whether a task or an idle slot holds the cgroup `name`.
  bool CgroupInUse(const std::string& name) const;
  // A kept shim done with its task: back to the idle ones, or (the pool full, or not `reusable`)
  // its socket closed, which ends it; it is reaped as a helper.
  void ReleaseShim(const KeptShim& shim, bool reusable, int64_t now_micros);
  // Closes the idle shims' sockets (which ends them) and hands them to the helpers to reap.
  void EndIdleShims();
  // Reaps helpers as they end, for at most `limit`.
  void WaitForHelpers(std::chrono::milliseconds limit);
  // Whether the task's shim has ended (reaping it when it is this process's child).
  bool ShimDone(Task& task);
  // The leader still runs: its pid names the same process as at start.
  bool LeaderAlive(const Task& task) const;
  void WriteRunRecord(const Task& task) const;
  // Forgets a task (closing its pidfd).
  std::map<std::string, Task>::iterator Erase(std::map<std::string, Task>::iterator it);
  void RemoveRecords(const std::string& task_id) const;
  // A task's cgroup is empty (processes found there are killed, and it is not); nothing but
  // true without a cgroup.
  bool CgroupEmpty(Task& task);
  // Removes the cgroups (by name) of ended tasks and ended slots; one that cannot go yet stays
  // for the next call.
  void RemoveCgroups(std::vector<std::string> names);
  // The shim's cgroup.procs pairs for the start of `task` (empty without a cgroup).
  std::vector<std::string> CgroupArguments(const Task& task) const;
  std::vector<TaskExit> Step(int64_t now_micros, bool apply_deadlines);

  // Gives a task's CPUs back to the pool; the tasks that share CPUs get them.
  void GiveCpus(const std::vector<int>& cpus);
  // Writes SharedCpus to the cgroup of every task that shares CPUs, when they changed (`force`:
  // whether or not). Before a bound task starts (they leave its CPUs) and after one ends.
  void UpdateSharedCpus(bool force = false);
  // The CPUs this process may run on that no task is bound to (empty without a pool).
  std::vector<int> UnboundCpus() const;
  SupervisorOptions options_;
  std::vector<int> node_cpus_;    // With a CPU pool: the CPUs this process may run on.
  std::vector<int> shared_cpus_;  // SharedCpus as last written.
  bool subreaper_active_ = false;
  bool detached_ = false;
  std::map<std::string, Task> tasks_;
  std::vector<TaskExit> pending_exits_;  // start_failed exits, returned by the next Poll.
  std::vector<Helper> helpers_;
  std::vector<KeptShim> idle_shims_;
  std::vector<std::string> stale_cgroups_;  // Cgroups of ended tasks not removed yet.
  uint64_t next_slot_ = 0;                  // The number of the next slot made.
  // Tasks whose exit was returned: their records go at the next Poll (the exit is in the
  // caller's hands by then).
  std::vector<std::string> collected_;
  int64_t last_scan_micros_ = 0;  // Last full scan.
  pid_t last_pid_seen_ = 0;
  uint64_t pid_epoch_ = 0;    // Incremented whenever the pid counter is seen to wrap.
  bool pid_tracking_ = true;  // False when /proc/loadavg cannot be read: full scans only.
  bool force_scan_ = false;
  // Adopted processes whose environment did not name any task, by (pid, start time).
  std::set<std::pair<pid_t, uint64_t>> foreign_orphans_;
};

// An Executor whose tasks are processes followed by a TaskSupervisor: everything but starting
// (and the name) is the supervisor's, whatever the launch method.
class SupervisedExecutor : public Executor {
 public:
  Status Stop(const std::string& task_id, const StopOrder& order) override {
    return supervisor_.Stop(task_id, order);
  }
  std::vector<TaskExit> Poll(int64_t now_micros) override { return supervisor_.Poll(now_micros); }
  std::vector<std::string> Running() const override { return supervisor_.Running(); }
  bool IsGpuBusy(int index) const override { return supervisor_.IsGpuBusy(index); }
  std::optional<core::ResourceUsage> Usage(const std::string& task_id) const override {
    return supervisor_.Usage(task_id);
  }
  std::vector<int> CpuSet(const std::string& task_id) const override {
    return supervisor_.CpuSet(task_id);
  }
  std::vector<TaskExit> StopAll(std::chrono::milliseconds grace) override {
    return supervisor_.StopAll(grace);
  }
  void Detach() override { supervisor_.Detach(); }
  std::vector<int> WakeFds() const override { return supervisor_.WakeFds(); }
  int64_t NextPollMicros(int64_t now_micros) const override {
    return supervisor_.NextPollMicros(now_micros);
  }
  std::vector<HeldTask> Reattach(std::vector<std::string>* lost) override {
    return supervisor_.Reattach([this](const TaskLaunch& l) { return AdoptionPlan(l); }, lost);
  }

  std::string LogPath(const std::string& task_id) const { return supervisor_.LogPath(task_id); }

 protected:
  explicit SupervisedExecutor(SupervisorOptions options) : supervisor_(std::move(options)) {}
  // What stopping an adopted task needs (LaunchPlan's stop_argv, kill_argv, helper_env); the
  // default: signals.
  virtual LaunchPlan AdoptionPlan(const TaskLaunch& launch) const {
    (void)launch;
    return {};
  }
  TaskSupervisor supervisor_;
};

}  // namespace dgpu::agent
