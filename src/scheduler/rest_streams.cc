#include "scheduler/rest_streams.h"

#include <spdlog/spdlog.h>

namespace dgpu::scheduler {

void RestServer::Impl::LogStream::Start(core::TaskNumber task) {
  task_ = task;
  Locate([](LogStream& self) { self.Read(); });
}

void RestServer::Impl::LogStream::Locate(void (*then)(LogStream&)) {
  impl_->d.app->LocateLog(
      caller_, task_, query_.rank, [self = shared_from_this(), then](const Result<LogSource>& r) {
        if (!r.ok()) return self->Fail(r.error());
        if (!self->source_.node_id.empty() && r.value().node_id != self->source_.node_id) {
          self->offset_ = 0;  // Run again on another node: its log there starts anew.
        }
        self->source_ = r.value();
        then(*self);
      });
}

void RestServer::Impl::LogStream::Read() {
  LogRead read{source_.node_id, source_.task_id, offset_, 0, kPieceBytes};
  if (!read_once_ && query_.tail) {
    // The last lines; tail=0: none, only what comes next (the end of the log).
    if (*query_.tail > 0) {
      read.tail_lines = *query_.tail;
    } else {
      read.offset = INT64_MAX / 2;
    }
  }
  impl_->d.app->ReadLog(
      caller_, read, [self = shared_from_this()](const Result<LogPiece>& r) { self->OnPiece(r); });
}

void RestServer::Impl::LogStream::OnPiece(const Result<LogPiece>& r) {
  if (!r.ok()) {
    // A follow of a task that has not ended waits for its agent (reconnecting, or not yet
    // attached when the task was just dispatched).
    if (!query_.follow || source_.finished) return Fail(r.error());
    if (!response_) Begin()->flush();
    return Wait();
  }
  const LogPiece& piece = r.value();
  if (!piece.missing.empty() && source_.finished) {
    return Fail(Error{ErrorCode::kLogUnavailable, "", piece.missing, StatusCode::kNotFound});
  }
  // A task that has not ended but has no log yet (dispatched a moment ago): an empty log.
  if (piece.missing.empty()) read_once_ = true;
  offset_ = piece.offset + static_cast<int64_t>(piece.data.size());
  const bool more = offset_ < piece.size && !piece.data.empty();
  Begin();
  if (!piece.data.empty()) response_->append_chunk(piece.data);
  response_->flush([self = shared_from_this(), more](const restinio::asio_ns::error_code& ec) {
    if (ec) return;  // The client is gone.
    if (more) return self->Read();
    if (!self->query_.follow || self->source_.finished) return self->End();
    self->Wait();
  });
}

RestServer::Impl::LogStream::Response* RestServer::Impl::LogStream::Begin() {
  if (!response_) {
    response_.emplace(impl_->StartResponse<restinio::chunked_output_t>(
        req_, caller_, route_, 200, "text/plain; charset=utf-8", source_.task_id));
    response_->append_header(restinio::http_field::cache_control, "no-cache");
    response_->append_header("X-Accel-Buffering", "no");
    response_->append_header("X-Dgpu-Node", source_.node_id);
  }
  return &*response_;
}

void RestServer::Impl::LogStream::Wait() {
  if (impl_->stopping.load()) return End();
  timer_.expires_after(kPollInterval);
  timer_.async_wait([self = shared_from_this()](const restinio::asio_ns::error_code& ec) {
    if (ec) return;
    if (self->impl_->stopping.load()) return self->End();
    self->Locate([](LogStream& s) { s.Read(); });
  });
}

void RestServer::Impl::LogStream::Fail(const Error& e) {
  if (!response_) return impl_->SendError(req_, caller_, route_, e, core::FormatTaskId(task_));
  spdlog::warn("log of {} from {}: {}; its response ends here", source_.task_id, source_.node_id,
               e.message);
  End();
}

void RestServer::Impl::LogStream::End() { response_->done(); }

}  // namespace dgpu::scheduler
