#include "agent/session.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <set>
#include <thread>

#include "agent/epoch_file.h"
#include "agent/node_resources.h"
#include "agent/retention.h"
#include "agent/task_log.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "dgpu/v1/scheduler.grpc.pb.h"

namespace dgpu::agent {
namespace {

using dgpu::v1::HeartbeatRequest;
using dgpu::v1::HeartbeatResponse;

int64_t Mono() { return common::SystemClock::Instance().MonotonicMicros(); }
int64_t ToMicros(std::chrono::milliseconds d) { return d.count() * 1000; }

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

void FillGpu(const GpuDevice& d, dgpu::v1::GpuStatus* g) {
  g->set_index(d.index);
  g->set_uuid(d.uuid);
  g->set_model(d.name);
  g->set_memory_mb(d.memory_total_mb);
  g->set_memory_used_mb(d.memory_used_mb);
  g->set_utilization_pct(d.utilization_pct.value_or(-1));
  g->set_temperature_c(d.temperature_c.value_or(-1));
  g->set_pci_bus_id(d.pci_bus_id);
  g->set_unhealthy(!d.healthy);
  g->set_health_reason(d.health_reason);
  if (d.link_group >= 0) g->set_nvlink_group(d.link_group);
}

// A StopOrder from the scheduler: no reason (or one this agent does not know) is a cancel, no
// grace period (or a negative one) is the agent's own.
StopOrder ToStopOrder(const dgpu::v1::StopOrder& order) {
  StopOrder out;
  if (!order.reason().empty()) {
    std::optional<core::StopReason> reason = core::ParseStopReason(order.reason());
    if (reason.has_value() && *reason != core::StopReason::kNone) {
      out.reason = *reason;
    } else {
      spdlog::warn("stop order for {} has unknown reason \"{}\"; stopping it as a cancel",
                   order.task_id(), order.reason());
    }
  }
  if (order.has_grace_period_seconds() && order.grace_period_seconds() >= 0) {
    out.grace = std::chrono::seconds(order.grace_period_seconds());
  }
  // Only a task id goes into the task's log.
  if (out.reason == core::StopReason::kPreempt &&
      core::ParseTaskId(order.preempted_by()).has_value()) {
    out.preempted_by = order.preempted_by();
  }
  return out;
}

void FillResult(const TaskExit& e, dgpu::v1::TaskResult* r) {
  r->set_task_id(e.task_id);
  r->set_success(e.success);
  r->set_exit_code(e.exit_code);
  r->set_error(e.error);
  r->set_finished_at_unix_micros(e.finished_at_unix_micros);
  r->set_run(e.run);
  if (e.usage.has_value()) {
    r->mutable_usage()->set_cpu_micros(e.usage->cpu_micros);
    r->mutable_usage()->set_max_memory_bytes(e.usage->max_memory_bytes);
  }
}

}  // namespace

// One connection to one scheduler: a channel, and the Heartbeat stream with its reader thread.
struct AgentSession::Connection {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<dgpu::v1::SchedulerService::Stub> stub;
  grpc::ClientContext stream_ctx;
  std::unique_ptr<grpc::ClientReaderWriter<HeartbeatRequest, HeartbeatResponse>> stream;
  std::thread reader;

  std::mutex mu;
  std::deque<HeartbeatResponse> inbox;  // GUARDED_BY(mu)
  bool broken = false;                  // GUARDED_BY(mu)

  void StartReader(AgentSession::Waker* waker) {
    reader = std::thread([this, waker] {
      HeartbeatResponse msg;
      while (stream->Read(&msg)) {
        {
          std::lock_guard<std::mutex> lock(mu);
          inbox.push_back(std::move(msg));
        }
        waker->Wake();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        broken = true;
      }
      waker->Wake();
    });
  }

  ~Connection() {
    stream_ctx.TryCancel();
    if (reader.joinable()) reader.join();
  }
};

// One TaskFinished call in flight. It keeps the channel alive: the connection may be replaced
// before the answer comes.
struct AgentSession::Report {
  TaskExit exit;
  uint64_t generation = 0;
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext ctx;
  dgpu::v1::TaskFinishedRequest req;
  dgpu::v1::TaskFinishedResponse resp;
  grpc::Status status;
};

AgentSession::Waker::Waker() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) spdlog::error("eventfd: {}; the agent's loop wakes every 20 ms", strerror(errno));
}

AgentSession::Waker::~Waker() {
  if (fd_ >= 0) close(fd_);
}

void AgentSession::Waker::Wake() {
  const uint64_t one = 1;
  if (fd_ >= 0) {
    ssize_t ignored = write(fd_, &one, sizeof(one));
    (void)ignored;
  }
}

void AgentSession::Waker::Wait(std::chrono::milliseconds timeout, const std::vector<int>& fds) {
  std::vector<pollfd> polled;
  polled.reserve(fds.size() + 1);
  if (fd_ >= 0) polled.push_back({fd_, POLLIN, 0});
  for (int fd : fds) polled.push_back({fd, POLLIN, 0});
  const auto limit = fd_ >= 0 ? timeout : std::min(timeout, std::chrono::milliseconds(20));
  const int n = poll(polled.data(), polled.size(), static_cast<int>(limit.count()));
  if (n > 0 && fd_ >= 0 && (polled[0].revents & POLLIN) != 0) {
    uint64_t count = 0;
    ssize_t ignored = read(fd_, &count, sizeof(count));
    (void)ignored;
  }
}

AgentSession::AgentSession(common::AgentConfig config, std::string agent_id,
                           std::unique_ptr<GpuDiscovery> gpus, std::unique_ptr<Executor> executor,
                           FinishOutbox outbox, uint64_t highest_epoch)
    : config_(std::move(config)),
      agent_id_(std::move(agent_id)),
      gpus_(std::make_unique<GpuMonitor>(
          std::move(gpus),
          GpuMonitorOptions{.metrics_interval = config_.agent.heartbeat_interval,
                            .health_interval = config_.gpu.health_check_interval,
                            .health_check_program = config_.gpu.health_check_program,
                            .program_timeout = std::min<std::chrono::milliseconds>(
                                config_.gpu.health_check_interval, std::chrono::seconds(60)),
                            .on_health_change = [this] { waker_.Wake(); }})),
      executor_(std::move(executor)),
      outbox_(std::move(outbox)),
      highest_epoch_(highest_epoch),
      rng_(std::random_device{}()) {
  addresses_.push_back(common::ToConnectAddress(config_.scheduler.master_address));
  if (!config_.scheduler.standby_address.empty()) {
    addresses_.push_back(common::ToConnectAddress(config_.scheduler.standby_address));
  }
}

AgentSession::~AgentSession() {
  gpus_->Stop();  // Its thread wakes waker_.
  conn_.reset();  // Joins the stream's reader, which wakes waker_, before members go.
  // Answers reference this object: wait for every call still in flight.
  for (auto& [id, report] : reports_in_flight_) report->ctx.TryCancel();
  std::unique_lock<std::mutex> lock(report_mu_);
  report_cv_.wait(lock, [this] { return report_results_.size() == reports_in_flight_.size(); });
}

Status AgentSession::AcceptEpoch(uint64_t epoch) {
  if (epoch < highest_epoch_) {
    return FailedPrecondition("epoch " + std::to_string(epoch) + " is older than " +
                              std::to_string(highest_epoch_));
  }
  if (epoch > highest_epoch_) {
    // Following an epoch that a restart would forget could obey a deposed leader later on.
    if (Status s = StoreEpoch(config_.executor.work_dir, epoch); !s.ok()) {
      return Unavailable("cannot follow epoch " + std::to_string(epoch) +
                         " until it is stored: " + s.message());
    }
    highest_epoch_ = epoch;
  }
  return OkStatus();
}

bool AgentSession::Connect() {
  const std::string address = addresses_[next_address_ % addresses_.size()];
  next_address_++;
  auto fail = [&](const std::string& why) {
    failures_++;
    int64_t base = ToMicros(config_.scheduler.retry_interval);
    int64_t cap = ToMicros(config_.scheduler.max_retry_interval);
    // Every address gets a prompt try; the backoff grows once all have failed in turn.
    int round = (failures_ - 1) / static_cast<int>(addresses_.size());
    int64_t delay = failures_ % addresses_.size() != 0 ? 0 : base;
    for (int i = 0; i < round && delay < cap; ++i) delay *= 2;
    delay = std::min(delay, cap);
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    delay = static_cast<int64_t>(static_cast<double>(delay) * jitter(rng_));
    next_attempt_ = Mono() + delay;
    spdlog::warn("cannot connect to scheduler {}: {} (next attempt in {} ms)", address, why,
                 delay / 1000);
    return false;
  };

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto conn = std::make_unique<Connection>();
  conn->address = address;
  conn->channel = grpc::CreateCustomChannel(address, common::ChannelCredentials(tls_), args);
  conn->stub = dgpu::v1::SchedulerService::NewStub(conn->channel);

  TakeGpuSnapshot();

  dgpu::v1::RegisterAgentRequest req;
  req.set_agent_id(agent_id_);
  req.set_instance_id(instance_id_);
  req.set_node_group(config_.agent.node_group);
  req.set_address(config_.agent.advertise_address.empty() ? Hostname()
                                                          : config_.agent.advertise_address);
  req.set_epoch(highest_epoch_);
  req.set_version(DGPU_VERSION);
  req.set_cpus_milli(offered_cpus_milli_);
  req.set_memory_mb(offered_memory_mb_);
  req.set_isolation(isolation_);
  for (const auto& [key, value] : config_.agent.labels) (*req.mutable_labels())[key] = value;
  for (const auto& d : devices_) FillGpu(d, req.add_gpus());
  for (const auto& [id, running] : task_gpus_) {
    auto* r = req.add_running();
    r->set_task_id(id);
    for (int g : running.gpu_indices) r->add_gpu_indices(g);
    r->set_run(running.run);
  }
  for (const auto& e : UndeliveredFinishes()) FillResult(e, req.add_finished());

  dgpu::v1::RegisterAgentResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + config_.scheduler.connection_timeout);
  ctx.set_wait_for_ready(false);
  grpc::Status s = conn->stub->RegisterAgent(&ctx, req, &resp);
  if (!s.ok()) return fail(s.error_message() + TransportHint(s));
  if (Status accepted = AcceptEpoch(resp.epoch()); !accepted.ok()) {
    return fail(accepted.message());
  }
  // The answer names tasks only: nothing was added to the outbox since the request was built.
  for (const auto& id : resp.acknowledged_finishes()) ForgetFinish(id, 0);

  conn->stream = conn->stub->Heartbeat(&conn->stream_ctx);
  conn->StartReader(&waker_);
  conn_ = std::move(conn);
  ++connection_generation_;
  failures_ = 0;
  Contact(Mono());
  common::LogEvent("agent_connected", {{"scheduler", address},
                                       {"epoch", highest_epoch_},
                                       {"gpus", static_cast<int64_t>(devices_.size())},
                                       {"running", static_cast<int64_t>(task_gpus_.size())}});
  next_heartbeat_ = 0;
  return true;
}

void AgentSession::StopTasksIfCutOff(int64_t now) {
  const int64_t limit = ToMicros(config_.agent.stop_tasks_after_disconnect);
  if (limit <= 0 || stopped_for_disconnect_ || now - last_contact_ < limit) return;
  stopped_for_disconnect_ = true;
  const std::vector<std::string> running = executor_->Running();
  if (running.empty()) return;
  spdlog::warn(
      "no scheduler has answered for {} ms (agent.stop_tasks_after_disconnect): stopping {} "
      "task(s); they are reported as disconnected when a scheduler answers again",
      (now - last_contact_) / 1000, running.size());
  for (const auto& id : running) {
    StopTask(id, StopOrder{core::StopReason::kDisconnected, std::chrono::milliseconds(-1), {}},
             highest_epoch_);
  }
}

std::string AgentSession::TransportHint(const grpc::Status& s) const {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  const std::string& m = s.error_message();
  if (!tls_ && m.find("Socket closed") != std::string::npos) {
    return " (a scheduler with server.tls set closes plain-text connections: set "
           "scheduler.tls.ca_file, and cert_file and key_file if it asks for client "
           "certificates)";
  }
  if (tls_ && (m.find("Socket closed") != std::string::npos ||
               m.find("andshake") != std::string::npos || m.find("SSL") != std::string::npos)) {
    return tls_->cert.empty()
               ? " (the TLS handshake failed: check that the scheduler has server.tls set and "
                 "that scheduler.tls.ca_file signed its certificate; a scheduler with "
                 "server.tls.client_ca_file also needs scheduler.tls.cert_file and key_file)"
               : " (the TLS handshake failed: check that the scheduler has server.tls set, that "
                 "scheduler.tls.ca_file signed its certificate and that its client_ca_file "
                 "signed this agent's)";
  }
  return "";
}

void AgentSession::Disconnect(const std::string& why) {
  if (!conn_) return;
  spdlog::warn("disconnected from scheduler {}: {}", conn_->address, why);
  // Reports still in flight on this connection are answered as cancelled and retried later (or
  // delivered with the next registration).
  for (auto& [id, report] : reports_in_flight_) {
    if (report->generation == connection_generation_) report->ctx.TryCancel();
  }
  conn_.reset();
  next_attempt_ = Mono() + ToMicros(config_.scheduler.retry_interval) / 4;
}

void AgentSession::ReportRefusal(const TaskLaunch& launch, const std::string& why) {
  TaskExit e;
  e.task_id = launch.task_id;
  e.run = launch.run;
  e.success = false;
  e.exit_code = -1;
  e.error = "start_refused: " + why;
  e.finished_at_unix_micros = common::NowMicros();
  if (Status s = outbox_.Add(e); !s.ok()) spdlog::error("cannot record refusal: {}", s.message());
  next_finish_retry_ = 0;
  waker_.Wake();
}

void AgentSession::AdoptTasks(const std::vector<HeldTask>& tasks) {
  for (const auto& t : tasks) {
    task_gpus_[t.task_id] = {t.gpu_indices, t.run};
    spdlog::info("re-attached to {} (run {}, GPUs {}, started {}) left by a previous agent process",
                 t.task_id, t.run, JoinGpuIndices(t.gpu_indices),
                 common::FormatRfc3339(t.started_at_micros));
  }
}

void AgentSession::StartTask(const std::string& task_id, const TaskLaunch& launch, uint64_t epoch) {
  Status s = executor_->Start(launch);
  if (s.ok()) {
    const int64_t started_at = common::NowMicros();
    task_gpus_[task_id] = {launch.gpu_indices, launch.run};
    unreported_starts_.push_back({task_id, started_at, launch.run});
    common::LogEvent("task_started", {{"task_id", task_id},
                                      {"node", agent_id_},
                                      {"gpus", JoinGpuIndices(launch.gpu_indices)},
                                      {"epoch", epoch},
                                      {"started_at", common::FormatRfc3339(started_at)}});
    return;
  }
  if (s.code() == StatusCode::kAlreadyExists) {
    spdlog::warn("ignored duplicate dispatch of {}: {}", task_id, s.message());
    return;
  }
  spdlog::error("refused to start {}: {}", task_id, s.message());
  ReportRefusal(launch, s.message());
}

void AgentSession::HandleInbound() {
  std::deque<HeartbeatResponse> msgs;
  bool broken = false;
  {
    std::lock_guard<std::mutex> lock(conn_->mu);
    msgs.swap(conn_->inbox);
    broken = conn_->broken;
  }
  if (!msgs.empty()) Contact(Mono());
  for (const auto& m : msgs) {
    if (Status accepted = AcceptEpoch(m.epoch()); !accepted.ok()) {
      spdlog::warn("ignored orders from epoch {} (following epoch {}): {}", m.epoch(),
                   highest_epoch_, accepted.message());
      continue;
    }
    if (m.reregister()) {
      Disconnect("the scheduler asked this agent to register again");
      next_attempt_ = 0;
      return;
    }
    for (const auto& a : m.start()) {
      TaskLaunch launch;
      launch.task_id = a.task_id();
      launch.command = a.command();
      for (const auto& [k, v] : a.env()) launch.env.emplace_back(k, v);
      std::sort(launch.env.begin(), launch.env.end());
      launch.gpu_indices.assign(a.gpu_indices().begin(), a.gpu_indices().end());
      launch.timeout_seconds = a.timeout_seconds();
      launch.image = a.image();
      launch.user = a.user();
      launch.run = a.run();
      launch.cpus_milli = a.cpus_milli();
      launch.memory_mb = a.memory_mb();
      if (a.array_size() > 0) {
        launch.array_index = a.array_index();
        launch.array_size = a.array_size();
      }
      if (a.has_gang()) {
        const auto& g = a.gang();
        launch.gang = TaskLaunch::Gang{g.node_rank(),
                                       g.nnodes(),
                                       g.master_addr(),
                                       g.master_port(),
                                       {g.hosts().begin(), g.hosts().end()},
                                       g.gpus_per_node()};
      }
      StartTask(a.task_id(), launch, m.epoch());
    }
    ApplyStops(m);
    if (!m.log_requests().empty()) ServeLogs(m);
    if (!conn_) return;  // The answer could not be written.
  }
  if (broken) Disconnect("heartbeat stream closed");
}

void AgentSession::ApplyStops(const HeartbeatResponse& m) {
  std::set<std::string> ordered;
  for (const auto& order : m.stop()) {
    ordered.insert(order.task_id());
    StopTask(order.task_id(), ToStopOrder(order), m.epoch());
  }
  // A scheduler that predates StopOrder sends ids only; a newer one sends both.
  for (const auto& id : m.cancel_task_ids()) {
    if (ordered.count(id) == 0) StopTask(id, StopOrder{}, m.epoch());
  }
}

void AgentSession::StopTask(const std::string& task_id, const StopOrder& order, uint64_t epoch) {
  Status s = executor_->Stop(task_id, order);
  const std::chrono::milliseconds grace =
      order.grace.count() < 0 ? config_.executor.kill_grace_period : order.grace;
  common::LogEvent("task_stopping", {{"task_id", task_id},
                                     {"node", agent_id_},
                                     {"epoch", epoch},
                                     {"reason", core::ToString(order.reason)},
                                     {"grace_seconds", static_cast<double>(grace.count()) / 1000.0},
                                     {"result", s.ok() ? "stopping" : s.message()}});
}

void AgentSession::ServeLogs(const HeartbeatResponse& m) {
  HeartbeatRequest req;
  req.set_agent_id(agent_id_);
  req.set_epoch(highest_epoch_);
  req.set_sent_at_unix_micros(common::NowMicros());
  for (const auto& r : m.log_requests()) {
    auto* chunk = req.add_log_chunks();
    chunk->set_request_id(r.request_id());
    if (Status valid = ValidateTaskId(r.task_id()); !valid.ok()) {
      chunk->set_error(valid.message());
      continue;
    }
    LogRead read = ReadLog(config_.executor.work_dir + "/" + r.task_id() + ".log", r.offset(),
                           r.tail_lines(), std::clamp(r.max_bytes(), 0, kMaxLogChunkBytes));
    chunk->set_found(read.found);
    chunk->set_offset(read.offset);
    chunk->set_size(read.size);
    chunk->set_error(read.error);
    chunk->set_data(std::move(read.data));
  }
  if (!conn_->stream->Write(req)) Disconnect("log chunk write failed");
}

void AgentSession::SendStarts() {
  HeartbeatRequest req;
  for (const auto& start : unreported_starts_) {
    if (task_gpus_.count(start.task_id) == 0) continue;  // Finished meanwhile.
    auto* s = req.add_started();
    s->set_task_id(start.task_id);
    s->set_started_at_unix_micros(start.started_at_micros);
    s->set_run(start.run);
    for (int cpu : executor_->CpuSet(start.task_id)) s->add_cpu_set(cpu);
  }
  if (req.started().empty()) {
    unreported_starts_.clear();
    return;
  }
  req.set_agent_id(agent_id_);
  req.set_epoch(highest_epoch_);
  req.set_sent_at_unix_micros(common::NowMicros());
  if (!conn_->stream->Write(req)) {
    Disconnect("start report write failed");  // Kept: sent again on the next connection.
    return;
  }
  unreported_starts_.clear();
}

void AgentSession::TakeGpuSnapshot() {
  GpuSnapshot gpus = gpus_->Latest();
  devices_ = std::move(gpus.devices);
  health_generation_ = gpus.health_generation;
}

void AgentSession::SendHeartbeat(int64_t now) {
  TakeGpuSnapshot();
  HeartbeatRequest req;
  req.set_agent_id(agent_id_);
  req.set_epoch(highest_epoch_);
  req.set_sent_at_unix_micros(common::NowMicros());
  for (const auto& d : devices_) FillGpu(d, req.add_gpus());
  for (const auto& id : executor_->Running()) {
    req.add_running_task_ids(id);
    if (std::optional<core::ResourceUsage> used = executor_->Usage(id)) {
      auto* u = req.add_usage();
      u->set_task_id(id);
      u->mutable_usage()->set_cpu_micros(used->cpu_micros);
      u->mutable_usage()->set_max_memory_bytes(used->max_memory_bytes);
    }
  }
  if (!conn_->stream->Write(req)) {
    Disconnect("heartbeat write failed");
    return;
  }
  next_heartbeat_ = now + ToMicros(config_.agent.heartbeat_interval);
}

void AgentSession::SendReports(const std::vector<TaskExit>& exits) {
  if (!conn_) return;
  // Bounded so that a long outage does not turn into thousands of calls at once.
  constexpr size_t kMaxInFlight = 256;
  for (const auto& e : exits) {
    if (reports_in_flight_.size() >= kMaxInFlight) break;
    if (reports_in_flight_.count(e.task_id) > 0) continue;
    auto report = std::make_unique<Report>();
    report->exit = e;
    report->generation = connection_generation_;
    report->channel = conn_->channel;
    report->req.set_agent_id(agent_id_);
    report->req.set_epoch(highest_epoch_);
    FillResult(e, report->req.mutable_result());
    report->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    Report* raw = report.get();
    reports_in_flight_.emplace(e.task_id, std::move(report));
    conn_->stub->async()->TaskFinished(&raw->ctx, &raw->req, &raw->resp,
                                       [this, raw](grpc::Status s) {
                                         // Everything under the lock: once it is released, the
                                         // owner may free the report or the session itself.
                                         std::lock_guard<std::mutex> lock(report_mu_);
                                         raw->status = std::move(s);
                                         report_results_.push_back(raw);
                                         report_cv_.notify_all();
                                         waker_.Wake();
                                       });
  }
}

void AgentSession::RetryReports(int64_t now, bool force) {
  if (!conn_ || (!force && now < next_finish_retry_)) return;
  // Everything pending is in flight.
  if (outbox_.size() + unpersisted_.size() <= reports_in_flight_.size()) return;
  SendReports(UndeliveredFinishes());
}

std::vector<TaskExit> AgentSession::UndeliveredFinishes() const {
  std::vector<TaskExit> exits = outbox_.Pending();
  for (const auto& [id, exit] : unpersisted_) exits.push_back(exit);
  return exits;
}

void AgentSession::HandleReportResults(int64_t now) {
  std::vector<Report*> results;
  {
    std::lock_guard<std::mutex> lock(report_mu_);
    results.swap(report_results_);
  }
  bool failed = false;
  bool disconnect = false;
  std::string failure;
  for (Report* report : results) {
    const grpc::Status& s = report->status;
    const TaskExit& e = report->exit;
    bool delivered = s.ok() || s.error_code() == grpc::StatusCode::ALREADY_EXISTS;
    // The scheduler cannot apply it (the task is unknown or runs elsewhere now): drop it.
    bool undeliverable = s.error_code() == grpc::StatusCode::NOT_FOUND ||
                         s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                         (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                          s.error_message().find("not registered") == std::string::npos);
    if (delivered || undeliverable) {
      if (undeliverable) {
        spdlog::warn("scheduler refused the finish of {}: {}", e.task_id, s.error_message());
      }
      ForgetFinish(e.task_id, e.run);
    } else {
      // Kept in the outbox: retried, or delivered with the next registration.
      if (!failed) spdlog::warn("cannot report the finish of {}: {}", e.task_id, s.error_message());
      failed = true;
      failure = s.error_message();
      const bool current = report->generation == connection_generation_ && conn_ != nullptr;
      if (current && (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      s.error_code() == grpc::StatusCode::FAILED_PRECONDITION)) {
        disconnect = true;
      }
    }
    reports_in_flight_.erase(e.task_id);
  }
  if (failed) {
    next_finish_retry_ = now + 1'000'000;
    if (disconnect) Disconnect("finish report failed: " + failure);
  }
}

void AgentSession::PersistFinishes(const std::vector<TaskExit>& exits) {
  Status s = outbox_.AddAll(exits);
  if (s.ok()) return;
  spdlog::error("cannot persist {} finishes together: {}", exits.size(), s.message());
  for (const auto& e : exits) PersistFinish(e);
}

void AgentSession::PersistFinish(const TaskExit& exit) {
  Status s = outbox_.Add(exit);
  if (s.ok() || s.code() == StatusCode::kInvalidArgument) {
    if (!s.ok()) spdlog::error("dropping the finish of {}: {}", exit.task_id, s.message());
    unpersisted_.erase(exit.task_id);
    return;
  }
  spdlog::error("cannot persist the finish of {} (retried every second): {}", exit.task_id,
                s.message());
  unpersisted_[exit.task_id] = exit;
}

void AgentSession::RetryPersist(int64_t now) {
  if (unpersisted_.empty() || now < next_persist_retry_) return;
  next_persist_retry_ = now + 1'000'000;
  std::vector<TaskExit> exits;
  for (const auto& [id, exit] : unpersisted_) exits.push_back(exit);
  for (const auto& exit : exits) PersistFinish(exit);
}

void AgentSession::ForgetFinish(const std::string& task_id, int run) {
  auto unpersisted = unpersisted_.find(task_id);
  if (unpersisted != unpersisted_.end() && CoversRun(run, unpersisted->second.run)) {
    unpersisted_.erase(unpersisted);  // Delivered before it could be persisted.
    return;
  }
  if (Status s = outbox_.Ack(task_id, run); !s.ok()) {
    // Reported again after a restart; the scheduler answers ALREADY_EXISTS then.
    spdlog::warn("cannot record that the finish of {} was delivered: {}", task_id, s.message());
  }
}

void AgentSession::DrainReports(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock(report_mu_);
    report_cv_.wait_for(lock, timeout,
                        [this] { return report_results_.size() == reports_in_flight_.size(); });
  }
  HandleReportResults(Mono());
}

void AgentSession::SweepTaskFiles(int64_t now) {
  const auto retention = config_.executor.retention;
  next_sweep_ = now + std::clamp<int64_t>(ToMicros(retention) / 10, 1'000'000, 3'600'000'000);
  if (sweep_.valid() && sweep_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return;  // The previous removal is still under way.
  }
  std::vector<std::string> running = executor_->Running();
  std::set<std::string> keep(running.begin(), running.end());
  for (const auto& [id, gpus] : task_gpus_) keep.insert(id);
  // The scan and the removal are I/O: off the loop. A task started meanwhile has fresh files.
  sweep_ = std::async(
      std::launch::async, [dir = config_.executor.work_dir, retention, keep = std::move(keep)] {
        auto expired = ExpiredTaskFiles(dir, retention, keep, std::chrono::system_clock::now());
        if (expired.empty()) return;
        const int removed = RemoveTaskFiles(expired);
        spdlog::info("executor.retention: removed {} old task files and directories", removed);
      });
}

std::chrono::milliseconds AgentSession::NextWake(int64_t now) const {
  int64_t next = now + 60'000'000;
  if (stop_.load()) return std::chrono::milliseconds(0);
  if (conn_) {
    next = std::min(next, next_heartbeat_);
    if (outbox_.size() + unpersisted_.size() > reports_in_flight_.size()) {
      next = std::min(next, next_finish_retry_);
    }
  } else {
    next = std::min(next, next_attempt_);
  }
  if (!unpersisted_.empty()) next = std::min(next, next_persist_retry_);
  if (config_.executor.retention.count() > 0) next = std::min(next, next_sweep_);
  const int64_t cut_off = ToMicros(config_.agent.stop_tasks_after_disconnect);
  if (cut_off > 0 && !stopped_for_disconnect_ && !task_gpus_.empty()) {
    next = std::min(next, last_contact_ + cut_off);
  }
  const int64_t unix_now = common::NowMicros();
  const int64_t poll_at = executor_->NextPollMicros(unix_now);
  if (poll_at != INT64_MAX) next = std::min(next, now + std::max<int64_t>(poll_at - unix_now, 0));
  // Rounded up: a wake a little early would only find nothing due and sleep again.
  return std::chrono::milliseconds(std::max<int64_t>((next - now + 999) / 1000, 0));
}

void AgentSession::Shutdown() {
  if (config_.executor.keep_tasks_on_exit) {
    spdlog::info("leaving {} tasks running (keep_tasks_on_exit)", executor_->Running().size());
    executor_->Detach();
  } else {
    auto exits = executor_->StopAll(config_.executor.kill_grace_period);
    PersistFinishes(exits);
    for (const auto& e : exits) {
      common::LogEvent(common::events::kTaskFinished,
                       {{"task_id", e.task_id}, {"node", agent_id_}, {"error", e.error}});
    }
    RetryReports(Mono(), true);
    DrainReports(std::chrono::seconds(6));  // Each call has a 5 s deadline.
  }
  if (conn_) conn_->stream_ctx.TryCancel();
  conn_.reset();
}

int AgentSession::Run() {
  if (Status s = gpus_->Start(); !s.ok()) {
    spdlog::error("GPU discovery failed: {}", s.message());
    return 1;
  }
  devices_ = gpus_->Latest().devices;
  spdlog::info("dgpu-agent {} starting: {} GPUs via {}, executor {}, schedulers {}", agent_id_,
               devices_.size(), gpus_->method(), executor_->name(), addresses_.size());
  const NodeResourceFigures resources = ResolveNodeResources(config_.resources);
  offered_cpus_milli_ = resources.cpus_milli;
  offered_memory_mb_ = resources.memory_mb;
  spdlog::info(
      "resources for tasks: {} CPUs, {} MiB of memory (reserved {} CPUs, {} MiB); "
      "isolation {}",
      core::CpusOfMilli(resources.cpus_milli), resources.memory_mb,
      core::CpusOfMilli(config_.resources.reserved_cpus_milli),
      config_.resources.reserved_memory_mb,
      isolation_ == "none" ? "none: tasks share them unenforced" : isolation_);
  Contact(Mono());
  while (!stop_.load()) {
    int64_t now = Mono();
    std::vector<TaskExit> exits = executor_->Poll(common::NowMicros());
    if (!exits.empty()) {
      // Reported first, persisted while the reports travel (see the class comment).
      SendReports(exits);
      PersistFinishes(exits);
    }
    RetryPersist(now);
    for (const auto& e : exits) {
      task_gpus_.erase(e.task_id);
      common::LogEvent(common::events::kTaskFinished, {{"task_id", e.task_id},
                                                       {"node", agent_id_},
                                                       {"success", e.success},
                                                       {"exit_code", e.exit_code},
                                                       {"error", e.error}});
    }
    HandleReportResults(now);
    StopTasksIfCutOff(now);
    if (config_.executor.retention.count() > 0 && now >= next_sweep_) SweepTaskFiles(now);
    if (!conn_) {
      if (now >= next_attempt_) Connect();
    } else {
      HandleInbound();
      if (conn_ && !unreported_starts_.empty()) SendStarts();
      // A GPU whose health changed is reported at once, not at the next heartbeat.
      if (conn_ && (now >= next_heartbeat_ || gpus_->health_generation() != health_generation_)) {
        SendHeartbeat(now);
      }
      if (conn_) RetryReports(now, false);
    }
    // Sleep until an order, an answer, a child's exit (SIGCHLD), a shim's end or what is due.
    waker_.Wait(NextWake(Mono()), executor_->WakeFds());
  }
  spdlog::info("dgpu-agent stopping");
  Shutdown();
  return 0;
}

}  // namespace dgpu::agent
