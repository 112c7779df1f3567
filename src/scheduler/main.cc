// dgpu-scheduler: REST for users, gRPC for agents, the scheduling core on one owner thread,
// SQLite for durability.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "common/config.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "scheduler/agent_service.h"
#include "scheduler/core_loop.h"
#include "scheduler/rest_server.h"
#include "scheduler/snapshot_json.h"
#include "store/database.h"
#include "store/journal.h"
#include "store/snapshot.h"

namespace dgpu::scheduler {
namespace {

int Fail(const std::string& message) {
  std::cerr << "dgpu-scheduler: " << message << std::endl;
  spdlog::error("{}", message);
  common::FlushLogs();
  return 1;
}

// Marks nodes that went silent as lost and logs the transition.
void TickNodes(CoreLoop::Context& c) {
  std::vector<std::string> online_before;
  for (const auto& n : c.core.Nodes()) {
    if (n.online) online_before.push_back(n.id);
  }
  c.core.Tick(c.now);
  for (const auto& id : online_before) {
    auto n = c.core.FindNode(id);
    if (n && !n->online) {
      common::LogEvent(common::events::kAgentOffline,
                       {{"node", id}, {"reason", "heartbeat_timeout"}});
    }
  }
}

int Run(int argc, char** argv) {
  common::DaemonFlagsSpec spec{"dgpu-scheduler",
                               "Central scheduler of dgpu: REST API for users, gRPC for agents.",
                               {}};
  common::DaemonFlags flags = common::ParseDaemonFlagsOrExit(argc, argv, spec);
  common::SchedulerConfig cfg;
  if (!flags.config_path.empty()) {
    auto loaded = common::LoadSchedulerConfig(flags.config_path);
    if (!loaded.ok()) return Fail(loaded.status().message());
    cfg = std::move(*loaded);
  }
  if (Status s = common::SetupLogging(cfg.logging, "scheduler"); !s.ok()) {
    return Fail(s.message());
  }
  auto http = common::ParseHostPort(common::ToBindAddress(cfg.server.http_address));
  auto grpc_addr = common::ParseHostPort(common::ToBindAddress(cfg.server.grpc_address));
  if (!http) return Fail("server.http_address: cannot parse \"" + cfg.server.http_address + "\"");
  if (!grpc_addr) {
    return Fail("server.grpc_address: cannot parse \"" + cfg.server.grpc_address + "\"");
  }

  // Signals are taken by sigwait on this thread; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Storage.
  std::error_code ec;
  std::filesystem::create_directories(cfg.storage.snapshot_dir, ec);
  if (ec) {
    return Fail("storage.snapshot_dir: cannot create " + cfg.storage.snapshot_dir + ": " +
                ec.message());
  }
  auto db_or = store::Database::Open(cfg.storage.snapshot_dir, cfg.storage.fsync);
  if (!db_or.ok()) return Fail(db_or.status().message());
  std::unique_ptr<store::Database> db = std::move(*db_or);
  auto state = db->Load();
  if (!state.ok()) return Fail("cannot load state: " + state.status().message());

  core::CoreConfig core_cfg;
  core_cfg.online_percent = state->online_percent.value_or(cfg.quota.online_percent);
  core_cfg.max_attempts = cfg.scheduler.max_attempts;
  core_cfg.max_bypass = cfg.scheduler.max_bypass;
  core_cfg.heartbeat_timeout = cfg.agent.heartbeat_timeout.count() * 1000;
  auto core = std::make_unique<core::SchedulerCore>(core_cfg);
  const core::TimeMicros start = common::NowMicros();
  size_t restored_running = 0;
  for (const auto& t : state->tasks) {
    if (Status s = core->Restore(t, start); !s.ok()) {
      return Fail("cannot restore " + core::FormatTaskId(t.id) + ": " + s.message());
    }
    if (t.status == core::TaskStatus::kRunning) restored_running++;
  }
  core->SetNextTaskNumber(state->next_task_number);
  core->TakeChanges();  // Restoring changes nothing on disk.
  spdlog::info("state loaded from {}: {} unfinished tasks ({} running), next task number {}",
               db->path(), state->tasks.size(), restored_running, state->next_task_number);

  LeaderState leader;
  uint64_t epoch = std::max<uint64_t>(state->epoch, 1);
  if (epoch != state->epoch) {
    if (Status s = db->SetEpoch(epoch); !s.ok()) return Fail("cannot store epoch: " + s.message());
  }
  bool lead = cfg.scheduler.role == common::SchedulerRole::kMaster;
  leader.Set(lead, epoch);
  if (lead) {
    common::LogEvent(common::events::kLeaderElected, {{"epoch", epoch}, {"reason", "role"}});
  }

  store::Journal journal(db.get(), state->last_applied_seq);
  Metrics metrics;
  AgentHub hub(&leader, &metrics);
  CoreLoop loop(std::move(core), &journal, &hub, nullptr, &common::SystemClock::Instance());
  loop.AddTimer(std::chrono::seconds(1), [&journal](CoreLoop::Context& c) {
    TickNodes(c);
    // While storage is failing, keep retrying the kept changes.
    if (!journal.health().ok()) c.OnDurable([](Status) {});
  });
  // The safety-net pass: every batch ends with a pass, so an empty batch is enough.
  loop.AddTimer(cfg.scheduler.schedule_interval, [](CoreLoop::Context&) {});
  std::string snapshot_dir = cfg.storage.snapshot_dir;
  loop.AddTimer(cfg.scheduler.snapshot_interval, [&leader, snapshot_dir](CoreLoop::Context& c) {
    Status s = store::WriteStateFile(snapshot_dir, StateToJson(c.core, leader.epoch(), c.now));
    if (!s.ok()) spdlog::warn("state snapshot failed: {}", s.message());
  });
  loop.Start();

  // Background pruning of old history.
  std::atomic<bool> stop_pruner{false};
  std::thread pruner([&] {
    const int64_t retention_us = cfg.storage.retention.count() * 1000;
    while (!stop_pruner.load()) {
      auto pruned = db->PruneFinished(common::NowMicros() - retention_us, 1000);
      if (pruned.ok() && *pruned > 0) spdlog::info("pruned {} finished tasks", *pruned);
      for (int i = 0; i < 600 && !stop_pruner.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });

  // gRPC.
  AgentService agent_service(&loop, &hub, &leader, db.get(), &metrics,
                             static_cast<int>(cfg.scheduler.schedule_interval.count() / 1000));
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  std::string grpc_bind = (grpc_addr->host.empty() ? "0.0.0.0" : grpc_addr->host) + ":" +
                          std::to_string(grpc_addr->port);
  builder.AddListeningPort(grpc_bind, grpc::InsecureServerCredentials(), &grpc_port);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.RegisterService(&agent_service);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (!grpc_server || grpc_port == 0) {
    stop_pruner = true;
    pruner.join();
    loop.Stop();
    journal.Shutdown();
    return Fail("cannot listen for gRPC on " + grpc_bind);
  }

  // REST.
  RestServer rest({&loop, &leader, db.get(), &journal, &metrics});
  std::string http_host = http->host.empty() ? "0.0.0.0" : http->host;
  if (Status s = rest.Start(http_host, http->port, 2); !s.ok()) {
    grpc_server->Shutdown();
    stop_pruner = true;
    pruner.join();
    loop.Stop();
    journal.Shutdown();
    return Fail(s.message());
  }
  leader.set_leader_http(lead ? common::ToConnectAddress(cfg.server.http_address) : "");
  spdlog::info("dgpu-scheduler {} listening: http {}:{} grpc {} role {} epoch {}",
               common::BuildVersion(), http_host, http->port, grpc_bind,
               lead ? "leader" : "standby", epoch);

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  rest.Stop();
  hub.CloseAll();
  grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  loop.RunAndWait([&](CoreLoop::Context& c) {
    Status s = store::WriteStateFile(snapshot_dir, StateToJson(c.core, leader.epoch(), c.now));
    if (!s.ok()) spdlog::warn("final state snapshot failed: {}", s.message());
  });
  loop.Stop();
  journal.Shutdown();
  stop_pruner = true;
  pruner.join();
  spdlog::info("dgpu-scheduler stopped");
  common::FlushLogs();
  return 0;
}

}  // namespace
}  // namespace dgpu::scheduler

int main(int argc, char** argv) { return dgpu::scheduler::Run(argc, argv); }
