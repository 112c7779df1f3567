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
// agent's own).
struct Victim {
  TaskNumber task = 0;
  int32_t grace_seconds = -1;
};

// Post-filter stage: called for a queue head that cannot start for a reason that GPUs freeing
// up would remove (quota_exhausted, no_node_fits). It may name running tasks to stop: the core
// stops them for `preempt` (they keep their GPUs until their agents confirm, then go back to
// their queues), and the head starts in a later pass once the GPUs are free. A hook must not
// name victims again while earlier ones are still stopping for the same head.
class PostFilterHook {
 public:
  virtual ~PostFilterHook() = default;
  virtual std::string_view name() const = 0;
  virtual std::vector<Victim> Victims(const SchedulerCore& core, const Task& waiting,
                                      PendingReason why) = 0;
};

struct Policies {
  std::vector<std::shared_ptr<const NodeFilter>> filters;  // All must pass.
  std::shared_ptr<PostFilterHook> post_filter;             // None: nothing is preempted.
};

}  // namespace dgpu::core
