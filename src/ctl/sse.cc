#include "ctl/sse.h"

#include <charconv>
#include <utility>

namespace dgpu::ctl {

bool SseParser::Feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event) {
  for (char c : bytes) {
    if (c != '\n') {
      line_ += c;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    const std::string line = std::exchange(line_, {});
    if (line.empty()) {
      if (!has_fields_) continue;
      const SseEvent event = std::exchange(event_, {});
      has_fields_ = false;
      has_data_ = false;
      if (!on_event(event)) return false;
      continue;
    }
    if (line.front() == ':') continue;  // A comment.
    const size_t colon = line.find(':');
    const std::string field = line.substr(0, colon);
    std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (field == "id") {
      uint64_t id = 0;
      const char* end = value.data() + value.size();
      auto [ptr, ec] = std::from_chars(value.data(), end, id);
      event_.id = ec == std::errc() && ptr == end ? std::optional<uint64_t>(id) : std::nullopt;
    } else if (field == "event") {
      event_.event = value;
    } else if (field == "data") {
      if (has_data_) event_.data += '\n';
      event_.data += value;
      has_data_ = true;
    } else {
      continue;  // retry and unknown fields.
    }
    has_fields_ = true;
  }
  return true;
}

}  // namespace dgpu::ctl
