#include "scheduler/snapshot_json.h"

#include "common/time_util.h"
#include "scheduler/api_json.h"

namespace dgpu::scheduler {

nlohmann::json StateToJson(const core::SchedulerCore& core, uint64_t epoch, core::TimeMicros now) {
  using nlohmann::json;
  json tasks = json::array();
  std::vector<const core::Task*> sorted;
  core.ForEachTask([&](const core::Task& t) { sorted.push_back(&t); });
  std::sort(sorted.begin(), sorted.end(),
            [](const core::Task* a, const core::Task* b) { return a->id < b->id; });
  for (const core::Task* t : sorted) tasks.push_back(TaskToJson(*t, core.ReasonOf(*t)));
  json nodes = json::array();
  for (const auto& n : core.Nodes()) {
    nodes.push_back({{"id", n.id},
                     {"address", n.address},
                     {"status", n.online ? "online" : "offline"},
                     {"gpus", n.gpu_count},
                     {"free_gpus", n.free_gpus}});
  }
  json queues = json::object();
  for (auto p : {core::Priority::kHigh, core::Priority::kLow}) {
    json order = json::array();
    for (auto id : core.QueueOrder(p)) order.push_back(core::FormatTaskId(id));
    queues[std::string(core::ToString(p))] = std::move(order);
  }
  return json{{"written_at", common::FormatRfc3339(now)},
              {"epoch", epoch},
              {"online_percent", core.online_percent()},
              {"next_task_number", core.next_task_number()},
              {"quota", QuotaToJson(core.Quota())},
              {"queues", std::move(queues)},
              {"nodes", std::move(nodes)},
              {"tasks", std::move(tasks)}};
}

}  // namespace dgpu::scheduler
