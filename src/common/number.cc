#include "common/number.h"

#include <charconv>
#include <string>
#include <system_error>

namespace dgpu::common {
namespace {

template <typename T>
StatusOr<T> ParseWhole(std::string_view text, std::string_view source) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const std::string quoted = "\"" + std::string(text) + "\"";
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgument(std::string(source) + ": " + quoted + " is out of range");
  }
  if (ec != std::errc() || ptr != end) {
    return InvalidArgument(std::string(source) + ": " + quoted + " is not a whole number");
  }
  return value;
}

}  // namespace

StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view source) {
  return ParseWhole<int64_t>(text, source);
}

StatusOr<uint64_t> ParseUint64(std::string_view text, std::string_view source) {
  return ParseWhole<uint64_t>(text, source);
}

}  // namespace dgpu::common
