#include "core/task_fields.h"

namespace dgpu::core {

std::string_view NamesOf(Priority*) { return "a priority (high or low)"; }
std::string_view NamesOf(TaskStatus*) {
  return "a task status (pending, running, success, failed or cancelled)";
}
std::string_view NamesOf(StopReason*) {
  return "a stop reason (\"\", cancel, preempt, drain, member_failure, timeout, gpu_failure, "
         "reconcile or member_lost)";
}

std::string_view NamesOf(DependencyCondition*) {
  return "a dependency condition (afterok, afternotok, afterany or after)";
}
std::string_view NamesOf(DependencyState*) {
  return "a dependency state (waiting, satisfied or never_satisfied)";
}

std::string FinishDecodedTask(Task* t) {
  if (t->status != TaskStatus::kPending) t->retry_at = 0;
  if (!IsValidTeamName(t->spec.team)) return "invalid team '" + t->spec.team + "'";
  if (!ValidArrayFields(t->spec)) {
    return "array_index " + std::to_string(t->spec.array_index) + " of array_size " +
           std::to_string(t->spec.array_size) + " is out of range";
  }
  if (t->spec.nodes < 1 || t->spec.nodes > kMaxGangNodes ||
      t->spec.gpu_count % t->spec.nodes != 0) {
    return "gpu_count " + std::to_string(t->spec.gpu_count) + " is not split evenly over " +
           std::to_string(t->spec.nodes) + " nodes";
  }
  if (t->spec.depends_on.size() > kMaxDependencies) {
    return std::to_string(t->spec.depends_on.size()) + " dependencies (at most " +
           std::to_string(kMaxDependencies) + ")";
  }
  for (const Dependency& d : t->spec.depends_on) {
    if (d.task == 0) return "a dependency on task number 0";
  }
  return "";
}

}  // namespace dgpu::core
