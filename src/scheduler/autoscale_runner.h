// AutoscaleRunner: the scheduler's side of autoscaling (core/autoscale.h).
//
// Every tick on the owner thread (while this scheduler leads) it gives the planner the queue
// heads, the nodes with the group their agents named (agent.node_group) and the quotas, then
// carries out the plan: a node to release is made `releasing` first (durable, so that no task
// lands there and a new leader knows), then its group's scale_down_program runs; a group to
// grow gets its scale_up_program. Programs run on the runner's own threads with
// autoscale.program_timeout; how they ended comes back to the owner thread. A failed release
// makes its node schedulable again; a released node that has gone is forgotten (its mode record
// dropped). Stop() kills programs still running.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "core/autoscale.h"
#include "scheduler/core_loop.h"
#include "scheduler/worker_pool.h"

namespace dgpu::scheduler {

struct AutoscaleStatus {
  bool enabled = false;
  common::AutoscaleConfig config;
  std::vector<core::Autoscaler::GroupView> groups;
};

class AutoscaleRunner {
 public:
  // `online_percent` and `borrowing` as the core's configuration; the loop must outlive Stop().
  AutoscaleRunner(common::AutoscaleConfig config, double online_percent, bool borrowing,
                  CoreLoop* loop);
  ~AutoscaleRunner();
  AutoscaleRunner(const AutoscaleRunner&) = delete;
  AutoscaleRunner& operator=(const AutoscaleRunner&) = delete;

  // Checks that every program exists and is executable: InvalidArgument naming the key.
  Status CheckPrograms() const;
  // Kills programs still running and joins the threads; their results are dropped. Idempotent.
  void Stop();

  // Owner thread.
  // A node of `group` registered with `gpus`; a node whose GPUs are not its group's (count or
  // model) is logged: the planner sizes the group by its configuration.
  void NodeRegistered(const std::string& node_id, const std::string& group,
                      const std::vector<core::GpuInfo>& gpus);
  void Tick(CoreLoop::Context& c);
  AutoscaleStatus View() const;

 private:
  void RunProgram(std::vector<std::string> argv,
                  std::function<void(CoreLoop::Context&, const Status&)> done);
  void Release(CoreLoop::Context& c, const core::AutoscalePlan::Down& down);
  // A release that failed or whose node has gone: a node still `releasing` becomes schedulable
  // (its mode record dropped).
  void EndRelease(CoreLoop::Context& c, const std::string& node);

  const common::AutoscaleConfig config_;
  core::Autoscaler planner_;
  CoreLoop* loop_;
  WorkerPool programs_;
  std::atomic<bool> stopping_{false};
  // Owner thread only.
  std::unordered_map<std::string, int> node_group_;  // -1: a group not configured.
  std::set<std::string> unknown_groups_;             // Logged once each.
  core::ScaleInputs inputs_;
  std::vector<core::ScaleNode> nodes_;
};

// The planner's settings from the configuration.
core::AutoscaleSettings ToAutoscaleSettings(const common::AutoscaleConfig& config,
                                            double online_percent, bool borrowing);

}  // namespace dgpu::scheduler
