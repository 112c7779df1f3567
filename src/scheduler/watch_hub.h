// WatchHub: the live feed behind GET /api/v1/watch (Server-Sent Events).
//
// After each batch the owner thread hands the hub what changed (OnPass, a BatchObserver): the
// tasks whose durable state changed (their last state in the batch, with the pending reason),
// the nodes touched by the batch's events, and the quota when it or a team changed. The hub's own
// thread turns them into SSE frames, numbers them, keeps the last `history` of them for resuming
// and writes each frame to every watcher. The owner thread only copies; no JSON is made there.
//
// Frames:
//   id: <seq>\nevent: task|node|quota\ndata: <the object as GET /tasks/{id}, /agents, /quota>\n\n
//   event: sync  (data {"seq": N}): the watcher is caught up; live events follow.
//   event: reset (data {"seq": N, "reason": ...}): the events after `since` cannot be replayed
//     (too old, from another scheduler process, or dropped under load): list again, then go on.
//   ": keepalive" comment lines while nothing happens, so that dead connections are found.
// Sequence numbers start at the hub's creation time in microseconds, so that a `since` from an
// earlier process (or another scheduler) is always either below the hub's floor or above its
// last number, and answered with a reset, never with a wrong replay.
//
// The hub records only while someone watches, or did within `keep_recording`, so that an unwatched
// scheduler pays nothing; a watcher that comes back later than that gets a reset.
//
// Compression: every write to the watchers is compressed once, by one raw deflate stream that
// ends each write with Z_FULL_FLUSH, so that no compressed write refers to an earlier one. A
// watcher that asked for deflate gets a zlib header and its catch-up compressed on its own (also
// ending with a full flush), then the shared bytes: to its decoder they continue one valid zlib
// stream. The stream is never ended (no checksum trailer), as an event stream is not.
#pragma once

#include <zlib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "core/scheduler_core.h"
#include "scheduler/application.h"
#include "scheduler/core_loop.h"

namespace dgpu::scheduler {

// One watcher's connection. Called on the hub's thread only.
class WatchSink {
 public:
  virtual ~WatchSink() = default;
  // The client takes the stream deflate-compressed (`Content-Encoding: deflate`): it is sent one
  // zlib header and its own catch-up, then the bytes of one compressor shared by all such
  // watchers (see WatchHub). Fixed for the sink's life.
  virtual bool deflate() const { return false; }
  // Queues `text` for the client (the same buffer goes to every watcher); false when the client
  // is gone or too far behind (the hub then closes it and forgets it).
  virtual bool Send(const std::shared_ptr<const std::string>& text) = 0;
  // Ends the response.
  virtual void Close() = 0;
};

struct WatchOptions {
  size_t history = 10000;  // Events kept for resuming.
  std::chrono::milliseconds keepalive{15000};
  // Events are written to the watchers at most this often (one write per watcher for all the
  // events of the interval): under thousands of changes a second, a write per change and
  // watcher would cost more than making the events.
  std::chrono::milliseconds flush_interval{50};
  std::chrono::milliseconds keep_recording{300000};  // After the last watcher left.
  // A batch with more task changes than this (a large job array) becomes one reset event.
  size_t max_batch_tasks = 10000;
  // Items waiting for the hub's thread beyond which new ones are dropped for a reset.
  size_t max_queued = 200000;
};

class WatchHub final : public BatchObserver {
 public:
  explicit WatchHub(WatchOptions options = {});
  ~WatchHub() override;  // Stops (closes every watcher).
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  void Start();
  void Stop();

  // Thread-safe. The watcher gets the events after `since` then a sync, or (since unset) a sync
  // at once, or a reset when `since` cannot be resumed; then every event as it happens.
  void Add(std::shared_ptr<WatchSink> sink, std::optional<uint64_t> since);
  size_t watchers() const;
  uint64_t last_seq() const;

  // Owner thread.
  void OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>& decisions,
              const std::vector<core::Change>& changes, const std::vector<core::Event>& events,
              double pass_seconds, core::TimeMicros now) override;

 private:
  struct TaskItem {
    core::Task task;
    core::PendingReason reason = core::PendingReason::kNone;
    core::TaskNumber reserved_for = 0;
  };
  struct ResetItem {
    std::string reason;
  };
  // A watcher joins here, in order with the events.
  struct JoinItem {
    std::shared_ptr<WatchSink> sink;
    std::optional<uint64_t> since;
  };
  // Recording starts (again): nothing before can be resumed.
  struct GapItem {};
  using Item = std::variant<TaskItem, core::NodeView, QuotaState, ResetItem, JoinItem, GapItem>;
  struct Frame {
    uint64_t seq;
    std::string text;
  };

  // Owner thread: whether this batch is recorded.
  bool Recording(std::chrono::steady_clock::time_point now);
  void Run();
  // Hub thread: numbers an event and sends it to every watcher.
  void Publish(const char* type, const std::string& data);
  void Handle(Item& item);
  void Join(JoinItem& join);
  // Sends the frames published since the last flush to every watcher, as one buffer.
  void Flush();
  void SendToAll(std::string text);
  // Removes a watcher whose Send failed.
  void Drop(size_t index);
  std::string ControlFrame(const char* type, const std::string& reason) const;

  const WatchOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;                              // GUARDED_BY(mu_)
  bool overflowed_ = false;                             // GUARDED_BY(mu_): items were dropped
  bool stopping_ = false;                               // GUARDED_BY(mu_)
  size_t watcher_count_ = 0;                            // GUARDED_BY(mu_)
  bool recording_ = false;                              // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point last_watched_;  // GUARDED_BY(mu_)
  uint64_t seq_ = 0;                                    // GUARDED_BY(mu_): the last number given
  std::thread thread_;

  // Hub thread only.
  std::vector<std::shared_ptr<WatchSink>> sinks_;
  std::unique_ptr<z_stream, void (*)(z_stream*)> shared_deflate_;
  std::deque<Frame> history_;
  std::string unsent_;  // Frames published, not yet flushed.
  uint64_t floor_ = 0;  // The lowest `since` that can be resumed.
};

}  // namespace dgpu::scheduler
