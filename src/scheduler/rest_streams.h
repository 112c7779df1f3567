// The REST API's long answers: a watcher's event stream (SseSink, GET /watch) and a task's log,
// read from its agent piece by piece and followed (RestServer::Impl::LogStream, GET
// /tasks/{id}/logs).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <restinio/all.hpp>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/rest_server_impl.h"
#include "scheduler/watch_hub.h"

namespace dgpu::scheduler {

// A watcher's connection (GET /watch): a chunked response that stays open. The hub's thread
// writes to it; RESTinio hands each write to the connection's own executor. A client that reads
// too slowly (more than kMaxBuffered bytes written but not yet sent) is dropped: it resumes with
// `since`, from the hub's history.
class SseSink final : public WatchSink, public std::enable_shared_from_this<SseSink> {
 public:
  using Response = restinio::response_builder_t<restinio::chunked_output_t>;
  static constexpr size_t kMaxBuffered = 8 << 20;

  explicit SseSink(bool deflate) : deflate_(deflate) {}
  bool deflate() const override { return deflate_; }

  // The response, once the watch is admitted: what was sent before waits for it.
  void Begin(Response response) {
    std::lock_guard<std::mutex> lock(mu_);
    response_.emplace(std::move(response));
    if (closed_) {
      response_->done();
      return;
    }
    for (const auto& text : std::exchange(early_, {})) Write(text);
    response_->flush();
  }

  bool Send(const std::shared_ptr<const std::string>& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load() || buffered_.load() > kMaxBuffered) return false;
    if (!response_) {
      early_.push_back(text);
      return true;
    }
    Write(text);
    return true;
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    if (response_) response_->done();
  }

 private:
  void Write(const std::shared_ptr<const std::string>& text) {
    const size_t n = text->size();
    buffered_ += n;
    response_->append_chunk(text);
    response_->flush([self = shared_from_this(), n](const restinio::asio_ns::error_code& ec) {
      self->buffered_ -= n;
      if (ec) self->broken_ = true;
    });
  }

  const bool deflate_;
  std::mutex mu_;  // Begin (an HTTP thread) and the hub's thread.
  std::optional<Response> response_;
  std::vector<std::shared_ptr<const std::string>> early_;
  bool closed_ = false;
  std::atomic<bool> broken_{false};
  std::atomic<size_t> buffered_{0};
};

// GET /tasks/{id}/logs: the log read from its agent piece by piece, each piece written as a
// chunk and the next read once it is sent (a slow reader slows the reads). With follow, the
// end of the log is read again every kLogPollInterval until the task has ended and what it
// wrote last is sent. An error before the first piece is the answer; after it, the response
// ends (or, when following, reads are tried again until the task ends).
class RestServer::Impl::LogStream : public std::enable_shared_from_this<LogStream> {
 public:
  static constexpr int32_t kPieceBytes = 512 << 10;
  static constexpr auto kPollInterval = std::chrono::milliseconds(250);

  LogStream(Impl* impl, req_t req, Caller caller, std::string route, LogQuery query)
      : impl_(impl),
        req_(std::move(req)),
        caller_(std::move(caller)),
        route_(std::move(route)),
        query_(query),
        offset_(query.offset),
        timer_(*impl->io) {}

  void Start(core::TaskNumber task);

 private:
  using Response = restinio::response_builder_t<restinio::chunked_output_t>;

  // Where the log is now; `then` runs with source_ set. A failure is the answer, or ends it.
  void Locate(void (*then)(LogStream&));
  void Read();

  void OnPiece(const Result<LogPiece>& r);

  // The response's status line and headers, once.
  Response* Begin();

  // Reads again after the poll interval, from where the task runs now.
  void Wait();
  void Fail(const Error& e);
  void End();

  Impl* impl_;
  const req_t req_;
  const Caller caller_;
  const std::string route_;
  const LogQuery query_;
  core::TaskNumber task_ = 0;
  // One step at a time (a read, a write, a wait), each started by the one before, so these
  // are never used by two threads at once.
  LogSource source_;
  int64_t offset_;
  bool read_once_ = false;  // A piece of the log came (a tail applies to the first only).
  std::optional<Response> response_;
  restinio::asio_ns::steady_timer timer_;
};

}  // namespace dgpu::scheduler
