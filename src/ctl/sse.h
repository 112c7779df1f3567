// Server-Sent Events as GET /api/v1/watch writes them (the WHATWG event-stream format): frames
// of "field: value" lines ended by a blank line; comment lines (": keepalive") are skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace dgpu::ctl {

struct SseEvent {
  std::optional<uint64_t> id;  // The frame's id, when it has a numeric one.
  std::string event = "message";
  std::string data;  // Data lines joined with '\n'.
};

// Feeds bytes as they arrive (split anywhere) and calls `on_event` for each complete frame.
class SseParser {
 public:
  // Returns false as soon as `on_event` does (the rest of `bytes` is dropped), else true.
  bool Feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event);

 private:
  std::string line_;  // An unfinished line.
  SseEvent event_;
  bool has_fields_ = false;
  bool has_data_ = false;
};

}  // namespace dgpu::ctl
