// QueuedBidiReactor: a server bidi stream that any thread may write to.
//
// gRPC's callback API allows one write in flight per stream; Send() queues messages and writes
// them one after the other. Close() finishes the stream once. Derived reactors keep themselves
// alive (a shared_ptr to self) until OnDone, and call MarkDone() there. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <deque>
#include <limits>
#include <mutex>

namespace dgpu::scheduler {

template <typename Req, typename Resp>
class QueuedBidiReactor : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  // Queues `msg`; dropped when the stream is finished. A stream with `max_queued` messages
  // waiting is finished with RESOURCE_EXHAUSTED instead (a peer that does not keep up).
  void Send(Resp msg, size_t max_queued = std::numeric_limits<size_t>::max()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (out_.size() >= max_queued) {
      finished_ = true;
      this->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "peer too far behind"));
      return;
    }
    out_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      this->StartWrite(&out_.front());
    }
  }

  // Finishes the stream with `status` unless it already is.
  void Close(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    out_.pop_front();
    if (!ok || finished_ || out_.empty()) {
      writing_ = false;
      return;
    }
    this->StartWrite(&out_.front());
  }

 protected:
  // From OnDone: nothing may be written any more.
  void MarkDone() {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }

 private:
  std::mutex mu_;
  std::deque<Resp> out_;   // GUARDED_BY(mu_) Front is the write in flight, when writing_.
  bool writing_ = false;   // GUARDED_BY(mu_)
  bool finished_ = false;  // GUARDED_BY(mu_)
};

}  // namespace dgpu::scheduler
