#include "scheduler/state_file.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "common/time_util.h"
#include "scheduler/api_json.h"
#include "store/snapshot.h"
#include "store/task_codec.h"

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

// `value` as the pretty printer writes it `depth` levels deep (2 spaces each).
std::string Nested(const json& value, int depth) {
  const std::string text = store::DumpJson(value, 2);
  const std::string pad(static_cast<size_t>(2 * depth), ' ');
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += pad;
  }
  return out;
}

// A JSON array written element by element, `depth` levels deep.
class ArrayStream {
 public:
  ArrayStream(common::AtomicFileWriter& out, int depth)
      : out_(out), pad_(static_cast<size_t>(2 * depth), ' ') {}
  void Add(const json& element) {
    out_.Write(empty_ ? "[\n" : ",\n");
    empty_ = false;
    out_.Write(pad_);
    out_.Write("  ");
    out_.Write(Nested(element, static_cast<int>(pad_.size() / 2) + 1));
  }
  void Close() {
    if (empty_) {
      out_.Write("[]");
      return;
    }
    out_.Write("\n");
    out_.Write(pad_);
    out_.Write("]");
  }

 private:
  common::AtomicFileWriter& out_;
  const std::string pad_;
  bool empty_ = true;
};

json NodesToJson(const std::vector<core::NodeView>& nodes) {
  json out = json::array();
  for (const auto& n : nodes) {
    out.push_back({{"id", n.id},
                   {"address", n.address},
                   {"status", core::NodeStateName(n.online, n.mode)},
                   {"gpus", n.gpu_count},
                   {"free_gpus", n.free_gpus}});
  }
  return out;
}

Status WriteQueues(store::ReadSnapshot& snapshot, common::AtomicFileWriter& out) {
  out.Write("{\n");
  for (auto p : {core::Priority::kHigh, core::Priority::kLow}) {
    out.Write("    \"" + std::string(core::ToString(p)) + "\": ");
    ArrayStream ids(out, 2);
    Status s =
        snapshot.ForEachQueued(p, [&](core::TaskNumber id) { ids.Add(core::FormatTaskId(id)); });
    if (!s.ok()) return s;
    ids.Close();
    out.Write(p == core::Priority::kHigh ? ",\n" : "\n");
  }
  out.Write("  }");
  return OkStatus();
}

Status WriteTasks(const StateHeader& header, store::ReadSnapshot& snapshot,
                  common::AtomicFileWriter& out) {
  ArrayStream tasks(out, 1);
  Status s = snapshot.ForEachUnfinished([&](const core::Task& t) {
    core::PendingReason reason = core::PendingReason::kNone;
    if (t.status == core::TaskStatus::kPending) {
      auto head = header.head_reasons.find(t.id);
      reason = head != header.head_reasons.end() ? head->second : core::PendingReason::kQueued;
    }
    tasks.Add(TaskToJson(t, reason));
  });
  if (!s.ok()) return s;
  tasks.Close();
  return OkStatus();
}

Status WriteFromSnapshot(const std::string& dir, const StateHeader& header,
                         store::ReadSnapshot& snapshot) {
  StatusOr<std::unique_ptr<common::AtomicFileWriter>> file = store::OpenStateFile(dir);
  if (!file.ok()) return file.status();
  common::AtomicFileWriter& out = **file;
  out.Write("{\n  \"epoch\": " + json(header.epoch).dump());
  // The tasks come from the store's snapshot, opened after the header was taken: tasks stored
  // in between are in the file, so the number comes from that snapshot too (never lower).
  const core::TaskNumber next = std::max(header.next_task_number, snapshot.meta().next_task_number);
  out.Write(",\n  \"next_task_number\": " + json(next).dump());
  out.Write(",\n  \"nodes\": " + Nested(NodesToJson(header.nodes), 1));
  out.Write(",\n  \"online_percent\": " + json(header.online_percent).dump());
  out.Write(",\n  \"queues\": ");
  if (Status s = WriteQueues(snapshot, out); !s.ok()) return s;
  out.Write(",\n  \"quota\": " + Nested(QuotaToJson(header.quota), 1));
  out.Write(",\n  \"tasks\": ");
  if (Status s = WriteTasks(header, snapshot, out); !s.ok()) return s;
  out.Write(",\n  \"written_at\": " + json(common::FormatRfc3339(header.written_at)).dump());
  out.Write("\n}\n");
  return out.Commit();
}

}  // namespace

StateHeader TakeStateHeader(const core::SchedulerCore& core, uint64_t epoch, core::TimeMicros now) {
  StateHeader h;
  h.written_at = now;
  h.epoch = epoch;
  h.online_percent = core.online_percent();
  h.next_task_number = core.next_task_number();
  h.quota = core.Quota();
  h.nodes = core.Nodes();
  std::vector<core::SchedulerCore::QueueHead> heads;
  core.QueueHeads(heads);
  for (const auto& head : heads) h.head_reasons.emplace(head.task, head.reason);
  return h;
}

Status WriteStateFile(const std::string& dir, const StateHeader& header, store::Database& db,
                      const std::atomic<int64_t>* deadline) {
  const auto expired = [deadline] {
    if (deadline == nullptr) return false;
    const int64_t at = deadline->load(std::memory_order_relaxed);
    return at != 0 && common::SystemClock::Instance().MonotonicMicros() >= at;
  };
  if (expired()) return Status(StatusCode::kDeadlineExceeded, "state.json: no time left");
  StatusOr<std::unique_ptr<store::ReadSnapshot>> snapshot = db.OpenReadSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  (*snapshot)->InterruptWhen(expired);
  Status written = WriteFromSnapshot(dir, header, **snapshot);
  if (!written.ok() && expired()) {
    return Status(StatusCode::kDeadlineExceeded, "state.json: stopped, no time left");
  }
  return written;
}

StateFileWriter::Requested StateFileWriter::Request(StateHeader header, int64_t now) {
  if (now < rest_until_.load()) return Requested::kResting;
  if (writing_.exchange(true)) return Requested::kBusy;
  worker_->Post([this, header = std::move(header)] {
    const common::Clock& clock = common::SystemClock::Instance();
    const int64_t start = clock.MonotonicMicros();
    Status s = WriteStateFile(dir_, header, *db_, &deadline_);
    const int64_t end = clock.MonotonicMicros();
    if (s.code() == StatusCode::kDeadlineExceeded) {
      spdlog::info("state snapshot abandoned: shutting down");
    } else if (!s.ok()) {
      spdlog::warn("state snapshot failed: {}", s.message());
    }
    rest_until_.store(end + (end - start));
    writing_.store(false);
    if (s.ok()) last_write_micros_.store(end - start);  // Last: what the write left is set.
  });
  return Requested::kStarted;
}

}  // namespace dgpu::scheduler
