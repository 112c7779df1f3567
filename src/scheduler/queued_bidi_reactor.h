// QueuedBidiReactor: a server bidi stream that any thread may write to.
//
// gRPC's callback API allows one write in flight per stream; Send() queues messages and writes
// them one after the other. Close() finishes the stream once. Derived reactors read with Read(),
// handle reads in ReadDone() and keep themselves alive (a shared_ptr to self) until StreamDone(),
// the last callback. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>

#include "base/happens_before.h"

namespace dgpu::scheduler {

template <typename Req, typename Resp>
class QueuedBidiReactor : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  // Queues `msg`; dropped when the stream is finished. A stream with `max_queued` messages
  // waiting is finished with RESOURCE_EXHAUSTED instead (a peer that does not keep up).
  // `written`, if set, is called (on a gRPC thread, without the stream's lock) once gRPC has
  // taken the message for sending; not if the message is dropped or the write fails.
  void Send(Resp msg, size_t max_queued = std::numeric_limits<size_t>::max(),
            std::function<void()> written = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (out_.size() >= max_queued) {
      finished_ = true;
      happens_before::Release(this);
      this->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "peer too far behind"));
      return;
    }
    out_.push_back({std::move(msg), std::move(written)});
    if (!writing_) {
      writing_ = true;
      happens_before::Release(this);
      this->StartWrite(&out_.front().msg);
    }
  }

  // Finishes the stream with `status` unless it already is.
  void Close(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    happens_before::Release(this);
    this->Finish(status);
  }

  // gRPC's callbacks, each ordered after the operation it completes (see happens_before.h).
  void OnReadDone(bool ok) final {
    happens_before::Acquire(this);
    ReadDone(ok);
  }

  void OnWriteDone(bool ok) final {
    happens_before::Acquire(this);
    std::function<void()> written;
    {
      std::lock_guard<std::mutex> lock(mu_);
      written = std::move(out_.front().written);
      out_.pop_front();
      if (!ok || finished_ || out_.empty()) {
        writing_ = false;
      } else {
        happens_before::Release(this);
        this->StartWrite(&out_.front().msg);
      }
    }
    if (ok && written) written();
  }

  void OnDone() final {
    happens_before::Acquire(this);
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;  // Nothing may be written any more.
    }
    StreamDone();
  }

 protected:
  // Starts the next read; its result comes to ReadDone. One read in flight at a time.
  void Read(Req* req) {
    happens_before::Release(this);
    this->StartRead(req);
  }

  virtual void ReadDone(bool ok) = 0;
  // The stream's last callback: every operation has completed. The object may destroy itself.
  virtual void StreamDone() = 0;

 private:
  std::mutex mu_;
  struct Out {
    Resp msg;
    std::function<void()> written;  // May be empty.
  };
  std::deque<Out> out_;    // GUARDED_BY(mu_) Front is the write in flight, when writing_.
  bool writing_ = false;   // GUARDED_BY(mu_)
  bool finished_ = false;  // GUARDED_BY(mu_)
};

}  // namespace dgpu::scheduler
