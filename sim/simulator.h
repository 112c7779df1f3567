// The replay engine of dgpu-sim: a discrete-event loop in virtual time over a workload and a
// cluster, driving either the real scheduling core (policy dgpu) or a model of the original
// system's placement (policy original).
//
// Events are arrivals (the workload, already sorted) and completions (a min-heap keyed by
// (time, sequence)). At each distinct timestamp every event of that time is applied (completions,
// then arrivals in trace order), then ONE scheduling pass runs and each task it starts gets a
// completion event at now + duration. A job asking for more GPUs than any node of a matching
// model has runs as a gang (policy dgpu): ceil(gpus / largest node) members of ceil(gpus /
// members) GPUs each, one per node, started together and ended together; the original policy
// spreads it over idle GPUs anywhere. A job the cluster can never hold is rejected (counted,
// never submitted). Results depend only on the inputs and the seed; only the wall-clock fields
// vary between runs. Not thread-safe; no I/O.
//
// With borrowing (policy dgpu), a stop order for a preemption ends its task `grace` seconds
// later: a "stopped" event then reports the task ended (exit 143) and the core puts it back in
// its queue; its normal completion is dropped (each event carries the job's start number). A
// preempted job restarts from zero.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/autoscale.h"
#include "core/types.h"
#include "sim/cluster.h"
#include "sim/teams.h"
#include "sim/workload.h"

namespace dgpu::sim {

enum class Policy : uint8_t {
  kDgpu,      // The real core: best-fit, one node per task, bounded bypass.
  kOriginal,  // Random idle GPUs from the whole cluster, possibly on several nodes.
};
std::string_view ToString(Policy p);
std::optional<Policy> ParsePolicy(std::string_view s);

// Where team guarantees come from.
enum class TeamGuarantees : uint8_t {
  kNone,          // Teams share their classes.
  kProportional,  // Computed from the workload (ProportionalGuarantees).
  kGiven,         // SimOptions::teams.
};
std::string_view ToString(TeamGuarantees g);

struct SimOptions {
  Policy policy = Policy::kDgpu;
  double online_percent = 0.7;
  int max_bypass = 16;
  uint64_t seed = 1;  // Policy original: the GPU picks.
  // Simulated time at which the replay stops (from time 0 = the first arrival); nullopt: run
  // until no event is left.
  std::optional<core::TimeMicros> max_time;
  // Jobs larger than a node run as gangs (see above); false: they are rejected, as before gangs
  // existed (for figures comparable with those).
  bool gangs = true;
  // The core's scheduler.topology_key (policy dgpu): a label key some node group of the
  // cluster has. Empty: gangs by best fit alone.
  std::string topology_key;
  // The core is told the cluster file's NVLink groups (policy dgpu); false: it is not (GPUs are
  // taken lowest first), and the report still says how placements lie over the groups.
  bool nvlink = true;

  // Backfill (policy dgpu only): the core's scheduler.backfill and backfill_depth, with every
  // job's time limit its real run time x limit_factor (rounded up to whole seconds; 0: no limits).
  bool backfill = false;
  int backfill_depth = 100;
  double limit_factor = 0;

  // Teams, borrowing and preemption (policy dgpu only): the core's settings of the same names.
  bool borrowing = false;
  int preemption_grace_seconds = 30;
  core::TimeMicros min_runtime = 0;
  TeamGuarantees team_guarantees = TeamGuarantees::kNone;
  TeamLimitsMap teams;  // kGiven: limits by core team name.

  // Autoscaling (policy dgpu only): the cluster is the node groups at max_nodes, of which
  // min_nodes are up at time 0; the real planner (core/autoscale.h) runs every `tick`; a
  // scale-up program succeeds at once and its nodes register `boot_time` later; a release
  // takes its node away at once. The cluster given to Simulate must be the groups, in order,
  // each with count = max_nodes (AutoscaleCluster).
  struct Autoscale {
    core::AutoscaleSettings settings;
    core::TimeMicros boot_time = 120 * core::kMicrosPerSecond;
    core::TimeMicros tick = 10 * core::kMicrosPerSecond;
  };
  std::optional<Autoscale> autoscale;
};

// The cluster an autoscaled replay runs on: each group at its max_nodes.
ClusterSpec AutoscaleCluster(const core::AutoscaleSettings& settings);

// A distribution of durations, in seconds. Percentiles are nearest-rank: the ceil(p * n)-th
// smallest value.
struct Distribution {
  uint64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
};

struct SimResult {
  Policy policy = Policy::kDgpu;
  int nodes = 0;
  int total_gpus = 0;

  uint64_t jobs = 0;         // In the workload.
  uint64_t not_arrived = 0;  // Arrive after max_time.
  // Too large for the cluster: more GPUs than any node of a matching model has, and (policy
  // dgpu) too few such nodes to run it as a gang.
  uint64_t rejected_exceeds_node = 0;
  uint64_t rejected_no_model = 0;  // No node has a matching GPU model.
  uint64_t submitted = 0;
  uint64_t started = 0;
  uint64_t completed = 0;
  uint64_t running_at_end = 0;
  uint64_t pending_at_end[core::kPriorityCount] = {0, 0};

  // Queueing delay (submit -> first start) of started jobs: [high, low, all].
  Distribution queueing_delay[core::kPriorityCount + 1];
  Distribution completion_time;  // Submit -> finish of completed jobs.
  // Jobs larger than a node (policy dgpu runs them as gangs, see above), submitted, and the
  // queueing delay of those that started.
  uint64_t gangs = 0;
  Distribution gang_queueing_delay;

  core::TimeMicros makespan = 0;  // First arrival to the last event (or max_time).
  double busy_gpu_seconds = 0;    // Within the makespan.
  double utilization = 0;         // busy_gpu_seconds / (total_gpus * makespan).

  // Fragmentation: the time, after a pass, during which some queue head waits with reason
  // no_node_fits although the free GPUs of its model add up to its request, and the free GPUs
  // integrated over that time.
  core::TimeMicros fragmented_time = 0;
  double fragmented_free_gpu_seconds = 0;

  // Starts of tasks whose GPUs span several nodes (policy dgpu: gangs, restarts included) and the
  // nodes they span in total.
  uint64_t multi_node_tasks = 0;
  uint64_t multi_node_task_nodes = 0;
  // Per label key of the cluster (in key order), how those starts spread over its values: the
  // distinct values among each start's nodes (a node without the key is a value of its own),
  // summed, and the starts on one value.
  struct Spread {
    std::string key;
    uint64_t starts = 0;
    uint64_t values = 0;
    uint64_t one_value = 0;
  };
  std::vector<Spread> spread;
  // Policy dgpu on a cluster with NVLink groups: placements of several GPUs on one node (a
  // gang's members each) that one of the node's groups could hold, those inside one group, and
  // the GPUs outside the group holding most of each, summed.
  struct Links {
    uint64_t placements = 0;
    uint64_t in_one_group = 0;
    uint64_t gpus_outside = 0;
  };
  std::optional<Links> links;

  uint64_t decisions = 0;  // Start decisions (a restart after a preemption is one more).
  uint64_t passes = 0;     // Scheduling passes (= distinct event timestamps).

  // Stop orders for preemptions, and the GPU time their tasks had run when they ended (or when
  // the replay stopped), which is lost: a preempted job starts over. Counted in busy time too.
  uint64_t preemptions = 0;
  double preempted_gpu_seconds = 0;

  // Per team and class, for every (team, class) with submitted jobs or a guarantee; by team
  // name, online first.
  struct TeamResult {
    std::string team;
    core::Priority priority = core::Priority::kLow;
    int guarantee = 0;  // As the core applies it.
    uint64_t jobs = 0;  // Submitted.
    Distribution queueing_delay;
    uint64_t preemptions = 0;  // Stop orders its jobs received.
  };
  std::vector<TeamResult> teams;

  // Autoscaling: nodes count as provisioned from their scale-up (boot time included) until
  // their release, or from time 0 for the min_nodes.
  struct AutoscaleResult {
    double provisioned_gpu_seconds = 0;
    double mean_nodes = 0;         // Provisioned node-seconds / makespan.
    int peak_nodes = 0;            // Provisioned at once.
    uint64_t scale_ups = 0;        // Programs run.
    uint64_t nodes_requested = 0;  // By them.
    uint64_t nodes_released = 0;
    uint64_t boot_timeouts = 0;  // Plans' errors (none expected: boots always succeed).
  };
  std::optional<AutoscaleResult> autoscale;
  // Wall-clock and process CPU time of the event loop alone; they vary between runs. CPU time
  // is the steadier figure on a loaded machine.
  double replay_wall_seconds = 0;
  double replay_cpu_seconds = 0;
};

// Runs the replay. InvalidArgument for bad options (online_percent outside [0,1], max_bypass <
// 1, a negative grace or minimum run time, borrowing or guarantees with policy original,
// guarantees that exceed a class quota) or a cluster that does not validate.
StatusOr<SimResult> Simulate(const Workload& workload, const ClusterSpec& cluster,
                             const SimOptions& options);

}  // namespace dgpu::sim
