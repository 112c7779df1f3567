// A fleet of agents in one process, over real gRPC: each registers with its GPUs, keeps one
// Heartbeat stream open and heartbeats every --heartbeat seconds (the agents' phases spread
// evenly over the interval, as agents started at different times are), confirms each task it is
// given at once and reports it finished --run-time seconds later (a stop order ends it at once).
// For measuring the scheduler with many nodes on one machine (bench/run_fleet_bench.sh).
//
//   agent_loadgen --scheduler 127.0.0.1:9090 --agents 10000 --gpus 8 --heartbeat 5
//                 --run-time 1 --duration 60    (one command line)
//
// A task whose env holds LOADGEN_SUBMITTED_US (unix micros, set by the submitter) adds its
// submission-to-assignment time to the latency figures. Prints one line of counters a second
// and a summary at the end; exits 1 if an agent failed to register or lost its stream.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/grpc_runtime.h"
#include "dgpu/v1/scheduler.grpc.pb.h"

namespace {

using dgpu::v1::HeartbeatRequest;
using dgpu::v1::HeartbeatResponse;

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Counters {
  std::atomic<int64_t> registered{0}, register_failures{0}, heartbeats{0}, answers{0}, started{0},
      finished{0}, finish_failures{0}, stops{0}, streams_lost{0}, reregister{0};
};

struct Options {
  std::string scheduler = "127.0.0.1:9090";
  int agents = 100;
  int gpus = 8;
  double heartbeat = 5;
  double run_time = 1;
  double duration = 60;
  int channels = 0;  // 0: one per agent
  std::string prefix = "load";
};

class Agent;

// A unary call's request, response and context, alive until its callback has run.
template <typename Request, typename Response>
struct UnaryCall {
  UnaryCall() { ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30)); }
  Request req;
  Response resp;
  grpc::ClientContext ctx;
};

// The fields every GPU report of the fleet shares.
void FillGpu(dgpu::v1::GpuStatus* s, int index) {
  s->set_index(index);
  s->set_model("Tesla V100-SXM2-32GB");
  s->set_memory_mb(32768);
}

// The agent's Heartbeat stream: one write in flight at a time, the rest queued.
class Stream final : public grpc::ClientBidiReactor<HeartbeatRequest, HeartbeatResponse> {
 public:
  explicit Stream(Agent* agent) : agent_(agent) {}
  void Begin(dgpu::v1::SchedulerService::Stub* stub);
  void Send(HeartbeatRequest req) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    if (writing_) {
      queue_.push_back(std::move(req));
      return;
    }
    writing_ = true;
    current_ = std::move(req);
    StartWrite(&current_);
  }
  grpc::ClientContext ctx;

 private:
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ok || queue_.empty()) {
      writing_ = false;
      return;
    }
    current_ = std::move(queue_.front());
    queue_.pop_front();
    StartWrite(&current_);
  }
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  Agent* agent_;
  std::mutex mu_;
  bool writing_ = false;
  bool closing_ = false;  // the read side ended: no more writes
  HeartbeatRequest current_;
  std::deque<HeartbeatRequest> queue_;
  HeartbeatResponse read_;
};

class Agent {
 public:
  Agent(std::string id, const std::shared_ptr<grpc::Channel>& channel, const Options& o,
        Counters* c)
      : id_(std::move(id)),
        stub_(dgpu::v1::SchedulerService::NewStub(channel)),
        opt_(o),
        counters_(c) {}

  // Real agents start at different times: their heartbeats are spread over the interval, not
  // sent by all in the same instant. Before the first Tick.
  void set_phase(int64_t micros) { phase_ = micros; }

  // Called by the driver thread every tick.
  // `registrations`: how many more agents may start registering in this tick (a first call on
  // a fresh connection is slow: registering all at once would hold up the heartbeats of those
  // already registered past the scheduler's heartbeat timeout).
  void Tick(int64_t now, int* registrations) {
    std::vector<std::string> ending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ == State::kNew) {
        if (*registrations <= 0) return;
        --*registrations;
        state_ = State::kRegistering;
        next_heartbeat_ = now + phase_;
        Register();
        return;
      }
      if (state_ != State::kOnline) return;
      for (auto it = running_.begin(); it != running_.end();) {
        if (it->second <= now) {
          ending.push_back(it->first);
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& task : ending) Finish(task, true, "");
    if (now >= next_heartbeat_) {
      next_heartbeat_ = now + static_cast<int64_t>(opt_.heartbeat * 1e6);
      HeartbeatRequest req;
      req.set_agent_id(id_);
      req.set_sent_at_unix_micros(NowMicros());
      for (int g = 0; g < opt_.gpus; ++g) {
        auto* s = req.add_gpus();
        FillGpu(s, g);
        s->set_utilization_pct(-1);
        s->set_temperature_c(-1);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        req.set_epoch(epoch_);
        for (const auto& [task, end] : running_) req.add_running_task_ids(task);
      }
      stream_->Send(std::move(req));
      counters_->heartbeats++;
    }
  }

  // From the stream's reader.
  void Handle(const HeartbeatResponse& m, int64_t now, std::vector<int64_t>* latencies) {
    counters_->answers++;
    HeartbeatRequest starts;
    std::vector<std::string> stopped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      epoch_ = std::max(epoch_, m.epoch());
      starts.set_epoch(epoch_);
      for (const auto& a : m.start()) {
        running_[a.task_id()] = now + static_cast<int64_t>(opt_.run_time * 1e6);
        auto* s = starts.add_started();
        s->set_task_id(a.task_id());
        s->set_started_at_unix_micros(NowMicros());
        auto it = a.env().find("LOADGEN_SUBMITTED_US");
        if (it != a.env().end()) latencies->push_back(NowMicros() - std::stoll(it->second));
      }
      for (const auto& id : m.cancel_task_ids()) {
        if (running_.erase(id) != 0) stopped.push_back(id);
      }
    }
    if (starts.started_size() > 0) {
      starts.set_agent_id(id_);
      starts.set_sent_at_unix_micros(NowMicros());
      counters_->started += starts.started_size();
      stream_->Send(std::move(starts));
    }
    for (const auto& id : stopped) {
      counters_->stops++;
      Finish(id, false, "cancelled");
    }
    if (m.reregister()) counters_->reregister++;  // it had timed out (not registered again)
  }

  void StreamEnded() { counters_->streams_lost++; }

 private:
  enum class State { kNew, kRegistering, kOnline, kFailed };

  void Register() {
    auto call = std::make_shared<
        UnaryCall<dgpu::v1::RegisterAgentRequest, dgpu::v1::RegisterAgentResponse>>();
    auto& req = call->req;
    req.set_agent_id(id_);
    req.set_address("loadgen");
    req.set_version("loadgen");
    req.set_instance_id(id_);
    for (int g = 0; g < opt_.gpus; ++g) {
      auto* s = req.add_gpus();
      FillGpu(s, g);
      s->set_uuid("GPU-" + id_ + "-" + std::to_string(g));
    }
    stub_->async()->RegisterAgent(&call->ctx, &call->req, &call->resp,
                                  [this, call](const grpc::Status& s) {
                                    std::lock_guard<std::mutex> lock(mu_);
                                    if (!s.ok()) {
                                      state_ = State::kFailed;
                                      counters_->register_failures++;
                                      std::fprintf(stderr, "%s: register failed: %s\n", id_.c_str(),
                                                   s.error_message().c_str());
                                      return;
                                    }
                                    epoch_ = call->resp.epoch();
                                    stream_ = new Stream(this);
                                    stream_->Begin(stub_.get());
                                    state_ = State::kOnline;
                                    counters_->registered++;
                                  });
  }

  void Finish(const std::string& task, bool success, const std::string& error) {
    uint64_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      epoch = epoch_;
    }
    auto call = std::make_shared<
        UnaryCall<dgpu::v1::TaskFinishedRequest, dgpu::v1::TaskFinishedResponse>>();
    auto& req = call->req;
    req.set_agent_id(id_);
    req.set_epoch(epoch);
    req.mutable_result()->set_task_id(task);
    req.mutable_result()->set_success(success);
    req.mutable_result()->set_exit_code(success ? 0 : 143);
    req.mutable_result()->set_error(error);
    req.mutable_result()->set_finished_at_unix_micros(NowMicros());
    stub_->async()->TaskFinished(
        &call->ctx, &call->req, &call->resp, [this, call](const grpc::Status& s) {
          if (s.ok() || s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
            counters_->finished++;
          } else {
            counters_->finish_failures++;
          }
        });
  }

  std::string id_;
  std::unique_ptr<dgpu::v1::SchedulerService::Stub> stub_;
  const Options& opt_;
  Counters* counters_;
  std::mutex mu_;
  State state_ = State::kNew;               // GUARDED_BY(mu_)
  uint64_t epoch_ = 0;                      // GUARDED_BY(mu_)
  std::map<std::string, int64_t> running_;  // GUARDED_BY(mu_): task -> end (unix micros)
  Stream* stream_ = nullptr;                // set once, before kOnline; freed at exit
  int64_t next_heartbeat_ = 0;              // driver thread only
  int64_t phase_ = 0;                       // offset of the first heartbeat, micros
};

std::mutex latency_mu;
std::vector<int64_t> latencies;  // GUARDED_BY(latency_mu)

void Stream::Begin(dgpu::v1::SchedulerService::Stub* stub) {
  stub->async()->Heartbeat(&ctx, this);
  StartRead(&read_);
  AddHold();  // Writes start from the driver thread: held until the read side ends.
  StartCall();
}

void Stream::OnReadDone(bool ok) {
  if (!ok) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    RemoveHold();  // OnDone follows once the write in flight, if any, is done.
    return;
  }
  std::vector<int64_t> l;
  agent_->Handle(read_, NowMicros(), &l);
  if (!l.empty()) {
    std::lock_guard<std::mutex> lock(latency_mu);
    latencies.insert(latencies.end(), l.begin(), l.end());
  }
  StartRead(&read_);
}

void Stream::OnDone(const grpc::Status& status) {
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) agent_->StreamEnded();
}

int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  dgpu::common::ConfigureGrpcRuntime();
  Options o;
  CLI::App app{"agent_loadgen: many dgpu agents over real gRPC from one process"};
  app.add_option("--scheduler", o.scheduler, "the scheduler's gRPC address");
  app.add_option("--agents", o.agents, "how many agents")->check(CLI::Range(1, 100000));
  app.add_option("--gpus", o.gpus, "GPUs per agent")->check(CLI::Range(1, 64));
  app.add_option("--heartbeat", o.heartbeat, "heartbeat interval, seconds")
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("--run-time", o.run_time, "how long each task runs, seconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--duration", o.duration, "how long to run, seconds")->check(CLI::Range(0.1, 1e6));
  app.add_option("--channels", o.channels, "gRPC connections shared by the agents (0: one each)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--prefix", o.prefix, "agent ids are <prefix>-<n>");
  CLI11_PARSE(app, argc, argv);

  Counters c;
  const int channels = o.channels == 0 ? o.agents : std::min(o.channels, o.agents);
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  pool.reserve(static_cast<size_t>(channels));
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each, as real agents
    args.SetInt("loadgen.channel", i);
    pool.push_back(
        grpc::CreateCustomChannel(o.scheduler, grpc::InsecureChannelCredentials(), args));
  }
  std::vector<std::unique_ptr<Agent>> agents;
  agents.reserve(static_cast<size_t>(o.agents));
  for (int i = 0; i < o.agents; ++i) {
    agents.push_back(std::make_unique<Agent>(o.prefix + "-" + std::to_string(i + 1),
                                             pool[static_cast<size_t>(i % channels)], o, &c));
    agents.back()->set_phase(static_cast<int64_t>(o.heartbeat * 1e6) * i / o.agents);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::microseconds(static_cast<int64_t>(o.duration * 1e6));
  auto next_print = start + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < end) {
    const int64_t now = NowMicros();
    int registrations = 200;
    for (auto& a : agents) a->Tick(now, &registrations);
    if (std::chrono::steady_clock::now() >= next_print) {
      next_print += std::chrono::seconds(1);
      std::printf(
          "t=%3.0fs registered %lld heartbeats %lld answers %lld started %lld finished %lld "
          "stops %lld\n",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          static_cast<long long>(c.registered.load()), static_cast<long long>(c.heartbeats.load()),
          static_cast<long long>(c.answers.load()), static_cast<long long>(c.started.load()),
          static_cast<long long>(c.finished.load()), static_cast<long long>(c.stops.load()));
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<int64_t> l;
  {
    std::lock_guard<std::mutex> lock(latency_mu);
    l = latencies;
  }
  std::printf(
      "summary: agents %d registered %lld register_failures %lld heartbeats %lld started %lld "
      "finished %lld finish_failures %lld streams_lost %lld reregister_requests %lld\n",
      o.agents, static_cast<long long>(c.registered.load()),
      static_cast<long long>(c.register_failures.load()),
      static_cast<long long>(c.heartbeats.load()), static_cast<long long>(c.started.load()),
      static_cast<long long>(c.finished.load()), static_cast<long long>(c.finish_failures.load()),
      static_cast<long long>(c.streams_lost.load()), static_cast<long long>(c.reregister.load()));
  std::printf("submission to assignment: %zu tasks, p50 %.1f ms, p99 %.1f ms\n", l.size(),
              static_cast<double>(Percentile(l, 0.5)) / 1000.0,
              static_cast<double>(Percentile(l, 0.99)) / 1000.0);
  std::fflush(stdout);
  const bool ok =
      c.registered.load() == o.agents && c.streams_lost.load() == 0 && c.reregister.load() == 0;
  std::_Exit(ok ? 0 : 1);  // The streams stay open to the end: no orderly teardown needed.
}
