// Leader election through etcd's own election API (etcd 3.4 HTTP/JSON gateway, libcurl).
//
// The session pattern: a lease of `ttl`, kept alive every ttl/3; a campaign on the election
// name with that lease blocks until this scheduler is the leader. While leading, every
// successful keepalive extends the time this scheduler may act to (start of that keepalive +
// ttl - margin): a leader that cannot renew stops acting before its lease can expire, then
// reports the loss and campaigns again with a new lease.
//
// Threads: one campaign/keepalive thread, started by Start(); the callbacks run on it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "common/config.h"

namespace dgpu::scheduler {

// Minimal etcd v3 JSON gateway client. Thread-safe: every request has its own curl handle.
class EtcdClient {
 public:
  // `tls`: the CA that verifies https:// endpoints and the client certificate etcd may ask for
  // (ha.etcd_tls); with no CA file, the system's CAs.
  explicit EtcdClient(std::vector<std::string> endpoints, common::ClientTlsConfig tls = {})
      : endpoints_(std::move(endpoints)), tls_(std::move(tls)) {}
  EtcdClient(EtcdClient&& other) noexcept
      : endpoints_(std::move(other.endpoints_)),
        tls_(std::move(other.tls_)),
        preferred_(other.preferred_.load()) {}
  // POSTs `body` (JSON) to /v3/<path> on the first endpoint that answers. `timeout_ms` 0 means
  // no limit (campaign); `cancel` aborts a transfer in progress when it turns true.
  StatusOr<std::string> Post(const std::string& path, const std::string& body, long timeout_ms,
                             const std::atomic<bool>* cancel = nullptr);

  StatusOr<int64_t> GrantLease(int64_t ttl_seconds);
  // OK while the lease lives; NotFound once it expired. `timeout_ms` bounds the request.
  Status KeepAlive(int64_t lease_id, long timeout_ms = 2000);
  void Revoke(int64_t lease_id);
  StatusOr<std::string> Get(const std::string& key);
  Status Put(const std::string& key, const std::string& value);

 private:
  std::vector<std::string> endpoints_;
  common::ClientTlsConfig tls_;
  // The endpoint that answered last; the election and its keep-alive thread both post.
  std::atomic<size_t> preferred_ = 0;
};

// An integer of an etcd reply: the gateway writes 64-bit integers as JSON strings ("12"); plain
// JSON integers are accepted too. Anything else is InvalidArgument naming `source`.
StatusOr<int64_t> EtcdInt(const nlohmann::json& value, const std::string& source);

std::string Base64Encode(const std::string& in);
std::string Base64Decode(const std::string& in);

class EtcdElection {
 public:
  struct Callbacks {
    // Now the leader (campaign won). Returns false if it could not take over (it then resigns).
    std::function<bool()> on_elected;
    // No longer allowed to lead (lease lost or etcd unreachable past the deadline).
    std::function<void(const std::string& why)> on_lost;
    // The deadline (monotonic micros) until which the leader may act.
    std::function<void(int64_t)> set_act_until;
  };
  EtcdElection(EtcdClient client, std::string name, std::string value,
               std::chrono::milliseconds ttl, Callbacks callbacks);
  ~EtcdElection();
  void Start(std::chrono::milliseconds first_delay);
  void Stop();
  EtcdClient& client() { return client_; }

 private:
  void Run(std::chrono::milliseconds first_delay);
  bool SleepFor(std::chrono::milliseconds d);

  EtcdClient client_;
  std::string name_;
  std::string value_;
  std::chrono::milliseconds ttl_;
  Callbacks cb_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dgpu::scheduler
