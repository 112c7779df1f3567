// ReferenceScheduler: the scheduling rules of SchedulerCore written the plain way, for tests.
//
// It takes the same commands and answers the same queries as SchedulerCore, but keeps its state
// in ordinary containers and recomputes everything by full scans: the queue is every pending
// task sorted by (queue_seq, task), the quota use is a sum over the tasks that hold GPUs, a best
// fit is a scan of every GPU of every online node. No caches, no indexes, no pass skipping. It is
// slow and meant to be obviously correct; reference_test.cc drives it and the core with the same
// random commands and requires the same decisions and the same state.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/scheduler_core.h"
#include "core/types.h"

namespace dgpu::core::testing {

class ReferenceScheduler {
 public:
  explicit ReferenceScheduler(CoreConfig config);

  // Commands, with SchedulerCore's meaning, answers and error messages.
  StatusOr<TaskNumber> Submit(const TaskSpec& spec, TimeMicros now);
  Status Cancel(TaskNumber id, TimeMicros now, int32_t grace_seconds = -1);
  Status StopTask(TaskNumber id, StopReason reason, int32_t grace_seconds, TimeMicros now);
  Status RegisterNode(const std::string& node_id, const std::string& address,
                      const std::vector<GpuInfo>& gpus, const std::vector<RunningReport>& running,
                      const std::vector<FinishReport>& finished, TimeMicros now);
  Status Heartbeat(const std::string& node_id, TimeMicros now);
  Status NodeLost(const std::string& node_id, TimeMicros now);
  Status TaskStarted(TaskNumber id, const std::string& node_id, TimeMicros now);
  Status TaskFinished(const std::string& node_id, const FinishReport& report, TimeMicros now);
  Status SetOnlinePercent(double online_percent, TimeMicros now);
  void Tick(TimeMicros now);
  void Schedule(TimeMicros now);
  void Forget(TaskNumber id);

  // Queries.
  std::vector<Decision> TakeDecisions();
  const std::map<TaskNumber, Task>& tasks() const { return tasks_; }
  // kNone if not pending; kQueued behind the head of its shape; else what the last pass found.
  PendingReason ReasonOf(TaskNumber id) const;
  QuotaView Quota() const;
  std::vector<TaskNumber> QueueOrder(Priority p) const;  // Pending tasks, in queue order.
  std::vector<NodeView> Nodes() const;                   // By node id.
  std::vector<GpuView> Gpus() const;                     // By node id, then GPU index.
  std::optional<std::string> ReservedNode(Priority p) const;
  // Times a held oldest task was found unable to start as things are, which ended its hold.
  int holds_released() const { return holds_released_; }

 private:
  struct Gpu {
    GpuInfo info;
    TaskNumber task = 0;  // 0: free.
  };
  struct Node {
    std::string address;
    bool online = false;
    TimeMicros last_heartbeat = 0;
    std::vector<Gpu> gpus;  // Sorted by index.
  };
  // The starvation guard of one priority.
  struct Guard {
    TaskNumber oldest = 0;  // The oldest pending task when the last pass looked.
    int bypassed = 0;       // Younger tasks started while it waited.
    bool holding = false;
    std::optional<std::string> reserved_node;
  };
  // Pending tasks of one priority with the same wanted model and GPU count.
  using ShapeKey = std::pair<std::string, int>;
  struct Fit {
    std::string node_id;
    std::string model;
  };

  static bool Holds(const Task& t) { return t.status == TaskStatus::kRunning || t.stopping; }
  static ShapeKey ShapeOf(const Task& t) { return {t.spec.gpu_model, t.spec.gpu_count}; }
  bool HeldOn(const Task& t, const std::string& node_id) const;
  Guard& GuardOf(const Task& t) { return guards_[static_cast<int>(t.spec.priority)]; }

  int UsedGpus(Priority p) const;
  int TotalOnlineGpus() const;
  int QuotaOf(Priority p) const;
  std::vector<std::string> MatchingModels(const std::string& wanted) const;
  std::optional<Fit> BestFit(const Task& t, const std::set<std::string>& excluded) const;
  std::optional<std::string> MostFreeNode(const Task& t,
                                          const std::set<std::string>& excluded) const;
  PendingReason Diagnose(const Task& t) const;

  void SchedulePriority(Priority p, TimeMicros now);
  PendingReason TryStart(Task& t, const std::set<std::string>& excluded, TimeMicros now);
  bool Hold(Task& oldest, PendingReason reason, std::set<std::string>& excluded);
  void Start(Task& t, const Fit& fit, TimeMicros now);
  void LeaveQueue(const Task& t);
  void Release(Task& t);
  void RequeueOrFail(Task& t, TimeMicros now);
  void EndStop(Task& t, StopReason reason, TimeMicros now);
  void LoseHeld(Task& t, TimeMicros now);
  void ApplyFinish(Task& t, const FinishReport& report, TimeMicros now);
  void TakeOffline(const std::string& node_id, TimeMicros now);
  bool Claim(Node& node, const std::vector<int>& indices, TaskNumber task) const;
  void Adopt(Task& t, const std::string& node_id, const std::vector<int>& indices);

  CoreConfig config_;
  TaskNumber next_number_ = 1;
  int64_t next_back_seq_ = 1;   // Submissions count up...
  int64_t next_front_seq_ = 0;  // ...tasks put back at the head count down.
  std::map<TaskNumber, Task> tasks_;
  std::map<std::string, Node> nodes_;
  std::vector<std::string> node_order_;  // First registration order: Tick visits nodes so.
  std::vector<std::string> models_;      // In the order they were first seen.
  // Why the first task of each shape did not start, as of the last pass that tried it.
  std::map<std::pair<Priority, ShapeKey>, PendingReason> shape_reasons_;
  Guard guards_[kPriorityCount];
  std::vector<Decision> decisions_;
  int holds_released_ = 0;
};

}  // namespace dgpu::core::testing
