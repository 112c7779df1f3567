// The core and the reference scheduler (reference_scheduler.h) get the same seeded random
// command sequences, on clusters of 1 to 30 nodes of 1 to 8 GPUs and one to three GPU models
// (some nodes carry two). After every command both must have answered alike, ordered the same
// starts and stops, and hold the same tasks, queues, nodes, GPUs, quotas and reservations; after
// every pass, every pending task must also wait for the same reason. A mismatch names the seed,
// the step, the commands that led there and what differs.
//
// Decisions are compared as sequences, order included: the core hands them out in the order it
// makes them, which is queue order within a pass, and the daemon dispatches them in that order.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "core/scheduler_core.h"
#include "reference_scheduler.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::ReferenceScheduler;

std::string Describe(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string Describe(const Decision& d) {
  return d.kind == Decision::Kind::kStart
             ? "start " + FormatTaskId(d.task) + " on " + d.node_id + " " + Describe(d.gpu_indices)
             : "stop " + FormatTaskId(d.task) + " on " + d.node_id + " (" +
                   std::string(ToString(d.reason)) + ", grace " + std::to_string(d.grace_seconds) +
                   ")";
}

std::string Describe(const std::vector<Decision>& ds) {
  std::string out;
  for (const Decision& d : ds) out += "\n    " + Describe(d);
  return ds.empty() ? " none" : out;
}

std::string Describe(const Task& t) {
  std::ostringstream s;
  s << FormatTaskId(t.id) << " " << ToString(t.spec.priority) << " " << t.spec.gpu_count << "x'"
    << t.spec.gpu_model << "' " << ToString(t.status) << (t.stopping ? " stopping " : " ")
    << ToString(t.stop_reason) << " seq " << t.queue_seq << " attempts " << t.attempts
    << " preemptions " << t.preemptions << " error '" << t.error << "' exit " << t.exit_code
    << " created " << t.created_at << " started " << t.started_at << " finished " << t.finished_at
    << " on";
  for (const auto& na : t.allocation) s << " " << na.node_id << Describe(na.gpu_indices);
  return s.str();
}

std::string Describe(const QuotaView& q) {
  return "total " + std::to_string(q.total_gpus) + " high " + std::to_string(q.used[0]) + "/" +
         std::to_string(q.quota[0]) + " low " + std::to_string(q.used[1]) + "/" +
         std::to_string(q.quota[1]);
}

std::string Describe(const NodeView& n) {
  return n.id + " " + n.address + (n.online ? " online " : " offline ") +
         std::to_string(n.free_gpus) + "/" + std::to_string(n.gpu_count) + " free, heartbeat " +
         std::to_string(n.last_heartbeat);
}

std::string Describe(const GpuView& g) {
  return g.node_id + "/" + std::to_string(g.index) + " " + g.model + " " +
         std::string(ToString(g.status)) + " task " + std::to_string(g.current_task);
}

bool Same(const Task& a, const Task& b) {
  return a.id == b.id && a.spec.priority == b.spec.priority &&
         a.spec.gpu_count == b.spec.gpu_count && a.spec.gpu_model == b.spec.gpu_model &&
         a.status == b.status && a.stopping == b.stopping && a.stop_reason == b.stop_reason &&
         a.queue_seq == b.queue_seq && a.attempts == b.attempts && a.preemptions == b.preemptions &&
         a.error == b.error && a.exit_code == b.exit_code && a.created_at == b.created_at &&
         a.started_at == b.started_at && a.finished_at == b.finished_at &&
         a.allocation == b.allocation;
}

bool Same(const NodeView& a, const NodeView& b) {
  return a.id == b.id && a.address == b.address && a.online == b.online &&
         a.gpu_count == b.gpu_count && a.free_gpus == b.free_gpus &&
         a.last_heartbeat == b.last_heartbeat;
}

bool Same(const GpuView& a, const GpuView& b) {
  return a.node_id == b.node_id && a.index == b.index && a.model == b.model &&
         a.memory_mb == b.memory_mb && a.status == b.status && a.current_task == b.current_task;
}

bool Same(const QuotaView& a, const QuotaView& b) {
  return a.total_gpus == b.total_gpus && a.quota[0] == b.quota[0] && a.quota[1] == b.quota[1] &&
         a.used[0] == b.used[0] && a.used[1] == b.used[1];
}

// Lines "what: core X, reference Y" for each pair of lists that differ, element by element.
template <typename T>
void DiffLists(std::ostringstream& out, const std::string& what, const std::vector<T>& core,
               const std::vector<T>& ref) {
  for (size_t i = 0; i < std::max(core.size(), ref.size()); ++i) {
    if (i < core.size() && i < ref.size() && Same(core[i], ref[i])) continue;
    out << "\n  " << what << " #" << i << ": core "
        << (i < core.size() ? Describe(core[i]) : "(none)") << "\n  "
        << std::string(what.size(), ' ') << "     reference "
        << (i < ref.size() ? Describe(ref[i]) : "(none)");
  }
}

// What the sequences exercised, so that a generator that stopped reaching a rule shows.
struct Coverage {
  int sequences = 0;
  int steps = 0;
  int starts = 0;
  std::map<StopReason, int> stops;  // Stop orders, by reason.
  int stops_ended = 0;     // Checks of tasks back in the queue or failed after a stop (not cancel).
  int holds_released = 0;  // Holds ended because the held task could no longer start.
  int passes_with_reservation = 0;
  int agent_lost = 0;  // Tasks failed or put back after losing their node, per check.
  std::map<PendingReason, int> reasons;  // Pending reasons reported after passes.
};

// A cluster drawn from the seed: how many nodes, their sizes and models.
struct Cluster {
  std::vector<std::string> models;
  std::vector<std::string> wanted;  // What tasks ask for.
  int nodes = 1;
  int min_gpus = 1;
  int max_gpus = 8;
};

class Sequence {
 public:
  Sequence(uint32_t seed, Coverage& coverage) : seed_(seed), rng_(seed), coverage_(coverage) {
    CoreConfig cfg;
    cfg.max_bypass = pick(4) == 0 ? 16 : 1 + pick(4);
    cfg.max_attempts = 1 + pick(3);
    cfg.online_percent = pick(11) / 10.0;
    core_ = std::make_unique<SchedulerCore>(cfg);
    ref_ = std::make_unique<ReferenceScheduler>(cfg);
    const std::vector<std::string> all = {"A100", "H100-SXM", "Tesla V100-SXM2-32GB"};
    const int model_count = 1 + pick(3);
    cluster_.models.assign(all.begin(), all.begin() + model_count);
    // Any model, each by its name, one in other case and one by part of its name.
    cluster_.wanted = {"", "", "", "a100", "V100"};
    cluster_.wanted.insert(cluster_.wanted.end(), cluster_.models.begin(), cluster_.models.end());
    cluster_.nodes = pick(3) == 0 ? 1 + pick(4) : 1 + pick(30);
    cluster_.min_gpus = 1 + pick(4);
    cluster_.max_gpus = cluster_.min_gpus + pick(9 - cluster_.min_gpus);
    settings_ = "max_bypass " + std::to_string(cfg.max_bypass) + ", max_attempts " +
                std::to_string(cfg.max_attempts) + ", online_percent " +
                std::to_string(cfg.online_percent) + ", " + std::to_string(cluster_.nodes) +
                " nodes of " + std::to_string(cluster_.min_gpus) + "-" +
                std::to_string(cluster_.max_gpus) + " GPUs, " + std::to_string(model_count) +
                " models";
  }

  // Runs `steps` random commands; returns false (after reporting) at the first mismatch.
  bool Run(int steps) {
    coverage_.sequences++;
    for (int n = 0; n < cluster_.nodes; ++n) Register(NodeName(n), Layout(), {}, {});
    if (!Check(false)) return false;
    for (step_ = 0; step_ < steps; ++step_) {
      now_ += testing::kSec;
      coverage_.steps++;
      if (!Check(RandomCommand())) return false;
    }
    coverage_.holds_released += ref_->holds_released();
    return true;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }
  bool chance(int one_in) { return pick(one_in) == 0; }
  static std::string NodeName(int n) { return "node-" + std::to_string(100 + n); }
  std::string RandomNode() { return NodeName(pick(cluster_.nodes + 1)); }

  std::vector<GpuInfo> Layout() {
    const int count = cluster_.min_gpus + pick(cluster_.max_gpus - cluster_.min_gpus + 1);
    const int models = static_cast<int>(cluster_.models.size());
    const int model = pick(models);
    std::vector<GpuInfo> gpus = testing::MakeGpus(count, cluster_.models[model], 1000 * count);
    // A node with two models: its upper half is of the next one.
    if (models > 1 && count > 1 && chance(6)) {
      for (int i = count / 2; i < count; ++i) gpus[i].model = cluster_.models[(model + 1) % models];
    }
    // Agents usually list GPUs in index order, not always.
    if (chance(4)) std::reverse(gpus.begin(), gpus.end());
    return gpus;
  }

  void Log(std::string line) {
    log_.push_back("step " + std::to_string(step_) + " @" + std::to_string(now_ / testing::kSec) +
                   "s: " + std::move(line));
    if (log_.size() > 40) log_.pop_front();
  }

  // Both answer the command alike.
  template <typename Command>
  void Both(const std::string& what, Command&& command) {
    Status a = command(*core_);
    Status b = command(*ref_);
    Log(what + " -> " + a.ToString());
    if (!(a == b))
      answer_diff_ += "\n  answer: core " + a.ToString() + ", reference " + b.ToString();
  }

  // Tasks the reference knows, in some given state.
  std::vector<TaskNumber> TasksWhere(auto&& keep) const {
    std::vector<TaskNumber> out;
    for (const auto& [id, t] : ref_->tasks()) {
      if (keep(t)) out.push_back(id);
    }
    return out;
  }
  // One of `ids`, or a task nobody knows when there is none.
  TaskNumber PickFrom(const std::vector<TaskNumber>& ids) {
    return ids.empty() ? UnknownTask() : ids[pick(static_cast<int>(ids.size()))];
  }
  TaskNumber UnknownTask() const { return core_->next_task_number() + 1000; }
  TaskNumber AnyTask() {
    return PickFrom(TasksWhere([](const Task&) { return true; }));
  }
  static bool Holds(const Task& t) { return t.status == TaskStatus::kRunning || t.stopping; }

  void Register(const std::string& node, const std::vector<GpuInfo>& gpus,
                const std::vector<RunningReport>& running,
                const std::vector<FinishReport>& finished) {
    layouts_[node] = gpus;
    std::string what = "register " + node + " with " + std::to_string(gpus.size()) + " GPUs (" +
                       (gpus.empty() ? "" : gpus[0].model + ".." + gpus.back().model) +
                       "), running";
    for (const auto& r : running) what += " " + FormatTaskId(r.task) + Describe(r.gpu_indices);
    what += ", finished";
    for (const auto& f : finished) what += " " + FormatTaskId(f.task);
    Both(what, [&](auto& s) {
      return s.RegisterNode(node, "10.0.0." + node.substr(5), gpus, running, finished, now_);
    });
  }

  // What a returning agent reports: mostly the truth, sometimes a task the scheduler put back,
  // gave elsewhere or never knew, and finishes of what ran there or of queued tasks.
  void ReRegister() {
    const std::string node = RandomNode();
    std::vector<GpuInfo> gpus = layouts_.count(node) != 0 && !chance(4) ? layouts_[node] : Layout();
    std::vector<RunningReport> running;
    std::vector<FinishReport> finished;
    for (TaskNumber id :
         TasksWhere([&](const Task& t) { return Holds(t) && t.allocation[0].node_id == node; })) {
      const Task& t = ref_->tasks().at(id);
      if (chance(3)) {
        finished.push_back({id, !chance(3), pick(3), chance(2) ? "" : "signal:9", 0});
      } else if (!chance(5)) {
        running.push_back({id, t.allocation[0].gpu_indices});
      }
    }
    if (chance(4)) {
      TaskNumber id =
          PickFrom(TasksWhere([](const Task& t) { return t.status == TaskStatus::kPending; }));
      std::vector<int> indices;
      for (int i = pick(3); i < static_cast<int>(gpus.size()) && std::ssize(indices) < 1 + pick(4);
           ++i) {
        indices.push_back(gpus[i].index);
      }
      if (chance(3)) {
        finished.push_back({id, true, 0, "", now_ - testing::kSec});
      } else {
        running.push_back({id, indices});
      }
    }
    if (chance(6)) running.push_back({AnyTask(), {0}});
    if (chance(8)) running.push_back({UnknownTask(), {0}});
    // A faulty agent lists a task twice, with the same GPUs or only the first of them.
    if (!running.empty() && chance(10)) {
      RunningReport again = running[pick(static_cast<int>(running.size()))];
      if (chance(2) && again.gpu_indices.size() > 1) again.gpu_indices.resize(1);
      running.insert(running.begin() + pick(static_cast<int>(running.size()) + 1), again);
    }
    Register(node, gpus, running, finished);
  }

  void Submit() {
    TaskSpec spec = testing::Spec(
        chance(2) ? Priority::kHigh : Priority::kLow,
        chance(6) ? 1 + pick(cluster_.max_gpus + 2)
                  : 1 << pick(std::bit_width(static_cast<unsigned>(cluster_.max_gpus))),
        chance(20) ? "T4" : cluster_.wanted[pick(static_cast<int>(cluster_.wanted.size()))]);
    if (chance(40)) spec.gpu_count = 0;
    auto a = core_->Submit(spec, now_);
    auto b = ref_->Submit(spec, now_);
    Log("submit " + std::string(ToString(spec.priority)) + " " + std::to_string(spec.gpu_count) +
        "x'" + spec.gpu_model + "' -> " + (a.ok() ? FormatTaskId(*a) : a.status().ToString()));
    if (a.ok() != b.ok() || (a.ok() && *a != *b) || (!a.ok() && !(a.status() == b.status()))) {
      answer_diff_ += "\n  answer: core " + (a.ok() ? FormatTaskId(*a) : a.status().ToString()) +
                      ", reference " + (b.ok() ? FormatTaskId(*b) : b.status().ToString());
    }
  }

  void Finish() {
    std::vector<TaskNumber> held = TasksWhere([](const Task& t) { return Holds(t); });
    TaskNumber id = chance(8) ? AnyTask() : PickFrom(held);
    auto it = ref_->tasks().find(id);
    std::string node = it == ref_->tasks().end() || it->second.allocation.empty() || chance(10)
                           ? RandomNode()
                           : it->second.allocation[0].node_id;
    FinishReport report{id, !chance(3), pick(3), chance(4) ? "timeout" : "", chance(2) ? now_ : 0};
    Both("finish " + FormatTaskId(id) + " on " + node + (report.success ? " ok" : " failed"),
         [&](auto& s) { return s.TaskFinished(node, report, now_); });
  }

  // All online nodes but one (sometimes) say they are alive, and a few offline ones try to.
  void Heartbeats() {
    const std::string silent = chance(2) ? RandomNode() : "";
    std::string answers;
    for (const NodeView& n : ref_->Nodes()) {
      if (n.id == silent || (!n.online && !chance(4))) continue;
      Status a = core_->Heartbeat(n.id, now_);
      Status b = ref_->Heartbeat(n.id, now_);
      if (!a.ok()) answers += ", " + n.id + " " + a.ToString();
      if (!(a == b)) {
        answer_diff_ += "\n  answer: core " + a.ToString() + ", reference " + b.ToString();
      }
    }
    Log("heartbeats" + (silent.empty() ? "" : ", " + silent + " silent") + answers);
  }

  // Seconds between SIGTERM and SIGKILL: the agent's own (-1), none, or some; rarely invalid.
  int32_t RandomGrace() {
    static constexpr int32_t kGraces[] = {-1, -1, 0, 5, 30};
    return chance(30) ? -2 : kGraces[pick(5)];
  }

  // Mostly a running task (some already stopping), sometimes any, for every reason there is.
  void Stop() {
    TaskNumber id = chance(5) ? AnyTask() : PickFrom(TasksWhere([](const Task& t) {
      return t.status == TaskStatus::kRunning;
    }));
    const auto reason = static_cast<StopReason>(chance(8) ? pick(8) : 2 + pick(5));
    const int32_t grace = RandomGrace();
    Both("stop " + FormatTaskId(id) + " (" + std::string(ToString(reason)) + ", grace " +
             std::to_string(grace) + ")",
         [&](auto& s) { return s.StopTask(id, reason, grace, now_); });
  }

  // Returns whether the command was a pass.
  bool RandomCommand() {
    const int op = pick(100);
    if (op < 24) {
      Submit();
    } else if (op < 44) {
      core_->Schedule(now_);
      ref_->Schedule(now_);
      Log("schedule");
      return true;
    } else if (op < 58) {
      Finish();
    } else if (op < 63) {
      TaskNumber id =
          chance(4) ? AnyTask()
                    : PickFrom(TasksWhere([](const Task& t) { return !IsFinished(t.status); }));
      const int32_t grace = RandomGrace();
      Both("cancel " + FormatTaskId(id) + " (grace " + std::to_string(grace) + ")",
           [&](auto& s) { return s.Cancel(id, now_, grace); });
    } else if (op < 68) {
      Stop();
    } else if (op < 71) {
      TaskNumber id = AnyTask();
      auto it = ref_->tasks().find(id);
      std::string node = it == ref_->tasks().end() || it->second.allocation.empty()
                             ? RandomNode()
                             : it->second.allocation[0].node_id;
      Both("started " + FormatTaskId(id) + " on " + node,
           [&](auto& s) { return s.TaskStarted(id, node, now_); });
    } else if (op < 79) {
      Heartbeats();
    } else if (op < 83) {
      now_ += pick(20) * testing::kSec;
      core_->Tick(now_);
      ref_->Tick(now_);
      Log("tick");
    } else if (op < 86) {
      std::string node = chance(10) ? "node-unknown" : RandomNode();
      Both("lost " + node, [&](auto& s) { return s.NodeLost(node, now_); });
    } else if (op < 93) {
      ReRegister();
    } else if (op < 96) {
      double percent = chance(8) ? (chance(2) ? 1.5 : std::nan("")) : pick(11) / 10.0;
      Both("online_percent " + std::to_string(percent),
           [&](auto& s) { return s.SetOnlinePercent(percent, now_); });
    } else {
      TaskNumber id = AnyTask();
      core_->Forget(id);
      ref_->Forget(id);
      Log("forget " + FormatTaskId(id));
    }
    return false;
  }

  // Compares everything; after a pass also the pending reasons. Reports and returns false on a
  // difference.
  bool Check(bool after_pass) {
    std::ostringstream diff;
    diff << answer_diff_;
    answer_diff_.clear();
    std::vector<Decision> core_decisions = core_->TakeDecisions();
    std::vector<Decision> ref_decisions = ref_->TakeDecisions();
    for (const Decision& d : ref_decisions) {
      if (d.kind == Decision::Kind::kStart) {
        coverage_.starts++;
      } else {
        coverage_.stops[d.reason]++;
      }
    }
    if (core_decisions != ref_decisions) {
      diff << "\n  decisions: core" << Describe(core_decisions) << "\n  reference"
           << Describe(ref_decisions);
    }
    (void)core_->TakeChanges();
    if (core_->TaskCount() != ref_->tasks().size()) {
      diff << "\n  tasks in memory: core " << core_->TaskCount() << ", reference "
           << ref_->tasks().size();
    }
    for (const auto& [id, t] : ref_->tasks()) {
      const Task* c = core_->FindTask(id);
      if (c == nullptr || !Same(*c, t)) {
        diff << "\n  task: core " << (c ? Describe(*c) : "(none)") << "\n   reference "
             << Describe(t);
        continue;
      }
      if (t.error == "agent_lost") coverage_.agent_lost++;
      if (t.error == "preempted" || t.error == "drained" || t.error == "gpu_unhealthy" ||
          t.error == "member_failed") {
        coverage_.stops_ended++;
      }
      if (!after_pass) continue;
      PendingReason core_reason = core_->ReasonOf(*c);
      PendingReason ref_reason = ref_->ReasonOf(id);
      if (ref_reason != PendingReason::kNone) coverage_.reasons[ref_reason]++;
      if (core_reason != ref_reason) {
        diff << "\n  reason of " << FormatTaskId(id) << ": core " << ToString(core_reason)
             << ", reference " << ToString(ref_reason);
      }
    }
    for (Priority p : {Priority::kHigh, Priority::kLow}) {
      if (after_pass && ref_->ReservedNode(p)) coverage_.passes_with_reservation++;
      if (core_->QueueOrder(p) != ref_->QueueOrder(p)) {
        diff << "\n  queue " << ToString(p) << ": core " << Describe(Ints(core_->QueueOrder(p)))
             << ", reference " << Describe(Ints(ref_->QueueOrder(p)));
      }
      if (core_->ReservedNode(p) != ref_->ReservedNode(p)) {
        diff << "\n  reserved for " << ToString(p) << ": core "
             << core_->ReservedNode(p).value_or("none") << ", reference "
             << ref_->ReservedNode(p).value_or("none");
      }
    }
    DiffLists(diff, "quota", std::vector{core_->Quota()}, std::vector{ref_->Quota()});
    DiffLists(diff, "node", core_->Nodes(), ref_->Nodes());
    DiffLists(diff, "gpu", core_->Gpus(), ref_->Gpus());
    Status invariants = core_->CheckInvariants();
    if (!invariants.ok()) diff << "\n  core invariants: " << invariants.ToString();
    if (diff.str().empty()) return true;
    std::string history;
    for (const std::string& line : log_) history += "\n  " + line;
    ADD_FAILURE() << "seed " << seed_ << " (" << settings_ << ") differs after step " << step_
                  << "; the last commands:" << history << "\nwhat differs:" << diff.str();
    return false;
  }

  static std::vector<int> Ints(const std::vector<TaskNumber>& ids) {
    return std::vector<int>(ids.begin(), ids.end());
  }

  const uint32_t seed_;
  std::mt19937 rng_;
  Coverage& coverage_;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<ReferenceScheduler> ref_;
  Cluster cluster_;
  std::string settings_;
  std::map<std::string, std::vector<GpuInfo>> layouts_;
  TimeMicros now_ = 1000 * testing::kSec;
  int step_ = -1;
  std::deque<std::string> log_;
  std::string answer_diff_;
};

TEST(ReferenceTest, RandomSequencesDecideAlike) {
  Coverage c;
  for (uint32_t seed = 1; seed <= testing::Sequences(1000); ++seed) {
    if (!Sequence(seed, c).Run(300)) return;
  }
  std::cout << c.sequences << " sequences, " << c.steps << " steps, " << c.starts << " starts, "
            << c.passes_with_reservation << " passes with a reservation, " << c.holds_released
            << " holds released, " << c.agent_lost << " checks of tasks that lost their node, "
            << c.stops_ended << " of tasks after a stop; stops:";
  for (const auto& [reason, count] : c.stops) std::cout << " " << ToString(reason) << " " << count;
  std::cout << "; reasons after passes:";
  for (const auto& [reason, count] : c.reasons)
    std::cout << " " << ToString(reason) << " " << count;
  std::cout << "\n";
  // Every kind of step reached, in proportion to the sequences run.
  const int d = static_cast<int>(testing::kSequenceDivisor);
  EXPECT_GT(c.starts, 20000 / d);
  EXPECT_GT(c.passes_with_reservation, 300 / d);
  EXPECT_GT(c.holds_released, 10 / d);
  EXPECT_GT(c.agent_lost, 100000 / d);
  EXPECT_GT(c.stops_ended, 10000 / d);
  for (StopReason r :
       {StopReason::kCancel, StopReason::kPreempt, StopReason::kDrain, StopReason::kMemberFailure,
        StopReason::kTimeout, StopReason::kGpuFailure, StopReason::kReconcile}) {
    EXPECT_GT(c.stops[r], 500 / d) << ToString(r);
  }
  for (PendingReason r :
       {PendingReason::kQueued, PendingReason::kQuotaExhausted, PendingReason::kNoNodeFits,
        PendingReason::kNoGpuModel, PendingReason::kExceedsCluster}) {
    EXPECT_GT(c.reasons[r], 5000 / d) << ToString(r);
  }
}

// Documented rules, each on its smallest case, run on the reference and on the core alike: the
// random test shows that they agree, these show that what they agree on is the rule.
template <typename Scheduler>
class DocumentedRulesTest : public ::testing::Test {
 protected:
  Scheduler& Make(CoreConfig cfg) {
    scheduler_ = std::make_unique<Scheduler>(cfg);
    return *scheduler_;
  }
  // Runs a pass and returns its decisions, described.
  std::vector<std::string> Pass() {
    scheduler_->Schedule(now_);
    return Taken();
  }
  std::vector<std::string> Taken() {
    std::vector<std::string> out;
    for (const Decision& d : scheduler_->TakeDecisions()) out.push_back(Describe(d));
    return out;
  }
  std::unique_ptr<Scheduler> scheduler_;
  const TimeMicros now_ = testing::kSec;
};
using Schedulers = ::testing::Types<ReferenceScheduler, SchedulerCore>;
TYPED_TEST_SUITE(DocumentedRulesTest, Schedulers);

// A node reserved for one priority's starving task is not reserved for the other's too: neither
// could use it then. Here only n1 has 4 GPUs; the low task that needs them holds its priority
// instead, and the high one starts as soon as n1 is free.
TYPED_TEST(DocumentedRulesTest, ANodeIsReservedForOnePriorityOnly) {
  CoreConfig cfg;
  cfg.max_bypass = 1;
  cfg.online_percent = 0.5;
  auto& s = this->Make(cfg);
  ASSERT_TRUE(s.RegisterNode("n1", "a", testing::MakeGpus(4), {}, {}, this->now_).ok());
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 1), this->now_), 1u);
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-1 on n1 [0]"});
  for (const char* n : {"n2", "n3", "n4"}) {
    ASSERT_TRUE(s.RegisterNode(n, "a", testing::MakeGpus(2), {}, {}, this->now_).ok());
  }
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 4), this->now_), 2u);
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 1), this->now_), 3u);
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-3 on n2 [0]"});
  EXPECT_EQ(s.ReservedNode(Priority::kHigh), "n1");
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kLow, 4), this->now_), 4u);
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kLow, 1), this->now_), 5u);
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-5 on n2 [1]"});
  EXPECT_EQ(s.ReservedNode(Priority::kLow), std::nullopt);
  ASSERT_TRUE(s.TaskFinished("n1", {1, true, 0, "", this->now_}, this->now_).ok());
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-2 on n1 [0,1,2,3]"});
}

// A held task that can no longer start (its only big node left) ends its hold; when it can
// start again, younger tasks overtake it at most max_bypass times before a node is reserved.
TYPED_TEST(DocumentedRulesTest, BypassStaysBoundedAfterTheOldestCouldNotStart) {
  CoreConfig cfg;
  cfg.max_bypass = 1;
  cfg.online_percent = 0.5;
  auto& s = this->Make(cfg);
  ASSERT_TRUE(s.RegisterNode("n1", "a", testing::MakeGpus(4), {}, {}, this->now_).ok());
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kLow, 1), this->now_), 1u);
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-1 on n1 [0]"});
  ASSERT_TRUE(s.SetOnlinePercent(1.0, this->now_).ok());
  ASSERT_TRUE(s.RegisterNode("n2", "a", testing::MakeGpus(2), {}, {}, this->now_).ok());
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 4), this->now_), 2u);
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 1), this->now_), 3u);
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-3 on n2 [0]"});
  EXPECT_EQ(s.ReservedNode(Priority::kHigh), "n1");
  ASSERT_TRUE(s.NodeLost("n1", this->now_).ok());  // task-2 now exceeds the cluster.
  EXPECT_EQ(this->Pass(), std::vector<std::string>{});
  EXPECT_EQ(s.ReservedNode(Priority::kHigh), std::nullopt);
  // n1 comes back running task-1, which had been put back in the queue: 3 GPUs free there.
  ASSERT_TRUE(s.RegisterNode("n1", "a", testing::MakeGpus(4), {{1, {0}}}, {}, this->now_).ok());
  for (TaskNumber n : {4u, 5u, 6u}) {
    ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 1), this->now_), n);
  }
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-4 on n2 [1]"});
  EXPECT_EQ(s.ReservedNode(Priority::kHigh), "n1");
}

// An agent that lists a task being stopped twice: the repeat is ignored, the task keeps the
// GPUs of its first listing until its end is reported.
TYPED_TEST(DocumentedRulesTest, AStoppingTaskListedTwiceHoldsItsGpusOnce) {
  auto& s = this->Make(CoreConfig{});
  ASSERT_TRUE(s.RegisterNode("n1", "a", testing::MakeGpus(4), {}, {}, this->now_).ok());
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 2), this->now_), 1u);
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-1 on n1 [0,1]"});
  ASSERT_TRUE(s.Cancel(1, this->now_, 5).ok());
  EXPECT_EQ(this->Taken(), std::vector<std::string>{"stop task-1 on n1 (cancel, grace 5)"});
  ASSERT_TRUE(
      s.RegisterNode("n1", "a", testing::MakeGpus(4), {{1, {0, 1}}, {1, {0}}}, {}, this->now_)
          .ok());
  EXPECT_EQ(this->Taken(), std::vector<std::string>{"stop task-1 on n1 (cancel, grace -1)"});
  EXPECT_EQ(s.Nodes().at(0).free_gpus, 2);
  ASSERT_TRUE(s.TaskFinished("n1", {1, false, 143, "cancelled", this->now_}, this->now_).ok());
  EXPECT_EQ(s.Nodes().at(0).free_gpus, 4);
  EXPECT_EQ(s.Quota().used[static_cast<int>(Priority::kHigh)], 0);
}

// A preempted task keeps its GPUs until its end is confirmed, then goes back to its old place,
// ahead of a task submitted after it; a timed-out one fails once its node is lost.
TYPED_TEST(DocumentedRulesTest, AStoppedTaskRequeuesAtItsPlaceOrFails) {
  CoreConfig cfg;
  cfg.online_percent = 1.0;
  auto& s = this->Make(cfg);
  ASSERT_TRUE(s.RegisterNode("n1", "a", testing::MakeGpus(2), {}, {}, this->now_).ok());
  ASSERT_TRUE(s.RegisterNode("n2", "a", testing::MakeGpus(1), {}, {}, this->now_).ok());
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 2), this->now_), 1u);
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 1), this->now_), 2u);
  EXPECT_EQ(this->Pass(),
            (std::vector<std::string>{"start task-1 on n1 [0,1]", "start task-2 on n2 [0]"}));
  ASSERT_EQ(*s.Submit(testing::Spec(Priority::kHigh, 2), this->now_), 3u);
  ASSERT_TRUE(s.StopTask(1, StopReason::kPreempt, 5, this->now_).ok());
  ASSERT_TRUE(s.StopTask(1, StopReason::kDrain, 0, this->now_).ok());
  EXPECT_EQ(this->Taken(), (std::vector<std::string>{"stop task-1 on n1 (preempt, grace 5)",
                                                     "stop task-1 on n1 (preempt, grace 0)"}));
  EXPECT_EQ(this->Pass(), std::vector<std::string>{});
  ASSERT_TRUE(s.TaskFinished("n1", {1, false, 143, "", this->now_}, this->now_).ok());
  EXPECT_EQ(s.QueueOrder(Priority::kHigh), (std::vector<TaskNumber>{1, 3}));
  EXPECT_EQ(this->Pass(), std::vector<std::string>{"start task-1 on n1 [0,1]"});
  ASSERT_TRUE(s.StopTask(2, StopReason::kTimeout, -1, this->now_).ok());
  ASSERT_TRUE(s.NodeLost("n2", this->now_).ok());
  EXPECT_EQ(s.Nodes().at(1).free_gpus, 1);
  EXPECT_EQ(s.Quota().used[static_cast<int>(Priority::kHigh)], 2);
  EXPECT_EQ(s.StopTask(2, StopReason::kPreempt, -1, this->now_).ToString(),
            "FAILED_PRECONDITION: task-2 is not running (status failed)");
}

}  // namespace
}  // namespace dgpu::core
