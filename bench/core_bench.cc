// Scheduling core benchmarks.
//
// BM_Decision: one scheduling decision (submit, place, and later release) on a cluster of
// N nodes x 8 GPUs kept about half busy with a mix of 1/2/4/8-GPU tasks. With `resources`, the
// nodes report 64 CPUs and 512,000 MiB each and half the tasks ask for CPUs (the rest take their
// GPUs' share): 1, three quarters of the share; 2, one CPU more than the share (8-GPU tasks:
// the whole node's 64).
// BM_DecisionSelector: BM_Decision on nodes in 12 racks, half the tasks selecting one.
// BM_DecisionNvlink: BM_Decision on nodes whose GPUs are in two NVLink groups of 4.
// BM_ExplainPending: why a pending task waits, every node looked at (GET /tasks/{id}).
// BM_GangDecision: one gang of M members x 8 GPUs placed whole and ended, on that cluster.
// BM_GangDecisionTopology: the same with scheduler.topology_key, nodes in R racks.
// BM_DecisionTeams: BM_Decision with borrowing on and 15 teams, each with a guarantee in both
// classes (together the class quotas, online_percent 0.7); each task names a random team.
// BM_ChooseVictims: one reclaim pass on a cluster of N nodes x 8 GPUs filled with 1-GPU batch
// tasks that borrow the online class's idle GPUs: an online task within its team's guarantee
// arrives and the pass chooses the borrowers to stop for it (wall time of that pass only).
// BM_PassWhilePreemptorsWait: one pass on 10,000 nodes while N preemptors wait for victims.
// BM_NoFitPass: one scheduling pass over 100,000 pending tasks when nothing fits.
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "core/scheduler_core.h"

namespace dgpu::core {
namespace {

std::vector<GpuInfo> Gpus8() {
  std::vector<GpuInfo> g;
  for (int i = 0; i < 8; ++i) g.push_back({i, "A100", 81920, "", true, ""});
  return g;
}

// Gpus8 in two NVLink groups: 0-3 and 4-7.
std::vector<GpuInfo> LinkedGpus8() {
  std::vector<GpuInfo> g = Gpus8();
  for (int i = 0; i < 8; ++i) g[static_cast<size_t>(i)].link_group = i / 4;
  return g;
}

TaskSpec SpecOf(Priority p, int gpus) {
  TaskSpec s;
  s.priority = p;
  s.gpu_count = gpus;
  s.command = "true";
  return s;
}

TaskSpec SpecOf(Priority p, int gpus, const std::string& team) {
  TaskSpec s = SpecOf(p, gpus);
  s.team = team;
  return s;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The task sizes the decision benchmarks draw from.
constexpr int kSizes[] = {1, 1, 1, 1, 2, 2, 4, 8};

std::string NodeName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "node-%05d", i);
  return buf;
}

// The benchmarks' core: online_percent 0.5, changes and events recorded or not.
CoreConfig HalfOnlineConfig(bool record) {
  CoreConfig cfg;
  cfg.online_percent = 0.5;
  cfg.record_changes = record;
  cfg.record_events = record;
  return cfg;
}

// Registers `nodes` nodes x 8 GPUs and fills about half of the GPUs with long-running tasks of
// 1, 2, 4 and 8 GPUs (`running`: each task and its node, in start order).
void FillHalf(SchedulerCore& core, int nodes, std::mt19937& rng,
              std::deque<std::pair<TaskNumber, std::string>>& running,
              const NodeResources& resources = {}, const std::vector<GpuInfo>& gpus = Gpus8()) {
  for (int i = 0; i < nodes; ++i) {
    (void)core.RegisterNode(NodeName(i), "", gpus, resources, {}, {}, 0);
  }
  int64_t filled = 0;
  while (filled < nodes * 8 / 2) {
    int k = kSizes[rng() % 8];
    auto p = (rng() & 1) ? Priority::kHigh : Priority::kLow;
    (void)core.Submit(SpecOf(p, k), 0);
    core.Schedule(0);
    for (auto& d : core.TakeDecisions()) running.emplace_back(d.task, d.node_id);
    filled += k;
  }
}

// One decision per iteration: a task of 1-8 GPUs (`adjust` may change its spec) is submitted and
// a pass run; once placed, the oldest running task ends, so the cluster stays about half busy;
// else it is cancelled. `record`: the changes and events are taken as the daemon does.
template <typename Adjust>
void DecisionLoop(benchmark::State& state, SchedulerCore& core, std::mt19937& rng,
                  std::deque<std::pair<TaskNumber, std::string>>& running, bool record,
                  Adjust&& adjust) {
  TimeMicros now = 1;
  uint64_t placed = 0;
  for (auto _ : state) {
    int k = kSizes[rng() % 8];
    auto p = (rng() & 1) ? Priority::kHigh : Priority::kLow;
    TaskSpec spec = SpecOf(p, k);
    adjust(spec, k);
    auto id = core.Submit(spec, now);
    core.Schedule(now);
    auto d = core.TakeDecisions();
    if (!d.empty()) {
      placed++;
      running.emplace_back(d[0].task, d[0].node_id);
      auto [old, node] = running.front();
      running.pop_front();
      (void)core.TaskFinished(node, {old, true, 0, "", now}, now);
      core.Forget(old);
    } else {
      (void)core.Cancel(*id, now);
      core.Forget(*id);
    }
    if (record) {
      benchmark::DoNotOptimize(core.TakeChanges());
      benchmark::DoNotOptimize(core.TakeEvents());
    }
    ++now;
  }
  state.counters["placed_ratio"] =
      static_cast<double>(placed) / static_cast<double>(state.iterations());
}

void BM_Decision(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const bool record = state.range(1) != 0;
  const int64_t resources = state.range(2);
  SchedulerCore core(HalfOnlineConfig(record));
  std::mt19937 rng(42);
  std::deque<std::pair<TaskNumber, std::string>> running;
  FillHalf(core, nodes, rng, running,
           resources > 0 ? NodeResources{64000, 512000, "none"} : NodeResources{});
  core.TakeChanges();
  core.TakeEvents();
  DecisionLoop(state, core, rng, running, record, [&](TaskSpec& spec, int k) {
    if (resources > 0 && (rng() & 1)) {
      // 1: within the share (a node with the GPUs has the CPUs); 2: one CPU more than the
      // share (a whole node's for 8 GPUs), so that only nodes with more free GPUs than it asks
      // for have the CPUs.
      spec.cpus_milli = resources == 1 ? k * 6000 : k * 8000 + (k < 8 ? 1000 : 0);
    }
  });
}
BENCHMARK(BM_Decision)
    ->ArgNames({"nodes", "record_changes", "resources"})
    ->Args({200, 0, 0})
    ->Args({10000, 0, 0})
    ->Args({200, 1, 0})
    ->Args({10000, 1, 0})
    ->Args({10000, 0, 1})
    ->Args({10000, 0, 2})
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

void BM_DecisionNvlink(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  SchedulerCore core(HalfOnlineConfig(/*record=*/false));
  std::mt19937 rng(42);
  std::deque<std::pair<TaskNumber, std::string>> running;
  FillHalf(core, nodes, rng, running, {}, LinkedGpus8());
  DecisionLoop(state, core, rng, running, /*record=*/false, [](TaskSpec&, int) {});
}
BENCHMARK(BM_DecisionNvlink)
    ->ArgNames({"nodes"})
    ->Arg(10000)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// The 12 racks' selectors, rack r<i mod 12> labelling each of `nodes` nodes.
std::vector<std::vector<std::pair<std::string, std::string>>> LabelRacks(SchedulerCore& core,
                                                                         int nodes) {
  std::vector<std::vector<std::pair<std::string, std::string>>> racks;
  for (int r = 0; r < 12; ++r) racks.push_back({{"rack", "r" + std::to_string(r)}});
  for (int i = 0; i < nodes; ++i) {
    (void)core.SetNodeLabels(NodeName(i), {racks[static_cast<size_t>(i % 12)][0]});
  }
  return racks;
}

// BM_Decision's loop on nodes labelled in racks (LabelRacks): half the tasks select one rack
// (node_selector), so a twelfth of the nodes may take them.
void BM_DecisionSelector(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  SchedulerCore core(HalfOnlineConfig(/*record=*/false));
  std::mt19937 rng(42);
  std::deque<std::pair<TaskNumber, std::string>> running;
  FillHalf(core, nodes, rng, running);
  const auto racks = LabelRacks(core, nodes);
  DecisionLoop(state, core, rng, running, /*record=*/false, [&](TaskSpec& spec, int) {
    if (rng() & 1) spec.node_selector = racks[rng() % 12];
  });
}
BENCHMARK(BM_DecisionSelector)
    ->ArgNames({"nodes"})
    ->Arg(10000)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// What GET /tasks/{id} of a pending task costs the core: ExplainPending of a 4-GPU task selecting
// one of 12 racks on BM_Decision's half-busy cluster (every node looked at once).
void BM_ExplainPending(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  SchedulerCore core(HalfOnlineConfig(/*record=*/false));
  std::mt19937 rng(42);
  std::deque<std::pair<TaskNumber, std::string>> running;
  FillHalf(core, nodes, rng, running);
  TaskSpec spec = SpecOf(Priority::kLow, 4);
  spec.node_selector = LabelRacks(core, nodes)[3];
  const TaskNumber id = *core.Submit(spec, 1);
  for (auto _ : state) {
    auto detail = core.ExplainPending(id);
    benchmark::DoNotOptimize(detail);
  }
}
BENCHMARK(BM_ExplainPending)->Arg(10000)->Unit(benchmark::kMicrosecond);

// One gang decision: a gang of M members x 8 GPUs is submitted to the cluster of BM_Decision
// (N nodes x 8 GPUs, about half busy with the same mix), placed whole in one pass, and then
// ended member by member (each member's finish is part of the iteration, as it is of a task's
// life; the cluster goes back to the same state).
// BM_GangDecision's loop: a gang of `members` x 8 GPUs submitted, placed, its members ended.
void GangLoop(benchmark::State& state, SchedulerCore& core, int members, bool record) {
  TaskSpec gang = SpecOf(Priority::kHigh, members * 8);
  gang.nodes = members;
  TimeMicros now = 1;
  uint64_t placed = 0;
  for (auto _ : state) {
    auto id = core.Submit(gang, now);
    core.Schedule(now);
    auto d = core.TakeDecisions();
    if (!d.empty()) {
      placed++;
      for (const Decision& member : d) {
        (void)core.TaskFinished(member.node_id, {*id, true, 0, "", now}, now);
      }
    } else {
      (void)core.Cancel(*id, now);
    }
    core.Forget(*id);
    if (record) {
      benchmark::DoNotOptimize(core.TakeChanges());
      benchmark::DoNotOptimize(core.TakeEvents());
    }
    ++now;
  }
  state.counters["placed_ratio"] =
      static_cast<double>(placed) / static_cast<double>(state.iterations());
}

void BM_GangDecision(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int members = static_cast<int>(state.range(1));
  const bool record = state.range(2) != 0;
  SchedulerCore core(HalfOnlineConfig(record));
  std::mt19937 rng(42);
  std::deque<std::pair<TaskNumber, std::string>> running;
  FillHalf(core, nodes, rng, running);
  core.TakeChanges();
  core.TakeEvents();
  GangLoop(state, core, members, record);
}
BENCHMARK(BM_GangDecision)
    ->ArgNames({"nodes", "members", "record_changes"})
    ->Args({1000, 16, 0})
    ->Args({10000, 16, 0})
    ->Args({10000, 2, 0})
    ->Args({10000, 16, 1})
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// BM_GangDecision with scheduler.topology_key: rack, the nodes in `racks` racks (rack r<i mod
// racks>): the gang goes to the first rack whose fitting nodes hold it.
void BM_GangDecisionTopology(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int members = static_cast<int>(state.range(1));
  const int racks = static_cast<int>(state.range(2));
  CoreConfig config = HalfOnlineConfig(/*record=*/false);
  config.topology_key = "rack";
  SchedulerCore core(config);
  std::mt19937 rng(42);
  std::deque<std::pair<TaskNumber, std::string>> running;
  FillHalf(core, nodes, rng, running);
  for (int i = 0; i < nodes; ++i) {
    (void)core.SetNodeLabels(NodeName(i), {{"rack", "r" + std::to_string(i % racks)}});
  }
  GangLoop(state, core, members, /*record=*/false);
}
BENCHMARK(BM_GangDecisionTopology)
    ->ArgNames({"nodes", "members", "racks"})
    ->Args({10000, 16, 12})
    ->Args({10000, 16, 1250})
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// BM_Decision's loop with teams and borrowing: 15 teams share each class's quota as guarantees,
// so a pass runs both phases (heads within their guarantee, then borrowers in fair-share order).
// Every start is kept running and the oldest running task is released, so the cluster stays
// about half busy; a task that could not start is cancelled. Preemptions are not expected on a
// half-busy cluster; if one happens its victims are confirmed stopped at once (counted).
void BM_DecisionTeams(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const bool record = state.range(1) != 0;
  constexpr int kTeams = 15;
  CoreConfig cfg;
  cfg.online_percent = 0.7;
  cfg.borrowing = true;
  cfg.record_changes = record;
  cfg.record_events = record;
  // Guarantees: each class's quota split evenly (the remainder shared).
  const int total = nodes * 8;
  const int online_quota = static_cast<int>(std::lround(total * cfg.online_percent));
  const int batch_quota = total - online_quota;
  std::vector<std::string> teams;
  for (int i = 0; i < kTeams; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "team-%02d", i);
    teams.emplace_back(buf);
    cfg.teams[teams.back()] = {.online = online_quota / kTeams,
                               .batch = batch_quota / kTeams,
                               .max_gpus = -1,
                               .weight = 1};
  }
  SchedulerCore core(cfg);
  for (int i = 0; i < nodes; ++i) (void)core.RegisterNode(NodeName(i), "", Gpus8(), {}, {}, 0);
  std::mt19937 rng(42);
  const int sizes[] = {1, 1, 1, 1, 2, 2, 4, 8};
  // Fill to about half of the GPUs with long-running tasks.
  std::deque<std::pair<TaskNumber, std::string>> running;
  int64_t filled = 0;
  while (filled < nodes * 8 / 2) {
    int k = sizes[rng() % 8];
    auto p = (rng() & 1) ? Priority::kHigh : Priority::kLow;
    (void)core.Submit(SpecOf(p, k, teams[rng() % kTeams]), 0);
    core.Schedule(0);
    for (auto& d : core.TakeDecisions()) {
      if (d.kind == Decision::Kind::kStart) running.emplace_back(d.task, d.node_id);
    }
    filled += k;
  }
  const size_t busy = running.size();
  core.TakeChanges();
  core.TakeEvents();
  TimeMicros now = 1;
  uint64_t placed = 0;
  uint64_t stops = 0;
  for (auto _ : state) {
    int k = sizes[rng() % 8];
    auto p = (rng() & 1) ? Priority::kHigh : Priority::kLow;
    auto id = core.Submit(SpecOf(p, k, teams[rng() % kTeams]), now);
    core.Schedule(now);
    bool started = false;
    for (auto& d : core.TakeDecisions()) {
      if (d.kind == Decision::Kind::kStart) {
        started = started || d.task == *id;
        running.emplace_back(d.task, d.node_id);
      } else {
        // A preemption: its victim stops at once (goes back to its queue).
        stops++;
        (void)core.TaskFinished(d.node_id, {d.task, false, 143, "", now}, now);
      }
    }
    if (started) {
      placed++;
    } else if (const Task* t = core.FindTask(*id);
               t != nullptr && t->status == TaskStatus::kPending) {
      (void)core.Cancel(*id, now);
      core.Forget(*id);
    }
    // Release the oldest running tasks, so the cluster stays about half busy.
    while (running.size() > busy) {
      auto [old, node] = running.front();
      running.pop_front();
      const Task* t = core.FindTask(old);
      if (t == nullptr || t->status != TaskStatus::kRunning || t->stopping) continue;  // Preempted.
      (void)core.TaskFinished(node, {old, true, 0, "", now}, now);
      core.Forget(old);
    }
    // As the daemon does after every batch.
    if (record) {
      benchmark::DoNotOptimize(core.TakeChanges());
      benchmark::DoNotOptimize(core.TakeEvents());
    }
    ++now;
  }
  state.counters["placed_ratio"] =
      static_cast<double>(placed) / static_cast<double>(state.iterations());
  state.counters["stops"] = static_cast<double>(stops);
  int borrowed = 0;
  for (const TeamView& t : core.Teams()) borrowed += t.classes[0].borrowed + t.classes[1].borrowed;
  state.counters["borrowed_gpus_at_end"] = borrowed;
}
BENCHMARK(BM_DecisionTeams)
    ->ArgNames({"nodes", "record_changes"})
    ->Args({200, 0})
    ->Args({10000, 0})
    ->Args({200, 1})
    ->Args({10000, 1})
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// Choosing victims: N nodes x 8 GPUs, every GPU held by a 1-GPU batch task of team "batch-a"
// (batch guarantee 8), so all but 8 borrow, most of them the online class's idle GPUs. Each
// iteration submits an online task of 1, 2, 4 or 8 GPUs of team "online-a" (online guarantee
// 8, nothing held: within it) and times the pass that finds no room and chooses the borrowers to
// stop for it (wall time, steady clock, that pass only). Then, not timed: the victims confirm
// their stop and go back to their queue, the preemptor starts on the node they freed and
// finishes, the victims start there again, and a tick drops the finished preemptions, as the
// daemon's periodic tick does; the next iteration finds the cluster full again.
void BM_ChooseVictims(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const bool record = state.range(1) != 0;
  CoreConfig cfg;
  cfg.online_percent = 0.7;
  cfg.borrowing = true;
  cfg.record_changes = record;
  cfg.record_events = record;
  cfg.teams["online-a"] = {.online = 8, .batch = 0, .max_gpus = -1, .weight = 1};
  cfg.teams["batch-a"] = {.online = 0, .batch = 8, .max_gpus = -1, .weight = 1};
  const std::string online_team = "online-a";
  const std::string batch_team = "batch-a";
  SchedulerCore core(cfg);
  for (int i = 0; i < nodes; ++i) (void)core.RegisterNode(NodeName(i), "", Gpus8(), {}, {}, 0);
  TimeMicros now = 1;
  for (int i = 0; i < nodes * 8; ++i) (void)core.Submit(SpecOf(Priority::kLow, 1, batch_team), now);
  core.Schedule(now);
  std::vector<Decision> d = core.TakeDecisions();
  for (const Decision& x : d) (void)core.TaskStarted(x.task, x.node_id, now);
  if (d.size() != static_cast<size_t>(nodes) * 8 || core.PendingCount(Priority::kLow) != 0) {
    state.SkipWithError("the batch tasks did not fill the cluster");
    return;
  }
  core.TakeChanges();
  core.TakeEvents();
  const int sizes[] = {1, 2, 4, 8};
  std::vector<std::pair<TaskNumber, std::string>> victims;
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  uint64_t victim_count = 0;
  int64_t i = 0;
  for (auto _ : state) {
    const int k = sizes[i++ % 4];
    ++now;
    auto id = core.Submit(SpecOf(Priority::kHigh, k, online_team), now);
    const auto t0 = std::chrono::steady_clock::now();
    core.Schedule(now);
    const auto t1 = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(seconds);
    samples.push_back(seconds);
    // Not timed from here on.
    core.TakeDecisions(d);
    victims.clear();
    for (const Decision& x : d) {
      if (x.kind == Decision::Kind::kStop && x.reason == StopReason::kPreempt &&
          x.preempted_by == *id) {
        victims.emplace_back(x.task, x.node_id);
      }
    }
    if (victims.empty() || victims.size() != d.size()) {
      state.SkipWithError("the pass chose no victim (or decided something else)");
      break;
    }
    victim_count += victims.size();
    ++now;
    for (const auto& [v, node] : victims) {
      (void)core.TaskFinished(node, {v, false, 143, "", now}, now);
    }
    core.Schedule(now);
    core.TakeDecisions(d);
    if (d.size() != 1 || d[0].task != *id) {
      state.SkipWithError("the preemptor did not start once its victims stopped");
      break;
    }
    const std::string node = d[0].node_id;
    (void)core.TaskStarted(*id, node, now);
    ++now;
    (void)core.TaskFinished(node, {*id, true, 0, "", now}, now);
    core.Forget(*id);
    core.Schedule(now);
    core.TakeDecisions(d);
    if (d.size() != victims.size()) {
      state.SkipWithError("the victims did not start again");
      break;
    }
    for (const Decision& x : d) (void)core.TaskStarted(x.task, x.node_id, now);
    core.Tick(now);
    if (record) {
      benchmark::DoNotOptimize(core.TakeChanges());
      benchmark::DoNotOptimize(core.TakeEvents());
    }
  }
  if (samples.empty()) return;
  state.counters["victims_per_iter"] =
      static_cast<double>(victim_count) / static_cast<double>(samples.size());
  std::sort(samples.begin(), samples.end());
  state.counters["p50_ns"] = samples[samples.size() / 2] * 1e9;
  state.counters["p99_ns"] = samples[samples.size() * 99 / 100] * 1e9;
  state.counters["max_ns"] = samples.back() * 1e9;
}
BENCHMARK(BM_ChooseVictims)
    ->ArgNames({"nodes", "record_changes"})
    ->Args({200, 0})
    ->Args({10000, 0})
    ->Args({200, 1})
    ->Args({10000, 1})
    ->UseManualTime()
    ->Iterations(4000)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// A burst of online arrivals on a cluster full of borrowers: N online 1-GPU tasks have chosen
// their victims, which are in their grace period (not confirmed). Each iteration submits one
// batch task that cannot start and times the pass it causes (wall time, that pass only): what
// every pass costs while the preemptors wait.
void BM_PassWhilePreemptorsWait(benchmark::State& state) {
  const int nodes = 10000;
  const int waiting = static_cast<int>(state.range(0));
  CoreConfig cfg;
  cfg.online_percent = 0.7;
  cfg.borrowing = true;
  cfg.record_changes = false;
  cfg.record_events = false;
  cfg.teams["online-a"] = {.online = waiting, .batch = 0, .max_gpus = -1, .weight = 1};
  cfg.teams["batch-a"] = {.online = 0, .batch = 8, .max_gpus = -1, .weight = 1};
  SchedulerCore core(cfg);
  for (int i = 0; i < nodes; ++i) (void)core.RegisterNode(NodeName(i), "", Gpus8(), {}, {}, 0);
  TimeMicros now = 1;
  for (int i = 0; i < nodes * 8; ++i) {
    (void)core.Submit(SpecOf(Priority::kLow, 1, "batch-a"), now);
  }
  core.Schedule(now);
  std::vector<Decision> d = core.TakeDecisions();
  for (const Decision& x : d) (void)core.TaskStarted(x.task, x.node_id, now);
  for (int i = 0; i < waiting; ++i) (void)core.Submit(SpecOf(Priority::kHigh, 1, "online-a"), now);
  // A pass takes back room for a bounded number of preemptors; more passes for the rest.
  size_t stops = 0;
  for (int pass = 0; pass < 1000 && stops < static_cast<size_t>(waiting); ++pass) {
    ++now;
    core.Schedule(now);
    core.TakeDecisions(d);
    stops += d.size();
    (void)core.Submit(SpecOf(Priority::kLow, 1, "batch-a"), now);  // Makes the next pass run.
  }
  if (stops != static_cast<size_t>(waiting)) {
    state.SkipWithError("not every preemptor chose its victim");
    return;
  }
  core.TakeChanges();
  core.TakeEvents();
  for (auto _ : state) {
    // The head of a shape of its own, so that its arrival causes a pass.
    auto id = core.Submit(SpecOf(Priority::kLow, 3, "batch-a"), now);
    const auto t0 = std::chrono::steady_clock::now();
    core.Schedule(now);
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    core.TakeDecisions(d);
    if (!d.empty()) {
      state.SkipWithError("the pass decided something");
      break;
    }
    // Not timed: gone again, and the pass its leaving causes.
    (void)core.Cancel(*id, now);
    core.Forget(*id);
    core.Schedule(now);
    core.TakeDecisions(d);
  }
  state.counters["passes_run"] =
      static_cast<double>(core.stats().passes - core.stats().passes_skipped);
}
BENCHMARK(BM_PassWhilePreemptorsWait)
    ->ArgName("waiting")
    ->Arg(0)
    ->Arg(100)
    ->Arg(1000)
    ->UseManualTime()
    ->Iterations(200)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

// Place + release only: each iteration submits a batch of tasks (not timed), then times one
// scheduling pass that places them and the release of each. Reported per decision.
void BM_PlaceRelease(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  constexpr int kBatch = 256;
  SchedulerCore core(HalfOnlineConfig(/*record=*/false));
  for (int i = 0; i < nodes; ++i) (void)core.RegisterNode(NodeName(i), "", Gpus8(), {}, {}, 0);
  std::mt19937 rng(7);
  const int sizes[] = {1, 1, 1, 1, 2, 2, 4, 8};
  // About half of the GPUs stay busy with long-running tasks.
  int64_t filled = 0;
  while (filled < nodes * 8 / 2) {
    int k = sizes[rng() % 8];
    (void)core.Submit(SpecOf((rng() & 1) ? Priority::kHigh : Priority::kLow, k), 0);
    core.Schedule(0);
    filled += k;
  }
  core.TakeDecisions();
  uint64_t decisions = 0;
  TimeMicros now = 1;
  std::vector<Decision> d;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      (void)core.Submit(SpecOf((rng() & 1) ? Priority::kHigh : Priority::kLow, sizes[rng() % 8]),
                        now);
    }
    // Thread CPU time: steadier than wall time on a shared machine.
    double t0 = ThreadCpuSeconds();
    core.Schedule(now);
    d = core.TakeDecisions();
    for (const auto& x : d) (void)core.TaskFinished(x.node_id, {x.task, true, 0, "", now}, now);
    double t1 = ThreadCpuSeconds();
    state.SetIterationTime((t1 - t0) / static_cast<double>(std::max<size_t>(d.size(), 1)));
    decisions += d.size();
    // Not timed: drop what could not be placed, and forget finished tasks.
    for (const auto& x : d) core.Forget(x.task);
    for (auto id : core.QueueOrder(Priority::kHigh)) (void)core.Cancel(id, now), core.Forget(id);
    for (auto id : core.QueueOrder(Priority::kLow)) (void)core.Cancel(id, now), core.Forget(id);
    ++now;
  }
  state.counters["decisions_per_batch"] =
      static_cast<double>(decisions) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_PlaceRelease)
    ->ArgName("nodes")
    ->Arg(200)
    ->Arg(10000)
    ->UseManualTime()
    ->Iterations(400)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

void BM_NoFitPass(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  SchedulerCore core(HalfOnlineConfig(/*record=*/false));
  for (int i = 0; i < nodes; ++i) (void)core.RegisterNode(NodeName(i), "", Gpus8(), {}, {}, 0);
  // Fill every GPU, then queue 100,000 tasks of mixed sizes and both priorities.
  for (int i = 0; i < nodes; ++i) {
    (void)core.Submit(SpecOf(i % 2 ? Priority::kHigh : Priority::kLow, 8), 0);
  }
  core.Schedule(0);
  core.TakeDecisions();
  const int sizes[] = {1, 2, 4, 8};
  for (int i = 0; i < 100000; ++i) {
    (void)core.Submit(SpecOf(i % 3 ? Priority::kLow : Priority::kHigh, sizes[i % 4]), 0);
  }
  for (auto _ : state) {
    // A full pass, every shape searched: without this the core skips passes after which nothing
    // changed, and shapes that found no room.
    core.ForgetNoRoom();
    core.Schedule(1);
    benchmark::DoNotOptimize(core.HasDecisions());
  }
  state.counters["pending"] =
      static_cast<double>(core.PendingCount(Priority::kHigh) + core.PendingCount(Priority::kLow));
}
BENCHMARK(BM_NoFitPass)
    ->Arg(200)
    ->Arg(10000)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// A backfill pass: every GPU busy with tasks whose time limits end over the next ten hours, 1,000
// tasks pending in 250 shapes of 1 to 8 GPUs (both classes), each head waiting for node room; a
// full pass plans up to backfill_depth starts (Arg 1; 0: backfill off, the same pass without).
void BM_BackfillPass(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int depth = static_cast<int>(state.range(1));
  CoreConfig cfg = HalfOnlineConfig(/*record=*/false);
  cfg.backfill = depth > 0;
  cfg.backfill_depth = std::max(depth, 1);
  SchedulerCore core(cfg);
  for (int i = 0; i < nodes; ++i) (void)core.RegisterNode(NodeName(i), "", Gpus8(), {}, {}, 0);
  // As many cordoned nodes: their GPUs count in the quotas and take no task, so that every
  // pending task waits for node room, none for its class's quota.
  for (int i = 0; i < nodes; ++i) {
    const std::string spare = "spare-" + std::to_string(i);
    (void)core.RegisterNode(spare, "", Gpus8(), {}, {}, 0);
    (void)core.SetNodeMode(spare, NodeMode::kCordoned, 0);
  }
  std::mt19937 rng(11);
  const int sizes[] = {1, 2, 4, 8};
  // Fill every node: tasks of 8, 4 + 4, 2 x 4 or 8 x 1 GPUs, limits up to ten hours.
  for (int i = 0; i < nodes; ++i) {
    const int k = sizes[rng() % 4];
    for (int j = 0; j < 8 / k; ++j) {
      TaskSpec s = SpecOf(i % 2 ? Priority::kHigh : Priority::kLow, k);
      s.timeout_seconds = 600 + static_cast<int64_t>(rng() % 36000);
      (void)core.Submit(s, 0);
    }
    core.Schedule(0);
    core.TakeDecisions();
  }
  for (int i = 0; i < 1000; ++i) {
    TaskSpec s = SpecOf(i % 2 ? Priority::kHigh : Priority::kLow, sizes[i % 4]);
    s.cpus_milli = 1000 + (i % 250);  // A shape of its own for every 4th task: 250 heads.
    s.timeout_seconds = 60 + static_cast<int64_t>(rng() % 7200);
    (void)core.Submit(s, 1);
  }
  size_t planned = 0;
  for (auto _ : state) {
    core.ForgetNoRoom();
    const double t0 = ThreadCpuSeconds();
    core.Schedule(1);
    const double t1 = ThreadCpuSeconds();
    state.SetIterationTime(t1 - t0);
    if (core.HasDecisions()) {
      state.SkipWithError("the pass started a task");
      break;
    }
    planned = core.PlannedStarts().size();
  }
  state.counters["planned"] = static_cast<double>(planned);
  state.counters["pending"] =
      static_cast<double>(core.PendingCount(Priority::kHigh) + core.PendingCount(Priority::kLow));
}
BENCHMARK(BM_BackfillPass)
    ->ArgNames({"nodes", "depth"})
    ->Args({1000, 0})
    ->Args({1000, 100})
    ->Args({10000, 0})
    ->Args({10000, 100})
    ->UseManualTime()
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dgpu::core

BENCHMARK_MAIN();
