// LeaderState: whether this scheduler leads, its epoch, and where the leader is.
// Read from any thread (atomics and a mutex-guarded address).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace dgpu::scheduler {

class LeaderState {
 public:
  bool is_leader() const { return leader_.load(std::memory_order_acquire); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  void Set(bool leader, uint64_t epoch) {
    epoch_.store(epoch, std::memory_order_release);
    leader_.store(leader, std::memory_order_release);
  }
  std::string leader_http() const {
    std::lock_guard<std::mutex> lock(mu_);
    return leader_http_;
  }
  void set_leader_http(std::string address) {
    std::lock_guard<std::mutex> lock(mu_);
    leader_http_ = std::move(address);
  }
  // Why the leader is degraded (e.g. "standby unreachable"), for /readyz details.
  std::string detail() const {
    std::lock_guard<std::mutex> lock(mu_);
    return detail_;
  }
  void set_detail(std::string d) {
    std::lock_guard<std::mutex> lock(mu_);
    detail_ = std::move(d);
  }

 private:
  std::atomic<bool> leader_{false};
  std::atomic<uint64_t> epoch_{0};
  mutable std::mutex mu_;
  std::string leader_http_;  // GUARDED_BY(mu_)
  std::string detail_;       // GUARDED_BY(mu_)
};

}  // namespace dgpu::scheduler
