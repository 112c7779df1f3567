// Scheduling core benchmarks.
//
// BM_Decision: one scheduling decision (submit, place, and later release) on a cluster of
// N nodes x 8 GPUs kept about half busy with a mix of 1/2/4/8-GPU tasks.
// BM_NoFitPass: one scheduling pass over 100,000 pending tasks when nothing fits.
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <deque>
#include <random>

#include "core/scheduler_core.h"

namespace dgpu::core {
namespace {

std::vector<GpuInfo> Gpus8() {
  std::vector<GpuInfo> g;
  for (int i = 0; i < 8; ++i) g.push_back({i, "A100", 81920, "", true, ""});
  return g;
}

TaskSpec SpecOf(Priority p, int gpus) {
  TaskSpec s;
  s.priority = p;
  s.gpu_count = gpus;
  s.command = "true";
  return s;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string NodeName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "node-%05d", i);
  return buf;
}

void BM_Decision(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const bool record = state.range(1) != 0;
  CoreConfig cfg;
  cfg.online_percent = 0.5;
  cfg.record_changes = record;
  cfg.record_events = record;
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
    (void)core.Submit(SpecOf(p, k), 0);
    core.Schedule(0);
    for (auto& d : core.TakeDecisions()) running.emplace_back(d.task, d.node_id);
    filled += k;
  }
  core.TakeChanges();
  core.TakeEvents();
  TimeMicros now = 1;
  uint64_t placed = 0;
  for (auto _ : state) {
    int k = sizes[rng() % 8];
    auto p = (rng() & 1) ? Priority::kHigh : Priority::kLow;
    auto id = core.Submit(SpecOf(p, k), now);
    core.Schedule(now);
    auto d = core.TakeDecisions();
    if (!d.empty()) {
      placed++;
      running.emplace_back(d[0].task, d[0].node_id);
      // Release the oldest running task, so the cluster stays about half busy.
      auto [old, node] = running.front();
      running.pop_front();
      (void)core.TaskFinished(node, {old, true, 0, "", now}, now);
      core.Forget(old);
    } else {
      (void)core.Cancel(*id, now);
      core.Forget(*id);
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
}
BENCHMARK(BM_Decision)
    ->ArgNames({"nodes", "record_changes"})
    ->Args({200, 0})
    ->Args({10000, 0})
    ->Args({200, 1})
    ->Args({10000, 1})
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// Place + release only: each iteration submits a batch of tasks (not timed), then times one
// scheduling pass that places them and the release of each. Reported per decision.
void BM_PlaceRelease(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  constexpr int kBatch = 256;
  CoreConfig cfg;
  cfg.online_percent = 0.5;
  cfg.record_changes = false;
  cfg.record_events = false;
  SchedulerCore core(cfg);
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
  CoreConfig cfg;
  cfg.online_percent = 0.5;
  cfg.record_changes = false;
  cfg.record_events = false;
  SchedulerCore core(cfg);
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

}  // namespace
}  // namespace dgpu::core

BENCHMARK_MAIN();
