// Autoscaler: which node groups to grow and which idle nodes to give back, in the style of
// Slurm's power saving (ResumeProgram / SuspendProgram with ResumeTimeout) and Kubernetes'
// cluster autoscaler (pending work packed onto a group's node template).
//
// A planner without threads or I/O, driven by the scheduler daemon and by the simulator alike.
// Plan() takes the queue heads (with how many tasks wait in each shape), the nodes with their
// group and the class quotas; it answers with programs to run and nodes to forget. The caller
// runs the programs (off its owner thread) and reports how they ended (UpDone, DownDone).
//
// Rules:
//  - Demand: a queue head that waits for room for scale_up_delay, with every task of its shape
//    (all of one size). Room: no node of its model and size has it (no_node_fits,
//    exceeds_cluster, no_gpu_model), its class quota is used up (quota_exhausted: quotas grow
//    with the cluster), or it waits for borrowed GPUs to be taken back
//    (waiting_for_preemption). A team at its max_gpus, a task behind the head or in its retry
//    backoff is no demand: nodes would not let it start.
//  - Scale up: the demand is packed, largest tasks first, onto the nodes already asked for
//    (a program running, or booting), then onto new nodes of the first group (in configuration
//    order) whose model the task accepts and whose nodes are large enough, up to max_nodes.
//    Without borrowing a class takes new GPUs only within its quota grown by those nodes.
//    A group below min_nodes is brought up to it without waiting.
//  - One scale-up program per group at a time. Its nodes count as booting from its success
//    until a node of the group registers that was not there before, or boot_timeout passes
//    (they are then given up, and the view says so).
//  - Scale down: a schedulable node of a group, online with no task for idle_timeout, is
//    released while its group keeps min_nodes and is not growing: the caller first makes it
//    `releasing` (cordoned, durable), then runs the scale-down program. On success the node is
//    expected to leave; once offline it is forgotten (the caller drops its mode record). Without
//    borrowing, no node is released whose GPUs the quota of a class with tasks waiting for it
//    stands on. On
//    failure the caller makes it schedulable again. A releasing node still online boot_timeout
//    after its program succeeded, or one a new leader finds, is released again.
//  - A failed program (non-zero exit, timeout) holds its group back for retry_delay, doubling
//    with each failure in a row up to 10 minutes; the last error stays in the view.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "core/scheduler_core.h"
#include "core/types.h"

namespace dgpu::core {

struct NodeGroupSpec {
  std::string name;
  std::string model;  // The GPU model of its nodes, matched as tasks' gpu_model (gpu_model.h).
  int gpus_per_node = 8;
  int min_nodes = 0;
  int max_nodes = 1;
};

struct AutoscaleSettings {
  TimeMicros scale_up_delay = 30 * kMicrosPerSecond;
  TimeMicros idle_timeout = 600 * kMicrosPerSecond;
  TimeMicros boot_timeout = 600 * kMicrosPerSecond;
  TimeMicros retry_delay = 30 * kMicrosPerSecond;
  double online_percent = 0.7;  // The core's, for the quota rule.
  bool borrowing = false;
  std::vector<NodeGroupSpec> groups;
};

// A queue head as the core reports it, with the number of tasks in its shape.
struct ScaleDemand {
  Priority priority = Priority::kLow;
  std::string_view model;
  int gpu_count = 0;
  size_t tasks = 0;
  PendingReason reason = PendingReason::kQueued;
};

struct ScaleNode {
  std::string_view id;
  int group = -1;  // Index in AutoscaleSettings::groups; -1: not autoscaled.
  bool online = false;
  NodeMode mode = NodeMode::kSchedulable;
  int tasks = 0;
};

// GPUs on online nodes and in use per class (the core's QuotaView).
struct ScaleQuota {
  int total_gpus = 0;
  int used[kPriorityCount] = {0, 0};
};

struct AutoscalePlan {
  struct Up {
    int group = 0;
    int count = 0;
    size_t waiting_tasks = 0;  // Demand tasks this plan placed on the group.
  };
  struct Down {
    int group = 0;
    std::string node;
  };
  std::vector<Up> up;               // Run scale_up_program GROUP COUNT.
  std::vector<Down> down;           // Mark releasing, then run scale_down_program GROUP NODE.
  std::vector<std::string> forget;  // Released and gone: drop the node's mode record.
  // Failures this plan found (nodes that did not boot, a released node still online), each
  // "group: why", to be logged.
  std::vector<std::string> errors;
  bool empty() const { return up.empty() && down.empty() && forget.empty(); }
};

// What the planner reads from the core, gathered with buffers kept between looks: the queue
// heads as demand and the quota figures.
class ScaleInputs {
 public:
  void Read(const SchedulerCore& core);
  const std::vector<ScaleDemand>& demand() const { return demand_; }
  const ScaleQuota& quota() const { return quota_; }

 private:
  std::vector<SchedulerCore::QueueHead> heads_;  // demand_ points into their models.
  std::vector<ScaleDemand> demand_;
  ScaleQuota quota_;
};

class Autoscaler {
 public:
  explicit Autoscaler(AutoscaleSettings settings);

  const AutoscaleSettings& settings() const { return settings_; }
  // The group named so, or -1.
  int GroupIndex(std::string_view name) const;

  AutoscalePlan Plan(std::span<const ScaleDemand> demand, std::span<const ScaleNode> nodes,
                     const ScaleQuota& quota, TimeMicros now);

  // How a program of the plan ended (OK, or why not).
  void UpDone(int group, int count, const Status& result, TimeMicros now);
  void DownDone(const std::string& node, const Status& result, TimeMicros now);

  struct NodeView {
    std::string id;
    std::string state;          // "busy", "idle", "releasing", "offline"
    TimeMicros idle_since = 0;  // Idle: since when.
  };
  struct GroupView {
    NodeGroupSpec spec;
    int online = 0;                // Online nodes, releasing ones included.
    int idle = 0;                  // Of those, schedulable without a task.
    int releasing = 0;             // Being released.
    int requested = 0;             // Nodes of a scale-up program still running.
    int booting = 0;               // Asked for, not registered yet.
    size_t waiting_tasks = 0;      // Demand tasks packed onto this group by the last plan.
    uint64_t nodes_requested = 0;  // Since start: nodes asked for by successful programs.
    uint64_t nodes_released = 0;   // Since start: successful scale-down programs.
    uint64_t failures = 0;         // Since start: failed programs and boot timeouts.
    TimeMicros last_scale_up = 0;
    TimeMicros last_scale_down = 0;
    std::string last_error;  // Empty: none since the last success.
    TimeMicros last_error_at = 0;
    TimeMicros retry_at = 0;      // Held back until then after a failure (0: not held).
    std::vector<NodeView> nodes;  // By id.
  };
  std::vector<GroupView> View() const;

 private:
  struct Boot {
    int count = 0;
    TimeMicros deadline = 0;
  };
  struct GroupState {
    int requesting = 0;  // Nodes of the scale-up program running now.
    int early = 0;       // Nodes that registered while it ran (they need no boot).
    std::deque<Boot> booting;
    int booting_total = 0;
    TimeMicros retry_at = 0;
    TimeMicros backoff = 0;
    GroupView view;  // Counts of the last plan.
  };
  struct NodeTrack {
    int group = -1;
    bool member = false;   // Seen online in its group (a later registration is no boot).
    bool program = false;  // A scale-down program runs for it.
    TimeMicros idle_since = -1;
    TimeMicros released_at = -1;  // Its program succeeded then.
  };

  // Records a failure; with `plan`, also in plan->errors.
  void Fail(int group, const std::string& error, TimeMicros now, AutoscalePlan* plan = nullptr);
  void Succeeded(int group);
  bool HeldBack(int group, TimeMicros now) const;
  void ExpireBoots(int group, TimeMicros now, AutoscalePlan& plan);

  AutoscaleSettings settings_;
  std::vector<std::string> models_;  // groups' models, for MatchGpuModels.
  std::vector<GroupState> groups_;
  std::unordered_map<std::string, NodeTrack> nodes_;
  // Since when each (priority, model, GPU count) has waited for room.
  std::map<std::tuple<int, std::string, int>, TimeMicros, std::less<>> blocked_since_;
};

}  // namespace dgpu::core
