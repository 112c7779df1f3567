// The replay engine of dgpu-sim: a discrete-event loop in virtual time over a workload and a
// cluster, driving either the real scheduling core (policy dgpu) or a model of the original
// system's placement (policy original).
//
// Events are arrivals (the workload, already sorted) and completions (a min-heap keyed by
// (time, sequence)). At each distinct timestamp every event of that time is applied (completions,
// then arrivals in trace order), then ONE scheduling pass runs and each task it starts gets a
// completion event at now + duration. A job asking for more GPUs than any node of a matching
// model has is rejected (counted, never submitted). Results depend only on the inputs and the
// seed; only the wall-clock fields vary between runs. Not thread-safe; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/types.h"
#include "sim/cluster.h"
#include "sim/workload.h"

namespace dgpu::sim {

enum class Policy : uint8_t {
  kDgpu,      // The real core: best-fit, one node per task, bounded bypass.
  kOriginal,  // Random idle GPUs from the whole cluster, possibly on several nodes.
};
std::string_view ToString(Policy p);
std::optional<Policy> ParsePolicy(std::string_view s);

struct SimOptions {
  Policy policy = Policy::kDgpu;
  double online_percent = 0.7;
  int max_bypass = 16;
  uint64_t seed = 1;  // Policy original: the GPU picks.
  // Simulated time at which the replay stops (from time 0 = the first arrival); nullopt: run
  // until no event is left.
  std::optional<core::TimeMicros> max_time;
};

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

  uint64_t jobs = 0;                   // In the workload.
  uint64_t not_arrived = 0;            // Arrive after max_time.
  uint64_t rejected_exceeds_node = 0;  // More GPUs than any node of a matching model has.
  uint64_t rejected_no_model = 0;      // No node has a matching GPU model.
  uint64_t submitted = 0;
  uint64_t started = 0;
  uint64_t completed = 0;
  uint64_t running_at_end = 0;
  uint64_t pending_at_end[core::kPriorityCount] = {0, 0};

  // Queueing delay (submit -> start) of started jobs: [high, low, all].
  Distribution queueing_delay[core::kPriorityCount + 1];
  Distribution completion_time;  // Submit -> finish of completed jobs.

  core::TimeMicros makespan = 0;  // First arrival to the last event (or max_time).
  double busy_gpu_seconds = 0;    // Within the makespan.
  double utilization = 0;         // busy_gpu_seconds / (total_gpus * makespan).

  // Fragmentation: the time, after a pass, during which some queue head waits with reason
  // no_node_fits although the free GPUs of its model add up to its request, and the free GPUs
  // integrated over that time.
  core::TimeMicros fragmented_time = 0;
  double fragmented_free_gpu_seconds = 0;

  // Tasks whose GPUs span several nodes (policy original only) and the nodes they span in total.
  uint64_t multi_node_tasks = 0;
  uint64_t multi_node_task_nodes = 0;

  uint64_t decisions = 0;  // Start decisions.
  uint64_t passes = 0;     // Scheduling passes (= distinct event timestamps).
  // Wall-clock and process CPU time of the event loop alone; they vary between runs. CPU time
  // is the steadier figure on a loaded machine.
  double replay_wall_seconds = 0;
  double replay_cpu_seconds = 0;
};

// Runs the replay. InvalidArgument for bad options (online_percent outside [0,1], max_bypass <
// 1) or a cluster that does not validate.
StatusOr<SimResult> Simulate(const Workload& workload, const ClusterSpec& cluster,
                             const SimOptions& options);

}  // namespace dgpu::sim
