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

StatusOr<int64_t> ParseByteSize(std::string_view text, std::string_view source) {
  size_t digits = 0;
  while (digits < text.size() && IsDigit(text[digits])) ++digits;
  if (digits == 0)
    return Refused(text, source,
                   "is not a size (a whole number of bytes, or with a unit such as 512MiB or 1G)");
  std::string_view unit = text.substr(digits);
  if (unit.ends_with('B')) unit.remove_suffix(1);
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"", 1},
      {"k", 1000},
      {"K", 1000},
      {"M", 1000 * 1000},
      {"G", int64_t{1000} * 1000 * 1000},
      {"T", int64_t{1000} * 1000 * 1000 * 1000},
      {"Ki", int64_t{1} << 10},
      {"Mi", int64_t{1} << 20},
      {"Gi", int64_t{1} << 30},
      {"Ti", int64_t{1} << 40},
  };
  int64_t scale = 0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (scale == 0) {
    return Refused(text, source,
                   "has an unknown unit (use B, k, M, G, T or Ki, Mi, Gi, Ti, e.g. 512MiB)");
  }
  StatusOr<int64_t> n = ParseWhole<int64_t>(text.substr(0, digits), source);
  if (!n.ok()) return Refused(text, source, "is out of range");
  constexpr int64_t kMax = int64_t{1} << 62;
  if (*n > kMax / scale) return Refused(text, source, "is out of range");
  return *n * scale;
}

}  // namespace dgpu::common
