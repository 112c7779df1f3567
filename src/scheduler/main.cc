// dgpu-scheduler: REST for users, gRPC for agents, the scheduling core on one owner thread,
// SQLite for durability.
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "common/config.h"
#include "common/flags.h"
#include "common/grpc_runtime.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "scheduler/agent_service.h"
#include "scheduler/audit_log.h"
#include "scheduler/auth.h"
#include "scheduler/autoscale_runner.h"
#include "scheduler/core_bootstrap.h"
#include "scheduler/core_loop.h"
#include "scheduler/event_recorder.h"
#include "scheduler/log_relay.h"
#include "scheduler/replication.h"
#include "scheduler/rest_server.h"
#include "scheduler/state_file.h"
#include "scheduler/watch_hub.h"
#include "scheduler/worker_pool.h"
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

// Marks nodes that went silent as lost (logged from the core's node_lost events).
void TickNodes(CoreLoop::Context& c) { c.core.Tick(c.now); }

int Run(int argc, char** argv) {
  common::ConfigureGrpcRuntime();
  common::DaemonFlagsSpec spec{
      "dgpu-scheduler",
      "Central scheduler of dgpu: REST API for users, gRPC for agents.",
      {{"print-routes", "Print the REST routes served (METHOD PATH per line) and exit", false}}};
  common::DaemonFlags flags = common::ParseDaemonFlagsOrExit(argc, argv, spec);
  if (flags.extra.count("print-routes") != 0) {
    for (const RestRoute& r : RestServer::Routes()) std::cout << r.method << ' ' << r.path << '\n';
    std::cout.flush();
    return 0;
  }
  common::SchedulerConfig cfg;
  if (!flags.config_path.empty()) {
    auto loaded = common::LoadSchedulerConfig(flags.config_path);
    if (!loaded.ok()) return Fail(loaded.status().message());
    cfg = std::move(*loaded);
  }
  if (Status s = common::SetupLogging(cfg.logging, "scheduler"); !s.ok()) {
    return Fail(s.message());
  }
  if (!flags.config_path.empty()) {
    spdlog::info("{}: relative paths are resolved against the working directory {}",
                 flags.config_path, std::filesystem::current_path().string());
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
  sigaddset(&signals, SIGHUP);  // Reopens the log files (logrotate), reloads auth.tokens_file.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Who may do what.
  auto auth_or = Authenticator::Create(cfg.auth);
  if (!auth_or.ok()) return Fail(auth_or.status().message());
  std::unique_ptr<Authenticator> auth = std::move(*auth_or);
  // TLS material, checked now: a bad file is named before anything listens.
  std::optional<common::TlsMaterial> server_tls;
  if (cfg.server.tls.enabled()) {
    auto tls = common::LoadServerTls(cfg.server.tls, "server.tls");
    if (!tls.ok()) return Fail(tls.status().message());
    server_tls = std::move(*tls);
  }
  std::optional<common::TlsMaterial> peer_tls;
  if (cfg.replication.enabled && cfg.replication.tls.enabled()) {
    auto tls = common::LoadClientTls(cfg.replication.tls, "replication.tls");
    if (!tls.ok()) return Fail(tls.status().message());
    peer_tls = std::move(*tls);
  }
  if (cfg.ha.etcd_tls.enabled()) {
    auto tls = common::LoadClientTls(cfg.ha.etcd_tls, "ha.etcd_tls");
    if (!tls.ok()) return Fail(tls.status().message());
  }
  GrpcAccess grpc_access;
  grpc_access.auth = auth.get();
  grpc_access.client_certificates = server_tls && !server_tls->ca.empty();
  if (cfg.replication.enabled) {
    auto peer = common::ParseHostPort(common::ToConnectAddress(cfg.replication.peer_address));
    if (peer) grpc_access.peer_scheduler_name = peer->host;
  }
  std::unique_ptr<AuditLog> audit;
  if (!cfg.audit_file.empty()) {
    auto audit_or = AuditLog::Open(cfg.audit_file);
    if (!audit_or.ok()) return Fail(audit_or.status().message());
    audit = std::move(*audit_or);
  }

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
  if (const auto& upgrade = db->upgrade()) {
    spdlog::info("upgraded {} from schema version {} to {}; the file as it was is kept in {}",
                 db->path(), upgrade->from_version, upgrade->to_version, upgrade->backup_path);
  }
  const core::TimeMicros start = common::NowMicros();
  store::StoreMeta stored;
  auto core = BuildCoreFromDatabase(db.get(), cfg, start, &stored);
  if (!core.ok()) return Fail("cannot load state: " + core.status().message());
  spdlog::info("state loaded from {}: {} unfinished tasks, next task number {}", db->path(),
               (*core)->TaskCount(), stored.next_task_number);

  LeaderState leader;
  uint64_t epoch = std::max<uint64_t>(stored.epoch, 1);
  if (epoch != stored.epoch) {
    if (Status s = db->SetEpoch(epoch); !s.ok()) return Fail("cannot store epoch: " + s.message());
  }
  const bool configured_lead = cfg.scheduler.role == common::SchedulerRole::kMaster;
  const bool use_etcd = cfg.ha.election == common::ElectionMethod::kEtcd;
  const bool use_lease_file = cfg.ha.election == common::ElectionMethod::kLease;
  const bool ha_enabled = cfg.replication.enabled || use_lease_file || use_etcd;
  leader.Set(ha_enabled ? false : configured_lead, epoch);
  if (!ha_enabled && configured_lead) {
    common::LogEvent(common::events::kLeaderElected, {{"epoch", epoch}, {"reason", "role"}});
  }

  store::Journal journal(db.get(), stored.last_applied_seq);
  Metrics metrics;
  AgentHub hub(&leader, &metrics);
  LogRelay log_relay([&hub](const std::string& agent_id, dgpu::v1::HeartbeatResponse msg) {
    return hub.SendIfOpen(agent_id, std::move(msg));
  });
  hub.set_log_relay(&log_relay);
  EventRecorder recorder(&metrics, cfg.scheduler.task_log_lines_per_second);
  WatchHub watch;
  BatchObservers observers({&recorder, &watch});
  CoreLoop loop(std::move(*core), &journal, &hub, &observers, &common::SystemClock::Instance());
  // Off the owner thread: reads of stored tasks, and the long reads (state.json, a standby's
  // snapshot), so that point reads never wait behind those.
  WorkerPool readers(2);
  WorkerPool background(1);
  loop.SetActingGate(
      [&leader] { return leader.MayAct(common::SystemClock::Instance().MonotonicMicros()); });
  std::unique_ptr<HaController> ha;
  const std::string http_connect = common::ToConnectAddress(cfg.server.http_address);
  if (ha_enabled) {
    HaOptions ho;
    ho.id = common::IdOrHostname(cfg.scheduler.id);
    ho.http_address = http_connect;
    ho.replication = cfg.replication;
    ho.lease_dir = use_lease_file ? cfg.storage.shared_storage : "";
    ho.etcd = use_etcd;
    ho.etcd_endpoints = cfg.ha.etcd_endpoints;
    ho.lease_ttl = cfg.ha.lease_ttl;
    ho.etcd_prefix = cfg.ha.etcd_prefix;
    ho.access = grpc_access;
    ho.peer_tls = peer_tls;
    ho.etcd_tls = cfg.ha.etcd_tls;
    ha = std::make_unique<HaController>(ho, cfg, &leader, db.get(), &journal, &loop, &hub,
                                        &background);
    if (cfg.replication.enabled) loop.SetReplication(ha.get());
    leader.set_on_higher_epoch(
        [h = ha.get()](uint64_t e) { h->StepDown(e, "a higher epoch was seen"); });
  } else {
    // A single scheduler has no rival: an agent that followed a higher epoch (say, before the
    // database was reset) means this scheduler must move its epoch up, not step down.
    leader.set_on_higher_epoch([&leader, db = db.get()](uint64_t e) {
      spdlog::warn("an agent follows epoch {}: moving this scheduler's epoch up to it", e);
      if (Status s = db->SetEpoch(e); !s.ok()) {
        // Safe without a rival: after a restart the agents raise it again.
        spdlog::error("cannot store epoch {}: {}; following it in memory", e, s.message());
      }
      leader.Set(true, e);
    });
  }
  loop.AddTimer(std::chrono::seconds(1), [&journal](CoreLoop::Context& c) {
    TickNodes(c);
    // While storage is failing, keep retrying the kept changes.
    if (!journal.health().ok()) c.OnDurable([](const Status&) {});
  });
  std::unique_ptr<AutoscaleRunner> autoscale;
  if (cfg.autoscale.enabled) {
    autoscale = std::make_unique<AutoscaleRunner>(cfg.autoscale, cfg.quota.online_percent,
                                                  cfg.quota.borrowing, &loop);
    if (Status s = autoscale->CheckPrograms(); !s.ok()) {
      journal.Shutdown();
      return Fail(s.message());
    }
    loop.AddTimer(std::chrono::seconds(1), [&leader, a = autoscale.get()](CoreLoop::Context& c) {
      if (leader.MayAct(common::SystemClock::Instance().MonotonicMicros())) a->Tick(c);
    });
    std::string groups;
    for (const auto& g : cfg.autoscale.node_groups) {
      groups += fmt::format("{}{} ({} x {}, {}..{} nodes)", groups.empty() ? "" : ", ", g.name,
                            g.gpus_per_node, g.model, g.min_nodes, g.max_nodes);
    }
    spdlog::info("autoscale: node groups {}; scale_up_delay {} s, idle_timeout {} s", groups,
                 cfg.autoscale.scale_up_delay.count() / 1000,
                 cfg.autoscale.idle_timeout.count() / 1000);
  }
  // The safety-net pass: every batch ends with a pass, so an empty batch is enough.
  loop.AddTimer(cfg.scheduler.schedule_interval, [](CoreLoop::Context&) {});
  const std::string snapshot_dir = cfg.storage.snapshot_dir;
  StateFileWriter state_file(snapshot_dir, db.get(), &background);
  loop.AddTimer(cfg.scheduler.snapshot_interval, [&leader, &state_file](CoreLoop::Context& c) {
    switch (state_file.Request(TakeStateHeader(c.core, leader.epoch(), c.now),
                               common::SystemClock::Instance().MonotonicMicros())) {
      case StateFileWriter::Requested::kStarted:
        break;
      case StateFileWriter::Requested::kBusy:
        spdlog::warn("state snapshot skipped: the previous one is still being written");
        break;
      case StateFileWriter::Requested::kResting:
        spdlog::debug("state snapshot skipped: resting as long as the previous one took");
        break;
    }
  });
  watch.Start();
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

  // The use cases both transports call.
  RoleAuthorizer authorizer;
  Application app({&loop, &leader, db.get(), &readers, &journal, &metrics, &hub, &authorizer,
                   &background, cfg.limits.max_pending_per_user, autoscale.get(), &watch,
                   &log_relay, cfg.agent.max_gpus_per_node});

  // gRPC.
  AgentService agent_service(
      &app, &hub, static_cast<int>(cfg.scheduler.schedule_interval.count() / 1000), grpc_access);
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  std::string grpc_bind = (grpc_addr->host.empty() ? "0.0.0.0" : grpc_addr->host) + ":" +
                          std::to_string(grpc_addr->port);
  builder.AddListeningPort(grpc_bind, common::ServerCredentials(server_tls), &grpc_port);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.RegisterService(&agent_service);
  if (ha) builder.RegisterService(ha.get());
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (!grpc_server || grpc_port == 0) {
    stop_pruner = true;
    pruner.join();
    readers.Stop();
    background.Stop();
    loop.Stop();
    journal.Shutdown();
    return Fail("cannot listen for gRPC on " + grpc_bind);
  }

  // REST.
  RestServer rest({&app, &leader, &metrics, auth.get(), audit.get()});
  std::string http_host = http->host.empty() ? "0.0.0.0" : http->host;
  RestOptions rest_options;
  rest_options.read_timeout = cfg.server.read_timeout;
  rest_options.max_connections = static_cast<size_t>(cfg.server.max_connections);
  if (server_tls) rest_options.tls = RestTls{server_tls->cert, server_tls->key};
  if (Status s = rest.Start(http_host, http->port, rest_options); !s.ok()) {
    grpc_server->Shutdown();
    stop_pruner = true;
    pruner.join();
    readers.Stop();
    background.Stop();
    loop.Stop();
    journal.Shutdown();
    return Fail(s.message());
  }
  if (ha) {
    ha->Start(configured_lead);
  } else if (configured_lead) {
    leader.set_leader_http(http_connect);
  }
  spdlog::info("dgpu-scheduler {} listening: {} {}:{} grpc {} role {} epoch {}",
               common::BuildVersion(), server_tls ? "https" : "http", http_host, http->port,
               grpc_bind, leader.is_leader() ? "leader" : "standby", leader.epoch());
  if (server_tls) {
    spdlog::info(
        "TLS: certificate for {} (expires {}); gRPC {}", fmt::join(server_tls->names, ", "),
        common::FormatRfc3339(server_tls->not_after_unix * 1'000'000),
        server_tls->ca.empty()
            ? "without client certificates"
            : "requires client certificates: agents act only as the node their certificate names");
  }

  if (cfg.auth.mode == common::AuthMode::kNone) {
    spdlog::info("auth.mode none: {}",
                 cfg.auth.allow_insecure_remote
                     ? "every peer may do everything (auth.allow_insecure_remote: true)"
                     : "REST and gRPC answer loopback peers only (/healthz, /readyz and "
                       "/metrics answer everyone)");
  } else {
    spdlog::info("auth.mode {}: REST requests need a bearer token{}",
                 common::ToString(cfg.auth.mode),
                 cfg.auth.mode == common::AuthMode::kToken
                     ? fmt::format(" ({} users in {})", auth->users(), cfg.auth.tokens_file)
                     : std::string());
  }

  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    common::ReopenLogsOnSighup();
    if (audit) {
      if (Status s = audit->Reopen(); !s.ok()) spdlog::error("{}", s.message());
    }
    if (cfg.auth.mode == common::AuthMode::kToken) {
      if (Status s = auth->Reload(); s.ok()) {
        spdlog::info("reloaded {}: {} users", cfg.auth.tokens_file, auth->users());
      } else {
        spdlog::error("cannot reload the tokens file; the users loaded before stay: {}",
                      s.message());
      }
    }
  }
  spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  const common::Clock& clock = common::SystemClock::Instance();
  const int64_t shutdown_start = clock.MonotonicMicros();
  const std::atomic<int64_t> shutdown_deadline{
      shutdown_start +
      std::chrono::duration_cast<std::chrono::microseconds>(cfg.scheduler.shutdown_timeout)
          .count()};
  state_file.Abandon();  // A periodic write under way: the final one replaces it.
  watch.Stop();          // Ends every watch stream, so that the HTTP server can stop.
  rest.Stop();
  if (ha) ha->Stop();
  hub.CloseAll();
  // Calls in flight get a part of the time; the agents reconnect to whoever leads next.
  grpc_server->Shutdown(std::chrono::system_clock::now() +
                        std::min<std::chrono::milliseconds>(std::chrono::seconds(2),
                                                            cfg.scheduler.shutdown_timeout / 4));
  StateHeader final_state;
  loop.RunAndWait(
      [&](CoreLoop::Context& c) { final_state = TakeStateHeader(c.core, leader.epoch(), c.now); });
  if (autoscale) autoscale->Stop();  // Programs still running are killed.
  readers.Stop();
  background.Stop();  // A snapshot being written finishes first.
  loop.Stop();
  journal.Shutdown();
  // Everything is durable now: the final file holds it all, if there is time for it. One that
  // the last periodic write says cannot fit is not begun.
  const int64_t time_left = shutdown_deadline.load() - clock.MonotonicMicros();
  if (state_file.last_write_micros() > 0 && state_file.last_write_micros() > time_left) {
    spdlog::warn(
        "final state snapshot skipped: the last one took {:.1f} ms, more than the {:.1f} ms left "
        "of scheduler.shutdown_timeout; the database holds every task",
        static_cast<double>(state_file.last_write_micros()) / 1000,
        static_cast<double>(std::max<int64_t>(time_left, 0)) / 1000);
  } else if (Status s = WriteStateFile(snapshot_dir, final_state, *db, &shutdown_deadline);
             s.code() == StatusCode::kDeadlineExceeded) {
    spdlog::warn(
        "final state snapshot skipped: scheduler.shutdown_timeout ({} ms) reached; the database "
        "holds every task",
        cfg.scheduler.shutdown_timeout.count());
  } else if (!s.ok()) {
    spdlog::warn("final state snapshot failed: {}", s.message());
  }
  stop_pruner = true;
  pruner.join();
  spdlog::info("dgpu-scheduler stopped in {} ms",
               (clock.MonotonicMicros() - shutdown_start) / 1000);
  common::FlushLogs();
  return 0;
}

}  // namespace
}  // namespace dgpu::scheduler

int main(int argc, char** argv) { return dgpu::scheduler::Run(argc, argv); }
