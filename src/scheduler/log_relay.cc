#include "scheduler/log_relay.h"

#include <utility>
#include <vector>

namespace dgpu::scheduler {

namespace {

Error Unavailable(std::string message) {
  return Error{ErrorCode::kLogUnavailable, "", std::move(message), StatusCode::kUnavailable};
}

}  // namespace

LogRelay::LogRelay(SendFn send, std::chrono::milliseconds timeout)
    : send_(std::move(send)), timeout_(timeout), timer_([this] { Expire(); }) {}

LogRelay::~LogRelay() {
  std::map<uint64_t, Pending> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    left.swap(pending_);
  }
  cv_.notify_all();
  timer_.join();
  for (auto& [id, p] : left) p.done(Unavailable("the scheduler is shutting down"));
}

void LogRelay::Read(const LogRead& read, Done done) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return done(Unavailable("the scheduler is shutting down"));
    id = next_id_++;
    pending_[id] = {read.node_id, read.task_id, std::chrono::steady_clock::now() + timeout_,
                    std::move(done)};
  }
  cv_.notify_all();
  dgpu::v1::HeartbeatResponse msg;
  auto* r = msg.add_log_requests();
  r->set_request_id(id);
  r->set_task_id(read.task_id);
  r->set_offset(read.offset);
  r->set_tail_lines(read.tail_lines);
  r->set_max_bytes(read.max_bytes);
  if (send_(read.node_id, std::move(msg))) return;
  Done failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // Answered or expired meanwhile.
    failed = std::move(it->second.done);
    pending_.erase(it);
  }
  failed(Unavailable("node " + read.node_id + ", which holds the log of " + read.task_id +
                     ", is not connected"));
}

void LogRelay::Deliver(const std::string& agent_id, const dgpu::v1::LogChunk& chunk) {
  Done done;
  std::string task_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(chunk.request_id());
    if (it == pending_.end() || it->second.agent_id != agent_id) return;
    done = std::move(it->second.done);
    task_id = std::move(it->second.task_id);
    pending_.erase(it);
  }
  if (!chunk.found()) {
    return done(LogPiece{0, "", 0,
                         "node " + agent_id + " holds no log of " + task_id +
                             (chunk.error().empty() ? "" : " (" + chunk.error() + ")")});
  }
  done(LogPiece{chunk.offset(), chunk.data(), chunk.size(), ""});
}

void LogRelay::Expire() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<Pending> expired;
    auto next = now + std::chrono::seconds(1);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        expired.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        next = std::min(next, it->second.deadline);
        ++it;
      }
    }
    if (!expired.empty()) {
      lock.unlock();
      for (auto& p : expired) {
        p.done(Unavailable("node " + p.agent_id + " did not answer for the log within " +
                           std::to_string(timeout_.count()) + " ms"));
      }
      lock.lock();
      continue;
    }
    cv_.wait_until(lock, next);
  }
}

}  // namespace dgpu::scheduler
