// Extension points of the scheduling pass: what a policy plugs into besides the default stages
// (see pass.cc and "How to add a policy" in docs/architecture.md).
//
// A policy is a small object in CoreConfig::policies. It is called on the core's owner thread,
// during a pass, with read-only views; it must not keep references past the call, and it must
// be deterministic (a standby and a replay must decide the same).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace dgpu::core {

class SchedulerCore;

// What a filter sees of a node.
struct NodeFacts {
  const std::string& id;
  const Labels& labels;
};

// Filter stage: whether a task may run on a node at all, whatever its free GPUs. The default
// filters (GPU model, node state, GPU health) are built into the placement index; filters
// added here are asked for each node the index offers, in best-fit order, until one passes.
//
// The pass looks only at the head of each queue shape (priority, model, GPU count): a filter
// must decide the same for every task of a shape, so every task field it reads must be part of
// the shape's key.
class NodeFilter {
 public:
  virtual ~NodeFilter() = default;
  virtual std::string_view name() const = 0;
  virtual bool Feasible(const Task& task, const NodeFacts& node) const = 0;
};

// A running task to stop so that a waiting one can start, and its grace period (-1: the
// task's `preemption_grace_seconds`, else the configuration's `preemption.grace_period`).
struct Victim {
  TaskNumber task = 0;
  int32_t grace_seconds = -1;
};

// A post-filter's answer for a waiting task: the running tasks to stop, and the nodes to keep for
// it while they stop, one per member (a task on one node: one). Either both or neither: a plan
// with victims whose nodes do not name `nodes` distinct placeable nodes is not applied (nothing
// is stopped). An empty plan: nothing to do.
struct PreemptionPlan {
  std::vector<Victim> victims;
  std::vector<std::string> nodes;
};

// Post-filter stage: called for a queue head that cannot start for a reason that room freed on
// some node would remove (no_node_fits, quota_exhausted, insufficient_cpu, insufficient_memory),
// on every path of the pass. The core applies a plan the same way for every post-filter: each
// victim is stopped for `preempt` (it keeps its GPUs until its agent confirms, then goes back to
// its queue at its old position), the plan's nodes are kept for the waiting task (no other task
// starts on what the victims free there, and their GPUs count against its team's cap while
// kept), and the task starts there once the room is free. While a plan's victims still stop and
// its nodes will then hold the task, the core does not ask again for that task.
//
// None configured: the built-in reclaim of borrowed GPUs (quota.borrowing; preemption.cc) is
// the post-filter. One configured replaces it.
class PostFilterHook {
 public:
  virtual ~PostFilterHook() = default;
  virtual std::string_view name() const = 0;
  virtual PreemptionPlan Plan(const SchedulerCore& core, const Task& waiting,
                              PendingReason why) = 0;
};

struct Policies {
  std::vector<std::shared_ptr<const NodeFilter>> filters;  // All must pass.
  // None: the built-in reclaim of borrowed GPUs (nothing is preempted without borrowing).
  std::shared_ptr<PostFilterHook> post_filter;
};

}  // namespace dgpu::core
