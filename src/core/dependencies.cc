// Dependencies between tasks (TaskSpec::depends_on): a task held out of its queue until its
// parents have started, ended, succeeded or failed, as each entry's condition says.
//
// A held task is pending in no queue, as a task waiting out a retry backoff is; the pass never
// sees it. Each of its entries counts the members of its parent (one, or every member of an
// array) whose condition is still open; parents are watched by key (their array's first number,
// else their own), and a parent's change reaches the tasks that wait on its key when Emit notes
// it (parent_changes_), at the start of the next pass. What each member has been counted for
// (parent_seen_) makes every start and end count once, whichever task watched it first.
#include <algorithm>

#include "core/core_internal.h"

namespace dgpu::core {
namespace {

// Applies one member's state to an entry: returns true when the entry can never be satisfied.
bool ApplyMember(DependencyCondition c, bool started, bool ended, bool success, int32_t* remaining,
                 uint8_t* unsuccessful) {
  switch (c) {
    case DependencyCondition::kAfter:
      if (started || ended) --*remaining;
      return false;
    case DependencyCondition::kAfterAny:
      if (ended) --*remaining;
      return false;
    case DependencyCondition::kAfterOk:
      if (!ended) return false;
      if (!success) return true;
      --*remaining;
      return false;
    case DependencyCondition::kAfterNotOk:
      if (!ended) return false;
      --*remaining;
      if (!success) *unsuccessful = 1;
      return false;
  }
  return false;
}

// An entry's state once its count says so.
DependencyState StateOf(DependencyCondition c, bool never, int32_t remaining,
                        uint8_t unsuccessful) {
  if (never) return DependencyState::kNeverSatisfied;
  if (remaining > 0) return DependencyState::kWaiting;
  if (c == DependencyCondition::kAfterNotOk && unsuccessful == 0) {
    return DependencyState::kNeverSatisfied;
  }
  return DependencyState::kSatisfied;
}

bool Ended(const Task& t) { return IsFinished(t.status) && !t.stopping; }

}  // namespace

bool SchedulerCore::HasStarted(const Task& t) {
  return t.status == TaskStatus::kRunning || t.attempts > 0 || t.started_at != 0 ||
         t.preemptions > 0 || (IsFinished(t.status) && !t.allocation.empty());
}

Status SchedulerCore::CountDependencies(TaskNumber self, Dependencies& deps, DependencyWait* wait,
                                        bool restoring) const {
  const size_t n = deps.size();
  wait->key.assign(n, 0);
  wait->members.assign(n, 0);
  wait->remaining.assign(n, 0);
  wait->unsuccessful.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    Dependency& d = deps[i];
    if (d.state != DependencyState::kWaiting) continue;
    const std::string where = "depends_on[" + std::to_string(i) + "]: " + FormatTaskId(d.task);
    // The parent's array, from memory or the store. One that is not there is refused at
    // submission; at a restart it was deleted (store retention) and how it ended is not known.
    int32_t index = -1;
    int32_t size = 0;
    if (const TaskRecord* p = tasks_.Find(d.task); p != nullptr && d.task < self) {
      index = p->spec.array_index;
      size = p->spec.array_size;
    } else {
      StatusOr<std::vector<StoredTaskState>> stored = std::vector<StoredTaskState>{};
      if (stored_lookup_ && d.task != 0 && d.task < self) stored = stored_lookup_(d.task, d.task);
      if (!stored.ok()) return stored.status();
      if (stored->empty()) {
        if (!restoring) return InvalidArgument(where + " does not exist");
        d.state = DependencyState::kNeverSatisfied;
        continue;
      }
      index = stored->front().array_index;
      size = stored->front().array_size;
    }
    const TaskNumber first = size > 0 ? d.task - static_cast<TaskNumber>(index) : d.task;
    const TaskNumber count = size > 0 ? static_cast<TaskNumber>(size) : 1;
    wait->key[i] = first;
    wait->members[i] = static_cast<int32_t>(count);
    wait->remaining[i] = static_cast<int32_t>(count);
    bool never = false;
    // Members in memory first; the store answers for the others in one read.
    TaskNumber known = 0;
    for (TaskNumber m = first; m < first + count; ++m) {
      const TaskRecord* p = tasks_.Find(m);
      if (p == nullptr) continue;
      ++known;
      never |=
          ApplyMember(d.condition, HasStarted(*p), Ended(*p), p->status == TaskStatus::kSuccess,
                      &wait->remaining[i], &wait->unsuccessful[i]);
    }
    if (known < count && stored_lookup_) {
      StatusOr<std::vector<StoredTaskState>> stored = stored_lookup_(first, first + count - 1);
      if (!stored.ok()) return stored.status();
      for (const StoredTaskState& s : *stored) {
        if (s.id < first || s.id >= first + count || tasks_.Find(s.id) != nullptr) continue;
        ++known;
        never |= ApplyMember(d.condition, s.started, IsFinished(s.status),
                             s.status == TaskStatus::kSuccess, &wait->remaining[i],
                             &wait->unsuccessful[i]);
      }
    }
    // A member found nowhere was deleted long after it ended: a condition on it cannot be told.
    if (known < count) never = true;
    d.state = StateOf(d.condition, never, wait->remaining[i], wait->unsuccessful[i]);
  }
  return OkStatus();
}

bool SchedulerCore::AnyDependency(const Task& t, DependencyState state) {
  return std::any_of(t.spec.depends_on.begin(), t.spec.depends_on.end(),
                     [state](const Dependency& d) { return d.state == state; });
}

void SchedulerCore::HoldForDependencies(TaskRecord& t, DependencyWait wait) {
  // Watched by each waiting entry's key. A key watched for the first time takes its members in
  // memory as they are now as counted (CountDependencies read them so).
  for (size_t i = 0; i < t.spec.depends_on.size(); ++i) {
    if (t.spec.depends_on[i].state != DependencyState::kWaiting) continue;
    const TaskNumber key = wait.key[i];
    std::vector<TaskNumber>& children = dependents_[key];
    if (children.empty()) {
      for (TaskNumber m = key; m < key + static_cast<TaskNumber>(wait.members[i]); ++m) {
        if (const TaskRecord* p = tasks_.Find(m); p != nullptr) NoteSeen(*p);
      }
    }
    if (children.empty() || children.back() != t.id) children.push_back(t.id);
  }
  dependency_wait_[t.id] = std::move(wait);
  CountWaiting(t, +1);
}

void SchedulerCore::NoteSeen(const Task& p) {
  parent_seen_[p.id] =
      static_cast<uint8_t>((HasStarted(p) ? kParentStarted : 0) | (Ended(p) ? kParentEnded : 0));
}

bool SchedulerCore::CountParent(Task& child, size_t i, bool started, bool ended, bool success) {
  Dependency& d = child.spec.depends_on[i];
  DependencyWait& wait = dependency_wait_[child.id];
  const bool never =
      ApplyMember(d.condition, started, ended, success, &wait.remaining[i], &wait.unsuccessful[i]);
  const DependencyState state =
      StateOf(d.condition, never, wait.remaining[i], wait.unsuccessful[i]);
  if (state == d.state) return false;
  d.state = state;
  return true;
}

void SchedulerCore::LeaveDependencyWait(TaskRecord& t) {
  if (dependency_wait_.erase(t.id) > 0) CountWaiting(t, -1);
}

bool SchedulerCore::SettleDependencies(TaskRecord& t, TimeMicros now) {
  const bool never = AnyDependency(t, DependencyState::kNeverSatisfied);
  if (never && config_.kill_invalid_dependencies) {
    LeaveDependencyWait(t);
    t.status = TaskStatus::kFailed;
    t.error = "dependency_never_satisfied";
    t.exit_code = -1;
    t.finished_at = now;
    Emit(t);
    EmitEvent(Event::Kind::kTaskFinished, t, now, {}, t.error);
    return true;
  }
  if (never || AnyDependency(t, DependencyState::kWaiting)) {
    Emit(t);  // Its entries' states are durable.
    return false;
  }
  LeaveDependencyWait(t);
  Enqueue(t);
  pass_needed_ = true;
  Emit(t);
  return true;
}

void SchedulerCore::ResolveDependencies(TimeMicros now) {
  std::vector<TaskNumber> changed = std::exchange(dependency_settle_, {});
  while (!parent_changes_.empty() || !changed.empty()) {
    std::vector<TaskNumber> parents = std::exchange(parent_changes_, {});
    for (TaskNumber m : parents) {
      const TaskRecord* p = tasks_.Find(m);
      if (p == nullptr) continue;
      const TaskNumber key = WatchKey(*p);
      auto watchers = dependents_.find(key);
      if (watchers == dependents_.end()) continue;
      uint8_t& seen = parent_seen_[m];
      const bool started = HasStarted(*p) && (seen & kParentStarted) == 0;
      const bool ended = Ended(*p) && (seen & kParentEnded) == 0;
      if (!started && !ended) continue;
      // A member that ends without a start counted (cancelled while pending) counts as started
      // for kAfter once, here.
      const bool counts_start = started || (ended && (seen & kParentStarted) == 0);
      seen |= static_cast<uint8_t>(kParentStarted | (ended ? kParentEnded : 0));
      const bool success = p->status == TaskStatus::kSuccess;
      std::vector<TaskNumber>& children = watchers->second;
      for (TaskNumber c : children) {
        auto w = dependency_wait_.find(c);
        if (w == dependency_wait_.end()) continue;
        TaskRecord* child = tasks_.Find(c);
        bool any = false;
        for (size_t i = 0; i < child->spec.depends_on.size(); ++i) {
          if (w->second.key[i] != key ||
              child->spec.depends_on[i].state != DependencyState::kWaiting) {
            continue;
          }
          any |= CountParent(*child, i, counts_start, ended, success);
        }
        if (any) changed.push_back(c);
      }
      // Tasks no longer waiting on this key leave its list; an empty list stops the watch.
      std::erase_if(children, [&](TaskNumber c) {
        auto w = dependency_wait_.find(c);
        if (w == dependency_wait_.end()) return true;
        const TaskRecord* child = tasks_.Find(c);
        for (size_t i = 0; i < child->spec.depends_on.size(); ++i) {
          if (w->second.key[i] == key &&
              child->spec.depends_on[i].state == DependencyState::kWaiting) {
            return false;
          }
        }
        return true;
      });
      if (children.empty()) dependents_.erase(watchers);
    }
    // Settling fails or queues tasks, which may be parents in turn (their Emit notes them).
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    for (TaskNumber c : std::exchange(changed, {})) {
      TaskRecord* child = tasks_.Find(c);
      if (child != nullptr && dependency_wait_.contains(c)) SettleDependencies(*child, now);
    }
  }
}

}  // namespace dgpu::core
