#include "sim/simulator.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/gpu_model.h"
#include "core/scheduler_core.h"
#include "sim/completion_queue.h"
#include "sim/random.h"

namespace dgpu::sim {
namespace {

using core::Priority;
using core::TimeMicros;

// An impossible state (the core refused a command the simulator built correctly): stop loudly.
[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "dgpu-sim: internal error: %s\n", what.c_str());
  std::abort();
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Fatal(std::string(what) + ": " + s.ToString());
}

// The cluster as flat arrays. Node i is named "node-<i>", zero-padded so that name order is
// index order (the core breaks best-fit ties on the name).
struct Layout {
  std::vector<std::string> models;  // Distinct, in order of first appearance.
  std::vector<int> node_model;
  std::vector<int> node_gpus;
  std::vector<std::string> node_ids;
  std::vector<int> model_gpus;  // Total GPUs per model.
  std::vector<int> model_max_node;
  std::vector<const core::Labels*> node_labels;  // Its group's (the spec outlives the layout).
  // The label keys of the cluster, sorted, and per key each node's value as a number (-1: the
  // node has none), for the spread report.
  std::vector<std::string> label_keys;
  std::vector<std::vector<int32_t>> node_values;
  // Per node group, each GPU's NVLink group (kNoLinkGroup: none; empty: the group has none) and
  // the size of its largest NVLink group; per node its group's.
  struct Links {
    std::vector<int> link_of;
    int largest = 0;
  };
  std::vector<Links> group_links;
  std::vector<const Links*> node_links;
  bool has_links = false;

  explicit Layout(const ClusterSpec& spec) {
    const int nodes = spec.NodeCount();
    const int width = static_cast<int>(std::to_string(std::max(nodes - 1, 0)).size());
    for (const auto& g : spec.groups) {
      Links& links = group_links.emplace_back();
      if (g.nvlink_groups.empty()) continue;
      has_links = true;
      links.link_of.assign(static_cast<size_t>(g.gpus_per_node), core::kNoLinkGroup);
      for (size_t l = 0; l < g.nvlink_groups.size(); ++l) {
        for (int i : g.nvlink_groups[l])
          links.link_of[static_cast<size_t>(i)] = static_cast<int>(l);
        links.largest = std::max(links.largest, static_cast<int>(g.nvlink_groups[l].size()));
      }
    }
    for (size_t gi = 0; gi < spec.groups.size(); ++gi) {
      const NodeGroup& g = spec.groups[gi];
      auto it = std::find(models.begin(), models.end(), g.model);
      int m = static_cast<int>(it - models.begin());
      if (it == models.end()) {
        models.push_back(g.model);
        model_gpus.push_back(0);
        model_max_node.push_back(0);
      }
      for (int i = 0; i < g.count; ++i) {
        std::string index = std::to_string(node_ids.size());
        node_ids.push_back("node-" + std::string(width - index.size(), '0') + index);
        node_model.push_back(m);
        node_gpus.push_back(g.gpus_per_node);
        model_gpus[m] += g.gpus_per_node;
        model_max_node[m] = std::max(model_max_node[m], g.gpus_per_node);
        node_labels.push_back(&g.labels);
        node_links.push_back(&group_links[gi]);
      }
    }
    std::set<std::string> keys;
    for (const auto& g : spec.groups) {
      for (const auto& [key, value] : g.labels) keys.insert(key);
    }
    label_keys.assign(keys.begin(), keys.end());
    for (const std::string& key : label_keys) {
      std::map<std::string, int32_t> numbers;
      auto& values = node_values.emplace_back(node_ids.size(), -1);
      for (size_t n = 0; n < node_ids.size(); ++n) {
        auto it = node_labels[n]->find(key);
        if (it == node_labels[n]->end()) continue;
        values[n] =
            numbers.try_emplace(it->second, static_cast<int32_t>(numbers.size())).first->second;
      }
    }
  }

  static int NodeIndex(const std::string& id) {
    int index = 0;
    auto [ptr, ec] = std::from_chars(id.data() + 5, id.data() + id.size(), index);
    if (ec != std::errc() || id.compare(0, 5, "node-") != 0) Fatal("unknown node " + id);
    return index;
  }
};

// How multi-node starts spread over the values of each label key (SimResult::spread).
class SpreadCounter {
 public:
  explicit SpreadCounter(const Layout& layout) : layout_(layout) {
    for (const std::string& key : layout.label_keys) spread_.push_back({key});
  }
  // A start on these nodes (distinct node indices).
  template <typename Nodes>
  void Add(const Nodes& nodes) {
    for (size_t k = 0; k < spread_.size(); ++k) {
      values_.clear();
      int alone = 0;
      for (const auto node : nodes) {
        const int32_t v = layout_.node_values[k][static_cast<size_t>(node)];
        if (v < 0) {
          ++alone;
        } else if (std::find(values_.begin(), values_.end(), v) == values_.end()) {
          values_.push_back(v);
        }
      }
      const uint64_t distinct = values_.size() + static_cast<uint64_t>(alone);
      SimResult::Spread& s = spread_[k];
      ++s.starts;
      s.values += distinct;
      s.one_value += distinct == 1 ? 1 : 0;
    }
  }
  const std::vector<SimResult::Spread>& spread() const { return spread_; }

 private:
  const Layout& layout_;
  std::vector<SimResult::Spread> spread_;
  std::vector<int32_t> values_;
};

// How the GPUs of each placement of several GPUs that one NVLink group of its node could hold
// lie (SimResult::Links): the most of them in one group, the rest outside it (a GPU in no group
// is a group of its own).
class LinkCounter {
 public:
  explicit LinkCounter(const Layout& layout) : layout_(layout) {}
  void Add(size_t node, const std::vector<int>& gpus) {
    const Layout::Links& links = *layout_.node_links[node];
    const std::vector<int>& link_of = links.link_of;
    if (link_of.empty() || gpus.size() < 2 || static_cast<int>(gpus.size()) > links.largest) {
      return;
    }
    int most = 1;
    for (size_t i = 0; i < gpus.size(); ++i) {
      const int g = link_of[static_cast<size_t>(gpus[i])];
      if (g < 0) continue;
      int n = 0;
      for (int j : gpus) n += link_of[static_cast<size_t>(j)] == g ? 1 : 0;
      most = std::max(most, n);
    }
    const auto outside = static_cast<uint64_t>(static_cast<int>(gpus.size()) - most);
    ++links_.placements;
    links_.in_one_group += outside == 0 ? 1 : 0;
    links_.gpus_outside += outside;
  }
  const SimResult::Links& links() const { return links_; }

 private:
  const Layout& layout_;
  SimResult::Links links_;
};

// Registers node `node` of the layout with the core, with its GPUs, their NVLink groups (unless
// `links` is false) and its group's labels.
void RegisterLayoutNode(core::SchedulerCore& core, const Layout& layout, size_t node, bool links,
                        TimeMicros now) {
  std::vector<core::GpuInfo> gpus(layout.node_gpus[node]);
  const std::vector<int>& link_of = layout.node_links[node]->link_of;
  for (int g = 0; g < layout.node_gpus[node]; ++g) {
    gpus[g].index = g;
    gpus[g].model = layout.models[layout.node_model[node]];
    if (links && !link_of.empty()) gpus[g].link_group = link_of[static_cast<size_t>(g)];
  }
  Check(core.RegisterNode(layout.node_ids[node], "", gpus, {}, {}, now), "RegisterNode");
  if (!layout.node_labels[node]->empty()) {
    Check(core.SetNodeLabels(layout.node_ids[node], *layout.node_labels[node]), "SetNodeLabels");
  }
}

// What a workload model string matches in the cluster: the core's rule (core::MatchGpuModels).
struct Demand {
  std::vector<int> models;
  bool all = false;
  int max_per_node = 0;
};

std::vector<Demand> MatchDemands(const Workload& w, const Layout& layout) {
  std::vector<Demand> out;
  for (const auto& wanted : w.models) {
    Demand d;
    d.models = core::MatchGpuModels(wanted, layout.models);
    d.all = d.models.size() == layout.models.size();
    for (int m : d.models) d.max_per_node = std::max(d.max_per_node, layout.model_max_node[m]);
    out.push_back(std::move(d));
  }
  return out;
}

// How a job runs: on one node when a node of its model is large enough, else as a gang of
// ceil(gpus / largest node) members, each with ceil(gpus / members) GPUs (members are of equal
// size, so a job whose GPUs do not split evenly holds a few more).
struct JobShape {
  int nodes = 1;
  int per_node = 0;
  int Gpus() const { return nodes * per_node; }
};

JobShape ShapeOfJob(int gpus, const Demand& d) {
  if (gpus <= d.max_per_node || d.max_per_node <= 0) return {1, gpus};
  const int nodes = (gpus + d.max_per_node - 1) / d.max_per_node;
  return {nodes, (gpus + nodes - 1) / nodes};
}

// Whether the cluster can ever run a job of `shape`: one model of the demand has enough nodes
// of at least its members' size (a gang's members share one model).
bool ClusterHolds(const JobShape& shape, const Demand& d, const Layout& layout) {
  if (d.models.empty()) return false;
  if (shape.nodes == 1) return shape.per_node <= d.max_per_node;
  for (int m : d.models) {
    int nodes = 0;
    for (size_t i = 0; i < layout.node_model.size(); ++i) {
      if (layout.node_model[i] == m && layout.node_gpus[i] >= shape.per_node) ++nodes;
    }
    if (nodes >= shape.nodes) return true;
  }
  return false;
}

// Free GPUs per cluster model, kept by both engines.
class FreeGpus {
 public:
  explicit FreeGpus(const Layout& layout) : by_model_(layout.model_gpus) {
    for (int n : by_model_) total_ += n;
  }
  void Add(int model, int n) {
    by_model_[model] += n;
    total_ += n;
  }
  int total() const { return total_; }
  int For(const Demand& d) const {
    if (d.all) return total_;
    int n = 0;
    for (int m : d.models) n += by_model_[m];
    return n;
  }

 private:
  std::vector<int> by_model_;
  int total_ = 0;
};

// An event of the completion queue about a started task: its finish; with borrowing also the
// end of its stop after a preemption, and the time it may be preempted (min_runtime). 24 bytes:
// the queue moves these around.
struct Completion {
  enum class Kind : uint8_t { kFinish, kStop, kWake };
  uint32_t job = 0;
  uint32_t task = 0;                   // Its task (numbers follow submissions, like jobs),
  const core::Task* record = nullptr;  // the core's record of it,
  uint32_t node = 0;                   // and (policy dgpu) the node it runs on.
  // Borrowing: the job's start (1, 2, ...) the event belongs to. A preempted job's finish stays
  // in the queue; once the job has started again, the number tells it apart.
  uint32_t attempt : 30 = 0;
  Kind kind : 2 = Kind::kFinish;
};
static_assert(sizeof(Completion) == 24);

// Autoscaling in the replay (SimOptions::Autoscale): which nodes are off, booting, up or
// released, the planner, and the provisioned GPU time. Group g's nodes are a contiguous range
// of the layout, in group order.
class Fleet {
 public:
  Fleet(const SimOptions::Autoscale& options, const Layout& layout, core::SchedulerCore& core,
        FreeGpus& free)
      : options_(options),
        layout_(layout),
        core_(core),
        free_(free),
        planner_(options.settings),
        state_(layout.node_ids.size(), State::kOff),
        since_(layout.node_ids.size(), 0),
        tasks_(layout.node_ids.size(), 0),
        node_group_(layout.node_ids.size(), 0),
        off_(options.settings.groups.size()) {
    size_t node = 0;
    for (size_t g = 0; g < options.settings.groups.size(); ++g) {
      for (int i = 0; i < options.settings.groups[g].max_nodes; ++i, ++node) {
        node_group_[node] = static_cast<int>(g);
        off_[g].insert(static_cast<uint32_t>(node));
      }
    }
    if (node != layout.node_ids.size()) Fatal("the cluster is not the autoscale groups");
  }

  // Takes every node's GPUs away, then brings the min_nodes up at time 0.
  void Start() {
    for (size_t i = 0; i < state_.size(); ++i)
      free_.Add(layout_.node_model[i], -layout_.node_gpus[i]);
    for (size_t g = 0; g < off_.size(); ++g) {
      for (int i = 0; i < options_.settings.groups[g].min_nodes; ++i) Up(Take(g), 0, 0);
    }
    UpdatePeak();
  }

  TimeMicros next_tick() const { return next_tick_; }
  TimeMicros NextWake() const {
    return boots_.empty() ? next_tick_ : std::min(next_tick_, boots_.front().at);
  }
  // Whether the replay must go on for it: nodes boot, or tasks wait that it may still serve.
  bool Busy(uint64_t pending) const {
    return !boots_.empty() ||
           (pending > 0 &&
            quiet_ticks_ * options_.tick <= options_.settings.scale_up_delay + 2 * options_.tick);
  }
  // A job arrived: the planner has new work to look at.
  void Arrived() { quiet_ticks_ = 0; }
  void TaskStarted(uint32_t node) { ++tasks_[node]; }
  void TaskEnded(uint32_t node) { --tasks_[node]; }

  // Registers the nodes whose boot ends at `now`; true if any did.
  bool Boot(TimeMicros now) {
    bool any = false;
    while (!boots_.empty() && boots_.front().at <= now) {
      Up(boots_.front().node, now, since_[boots_.front().node]);
      boots_.pop_front();
      any = true;
    }
    return any;
  }

  void Tick(TimeMicros now) {
    next_tick_ = now + options_.tick;
    inputs_.Read(core_);
    nodes_.clear();
    for (uint32_t i = 0; i < state_.size(); ++i) {
      if (state_[i] != State::kUp && state_[i] != State::kReleased) continue;
      nodes_.push_back(
          {layout_.node_ids[i], node_group_[i], state_[i] == State::kUp,
           state_[i] == State::kUp ? core::NodeMode::kSchedulable : core::NodeMode::kReleasing,
           tasks_[i]});
    }
    core::AutoscalePlan plan = planner_.Plan(inputs_.demand(), nodes_, inputs_.quota(), now);
    result_.boot_timeouts += plan.errors.size();
    for (const std::string& id : plan.forget) {
      const uint32_t node = static_cast<uint32_t>(Layout::NodeIndex(id));
      Check(core_.SetNodeMode(id, core::NodeMode::kSchedulable, now), "SetNodeMode");
      state_[node] = State::kOff;
      off_[node_group_[node]].insert(node);
    }
    for (const auto& down : plan.down) {
      const uint32_t node = static_cast<uint32_t>(Layout::NodeIndex(down.node));
      if (tasks_[node] != 0 || state_[node] != State::kUp) Fatal("released a busy node");
      Check(core_.SetNodeMode(down.node, core::NodeMode::kReleasing, now), "SetNodeMode");
      Check(core_.NodeLost(down.node, now), "NodeLost");
      free_.Add(layout_.node_model[node], -layout_.node_gpus[node]);
      Provisioned(node, now);
      --provisioned_count_;
      state_[node] = State::kReleased;
      planner_.DownDone(down.node, OkStatus(), now);
      ++result_.nodes_released;
    }
    for (const auto& up : plan.up) {
      const int count = std::min<int>(up.count, static_cast<int>(off_[up.group].size()));
      for (int i = 0; i < count; ++i) {
        const uint32_t node = Take(up.group);
        state_[node] = State::kBooting;
        since_[node] = now;
        boots_.push_back({now + options_.boot_time, node});
      }
      planner_.UpDone(up.group, count, OkStatus(), now);
      ++result_.scale_ups;
      result_.nodes_requested += static_cast<uint64_t>(count);
    }
    quiet_ticks_ = plan.empty() && boots_.empty() ? quiet_ticks_ + 1 : 0;
    UpdatePeak();
  }

  SimResult::AutoscaleResult Finish(TimeMicros end) {
    for (uint32_t i = 0; i < state_.size(); ++i) {
      if (state_[i] == State::kUp || state_[i] == State::kBooting) Provisioned(i, end);
    }
    result_.provisioned_gpu_seconds = static_cast<double>(provisioned_gpu_ / 1e6L);
    result_.mean_nodes =
        end > 0 ? static_cast<double>(provisioned_nodes_ / static_cast<long double>(end)) : 0;
    return result_;
  }

 private:
  enum class State : uint8_t { kOff, kBooting, kUp, kReleased };
  struct Booting {
    TimeMicros at = 0;
    uint32_t node = 0;
  };

  uint32_t Take(size_t group) {
    auto it = off_[group].begin();
    const uint32_t node = *it;
    off_[group].erase(it);
    ++provisioned_count_;  // Booting or up from now on.
    return node;
  }
  // The node registers now; provisioned since `since`.
  void Up(uint32_t node, TimeMicros now, TimeMicros since) {
    RegisterLayoutNode(core_, layout_, node, /*links=*/true, now);
    free_.Add(layout_.node_model[node], layout_.node_gpus[node]);
    state_[node] = State::kUp;
    since_[node] = since;
  }
  void Provisioned(uint32_t node, TimeMicros until) {
    const TimeMicros d = until - since_[node];
    provisioned_gpu_ += static_cast<long double>(d) * layout_.node_gpus[node];
    provisioned_nodes_ += static_cast<long double>(d);
  }
  void UpdatePeak() { result_.peak_nodes = std::max(result_.peak_nodes, provisioned_count_); }

  const SimOptions::Autoscale& options_;
  const Layout& layout_;
  core::SchedulerCore& core_;
  FreeGpus& free_;
  core::Autoscaler planner_;
  std::vector<State> state_;
  std::vector<TimeMicros> since_;  // Provisioned since (its scale-up, or 0).
  std::vector<int> tasks_;         // Tasks running there.
  std::vector<int> node_group_;
  std::vector<std::set<uint32_t>> off_;  // Per group, lowest first.
  std::deque<Booting> boots_;            // In time order (one boot time for all).
  TimeMicros next_tick_ = 0;
  int64_t quiet_ticks_ = 0;
  int provisioned_count_ = 0;          // Nodes booting or up.
  long double provisioned_gpu_ = 0;    // GPU-microseconds.
  long double provisioned_nodes_ = 0;  // Node-microseconds.
  SimResult::AutoscaleResult result_;
  core::ScaleInputs inputs_;
  std::vector<core::ScaleNode> nodes_;
};

// Policy dgpu: the real scheduling core.
class CoreEngine {
 public:
  CoreEngine(const Layout& layout, const Workload& w, const std::vector<Demand>& demand,
             const SimOptions& options, const TeamLimitsMap& teams)
      : core_(MakeConfig(options, teams)),
        layout_(layout),
        spread_(layout),
        links_(layout),
        workload_(w),
        demand_(demand),
        free_(layout),
        grace_seconds_(options.preemption_grace_seconds),
        // Without borrowing or guarantees teams change no decision: every job goes to the
        // default team, which keeps one shape queue per size instead of one per team (the
        // per-team figures are the simulator's own, from the trace).
        core_teams_(options.borrowing || options.team_guarantees != TeamGuarantees::kNone),
        limit_factor_(options.limit_factor) {
    // With autoscaling the fleet registers nodes as they come up.
    for (size_t i = 0; !options.autoscale && i < layout.node_ids.size(); ++i) {
      RegisterLayoutNode(core_, layout, i, options.nvlink, 0);
    }
    spec_.command = "sim";
    task_job_.reserve(w.jobs.size());
    for (size_t m = 0; m < w.models.size(); ++m) {
      model_index_.emplace(w.models[m], static_cast<uint32_t>(m));
    }
    if (options.autoscale) {
      fleet_.emplace(*options.autoscale, layout, core_, free_);
      fleet_->Start();
    }
    // Guarantees as the core applies them; without autoscaling the nodes never change, so
    // neither do they (with it, the figures are those at time 0).
    for (const core::TeamView& team : core_.Teams()) {
      for (int p = 0; p < core::kPriorityCount; ++p) {
        guarantees_[{team.name, p}] = team.classes[p].guaranteed;
      }
    }
  }

  void Submit(uint32_t job, TimeMicros now) {
    const SimJob& j = workload_.jobs[job];
    spec_.priority = j.priority;
    const JobShape shape = ShapeOfJob(j.gpus, demand_[j.model]);
    spec_.nodes = shape.nodes;
    spec_.gpu_count = shape.Gpus();
    spec_.gpu_model = workload_.models[j.model];
    if (limit_factor_ > 0) {
      // The time limit a user would have given: the run time, over-estimated by the factor.
      spec_.timeout_seconds = std::max<int64_t>(
          1, static_cast<int64_t>(std::ceil(static_cast<double>(j.duration) * limit_factor_ /
                                            static_cast<double>(core::kMicrosPerSecond))));
    }
    if (core_teams_ && j.team != spec_team_) {  // Often one team in a row: no string copy.
      spec_team_ = j.team;
      spec_.team = workload_.teams[j.team];
    }
    auto task = core_.Submit(spec_, now);
    if (!task.ok()) Check(task.status(), "Submit");
    if (*task != task_job_.size() + 1) Fatal("task numbers are not sequential");
    task_job_.push_back(job);
  }

  // Calls started(completion) for each start and stopping(completion, grace seconds) for each
  // task stopped for a preemption.
  template <typename Started, typename Stopping>
  void Schedule(TimeMicros now, Started&& started, Stopping&& stopping) {
    const uint64_t skipped = core_.stats().passes_skipped;
    core_.Schedule(now);
    // A skipped pass changed nothing, and nothing finished since the last one (that would have
    // called for a pass): the queue heads, their reasons and the free GPUs are as they were.
    heads_unchanged_ = core_.stats().passes_skipped != skipped;
    if (!core_.HasDecisions()) return;
    core_.TakeDecisions(decisions_);
    for (const core::Decision& d : decisions_) {
      Completion c;
      c.job = task_job_[d.task - 1];
      c.node = Layout::NodeIndex(d.node_id);
      c.task = static_cast<uint32_t>(d.task);
      // The task stays at this address in the core until it is forgotten.
      c.record = core_.FindTask(d.task);
      // A gang has one decision per member; its job starts (or stops) with rank 0's.
      const bool gang = c.record->spec.nodes > 1;
      const bool rank0 = !gang || d.node_id == c.record->allocation[0].node_id;
      if (d.kind == core::Decision::Kind::kStop) {
        // Nodes never fail and nothing is cancelled: preemption is the only reason for a stop.
        if (d.reason != core::StopReason::kPreempt) Fatal("unexpected stop decision");
        if (rank0) stopping(c, d.grace_seconds >= 0 ? d.grace_seconds : grace_seconds_);
        continue;
      }
      free_.Add(layout_.node_model[c.node], -core::GpusPerNode(c.record->spec));
      if (layout_.has_links) links_.Add(c.node, d.gpu_indices);
      if (fleet_) fleet_->TaskStarted(c.node);
      if (gang) ++gang_starts_;
      if (gang && rank0 && !layout_.label_keys.empty()) {
        spread_nodes_.clear();
        for (const core::NodeAllocation& na : c.record->allocation) {
          spread_nodes_.push_back(Layout::NodeIndex(na.node_id));
        }
        spread_.Add(spread_nodes_);
      }
      if (rank0) started(c);
    }
  }

  // Everything a finish needs comes with the completion: no per-job state to look up.
  void Finish(const Completion& c, TimeMicros now) {
    core::FinishReport report;
    report.task = c.task;
    report.success = true;
    report.finished_at = now;
    if (c.record->spec.nodes > 1) {
      EndMembers(report, now);
      core_.Forget(report.task);
      return;
    }
    const int gpus = c.record->spec.gpu_count;
    Check(core_.TaskFinished(layout_.node_ids[c.node], report, now), "TaskFinished");
    core_.Forget(report.task);
    free_.Add(layout_.node_model[c.node], gpus);
    if (fleet_) fleet_->TaskEnded(c.node);
  }

  // A task stopped for a preemption has ended, as its agent would report it after SIGTERM: the
  // core puts it back in its queue (at its old position) and frees its GPUs.
  void Stop(const Completion& c, TimeMicros now) {
    core::FinishReport report;
    report.task = c.task;
    report.success = false;
    report.exit_code = 143;
    report.finished_at = now;
    if (c.record->spec.nodes > 1) {
      EndMembers(report, now);
      if (c.record->status != core::TaskStatus::kPending)
        Fatal("a preempted gang was not requeued");
      return;
    }
    const int gpus = c.record->spec.gpu_count;
    Check(core_.TaskFinished(layout_.node_ids[c.node], report, now), "TaskFinished (stopped)");
    if (c.record->status != core::TaskStatus::kPending) Fatal("a preempted task was not requeued");
    free_.Add(layout_.node_model[c.node], gpus);
    if (fleet_) fleet_->TaskEnded(c.node);
  }

  // Every member of a gang reports the same end, in rank order.
  void EndMembers(const core::FinishReport& report, TimeMicros now) {
    const core::Task& t = *core_.FindTask(report.task);
    const int per_node = core::GpusPerNode(t.spec);
    members_.clear();
    for (const core::NodeAllocation& na : t.allocation)
      members_.push_back(Layout::NodeIndex(na.node_id));
    for (int node : members_) {
      Check(core_.TaskFinished(layout_.node_ids[node], report, now), "TaskFinished (member)");
      free_.Add(layout_.node_model[node], per_node);
      if (fleet_) fleet_->TaskEnded(node);
    }
  }

  // The guarantee the core gives `team` in class `prio`.
  int Guarantee(const std::string& team, int prio) const {
    auto it = guarantees_.find({team, prio});
    return it == guarantees_.end() ? 0 : it->second;
  }

  // Hints from the loop, which knows the next completions: nothing is read that the finish would
  // not read anyway. The second reads the task record that the first fetched.
  void PrefetchFinish(const Completion& c) const { core_.PrefetchTask(c.task, c.record); }
  void PrefetchFinishNode(const Completion& c) const { core_.PrefetchTaskNode(c.record); }

  // Some queue head waits for no_node_fits although the free GPUs of its model would suffice.
  bool Fragmented() {
    if (heads_unchanged_ && fragmented_known_) return fragmented_;
    fragmented_known_ = true;
    fragmented_ = false;
    core_.QueueHeads(heads_);
    for (const auto& head : heads_) {
      if (head.reason != core::PendingReason::kNoNodeFits) continue;
      auto it = model_index_.find(*head.gpu_model);
      if (it == model_index_.end()) Fatal("unknown model " + *head.gpu_model);
      if (free_.For(demand_[it->second]) >= head.gpu_count) {
        fragmented_ = true;
        break;
      }
    }
    return fragmented_;
  }

  int TotalFree() const { return free_.total(); }
  Fleet* fleet() { return fleet_ ? &*fleet_ : nullptr; }
  uint64_t decisions() const { return core_.stats().decisions; }
  uint64_t passes() const { return core_.stats().passes; }
  uint64_t multi_node_tasks() const { return core_.stats().gang_starts; }
  uint64_t multi_node_task_nodes() const { return gang_starts_; }
  const std::vector<SimResult::Spread>& spread() const { return spread_.spread(); }
  std::optional<SimResult::Links> links() const {
    return layout_.has_links ? std::optional(links_.links()) : std::nullopt;
  }

 private:
  static core::CoreConfig MakeConfig(const SimOptions& options, const TeamLimitsMap& teams) {
    core::CoreConfig config;
    config.online_percent = options.online_percent;
    config.max_bypass = options.max_bypass;
    config.record_changes = false;
    config.record_events = false;
    config.borrowing = options.borrowing;
    config.preemption_grace_seconds = options.preemption_grace_seconds;
    config.min_runtime = options.min_runtime;
    config.teams = teams;
    config.topology_key = options.topology_key;
    config.backfill = options.backfill;
    config.backfill_depth = options.backfill_depth;
    return config;
  }

  core::SchedulerCore core_;
  const Layout& layout_;
  SpreadCounter spread_;
  LinkCounter links_;
  std::vector<int> spread_nodes_;  // Reused by every gang's start.
  const Workload& workload_;
  const std::vector<Demand>& demand_;
  FreeGpus free_;
  const int grace_seconds_;  // A stop order's grace when it names none (-1).
  core::TaskSpec spec_;
  uint32_t spec_team_ = ~uint32_t{0};  // The workload team whose name spec_.team holds.
  bool core_teams_ = false;            // Jobs go to their teams (else all to the default).
  const double limit_factor_;          // SimOptions::limit_factor.
  std::map<std::pair<std::string, int>, int> guarantees_;  // (team, class) -> GPUs.
  std::vector<uint32_t> task_job_;                         // Task number - 1 -> job.
  std::unordered_map<std::string, uint32_t> model_index_;  // Workload model -> its index.
  std::vector<core::Decision> decisions_;                  // Reused by every pass.
  std::vector<core::SchedulerCore::QueueHead> heads_;      // Reused by every pass.
  std::vector<int> members_;                               // Reused by every gang's end.
  uint64_t gang_starts_ = 0;                               // Members of gangs started.
  bool heads_unchanged_ = false;                           // The last pass was skipped.
  bool fragmented_known_ = false;
  bool fragmented_ = false;     // Fragmented() after the last pass that ran.
  std::optional<Fleet> fleet_;  // With autoscaling.
};

// Policy original: the same queues (FIFO per priority, high first, a task may overtake a head
// that does not fit, same quotas) but no node boundary: a task takes GPUs picked at random from
// all idle GPUs of its model in the cluster, so one task may land on several nodes.
class OriginalEngine {
 public:
  OriginalEngine(const Layout& layout, const Workload& w, const std::vector<Demand>& demand,
                 const SimOptions& options)
      : layout_(layout),
        spread_(layout),
        workload_(w),
        demand_(demand),
        free_(layout),
        rng_(options.seed),
        idle_model_(layout.models.size()),
        job_slot_(w.jobs.size(), 0) {
    for (size_t node = 0; node < layout.node_ids.size(); ++node) {
      for (int g = 0; g < layout.node_gpus[node]; ++g) {
        gpu_node_.push_back(static_cast<uint32_t>(node));
        gpu_model_.push_back(layout.node_model[node]);
      }
    }
    pos_all_.resize(gpu_node_.size());
    pos_model_.resize(gpu_node_.size());
    for (uint32_t gpu = 0; gpu < gpu_node_.size(); ++gpu) PutIdle(gpu);
    const int total = static_cast<int>(gpu_node_.size());
    int online = static_cast<int>(std::lround(total * options.online_percent));
    quota_[0] = std::clamp(online, 0, total);
    quota_[1] = total - quota_[0];
  }

  void Submit(uint32_t job, TimeMicros) {
    const SimJob& j = workload_.jobs[job];
    uint64_t key = (static_cast<uint64_t>(j.model) << 32) | static_cast<uint64_t>(j.gpus);
    int prio = static_cast<int>(j.priority);
    auto [it, inserted] = shape_ids_[prio].try_emplace(key, static_cast<uint32_t>(shapes_.size()));
    if (inserted) {
      shapes_.push_back(ShapeQueue{j.model, j.gpus, {}});
      prio_shapes_[prio].push_back(it->second);
    }
    shapes_[it->second].jobs.emplace_back(next_seq_++, job);
  }

  template <typename Started, typename Stopping>
  void Schedule(TimeMicros, Started&& started, Stopping&&) {
    ++passes_;
    using Head = std::pair<uint64_t, uint32_t>;  // (queue position, shape)
    for (int prio = 0; prio < core::kPriorityCount; ++prio) {
      heads_.clear();
      for (uint32_t s : prio_shapes_[prio]) {
        if (!shapes_[s].jobs.empty()) heads_.emplace_back(shapes_[s].jobs.front().first, s);
      }
      std::make_heap(heads_.begin(), heads_.end(), std::greater<Head>());
      while (!heads_.empty()) {
        std::pop_heap(heads_.begin(), heads_.end(), std::greater<Head>());
        uint32_t s = heads_.back().second;
        heads_.pop_back();
        ShapeQueue& shape = shapes_[s];
        // Nothing behind a head that does not fit can fit in this pass either.
        if (used_[prio] + shape.gpus > quota_[prio]) continue;
        if (free_.For(demand_[shape.model]) < shape.gpus) continue;
        uint32_t job = shape.jobs.front().second;
        shape.jobs.pop_front();
        Place(job, demand_[shape.model], shape.gpus);
        used_[prio] += shape.gpus;
        ++decisions_;
        Completion c;
        c.job = job;
        started(c);
        if (!shape.jobs.empty()) {
          heads_.emplace_back(shape.jobs.front().first, s);
          std::push_heap(heads_.begin(), heads_.end(), std::greater<Head>());
        }
      }
    }
  }

  void Finish(const Completion& c, TimeMicros) {
    const uint32_t job = c.job;
    uint32_t slot = job_slot_[job];
    for (uint32_t gpu : slots_[slot]) {
      PutIdle(gpu);
      free_.Add(gpu_model_[gpu], 1);
    }
    used_[static_cast<int>(workload_.jobs[job].priority)] -= workload_.jobs[job].gpus;
    slots_[slot].clear();
    free_slots_.push_back(slot);
  }

  // No borrowing, so nothing is ever stopped.
  void Stop(const Completion&, TimeMicros) { Fatal("policy original stops nothing"); }
  int Guarantee(const std::string&, int) const { return 0; }

  // Without node boundaries a head waits only for GPUs in total or for quota: never stranded.
  bool Fragmented() const { return false; }

  void PrefetchFinish(const Completion&) const {}
  void PrefetchFinishNode(const Completion&) const {}

  int TotalFree() const { return free_.total(); }
  Fleet* fleet() { return nullptr; }
  uint64_t decisions() const { return decisions_; }
  uint64_t passes() const { return passes_; }
  uint64_t multi_node_tasks() const { return multi_node_tasks_; }
  uint64_t multi_node_task_nodes() const { return multi_node_task_nodes_; }
  const std::vector<SimResult::Spread>& spread() const { return spread_.spread(); }
  // GPUs are taken anywhere, without groups: not counted.
  std::optional<SimResult::Links> links() const { return std::nullopt; }

 private:
  struct ShapeQueue {
    uint32_t model = 0;
    int gpus = 0;
    std::deque<std::pair<uint64_t, uint32_t>> jobs;  // (queue position, job)
  };

  void PutIdle(uint32_t gpu) {
    pos_all_[gpu] = static_cast<uint32_t>(idle_all_.size());
    idle_all_.push_back(gpu);
    auto& pool = idle_model_[gpu_model_[gpu]];
    pos_model_[gpu] = static_cast<uint32_t>(pool.size());
    pool.push_back(gpu);
  }

  void TakeIdle(uint32_t gpu) {
    auto remove = [](std::vector<uint32_t>& pool, std::vector<uint32_t>& pos, uint32_t g) {
      uint32_t last = pool.back();
      pool[pos[g]] = last;
      pos[last] = pos[g];
      pool.pop_back();
    };
    remove(idle_all_, pos_all_, gpu);
    remove(idle_model_[gpu_model_[gpu]], pos_model_, gpu);
    free_.Add(gpu_model_[gpu], -1);
  }

  void Place(uint32_t job, const Demand& demand, int gpus) {
    uint32_t slot;
    if (free_slots_.empty()) {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    job_slot_[job] = slot;
    auto& picked = slots_[slot];
    for (int i = 0; i < gpus; ++i) {
      uint32_t gpu;
      if (demand.all) {
        gpu = idle_all_[rng_.Below(idle_all_.size())];
      } else {
        size_t total = 0;
        for (int m : demand.models) total += idle_model_[m].size();
        size_t r = rng_.Below(total);
        size_t m = 0;
        while (r >= idle_model_[demand.models[m]].size())
          r -= idle_model_[demand.models[m++]].size();
        gpu = idle_model_[demand.models[m]][r];
      }
      TakeIdle(gpu);
      picked.push_back(gpu);
    }
    nodes_scratch_.clear();
    for (uint32_t gpu : picked) nodes_scratch_.push_back(gpu_node_[gpu]);
    std::sort(nodes_scratch_.begin(), nodes_scratch_.end());
    auto span = std::unique(nodes_scratch_.begin(), nodes_scratch_.end()) - nodes_scratch_.begin();
    if (span > 1) {
      ++multi_node_tasks_;
      multi_node_task_nodes_ += static_cast<uint64_t>(span);
      if (!layout_.label_keys.empty()) {
        spread_.Add(std::span<const uint32_t>(nodes_scratch_.data(), static_cast<size_t>(span)));
      }
    }
  }

  const Layout& layout_;
  SpreadCounter spread_;
  const Workload& workload_;
  const std::vector<Demand>& demand_;
  FreeGpus free_;
  SplitMix64 rng_;
  std::vector<uint32_t> gpu_node_;
  std::vector<int> gpu_model_;
  std::vector<uint32_t> idle_all_;
  std::vector<uint32_t> pos_all_;
  std::vector<std::vector<uint32_t>> idle_model_;
  std::vector<uint32_t> pos_model_;
  std::vector<std::vector<uint32_t>> slots_;  // GPUs held, per allocation slot.
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> job_slot_;
  std::vector<uint32_t> nodes_scratch_;
  std::unordered_map<uint64_t, uint32_t> shape_ids_[core::kPriorityCount];
  std::vector<uint32_t> prio_shapes_[core::kPriorityCount];
  std::vector<ShapeQueue> shapes_;
  std::vector<std::pair<uint64_t, uint32_t>> heads_;
  uint64_t next_seq_ = 0;
  int quota_[core::kPriorityCount] = {0, 0};
  int used_[core::kPriorityCount] = {0, 0};
  uint64_t decisions_ = 0;
  uint64_t passes_ = 0;
  uint64_t multi_node_tasks_ = 0;
  uint64_t multi_node_task_nodes_ = 0;
};

Distribution Summarize(std::vector<TimeMicros>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  long double sum = 0;
  for (TimeMicros v : values) sum += static_cast<long double>(v);
  d.mean = static_cast<double>(sum / static_cast<long double>(values.size()) / 1e6L);
  auto rank = [&](uint64_t percent) {
    uint64_t r = (percent * values.size() + 99) / 100;  // ceil(p * n), at least 1.
    return static_cast<double>(values[std::max<uint64_t>(r, 1) - 1]) / 1e6;
  };
  d.p50 = rank(50);
  d.p95 = rank(95);
  d.p99 = rank(99);
  return d;
}

// Borrowing: where a job stands, for events that may have gone stale and for the report.
enum class JobState : uint8_t { kWaiting, kRunning, kStopping, kDone };
struct Restarts {
  TimeMicros first_start = -1;
  uint32_t attempt = 0;  // Starts so far; the current one's number.
  JobState state = JobState::kWaiting;
};

template <typename Engine>
void RunLoop(Engine& engine, const Workload& w, const Layout& layout,
             const std::vector<Demand>& demand, const SimOptions& options, SimResult& r) {
  const auto& jobs = w.jobs;
  const size_t n = jobs.size();
  std::vector<TimeMicros> start(n, -1);  // The latest start.
  std::vector<uint8_t> submitted(n, 0);
  // Only with borrowing can a job stop and start again; without, none of this is kept and a
  // finish reads no per-job state.
  const bool preemptive = options.borrowing;
  std::vector<Restarts> restarts(preemptive ? n : 0);
  const bool wake = preemptive && options.min_runtime > 0;
  std::vector<uint64_t> team_preemptions(w.teams.size() * core::kPriorityCount, 0);
  long double lost = 0;  // GPU-microseconds of preempted starts, up to their stop.

  CompletionQueue<Completion> completions;
  size_t next = 0;
  uint64_t pending = 0;
  // Finish and stop events in the queue that will be applied: the others (finishes of stopped
  // starts, wake-ups) do not keep the replay going.
  uint64_t live = 0;
  const TimeMicros cap = options.max_time.value_or(std::numeric_limits<TimeMicros>::max());
  TimeMicros last = 0;
  bool fragmented = false;
  bool capped = false;
  long double fragmented_free = 0;  // GPU-microseconds.

  auto started = [&](TimeMicros now, Completion c) {
    start[c.job] = now;
    if (preemptive) {
      Restarts& job = restarts[c.job];
      if (job.first_start < 0) {
        job.first_start = now;
        ++r.started;
      }
      c.attempt = ++job.attempt;
      job.state = JobState::kRunning;
    } else {
      ++r.started;
    }
    completions.push(now + jobs[c.job].duration, c);
    ++live;
    --pending;
    if (wake) {
      // From then on it may be a victim; a pass must look again at waiting tasks.
      c.kind = Completion::Kind::kWake;
      completions.push(now + options.min_runtime, c);
    }
  };
  auto stopping = [&](TimeMicros now, Completion c, int grace_seconds) {
    Restarts& job = restarts[c.job];
    if (job.state != JobState::kRunning) Fatal("a stop order for a task that does not run");
    // Its finish is stale from now on: it ends when its stop does.
    job.state = JobState::kStopping;
    c.attempt = job.attempt;
    c.kind = Completion::Kind::kStop;
    completions.push(now + static_cast<TimeMicros>(grace_seconds) * core::kMicrosPerSecond, c);
    ++r.preemptions;
    ++team_preemptions[jobs[c.job].team * core::kPriorityCount +
                       static_cast<int>(jobs[c.job].priority)];
  };

  const auto wall_begin = std::chrono::steady_clock::now();
  const std::clock_t cpu_begin = std::clock();
  Fleet* fleet = engine.fleet();
  while (next < n || live > 0 || (fleet != nullptr && fleet->Busy(pending))) {
    TimeMicros now = std::numeric_limits<TimeMicros>::max();
    if (next < n) now = jobs[next].submit;
    if (!completions.empty()) now = std::min(now, completions.min_time());
    if (fleet != nullptr) now = std::min(now, fleet->NextWake());
    if (now > cap) {
      capped = true;
      break;
    }
    // The state after the last pass held until the first change at this timestamp. A timestamp
    // with only stale events is no event: it changes nothing and gets no pass.
    bool changed = false;
    auto change = [&] {
      if (changed) return;
      changed = true;
      if (fragmented) {
        r.fragmented_time += now - last;
        fragmented_free += static_cast<long double>(engine.TotalFree()) * (now - last);
      }
    };
    if (!completions.empty() && completions.min_time() == now) {
      completions.PopMin([&](const Completion& c) {
        switch (c.kind) {
          case Completion::Kind::kFinish:
            if (preemptive) {
              Restarts& job = restarts[c.job];
              if (job.attempt != c.attempt || job.state != JobState::kRunning) return;
              job.state = JobState::kDone;
            }
            change();
            --live;
            engine.Finish(c, now);
            ++r.completed;
            break;
          case Completion::Kind::kStop: {
            Restarts& job = restarts[c.job];
            if (job.attempt != c.attempt || job.state != JobState::kStopping) {
              Fatal("a stop ended for a task that was not stopping");
            }
            change();
            --live;  // Its finish went stale when the stop was ordered, and this is the end.
            engine.Stop(c, now);
            job.state = JobState::kWaiting;
            lost += static_cast<long double>(jobs[c.job].gpus) * (now - start[c.job]);
            ++pending;
            break;
          }
          case Completion::Kind::kWake: {
            // Only a borrowed task still running can now be a victim, and only for a waiting
            // task.
            const Restarts& job = restarts[c.job];
            if (job.attempt == c.attempt && job.state == JobState::kRunning && pending > 0 &&
                c.record->borrowed) {
              change();
            }
            break;
          }
        }
      });
    }
    if (next < n && jobs[next].submit == now) change();
    for (; next < n && jobs[next].submit == now; ++next) {
      const SimJob& j = jobs[next];
      const Demand& d = demand[j.model];
      if (d.models.empty()) {
        ++r.rejected_no_model;
      } else if (!(options.gangs || j.gpus <= d.max_per_node) ||
                 !ClusterHolds(ShapeOfJob(j.gpus, d), d, layout)) {
        ++r.rejected_exceeds_node;
      } else {
        engine.Submit(static_cast<uint32_t>(next), now);
        if (fleet != nullptr) fleet->Arrived();
        submitted[next] = 1;
        ++r.submitted;
        ++pending;
      }
    }
    if (fleet != nullptr && fleet->Boot(now)) change();  // Nodes that booted register.
    if (changed) {
      engine.Schedule(
          now, [&](const Completion& c) { started(now, c); },
          [&](const Completion& c, int grace_seconds) { stopping(now, c, grace_seconds); });
      fragmented = pending > 0 && engine.Fragmented();
      last = now;
      // What the next finishes will read is fetched in two steps, the second needing the first
      // to have arrived: the core's task record, then the task's node. A few timestamps apart,
      // the fetches overlap with other work instead of stalling the finish. A wake-up's task
      // may be gone.
      const auto& ahead = completions.ahead();
      if (ahead.size() > 6 && ahead[6].what.kind != Completion::Kind::kWake) {
        engine.PrefetchFinish(ahead[6].what);
      }
      if (ahead.size() > 3 && ahead[3].what.kind != Completion::Kind::kWake) {
        engine.PrefetchFinishNode(ahead[3].what);
      }
    }
    // The autoscaler looks after the pass, at its own pace.
    if (fleet != nullptr && now >= fleet->next_tick()) fleet->Tick(now);
  }
  r.replay_wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_begin).count();
  r.replay_cpu_seconds = static_cast<double>(std::clock() - cpu_begin) / CLOCKS_PER_SEC;
  const TimeMicros end = capped ? cap : last;
  if (fragmented && end > last) {
    r.fragmented_time += end - last;
    fragmented_free += static_cast<long double>(engine.TotalFree()) * (end - last);
  }
  r.fragmented_free_gpu_seconds = static_cast<double>(fragmented_free / 1e6L);
  if (fleet != nullptr) r.autoscale = fleet->Finish(end);
  r.not_arrived = n - next;
  r.makespan = n == 0 ? 0 : end;
  r.decisions = engine.decisions();
  r.passes = engine.passes();
  r.multi_node_tasks = engine.multi_node_tasks();
  r.multi_node_task_nodes = engine.multi_node_task_nodes();
  r.spread = engine.spread();
  r.links = engine.links();

  const size_t team_slots = w.teams.size() * core::kPriorityCount;
  std::vector<TimeMicros> delays[core::kPriorityCount + 1];
  std::vector<std::vector<TimeMicros>> team_delays(team_slots);
  std::vector<uint64_t> team_jobs(team_slots, 0);
  std::vector<TimeMicros> completion;
  std::vector<TimeMicros> gang_delays;
  long double busy = 0;  // GPU-microseconds of the latest starts.
  long double lost_at_end = 0;
  for (size_t i = 0; i < n; ++i) {
    const int prio = static_cast<int>(jobs[i].priority);
    const size_t team_slot = jobs[i].team * core::kPriorityCount + prio;
    const JobShape shape = ShapeOfJob(jobs[i].gpus, demand[jobs[i].model]);
    if (submitted[i]) ++team_jobs[team_slot];
    if (submitted[i] && shape.nodes > 1) ++r.gangs;
    const TimeMicros first = preemptive ? restarts[i].first_start : start[i];
    if (first < 0) {
      if (submitted[i]) ++r.pending_at_end[prio];
      continue;
    }
    // Queueing delay: arrival to the first start (a restart after a preemption adds none).
    delays[prio].push_back(first - jobs[i].submit);
    delays[core::kPriorityCount].push_back(first - jobs[i].submit);
    team_delays[team_slot].push_back(first - jobs[i].submit);
    if (shape.nodes > 1) gang_delays.push_back(first - jobs[i].submit);
    // A gang holds its members' GPUs; without node boundaries a job holds what it asked for.
    const long double gpus =
        static_cast<long double>(options.policy == Policy::kDgpu ? shape.Gpus() : jobs[i].gpus);
    if (!preemptive) {
      // A completion at or before the cap has been applied (the loop stops at the first event
      // after it); the others are still running at the end.
      const TimeMicros finish = start[i] + jobs[i].duration;
      const bool completed = finish <= cap;
      busy += gpus * ((completed ? finish : end) - start[i]);
      if (completed) completion.push_back(finish - jobs[i].submit);
      continue;
    }
    switch (restarts[i].state) {
      case JobState::kDone:
        busy += gpus * jobs[i].duration;
        completion.push_back(start[i] + jobs[i].duration - jobs[i].submit);
        break;
      case JobState::kRunning:
        busy += gpus * (end - start[i]);
        ++r.running_at_end;
        break;
      case JobState::kStopping:  // Its work up to the end is lost.
        busy += gpus * (end - start[i]);
        lost_at_end += gpus * (end - start[i]);
        ++r.running_at_end;
        break;
      case JobState::kWaiting:  // Preempted, not started again.
        ++r.pending_at_end[prio];
        break;
    }
  }
  if (!preemptive) r.running_at_end = r.started - r.completed;
  for (int p = 0; p <= core::kPriorityCount; ++p) r.queueing_delay[p] = Summarize(delays[p]);
  r.completion_time = Summarize(completion);
  r.gang_queueing_delay = Summarize(gang_delays);
  busy += lost;
  r.busy_gpu_seconds = static_cast<double>(busy / 1e6L);
  r.preempted_gpu_seconds = static_cast<double>((lost + lost_at_end) / 1e6L);
  if (r.makespan > 0 && r.total_gpus > 0) {
    r.utilization = static_cast<double>(
        busy / (static_cast<long double>(r.total_gpus) * static_cast<long double>(r.makespan)));
  }
  for (size_t t = 0; t < w.teams.size(); ++t) {
    for (int p = 0; p < core::kPriorityCount; ++p) {
      const size_t slot = t * core::kPriorityCount + p;
      SimResult::TeamResult team;
      team.guarantee = engine.Guarantee(w.teams[t], p);
      team.jobs = team_jobs[slot];
      if (team.jobs == 0 && team.guarantee == 0) continue;
      team.team = w.teams[t];
      team.priority = static_cast<core::Priority>(p);
      team.queueing_delay = Summarize(team_delays[slot]);
      team.preemptions = team_preemptions[slot];
      r.teams.push_back(std::move(team));
    }
  }
}

}  // namespace

std::string_view ToString(Policy p) { return p == Policy::kDgpu ? "dgpu" : "original"; }

std::optional<Policy> ParsePolicy(std::string_view s) {
  if (s == "dgpu") return Policy::kDgpu;
  if (s == "original") return Policy::kOriginal;
  return std::nullopt;
}

std::string_view ToString(TeamGuarantees g) {
  switch (g) {
    case TeamGuarantees::kNone:
      return "none";
    case TeamGuarantees::kProportional:
      return "proportional";
    case TeamGuarantees::kGiven:
      return "file";
  }
  return "none";
}

ClusterSpec AutoscaleCluster(const core::AutoscaleSettings& settings) {
  ClusterSpec spec;
  for (const auto& g : settings.groups)
    spec.groups.push_back({g.max_nodes, g.gpus_per_node, g.model, {}});
  return spec;
}

StatusOr<SimResult> Simulate(const Workload& workload, const ClusterSpec& cluster,
                             const SimOptions& options) {
  if (!(options.online_percent >= 0.0 && options.online_percent <= 1.0)) {
    return InvalidArgument("--online-percent must be between 0 and 1");
  }
  if (options.max_bypass < 0) return InvalidArgument("--max-bypass must not be negative");
  if (options.max_time && *options.max_time < 0) {
    return InvalidArgument("--max-time must not be negative");
  }
  if (options.preemption_grace_seconds < 0) {
    return InvalidArgument("--preemption-grace must not be negative");
  }
  if (options.min_runtime < 0) return InvalidArgument("--min-runtime must not be negative");
  if (options.policy != Policy::kDgpu &&
      (options.borrowing || options.team_guarantees != TeamGuarantees::kNone)) {
    return InvalidArgument("--borrowing and --team-guarantees need --policy dgpu");
  }
  Status valid = ValidateCluster(cluster);
  if (!valid.ok()) return valid;
  if (!options.topology_key.empty()) {
    if (options.policy != Policy::kDgpu)
      return InvalidArgument("--topology-key needs --policy dgpu");
    if (std::string why = core::CheckLabelKey(options.topology_key); !why.empty()) {
      return InvalidArgument("--topology-key '" + options.topology_key + "' is not valid: " + why);
    }
    if (!cluster.HasLabelKey(options.topology_key)) {
      return InvalidArgument("--topology-key " + options.topology_key +
                             ": no node group of the cluster has that label (give them labels "
                             "in a --cluster file)");
    }
  }
  if (options.autoscale) {
    if (options.policy != Policy::kDgpu) return InvalidArgument("--autoscale needs --policy dgpu");
    if (options.autoscale->boot_time < 0)
      return InvalidArgument("--boot-time must not be negative");
    if (options.autoscale->tick <= 0) return InvalidArgument("the autoscale tick must be positive");
    const ClusterSpec expected = AutoscaleCluster(options.autoscale->settings);
    bool same = expected.groups.size() == cluster.groups.size();
    for (size_t i = 0; same && i < cluster.groups.size(); ++i) {
      same = expected.groups[i].count == cluster.groups[i].count &&
             expected.groups[i].gpus_per_node == cluster.groups[i].gpus_per_node &&
             expected.groups[i].model == cluster.groups[i].model;
    }
    if (!same)
      return InvalidArgument("with --autoscale the cluster is the node groups at max_nodes");
  }

  const Layout layout(cluster);
  const std::vector<Demand> demand = MatchDemands(workload, layout);
  TeamLimitsMap teams;
  if (options.team_guarantees == TeamGuarantees::kGiven) {
    Status fit = CheckGuaranteesFit(options.teams, cluster.TotalGpus(), options.online_percent,
                                    "--team-guarantees");
    if (!fit.ok()) return fit;
    teams = options.teams;
  } else if (options.team_guarantees == TeamGuarantees::kProportional) {
    // GPU time (GPU-microseconds) per team and class of the jobs that will be submitted: a
    // rejected job never uses a GPU.
    std::vector<std::array<uint64_t, 2>> gpu_time(workload.teams.size(), {0, 0});
    for (const SimJob& j : workload.jobs) {
      const Demand& d = demand[j.model];
      const JobShape shape = ShapeOfJob(j.gpus, d);
      if (!(options.gangs || j.gpus <= d.max_per_node) || !ClusterHolds(shape, d, layout)) continue;
      gpu_time[j.team][static_cast<int>(j.priority)] +=
          static_cast<uint64_t>(shape.Gpus()) * static_cast<uint64_t>(j.duration);
    }
    teams = ProportionalGuarantees(workload.teams, gpu_time,
                                   ClassQuotas(cluster.TotalGpus(), options.online_percent));
  }
  SimResult r;
  r.policy = options.policy;
  r.nodes = cluster.NodeCount();
  r.total_gpus = cluster.TotalGpus();
  r.jobs = workload.jobs.size();

  if (options.policy == Policy::kDgpu) {
    CoreEngine engine(layout, workload, demand, options, teams);
    RunLoop(engine, workload, layout, demand, options, r);
  } else {
    OriginalEngine engine(layout, workload, demand, options);
    RunLoop(engine, workload, layout, demand, options, r);
  }
  return r;
}

}  // namespace dgpu::sim
