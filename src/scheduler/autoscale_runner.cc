#include "scheduler/autoscale_runner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/child_process.h"
#include "core/gpu_model.h"

namespace dgpu::scheduler {
namespace {

core::TimeMicros Micros(std::chrono::milliseconds d) { return d.count() * 1000; }

// One thread per group's programs at most, a few in all: programs wait on machines, not CPUs.
int ProgramThreads(const common::AutoscaleConfig& config) {
  return std::clamp(static_cast<int>(config.node_groups.size()) * 2, 1, 8);
}

}  // namespace

core::AutoscaleSettings ToAutoscaleSettings(const common::AutoscaleConfig& config,
                                            double online_percent, bool borrowing) {
  core::AutoscaleSettings s;
  s.scale_up_delay = Micros(config.scale_up_delay);
  s.idle_timeout = Micros(config.idle_timeout);
  s.boot_timeout = Micros(config.boot_timeout);
  s.retry_delay = Micros(config.retry_delay);
  s.online_percent = online_percent;
  s.borrowing = borrowing;
  for (const auto& g : config.node_groups) {
    s.groups.push_back({g.name, g.model, g.gpus_per_node, g.min_nodes, g.max_nodes});
  }
  return s;
}

AutoscaleRunner::AutoscaleRunner(common::AutoscaleConfig config, double online_percent,
                                 bool borrowing, CoreLoop* loop)
    : config_(std::move(config)),
      planner_(ToAutoscaleSettings(config_, online_percent, borrowing)),
      loop_(loop),
      programs_(ProgramThreads(config_)) {}

AutoscaleRunner::~AutoscaleRunner() { Stop(); }

Status AutoscaleRunner::CheckPrograms() const {
  for (size_t i = 0; i < config_.node_groups.size(); ++i) {
    const auto& g = config_.node_groups[i];
    for (auto [key, path] : {std::pair{"scale_up_program", &g.scale_up_program},
                             std::pair{"scale_down_program", &g.scale_down_program}}) {
      if (access(path->c_str(), X_OK) != 0) {
        return InvalidArgument("autoscale.node_groups[" + std::to_string(i) + "]." + key + ": " +
                               *path + " is not an executable file (" + strerror(errno) + ")");
      }
    }
  }
  return OkStatus();
}

void AutoscaleRunner::Stop() {
  stopping_.store(true);
  programs_.Stop();
}

void AutoscaleRunner::NodeRegistered(const std::string& node_id, const std::string& group,
                                     const std::vector<core::GpuInfo>& gpus) {
  if (group.empty()) {
    node_group_.erase(node_id);
    return;
  }
  const int index = planner_.GroupIndex(group);
  node_group_[node_id] = index;
  if (index >= 0) {
    const auto& spec = config_.node_groups[index];
    std::vector<std::string> models;
    models.reserve(gpus.size());
    for (const auto& g : gpus) models.push_back(g.model);
    const bool model_ok =
        gpus.empty() || core::MatchGpuModels(spec.model, models).size() == models.size();
    if (static_cast<int>(gpus.size()) != spec.gpus_per_node || !model_ok) {
      spdlog::warn(
          "autoscale: node {} of group {} has {} GPU(s) of model \"{}\"; the group is "
          "configured with {} x \"{}\" (autoscale.node_groups), which the autoscaler plans with",
          node_id, group, gpus.size(), gpus.empty() ? "" : gpus.front().model, spec.gpus_per_node,
          spec.model);
    }
  }
  if (index < 0 && unknown_groups_.insert(group).second) {
    spdlog::warn(
        "autoscale: agent {} joins node group \"{}\", which autoscale.node_groups does not list; "
        "its nodes are not scaled",
        node_id, group);
  }
}

void AutoscaleRunner::RunProgram(std::vector<std::string> argv,
                                 std::function<void(CoreLoop::Context&, const Status&)> done) {
  const int64_t timeout_ms = config_.program_timeout.count();
  programs_.Post([this, argv = std::move(argv), timeout_ms, done = std::move(done)] {
    if (stopping_.load()) return;
    Status s = common::RunToSuccess(argv, timeout_ms, &stopping_);
    if (s.code() == StatusCode::kCancelled) return;
    loop_->Post([s = std::move(s), done](CoreLoop::Context& c) { done(c, s); });
  });
}

void AutoscaleRunner::EndRelease(CoreLoop::Context& c, const std::string& node) {
  // An operator may have set another mode meanwhile: that one stays.
  std::optional<core::NodeView> n = c.core.FindNode(node);
  if (n && n->mode == core::NodeMode::kReleasing) {
    (void)c.core.SetNodeMode(node, core::NodeMode::kSchedulable, c.now);
  }
}

void AutoscaleRunner::Release(CoreLoop::Context& c, const core::AutoscalePlan::Down& down) {
  const auto& group = config_.node_groups[down.group];
  if (Status s = c.core.SetNodeMode(down.node, core::NodeMode::kReleasing, c.now); !s.ok()) {
    planner_.DownDone(down.node, s, c.now);
    return;
  }
  spdlog::info("autoscale: releasing idle node {} of group {}: {} {} {}", down.node, group.name,
               group.scale_down_program, group.name, down.node);
  RunProgram({group.scale_down_program, group.name, down.node},
             [this, node = down.node](CoreLoop::Context& c, const Status& s) {
               planner_.DownDone(node, s, c.now);
               if (s.ok()) {
                 spdlog::info("autoscale: node {} released; it is forgotten once it goes offline",
                              node);
                 return;
               }
               spdlog::warn("autoscale: releasing node {} failed, it takes tasks again: {}", node,
                            s.message());
               EndRelease(c, node);
             });
}

void AutoscaleRunner::Tick(CoreLoop::Context& c) {
  inputs_.Read(c.core);
  const std::vector<core::NodeView> nodes = c.core.Nodes();
  nodes_.clear();
  for (const auto& n : nodes) {
    auto it = node_group_.find(n.id);
    if (it == node_group_.end() || it->second < 0) continue;
    nodes_.push_back({n.id, it->second, n.online, n.mode, n.tasks});
  }
  core::AutoscalePlan plan = planner_.Plan(inputs_.demand(), nodes_, inputs_.quota(), c.now);
  for (const std::string& error : plan.errors) spdlog::warn("autoscale: {}", error);

  for (const std::string& node : plan.forget) {
    EndRelease(c, node);
    node_group_.erase(node);
    spdlog::info("autoscale: released node {} has gone", node);
  }
  for (const auto& down : plan.down) Release(c, down);
  for (const auto& up : plan.up) {
    const auto& group = config_.node_groups[up.group];
    spdlog::info(
        "autoscale: asking group {} for {} node(s) ({} task(s) wait for room there): {} {} {}",
        group.name, up.count, up.waiting_tasks, group.scale_up_program, group.name, up.count);
    RunProgram({group.scale_up_program, group.name, std::to_string(up.count)},
               [this, g = up.group, count = up.count, name = group.name](CoreLoop::Context& c,
                                                                         const Status& s) {
                 planner_.UpDone(g, count, s, c.now);
                 if (s.ok()) {
                   spdlog::info(
                       "autoscale: group {}: {} node(s) asked for, waiting for them to "
                       "register",
                       name, count);
                 } else {
                   spdlog::warn("autoscale: group {}: scaling up failed: {}", name, s.message());
                 }
               });
  }
}

AutoscaleStatus AutoscaleRunner::View() const { return {true, config_, planner_.View()}; }

}  // namespace dgpu::scheduler
