#include "scheduler/watch_hub.h"

#include <set>
#include <utility>

#include "common/time_util.h"
#include "scheduler/api_json.h"

namespace dgpu::scheduler {

using nlohmann::json;

namespace {

// A raw deflate stream (no header: the watchers get theirs from DeflateCatchUp), fast level.
z_stream* NewRawDeflate() {
  auto* z = new z_stream{};
  if (deflateInit2(z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    delete z;
    return nullptr;
  }
  return z;
}

void FreeDeflate(z_stream* z) {
  if (z == nullptr) return;
  deflateEnd(z);
  delete z;
}

// `text` through `z`, ending with a full flush: the output refers to nothing before it.
std::string DeflateFull(z_stream* z, const std::string& text) {
  std::string out;
  out.resize(deflateBound(z, static_cast<uLong>(text.size())) + 16);
  z->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z->avail_in = static_cast<uInt>(text.size());
  size_t used = 0;
  while (true) {
    if (used == out.size()) out.resize(out.size() * 2);
    z->next_out = reinterpret_cast<Bytef*>(out.data() + used);
    z->avail_out = static_cast<uInt>(out.size() - used);
    deflate(z, Z_FULL_FLUSH);
    used = out.size() - z->avail_out;
    // Done when the input is used and the flush fitted (output space left over).
    if (z->avail_in == 0 && z->avail_out > 0) break;
  }
  out.resize(used);
  return out;
}

// What a deflate watcher gets first: a zlib header, then `text` compressed on its own.
std::string DeflateCatchUp(const std::string& text) {
  std::unique_ptr<z_stream, void (*)(z_stream*)> z(NewRawDeflate(), FreeDeflate);
  // CMF 0x78: deflate, 32 KiB window; FLG 0x01: fastest level, no dictionary, check bits.
  std::string out("\x78\x01", 2);
  if (z) out += DeflateFull(z.get(), text);
  return out;
}

}  // namespace

WatchHub::WatchHub(WatchOptions options)
    : options_(options), shared_deflate_(NewRawDeflate(), FreeDeflate) {
  // Numbers start at the creation time in microseconds: see the file comment.
  seq_ = static_cast<uint64_t>(common::NowMicros());
  floor_ = seq_;
}

WatchHub::~WatchHub() { Stop(); }

void WatchHub::Start() {
  thread_ = std::thread([this] { Run(); });
}

void WatchHub::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WatchHub::Add(std::shared_ptr<WatchSink> sink, std::optional<uint64_t> since) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      sink->Close();
      return;
    }
    ++watcher_count_;
    if (!recording_) {
      recording_ = true;
      queue_.emplace_back(GapItem{});
    }
    queue_.emplace_back(JoinItem{std::move(sink), since});
  }
  cv_.notify_one();
}

size_t WatchHub::watchers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watcher_count_;
}

uint64_t WatchHub::last_seq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

bool WatchHub::Recording(std::chrono::steady_clock::time_point now) {
  if (watcher_count_ > 0) return true;
  if (recording_ && now - last_watched_ < options_.keep_recording) return true;
  recording_ = false;
  return false;
}

void WatchHub::OnPass(const core::SchedulerCore& core, const std::vector<core::Decision>&,
                      const std::vector<core::Change>& changes,
                      const std::vector<core::Event>& events, double, core::TimeMicros) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Recording(std::chrono::steady_clock::now())) return;
  }
  std::vector<Item> items;
  // Each task once, as it is after the batch.
  std::set<core::TaskNumber> seen;
  std::vector<const core::Task*> tasks;
  size_t task_changes = 0;
  bool quota = false;
  for (auto it = changes.rbegin(); it != changes.rend(); ++it) {
    switch (it->kind) {
      case core::Change::Kind::kTaskUpsert:
        ++task_changes;
        if (seen.insert(it->task.id).second) tasks.push_back(&it->task);
        break;
      case core::Change::Kind::kTaskArray:
        task_changes += static_cast<size_t>(std::max(it->task.spec.array_size, 1));
        break;
      case core::Change::Kind::kQuotaPercent:
      case core::Change::Kind::kTeamUpsert:
        quota = true;
        break;
      default:
        break;
    }
  }
  std::set<std::string> nodes;
  for (const core::Event& e : events) {
    if (!e.node_id.empty()) nodes.insert(e.node_id);
    if (e.kind == core::Event::Kind::kQuotaChanged || e.kind == core::Event::Kind::kTeamChanged) {
      quota = true;
    }
  }
  if (task_changes > options_.max_batch_tasks) {
    items.emplace_back(ResetItem{"one batch changed " + std::to_string(task_changes) + " tasks"});
  } else {
    // Job arrays: every member as it is now.
    for (const core::Change& c : changes) {
      if (c.kind != core::Change::Kind::kTaskArray) continue;
      for (int32_t i = 0; i < std::max(c.task.spec.array_size, 1); ++i) {
        const core::TaskNumber n = c.task.id + static_cast<core::TaskNumber>(i);
        if (!seen.insert(n).second) continue;
        const core::Task* live = core.FindTask(n);
        if (live != nullptr) {
          items.emplace_back(TaskItem{*live, core.ReasonOf(*live), core.ReservedFor(*live)});
        }
      }
    }
    for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {
      const core::Task* live = core.FindTask((*it)->id);
      if (live != nullptr) {
        items.emplace_back(TaskItem{*live, core.ReasonOf(*live), core.ReservedFor(*live)});
      } else {
        items.emplace_back(TaskItem{**it, core::PendingReason::kNone});
      }
    }
  }
  for (const std::string& id : nodes) {
    if (auto node = core.FindNode(id)) items.emplace_back(std::move(*node));
  }
  if (quota) items.emplace_back(QuotaState{core.Quota(), core.online_percent(), core.Teams()});
  if (items.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() + items.size() > options_.max_queued) {
      overflowed_ = true;
      return;
    }
    for (Item& item : items) queue_.push_back(std::move(item));
  }
  cv_.notify_one();
}

void WatchHub::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const bool woken = cv_.wait_for(lock, options_.keepalive,
                                    [this] { return stopping_ || !queue_.empty() || overflowed_; });
    if (stopping_) break;
    if (!woken) {
      lock.unlock();
      SendToAll(": keepalive\n\n");
      lock.lock();
      continue;
    }
    std::deque<Item> batch;
    batch.swap(queue_);
    const bool overflowed = std::exchange(overflowed_, false);
    lock.unlock();
    for (Item& item : batch) Handle(item);
    if (overflowed) {
      Item reset = ResetItem{"events were dropped under load"};
      Handle(reset);
    }
    Flush();
    lock.lock();
    // Let the next events gather for a while (a stop still ends the wait).
    cv_.wait_for(lock, options_.flush_interval, [this] { return stopping_; });
  }
  std::deque<Item> left;
  left.swap(queue_);
  lock.unlock();
  for (Item& item : left) {
    if (auto* join = std::get_if<JoinItem>(&item)) join->sink->Close();
  }
  for (auto& sink : sinks_) sink->Close();
  sinks_.clear();
}

void WatchHub::Handle(Item& item) {
  if (auto* t = std::get_if<TaskItem>(&item)) {
    Publish("task", TaskToJson(t->task, t->reason, {}, t->reserved_for).dump());
  } else if (auto* node = std::get_if<core::NodeView>(&item)) {
    Publish("node", AgentToJson(*node).dump());
  } else if (auto* q = std::get_if<QuotaState>(&item)) {
    Publish("quota", QuotaStateToJson(*q).dump());
  } else if (auto* reset = std::get_if<ResetItem>(&item)) {
    uint64_t seq = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seq = ++seq_;
    }
    Flush();
    // Nothing before a reset can be resumed: a watcher behind it must list again anyway.
    history_.clear();
    floor_ = seq;
    std::string text = "id: " + std::to_string(seq) + "\nevent: reset\ndata: " +
                       json{{"seq", seq}, {"reason", reset->reason}}.dump() + "\n\n";
    SendToAll(std::move(text));
  } else if (auto* join = std::get_if<JoinItem>(&item)) {
    Flush();  // What the others have not been sent yet is in the history it may replay.
    Join(*join);
  } else if (std::holds_alternative<GapItem>(item)) {
    std::lock_guard<std::mutex> lock(mu_);
    floor_ = ++seq_;
    history_.clear();
  }
}

void WatchHub::Publish(const char* type, const std::string& data) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = ++seq_;
  }
  std::string text = "id: " + std::to_string(seq) + "\nevent: " + type + "\ndata: " + data + "\n\n";
  unsent_ += text;
  history_.push_back({seq, std::move(text)});
  while (history_.size() > options_.history) {
    floor_ = history_.front().seq;
    history_.pop_front();
  }
}

std::string WatchHub::ControlFrame(const char* type, const std::string& reason) const {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = seq_;
  }
  json data{{"seq", seq}};
  if (!reason.empty()) data["reason"] = reason;
  return "retry: 2000\nid: " + std::to_string(seq) + "\nevent: " + type + "\ndata: " + data.dump() +
         "\n\n";
}

void WatchHub::Join(JoinItem& join) {
  std::string text;
  if (!join.since) {
    text = ControlFrame("sync", "");
  } else if (*join.since < floor_ || *join.since > last_seq()) {
    text = ControlFrame(
        "reset",
        *join.since < floor_
            ? "the events after " + std::to_string(*join.since) + " are no longer kept"
            : "sequence " + std::to_string(*join.since) + " is not from this scheduler process");
  } else {
    for (const Frame& f : history_) {
      if (f.seq > *join.since) text += f.text;
    }
    text += ControlFrame("sync", "");
  }
  // Without the shared compressor (it could not be made: out of memory) a deflate watcher is
  // refused like one whose first write failed.
  if (join.sink->deflate() && shared_deflate_) text = DeflateCatchUp(text);
  if ((join.sink->deflate() && !shared_deflate_) ||
      !join.sink->Send(std::make_shared<const std::string>(std::move(text)))) {
    join.sink->Close();
    std::lock_guard<std::mutex> lock(mu_);
    --watcher_count_;
    last_watched_ = std::chrono::steady_clock::now();
    return;
  }
  sinks_.push_back(std::move(join.sink));
}

void WatchHub::Flush() {
  if (unsent_.empty()) return;
  SendToAll(std::exchange(unsent_, {}));
}

void WatchHub::SendToAll(std::string text) {
  // Compressed once, for the first watcher that takes deflate, and shared by the others.
  std::shared_ptr<const std::string> packed;
  const auto shared = std::make_shared<const std::string>(std::move(text));
  for (size_t i = 0; i < sinks_.size();) {
    if (sinks_[i]->deflate() && !packed) {
      packed = std::make_shared<const std::string>(DeflateFull(shared_deflate_.get(), *shared));
    }
    if (sinks_[i]->Send(sinks_[i]->deflate() ? packed : shared)) {
      ++i;
    } else {
      Drop(i);
    }
  }
}

void WatchHub::Drop(size_t index) {
  sinks_[index]->Close();
  sinks_[index] = std::move(sinks_.back());
  sinks_.pop_back();
  std::lock_guard<std::mutex> lock(mu_);
  --watcher_count_;
  last_watched_ = std::chrono::steady_clock::now();
}

}  // namespace dgpu::scheduler
