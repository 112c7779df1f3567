#include "common/number.h"

#include <charconv>
#include <string>
#include <system_error>

namespace dgpu::common {
namespace {

Status Refused(std::string_view text, std::string_view source, std::string_view why) {
  return InvalidArgument(std::string(source) + ": \"" + std::string(text) + "\" " +
                         std::string(why));
}

template <typename T>
StatusOr<T> ParseWhole(std::string_view text, std::string_view source) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) return Refused(text, source, "is out of range");
  if (ec != std::errc() || ptr != end) return Refused(text, source, "is not a whole number");
  return value;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view source) {
  return ParseWhole<int64_t>(text, source);
}

StatusOr<uint64_t> ParseUint64(std::string_view text, std::string_view source) {
  return ParseWhole<uint64_t>(text, source);
}

StatusOr<double> ParseDouble(std::string_view text, std::string_view source) {
  // from_chars also reads "inf", "nan" and "infinity": only a digit or a '.' may start the
  // magnitude.
  const std::string_view magnitude = text.starts_with('-') ? text.substr(1) : text;
  if (magnitude.empty() || !(IsDigit(magnitude[0]) || magnitude[0] == '.')) {
    return Refused(text, source, "is not a number");
  }
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    return Refused(text, source, "is out of range");
  }
  if (ec != std::errc() || ptr != end) return Refused(text, source, "is not a number");
  return value;
}

}  // namespace dgpu::common
