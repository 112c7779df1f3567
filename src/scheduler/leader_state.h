// LeaderState: whether this scheduler leads, its epoch, and where the leader is.
// Read from any thread (atomics and a mutex-guarded address).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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
  // Any message carrying an epoch goes through here: a leader that sees a higher epoch must step
  // down at once. The handler (set before serving) runs on the calling thread.
  void ObserveEpoch(uint64_t seen) {
    if (seen <= epoch() || !is_leader()) return;
    std::function<void(uint64_t)> h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      h = on_higher_epoch_;
    }
    if (h) h(seen);
  }
  void set_on_higher_epoch(std::function<void(uint64_t)> h) {
    std::lock_guard<std::mutex> lock(mu_);
    on_higher_epoch_ = std::move(h);
  }
  // Lease gate: with an arbiter (uses_lease), a leader may act only until its lease deadline
  // (monotonic micros).
  void set_lease_until(int64_t mono_micros) { lease_until_.store(mono_micros); }
  bool MayAct(int64_t mono_now) const {
    if (!is_leader()) return false;
    if (!uses_lease_.load()) return true;
    return mono_now < lease_until_.load();
  }
  void set_uses_lease(bool v) { uses_lease_.store(v); }
  bool uses_lease() const { return uses_lease_.load(); }

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
  std::atomic<int64_t> lease_until_{0};
  std::atomic<bool> uses_lease_{false};
  mutable std::mutex mu_;
  std::string leader_http_;                        // GUARDED_BY(mu_)
  std::string detail_;                             // GUARDED_BY(mu_)
  std::function<void(uint64_t)> on_higher_epoch_;  // GUARDED_BY(mu_)
};

}  // namespace dgpu::scheduler
