#include "core/types.h"

#include <algorithm>
#include <charconv>

namespace dgpu::core {

std::string_view ToString(Priority p) { return p == Priority::kHigh ? "high" : "low"; }

std::string_view ToString(TaskStatus s) {
  switch (s) {
    case TaskStatus::kPending:
      return "pending";
    case TaskStatus::kRunning:
      return "running";
    case TaskStatus::kSuccess:
      return "success";
    case TaskStatus::kFailed:
      return "failed";
    case TaskStatus::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string_view ToString(PendingReason r) {
  switch (r) {
    case PendingReason::kNone:
      return "";
    case PendingReason::kQueued:
      return "queued";
    case PendingReason::kQuotaExhausted:
      return "quota_exhausted";
    case PendingReason::kNoNodeFits:
      return "no_node_fits";
    case PendingReason::kNoGpuModel:
      return "no_gpu_model";
    case PendingReason::kExceedsCluster:
      return "exceeds_cluster";
    case PendingReason::kTeamLimit:
      return "team_limit";
    case PendingReason::kWaitingForPreemption:
      return "waiting_for_preemption";
    case PendingReason::kRetryBackoff:
      return "retry_backoff";
    case PendingReason::kInsufficientCpu:
      return "insufficient_cpu";
    case PendingReason::kInsufficientMemory:
      return "insufficient_memory";
    case PendingReason::kNoNodeMatches:
      return "no_node_matches";
    case PendingReason::kDependency:
      return "dependency";
    case PendingReason::kDependencyNeverSatisfied:
      return "dependency_never_satisfied";
    case PendingReason::kReservedFor:
      return "reserved_for";
  }
  return "";
}

std::string_view ToString(DependencyCondition c) {
  switch (c) {
    case DependencyCondition::kAfterOk:
      return "afterok";
    case DependencyCondition::kAfterNotOk:
      return "afternotok";
    case DependencyCondition::kAfterAny:
      return "afterany";
    case DependencyCondition::kAfter:
      return "after";
  }
  return "";
}

std::string_view ToString(DependencyState s) {
  switch (s) {
    case DependencyState::kWaiting:
      return "waiting";
    case DependencyState::kSatisfied:
      return "satisfied";
    case DependencyState::kNeverSatisfied:
      return "never_satisfied";
  }
  return "";
}

std::optional<DependencyCondition> ParseDependencyCondition(std::string_view s) {
  for (auto c : {DependencyCondition::kAfterOk, DependencyCondition::kAfterNotOk,
                 DependencyCondition::kAfterAny, DependencyCondition::kAfter}) {
    if (ToString(c) == s) return c;
  }
  return std::nullopt;
}

std::optional<DependencyState> ParseDependencyState(std::string_view s) {
  for (auto st :
       {DependencyState::kWaiting, DependencyState::kSatisfied, DependencyState::kNeverSatisfied}) {
    if (ToString(st) == s) return st;
  }
  return std::nullopt;
}

std::string_view ToString(GpuStatus s) {
  switch (s) {
    case GpuStatus::kIdle:
      return "idle";
    case GpuStatus::kBusy:
      return "busy";
    case GpuStatus::kOffline:
      return "offline";
    case GpuStatus::kUnhealthy:
      return "unhealthy";
  }
  return "unknown";
}

std::string_view ToString(StopReason r) {
  switch (r) {
    case StopReason::kNone:
      return "";
    case StopReason::kCancel:
      return "cancel";
    case StopReason::kPreempt:
      return "preempt";
    case StopReason::kDrain:
      return "drain";
    case StopReason::kMemberFailure:
      return "member_failure";
    case StopReason::kTimeout:
      return "timeout";
    case StopReason::kGpuFailure:
      return "gpu_failure";
    case StopReason::kReconcile:
      return "reconcile";
    case StopReason::kMemberLost:
      return "member_lost";
    case StopReason::kDisconnected:
      return "disconnected";
  }
  return "unknown";
}

std::string_view ToString(NodeMode m) {
  switch (m) {
    case NodeMode::kSchedulable:
      return "schedulable";
    case NodeMode::kCordoned:
      return "cordoned";
    case NodeMode::kDraining:
      return "draining";
    case NodeMode::kReleasing:
      return "releasing";
  }
  return "unknown";
}

std::string_view NodeStateName(bool online, NodeMode m) {
  if (!online) return "offline";
  if (m == NodeMode::kReleasing) return "cordoned";
  return m == NodeMode::kSchedulable ? "online" : ToString(m);
}

std::string_view ToString(Event::Kind k) {
  switch (k) {
    case Event::Kind::kTaskSubmitted:
      return "task_submitted";
    case Event::Kind::kTaskScheduled:
      return "task_scheduled";
    case Event::Kind::kTaskStarted:
      return "task_started";
    case Event::Kind::kTaskStopping:
      return "task_stopping";
    case Event::Kind::kTaskStopped:
      return "task_stopped";
    case Event::Kind::kTaskRequeued:
      return "task_requeued";
    case Event::Kind::kTaskFinished:
      return "task_finished";
    case Event::Kind::kNodeJoined:
      return "node_joined";
    case Event::Kind::kNodeLost:
      return "node_lost";
    case Event::Kind::kQuotaChanged:
      return "quota_changed";
    case Event::Kind::kNodeStateChanged:
      return "node_state_changed";
    case Event::Kind::kTaskPreempted:
      return "task_preempted";
    case Event::Kind::kTeamChanged:
      return "team_changed";
  }
  return "unknown";
}

bool RequeuesWhenStopped(StopReason r) {
  return r == StopReason::kPreempt || r == StopReason::kDrain || r == StopReason::kGpuFailure ||
         r == StopReason::kMemberLost;
}

std::string_view StopError(StopReason r) {
  switch (r) {
    case StopReason::kCancel:
      return "cancelled";
    case StopReason::kPreempt:
      return "preempted";
    case StopReason::kDrain:
      return "drained";
    case StopReason::kMemberFailure:
      return "member_failed";
    case StopReason::kTimeout:
      return "timeout";
    case StopReason::kGpuFailure:
      return "gpu_unhealthy";
    case StopReason::kMemberLost:
      return "agent_lost";
    case StopReason::kDisconnected:
      return "disconnected";
    case StopReason::kNone:
    case StopReason::kReconcile:
      return "stopped";
  }
  return "stopped";
}

std::optional<Priority> ParsePriority(std::string_view s) {
  if (s == "high") return Priority::kHigh;
  if (s == "low") return Priority::kLow;
  return std::nullopt;
}

std::optional<TaskStatus> ParseTaskStatus(std::string_view s) {
  for (auto st : {TaskStatus::kPending, TaskStatus::kRunning, TaskStatus::kSuccess,
                  TaskStatus::kFailed, TaskStatus::kCancelled}) {
    if (ToString(st) == s) return st;
  }
  return std::nullopt;
}

std::optional<PendingReason> ParsePendingReason(std::string_view s) {
  for (auto r : {PendingReason::kNone, PendingReason::kQueued, PendingReason::kQuotaExhausted,
                 PendingReason::kNoNodeFits, PendingReason::kNoGpuModel,
                 PendingReason::kExceedsCluster, PendingReason::kTeamLimit,
                 PendingReason::kWaitingForPreemption, PendingReason::kRetryBackoff,
                 PendingReason::kInsufficientCpu, PendingReason::kInsufficientMemory,
                 PendingReason::kNoNodeMatches, PendingReason::kDependency,
                 PendingReason::kDependencyNeverSatisfied, PendingReason::kReservedFor}) {
    if (ToString(r) == s) return r;
  }
  return std::nullopt;
}

std::optional<StopReason> ParseStopReason(std::string_view s) {
  for (auto r : {StopReason::kNone, StopReason::kCancel, StopReason::kPreempt, StopReason::kDrain,
                 StopReason::kMemberFailure, StopReason::kTimeout, StopReason::kGpuFailure,
                 StopReason::kReconcile, StopReason::kMemberLost, StopReason::kDisconnected}) {
    if (ToString(r) == s) return r;
  }
  return std::nullopt;
}

std::optional<NodeMode> ParseNodeMode(std::string_view s) {
  for (auto m :
       {NodeMode::kSchedulable, NodeMode::kCordoned, NodeMode::kDraining, NodeMode::kReleasing}) {
    if (ToString(m) == s) return m;
  }
  return std::nullopt;
}

std::optional<ResourceUsage> UsageOf(const Allocation& a) {
  std::optional<ResourceUsage> used;
  for (const NodeAllocation& na : a) {
    if (na.usage == ResourceUsage{}) continue;
    if (!used.has_value()) used.emplace();
    used->cpu_micros += na.usage.cpu_micros;
    used->max_memory_bytes = std::max(used->max_memory_bytes, na.usage.max_memory_bytes);
  }
  return used;
}

int RunningMemberOn(const Allocation& a, std::string_view node_id) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].ended && a[i].node_id == node_id) return static_cast<int>(i);
  }
  return -1;
}

bool HasMemberOn(const Allocation& a, std::string_view node_id) {
  for (const NodeAllocation& m : a) {
    if (m.node_id == node_id) return true;
  }
  return false;
}

bool IsValidTeamName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lower_or_digit(name[0])) return false;
  for (char c : name.substr(1)) {
    if (!lower_or_digit(c) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string FormatTaskId(TaskNumber n) { return "task-" + std::to_string(n); }

Task ArrayMember(const Task& first, int32_t index) {
  Task t = first;
  t.id = first.id + static_cast<TaskNumber>(index);
  t.queue_seq = first.queue_seq + index;
  t.spec.array_index = index;
  return t;
}

std::optional<TaskNumber> ParseTaskId(std::string_view id) {
  constexpr std::string_view kPrefix = "task-";
  if (id.size() <= kPrefix.size() || id.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = id.substr(kPrefix.size());
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  TaskNumber n = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || n == 0) return std::nullopt;
  return n;
}

namespace {

// A name segment: 1-63 of [A-Za-z0-9-_.], beginning and ending with a letter or digit.
bool IsLabelName(std::string_view s) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A DNS subdomain: at most 253 characters, dot-separated lowercase labels of [a-z0-9-].
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string_view part =
        s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (part.empty() || part.size() > 63 || part.front() == '-' || part.back() == '-') return false;
    for (char c : part) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

std::string CheckLabelKey(std::string_view key) {
  const size_t slash = key.find('/');
  if (slash != std::string_view::npos) {
    if (!IsDnsSubdomain(key.substr(0, slash))) {
      return "the prefix before '/' must be a DNS subdomain (lowercase letters, digits, '-' and "
             "'.', at most 253 characters)";
    }
    key = key.substr(slash + 1);
  }
  if (!IsLabelName(key)) {
    return "a label key is 1 to 63 letters, digits, '-', '_' or '.', beginning and ending with a "
           "letter or digit (optionally after a DNS prefix and '/')";
  }
  return "";
}

std::string CheckLabelValue(std::string_view value) {
  if (value.empty() || IsLabelName(value)) return "";
  return "a label value is at most 63 letters, digits, '-', '_' or '.', beginning and ending with "
         "a letter or digit";
}

std::string CheckLinkGroups(const std::vector<std::vector<int>>& groups, int gpus) {
  if (groups.size() > static_cast<size_t>(kMaxLinkGroups)) {
    return "more than " + std::to_string(kMaxLinkGroups) + " groups";
  }
  std::vector<bool> seen(static_cast<size_t>(std::max(gpus, 0)), false);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string where = "group " + std::to_string(g) + ": ";
    if (groups[g].size() < 2) return where + "a group has at least 2 GPUs";
    for (int i : groups[g]) {
      if (i < 0 || i >= gpus) {
        return where + "GPU " + std::to_string(i) + " is not one of the node's GPUs (0 to " +
               std::to_string(gpus - 1) + ")";
      }
      if (seen[static_cast<size_t>(i)]) {
        return where + "GPU " + std::to_string(i) + " is in a group already";
      }
      seen[static_cast<size_t>(i)] = true;
    }
  }
  return "";
}

std::string CheckSelector(const std::vector<std::pair<std::string, std::string>>& selector) {
  if (selector.size() > kMaxSelectorEntries) {
    return "more than " + std::to_string(kMaxSelectorEntries) + " labels";
  }
  for (size_t i = 0; i < selector.size(); ++i) {
    const auto& [key, value] = selector[i];
    if (i > 0 && !(selector[i - 1].first < key)) return "keys not sorted, or one given twice";
    if (std::string why = CheckLabelKey(key); !why.empty()) return "key \"" + key + "\": " + why;
    if (std::string why = CheckLabelValue(value); !why.empty()) {
      return "value \"" + value + "\" of " + key + ": " + why;
    }
  }
  return "";
}

size_t FirstUnmatched(const std::vector<std::pair<std::string, std::string>>& selector,
                      const Labels& labels) {
  for (size_t i = 0; i < selector.size(); ++i) {
    auto it = labels.find(selector[i].first);
    if (it == labels.end() || it->second != selector[i].second) return i;
  }
  return selector.size();
}

bool MatchesSelector(const std::vector<std::pair<std::string, std::string>>& selector,
                     const Labels& labels) {
  return FirstUnmatched(selector, labels) == selector.size();
}

std::string FormatSelector(const std::vector<std::pair<std::string, std::string>>& selector) {
  std::string out;
  for (const auto& [key, value] : selector) {
    if (!out.empty()) out += ',';
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

}  // namespace dgpu::core
