// Why a pending task waits, node by node (SchedulerCore::ExplainPending): each node is counted
// by the first rule that turns the task away, with the same checks a pass makes.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/core_internal.h"

namespace dgpu::core {

namespace {

// The rules in the order a pass applies them.
enum class Rule : uint8_t {
  kOffline,
  kMode,
  kModel,
  kGpuCount,
  kSelector,
  kFilter,
  kNeverRoom,
  kKept,
  kFreeGpus,
  kFreeRoom,
};

std::string ModeText(NodeMode mode) {
  switch (mode) {
    case NodeMode::kCordoned:
      return "cordoned";
    case NodeMode::kDraining:
      return "draining";
    case NodeMode::kReleasing:
      return "being released";
    case NodeMode::kSchedulable:
      break;
  }
  return "not schedulable";
}

std::string ShortageText(PendingReason r, bool free) {
  return std::string("with too little ") + (free ? "free " : "") +
         (r == PendingReason::kInsufficientCpu ? "CPU" : "memory");
}

}  // namespace

std::string SchedulerCore::PendingDetail::Text() const {
  if (nodes == 0) return "no node is registered";
  std::string out = std::to_string(available) + " of " + std::to_string(nodes) +
                    (nodes == 1 ? " node" : " nodes") +
                    (needed > 1 ? " can take a member (it needs " + std::to_string(needed) + ")"
                                : " can take it");
  for (size_t i = 0; i < rejected.size(); ++i) {
    out += i == 0 ? "; " : ", ";
    out += std::to_string(rejected[i].second) + " " + rejected[i].first;
  }
  return out;
}

std::optional<SchedulerCore::PendingDetail> SchedulerCore::ExplainPending(TaskNumber id) const {
  const TaskRecord* t = tasks_.Find(id);
  if (t == nullptr || t->status != TaskStatus::kPending) return std::nullopt;
  const TaskSpec& spec = t->spec;
  const int per_node = GpusPerNode(spec);
  // ModelsFor caches its answers; asking it changes nothing a pass sees.
  const std::vector<int>& models = const_cast<SchedulerCore*>(this)->ModelsFor(spec.gpu_model);
  // Each selector entry's set of nodes (none: no node has that label).
  std::vector<std::optional<PlacementIndex::SetId>> label_sets;
  label_sets.reserve(spec.node_selector.size());
  for (const auto& [key, value] : spec.node_selector) label_sets.push_back(LabelSet(key, value));
  PendingDetail detail;
  detail.needed = std::max(1, spec.nodes);
  // Counted by rule and what it names (a mode, a selector entry, a filter, a task, whether the
  // node has unhealthy GPUs, the shortage); the words are made once per rule at the end.
  std::map<std::pair<Rule, uint64_t>, int> rejected;
  auto reject = [&](Rule rule, uint64_t what = 0) { ++rejected[{rule, what}]; };
  for (const auto& ptr : nodes_) {
    const NodeState& node = *ptr;
    ++detail.nodes;
    if (!node.online) {
      reject(Rule::kOffline);
      continue;
    }
    if (node.mode != NodeMode::kSchedulable) {
      reject(Rule::kMode, static_cast<uint64_t>(node.mode));
      continue;
    }
    // The model of the node's with the most usable GPUs, and the most of them free for t.
    int capacity = 0;
    int free = 0;
    for (int m : models) {
      const NodeState::ModelSlice* s = const_cast<NodeState&>(node).Slice(m);
      if (s == nullptr) continue;
      capacity = std::max(capacity, s->capacity);
      free = std::max(free, Available(node, m, id).gpus);
    }
    if (capacity == 0 || capacity < per_node) {
      reject(capacity == 0 ? Rule::kModel : Rule::kGpuCount, node.any_unhealthy ? 1 : 0);
      continue;
    }
    // The selector on the labels' bits (as the pass tests it), then the configured filters.
    const auto missing = std::find_if(label_sets.begin(), label_sets.end(), [&](const auto& set) {
      return !set || !index_.InSet(*set, node.slot);
    });
    if (missing != label_sets.end()) {
      reject(Rule::kSelector, static_cast<uint64_t>(missing - label_sets.begin()));
      continue;
    }
    if (const FilterVerdict v = CheckFilters(*t, node, /*selector_checked=*/true);
        v.kind != FilterVerdict::kPasses) {
      reject(Rule::kFilter, v.which);
      continue;
    }
    if (any_node_resources_) {
      if (const PendingReason r = node.ResourceShortage(spec, /*empty=*/true);
          r != PendingReason::kNone) {
        reject(Rule::kNeverRoom, static_cast<uint64_t>(r));
        continue;
      }
    }
    // The starvation guard's nodes take no other task (a preemption's promise is in `free`).
    const Reservation* kept = nullptr;
    for (const Reservation& r : reservations_) {
      if (!r.preemption && r.task != id &&
          std::find(r.slots.begin(), r.slots.end(), node.slot) != r.slots.end()) {
        kept = &r;
        break;
      }
    }
    if (kept != nullptr) {
      reject(Rule::kKept, kept->task);
      continue;
    }
    if (free < per_node) {
      reject(Rule::kFreeGpus);
      continue;
    }
    if (any_node_resources_) {
      if (const PendingReason r = node.ResourceShortage(spec); r != PendingReason::kNone) {
        reject(Rule::kFreeRoom, static_cast<uint64_t>(r));
        continue;
      }
    }
    ++detail.available;
  }
  const std::string gpus = spec.gpu_model.empty() ? "GPUs" : spec.gpu_model + " GPUs";
  const std::string count = std::to_string(per_node);
  for (const auto& [key, n] : rejected) {
    const auto [rule, what] = key;
    std::string text;
    switch (rule) {
      case Rule::kOffline:
        text = "offline";
        break;
      case Rule::kMode:
        text = ModeText(static_cast<NodeMode>(what));
        break;
      case Rule::kModel:
        text = (what != 0 ? "without healthy " : "without ") + gpus;
        break;
      case Rule::kGpuCount:
        text = "with fewer than " + count + (what != 0 ? " healthy " : " ") + gpus;
        break;
      case Rule::kSelector:
        text = "without label " + spec.node_selector[what].first + "=" +
               spec.node_selector[what].second;
        break;
      case Rule::kFilter:
        text = "rejected by filter " + std::string(config_.policies.filters[what]->name());
        break;
      case Rule::kNeverRoom:
      case Rule::kFreeRoom:
        text = ShortageText(static_cast<PendingReason>(what), rule == Rule::kFreeRoom);
        break;
      case Rule::kKept:
        text = "kept for " + FormatTaskId(what);
        break;
      case Rule::kFreeGpus:
        text = per_node == 1 ? "with no free " + gpus.substr(0, gpus.size() - 1)
                             : "with fewer than " + count + " free " + gpus;
        break;
    }
    detail.rejected.emplace_back(std::move(text), n);
  }
  return detail;
}

}  // namespace dgpu::core
