#include "scheduler/etcd_election.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/number.h"
#include "common/time_util.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

int64_t Mono() { return common::SystemClock::Instance().MonotonicMicros(); }

size_t Collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

int Progress(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* flag = static_cast<const std::atomic<bool>*>(cancel);
  return flag != nullptr && flag->load() ? 1 : 0;
}

}  // namespace

StatusOr<int64_t> EtcdInt(const json& v, const std::string& source) {
  if (v.is_string()) return common::ParseInt64(v.get<std::string>(), source);
  if (v.is_number_integer()) return v.get<int64_t>();
  return InvalidArgument(source + ": " + v.dump() + " is not a whole number");
}

std::string Base64Encode(const std::string& in) {
  static const char* kTable = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kTable[v >> 18];
    out += kTable[(v >> 12) & 63];
    out += kTable[(v >> 6) & 63];
    out += kTable[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kTable[v >> 18];
    out += kTable[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kTable[v >> 18];
    out += kTable[(v >> 12) & 63];
    out += kTable[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string Base64Decode(const std::string& in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : in) {
    int v = val(c);
    if (v < 0) continue;
    buf = (buf << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xFF);
    }
  }
  return out;
}

StatusOr<std::string> EtcdClient::Post(const std::string& path, const std::string& body,
                                       long timeout_ms, const std::atomic<bool>* cancel) {
  if (endpoints_.empty()) return Unavailable("no etcd endpoints configured");
  std::string last_error;
  const size_t first = preferred_.load(std::memory_order_relaxed);
  for (size_t k = 0; k < endpoints_.size(); ++k) {
    size_t idx = (first + k) % endpoints_.size();
    CURL* curl = curl_easy_init();
    if (curl == nullptr) return Internal("curl_easy_init failed");
    std::string url = endpoints_[idx] + "/v3/" + path;
    std::string out;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    if (timeout_ms > 0) curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    char curl_error[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
    if (!tls_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, tls_.ca_file.c_str());
    if (!tls_.cert_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, tls_.cert_file.c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, tls_.key_file.c_str());
    }
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, Progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(cancel));
    CURLcode rc = curl_easy_perform(curl);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    if (rc == CURLE_OK && code == 200) {
      preferred_.store(idx, std::memory_order_relaxed);
      return out;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) return Unavailable("cancelled");
    last_error = rc != CURLE_OK ? endpoints_[idx] + ": " +
                                      (curl_error[0] != '\0' ? std::string(curl_error)
                                                             : std::string(curl_easy_strerror(rc)))
                                : "HTTP " + std::to_string(code) + ": " + out;
    if (rc == CURLE_OK) break;  // The endpoint answered: another one would say the same.
  }
  return Unavailable("etcd: " + last_error);
}

StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  auto r =
      Post("lease/grant", json{{"TTL", std::to_string(ttl_seconds)}, {"ID", "0"}}.dump(), 2000);
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (!j.is_object() || !j.contains("ID")) return Unavailable("etcd: bad lease grant reply");
  return EtcdInt(j["ID"], "etcd lease grant reply: ID");
}

Status EtcdClient::KeepAlive(int64_t lease_id, long timeout_ms) {
  auto r = Post("lease/keepalive", json{{"ID", std::to_string(lease_id)}}.dump(), timeout_ms);
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  // The gateway streams {"result": {...}}; an expired lease comes back with no TTL (or 0).
  const json& res = j.is_object() && j.contains("result") ? j["result"] : j;
  if (!res.is_object() || !res.contains("TTL")) {
    return NotFound("etcd lease " + std::to_string(lease_id) + " expired");
  }
  StatusOr<int64_t> ttl = EtcdInt(res["TTL"], "etcd lease keepalive reply: TTL");
  if (!ttl.ok()) return ttl.status();
  if (*ttl <= 0) return NotFound("etcd lease " + std::to_string(lease_id) + " expired");
  return OkStatus();
}

void EtcdClient::Revoke(int64_t lease_id) {
  auto r = Post("lease/revoke", json{{"ID", std::to_string(lease_id)}}.dump(), 1000);
  // The lease then ends with its TTL; nothing waits for it meanwhile.
  if (!r.ok()) spdlog::info("etcd: cannot revoke lease {}: {}", lease_id, r.status().message());
}

StatusOr<std::string> EtcdClient::Get(const std::string& key) {
  auto r = Post("kv/range", json{{"key", Base64Encode(key)}}.dump(), 2000);
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (!j.is_object() || !j.contains("kvs") || j["kvs"].empty()) return std::string();
  return Base64Decode(j["kvs"][0].value("value", ""));
}

Status EtcdClient::Put(const std::string& key, const std::string& value) {
  auto r =
      Post("kv/put", json{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}}.dump(), 2000);
  return r.ok() ? OkStatus() : r.status();
}

EtcdElection::EtcdElection(EtcdClient client, std::string name, std::string value,
                           std::chrono::milliseconds ttl, Callbacks callbacks)
    : client_(std::move(client)),
      name_(std::move(name)),
      value_(std::move(value)),
      ttl_(ttl),
      cb_(std::move(callbacks)) {}

EtcdElection::~EtcdElection() { Stop(); }

void EtcdElection::Start(std::chrono::milliseconds first_delay) {
  thread_ = std::thread([this, first_delay] { Run(first_delay); });
}

void EtcdElection::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

bool EtcdElection::SleepFor(std::chrono::milliseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (!stop_.load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !stop_.load();
}

void EtcdElection::Run(std::chrono::milliseconds first_delay) {
  if (!SleepFor(first_delay)) return;
  const int64_t ttl_s = std::max<int64_t>(1, ttl_.count() / 1000);
  const auto renew_every = std::max(std::chrono::milliseconds(100), ttl_ / 3);
  const int64_t ttl_us = ttl_.count() * 1000;
  const int64_t margin = ttl_us / 6;
  while (!stop_.load()) {
    auto lease = client_.GrantLease(ttl_s);
    if (!lease.ok()) {
      spdlog::warn("etcd election: cannot get a lease: {}", lease.status().message());
      SleepFor(renew_every);
      continue;
    }
    // Keep the lease alive while campaigning (the campaign call blocks).
    std::atomic<bool> campaign_done{false};
    std::atomic<bool> lease_lost{false};
    std::thread keeper([&] {
      while (!stop_.load() && !campaign_done.load()) {
        SleepFor(renew_every);
        if (campaign_done.load() || stop_.load()) break;
        if (!client_.KeepAlive(*lease).ok()) {
          lease_lost.store(true);
          break;
        }
      }
    });
    std::atomic<bool> cancel_campaign{false};
    std::thread canceller([&] {
      while (!campaign_done.load()) {
        if (stop_.load() || lease_lost.load()) cancel_campaign.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    auto won = client_.Post("election/campaign",
                            json{{"name", Base64Encode(name_)},
                                 {"lease", std::to_string(*lease)},
                                 {"value", Base64Encode(value_)}}
                                .dump(),
                            0, &cancel_campaign);
    campaign_done.store(true);
    keeper.join();
    canceller.join();
    if (!won.ok() || lease_lost.load() || stop_.load()) {
      if (!stop_.load()) {
        spdlog::warn("etcd election: campaign ended without leadership: {}",
                     won.ok() ? "lease lost" : won.status().message());
      }
      client_.Revoke(*lease);
      SleepFor(renew_every);
      continue;
    }
    // Leader. First make sure the lease is still alive, and set how long we may act.
    int64_t renew_start = Mono();
    if (!client_.KeepAlive(*lease).ok()) {
      client_.Revoke(*lease);
      continue;
    }
    cb_.set_act_until(renew_start + ttl_us - margin);
    if (!cb_.on_elected()) {
      client_.Revoke(*lease);
      SleepFor(renew_every);
      continue;
    }
    int64_t act_until = renew_start + ttl_us - margin;
    std::string lost_why;
    while (!stop_.load()) {
      // Wake for the next renewal, or at the deadline when renewals keep failing: a leader that
      // may no longer act must not go on reporting itself the leader (a keepalive blocked for
      // its full timeout, or a retry a whole period later, used to overrun the deadline, past the
      // lease's expiry with a long ttl).
      const int64_t left_ms = std::max<int64_t>(0, (act_until - Mono()) / 1000);
      SleepFor(std::min(renew_every, std::chrono::milliseconds(left_ms)));
      if (stop_.load()) break;
      int64_t start = Mono();
      if (start >= act_until) {
        lost_why = "not renewed before the deadline";
        break;
      }
      Status s = client_.KeepAlive(
          *lease, static_cast<long>(std::clamp<int64_t>((act_until - start) / 1000, 1, 2000)));
      if (s.ok()) {
        act_until = start + ttl_us - margin;
        cb_.set_act_until(act_until);
        continue;
      }
      if (s.code() == StatusCode::kNotFound || Mono() >= act_until) {
        lost_why = s.message();
        break;
      }
      spdlog::warn("etcd election: keepalive failed ({}); still leading until the lease deadline",
                   s.message());
    }
    if (stop_.load()) {
      client_.Revoke(*lease);  // Hand leadership over promptly on a clean shutdown.
      return;
    }
    cb_.set_act_until(0);
    cb_.on_lost("etcd lease lost: " + lost_why);
    client_.Revoke(*lease);
  }
}

}  // namespace dgpu::scheduler
