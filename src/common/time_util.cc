#include "common/time_util.h"

#include <cassert>
#include <cmath>
#include <cstdio>

#include "common/number.h"

namespace dgpu::common {
namespace {

using std::chrono::days;
using std::chrono::microseconds;

constexpr int64_t kMicrosPerSecond = 1'000'000;
constexpr int64_t kMicrosPerMilli = 1'000;
constexpr double kMaxDurationMillis = 100.0 * 366 * 24 * 3600 * 1000;  // about 100 years

struct CivilTime {
  int year;
  unsigned month;
  unsigned day;
  int64_t hour;
  int64_t minute;
  int64_t second;
  int64_t micros;  // within the second, [0, 1e6)
};

CivilTime ToCivil(int64_t micros) {
  const std::chrono::sys_time<microseconds> tp{microseconds{micros}};
  const auto day = std::chrono::floor<days>(tp);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss<microseconds> hms{tp - day};
  return CivilTime{static_cast<int>(ymd.year()),
                   static_cast<unsigned>(ymd.month()),
                   static_cast<unsigned>(ymd.day()),
                   hms.hours().count(),
                   hms.minutes().count(),
                   hms.seconds().count(),
                   hms.subseconds().count()};
}

// Formats "YYYY-MM-DDTHH:MM:SS" followed by `fraction` (e.g. ".123") and 'Z'.
std::string FormatWithFraction(const CivilTime& t, const char* fraction) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02lld:%02lld:%02lld%sZ", t.year, t.month, t.day,
                static_cast<long long>(t.hour), static_cast<long long>(t.minute),
                static_cast<long long>(t.second), fraction);
  return buf;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Reads exactly `width` decimal digits at text[*pos], advancing *pos.
bool ReadFixedDigits(std::string_view text, size_t* pos, int width, int* out) {
  if (*pos + width > text.size()) return false;
  int value = 0;
  for (int i = 0; i < width; ++i) {
    const char c = text[*pos + i];
    if (!IsDigit(c)) return false;
    value = value * 10 + (c - '0');
  }
  *pos += width;
  *out = value;
  return true;
}

bool Expect(std::string_view text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Reads "digits[.digits]" at text[*pos] into *value, advancing *pos. At least one digit overall
// is required.
bool ReadDecimal(std::string_view text, size_t* pos, double* value) {
  size_t end = *pos;
  bool digits = false;
  bool dot = false;
  for (; end < text.size(); ++end) {
    if (IsDigit(text[end])) {
      digits = true;
    } else if (text[end] == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return false;
  StatusOr<double> parsed = ParseDouble(text.substr(*pos, end - *pos), "duration");
  if (!parsed.ok()) return false;
  *value = *parsed;
  *pos = end;
  return true;
}

}  // namespace

int64_t SystemClock::NowMicros() const {
  return std::chrono::duration_cast<microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SystemClock::MonotonicMicros() const {
  return std::chrono::duration_cast<microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const SystemClock& SystemClock::Instance() {
  static const SystemClock clock;
  return clock;
}

void FakeClock::Advance(std::chrono::microseconds delta) {
  assert(delta.count() >= 0);
  now_.fetch_add(delta.count(), std::memory_order_relaxed);
  monotonic_.fetch_add(delta.count(), std::memory_order_relaxed);
}

int64_t NowMicros() { return SystemClock::Instance().NowMicros(); }

std::string FormatRfc3339(int64_t micros) {
  const CivilTime t = ToCivil(micros);
  char fraction[32] = "";
  if (t.micros % kMicrosPerMilli == 0) {
    if (t.micros != 0) {
      std::snprintf(fraction, sizeof(fraction), ".%03lld",
                    static_cast<long long>(t.micros / kMicrosPerMilli));
    }
  } else {
    std::snprintf(fraction, sizeof(fraction), ".%06lld", static_cast<long long>(t.micros));
  }
  return FormatWithFraction(t, fraction);
}

std::string FormatRfc3339Millis(int64_t micros) {
  const CivilTime t = ToCivil(micros);
  char fraction[32];
  std::snprintf(fraction, sizeof(fraction), ".%03lld",
                static_cast<long long>(t.micros / kMicrosPerMilli));
  return FormatWithFraction(t, fraction);
}

std::optional<int64_t> ParseRfc3339(std::string_view text) {
  size_t pos = 0;
  int year, month, day, hour, minute, second;
  if (!ReadFixedDigits(text, &pos, 4, &year) || !Expect(text, &pos, '-') ||
      !ReadFixedDigits(text, &pos, 2, &month) || !Expect(text, &pos, '-') ||
      !ReadFixedDigits(text, &pos, 2, &day)) {
    return std::nullopt;
  }
  if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ')) {
    return std::nullopt;
  }
  ++pos;
  if (!ReadFixedDigits(text, &pos, 2, &hour) || !Expect(text, &pos, ':') ||
      !ReadFixedDigits(text, &pos, 2, &minute) || !Expect(text, &pos, ':') ||
      !ReadFixedDigits(text, &pos, 2, &second)) {
    return std::nullopt;
  }
  if (hour > 23 || minute > 59 || second > 60) return std::nullopt;

  int64_t fraction_micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && IsDigit(text[pos])) {
      if (digits < 6) fraction_micros = fraction_micros * 10 + (text[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return std::nullopt;
    for (int i = digits; i < 6; ++i) fraction_micros *= 10;
  }

  int64_t offset_seconds = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '+' ? 1 : -1;
    ++pos;
    int offset_hours, offset_minutes;
    if (!ReadFixedDigits(text, &pos, 2, &offset_hours) || !Expect(text, &pos, ':') ||
        !ReadFixedDigits(text, &pos, 2, &offset_minutes) || offset_hours > 23 ||
        offset_minutes > 59) {
      return std::nullopt;
    }
    offset_seconds = int64_t{sign} * (int64_t{offset_hours} * 3600 + int64_t{offset_minutes} * 60);
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;

  const std::chrono::year_month_day ymd{std::chrono::year{year},
                                        std::chrono::month{static_cast<unsigned>(month)},
                                        std::chrono::day{static_cast<unsigned>(day)}};
  if (!ymd.ok()) return std::nullopt;
  const int64_t days_since_epoch = std::chrono::sys_days{ymd}.time_since_epoch().count();
  const int64_t seconds = days_since_epoch * 86400 + int64_t{hour} * 3600 + int64_t{minute} * 60 +
                          second - offset_seconds;
  return seconds * kMicrosPerSecond + fraction_micros;
}

std::optional<std::chrono::system_clock::time_point> ParseRfc3339TimePoint(std::string_view text) {
  const std::optional<int64_t> micros = ParseRfc3339(text);
  if (!micros) return std::nullopt;
  return std::chrono::system_clock::time_point(microseconds{*micros});
}

std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return std::nullopt;

  size_t pos = 0;
  double total_millis = 0;
  bool first = true;
  while (pos < text.size() || first) {
    double value;
    if (!ReadDecimal(text, &pos, &value)) return std::nullopt;
    double unit_millis;
    if (pos == text.size() && first) {
      unit_millis = 1000;  // a bare number is seconds
    } else if (text.substr(pos, 2) == "ms") {
      unit_millis = 1;
      pos += 2;
    } else if (pos < text.size()) {
      switch (text[pos]) {
        case 's':
          unit_millis = 1000;
          break;
        case 'm':
          unit_millis = 60.0 * 1000;
          break;
        case 'h':
          unit_millis = 3600.0 * 1000;
          break;
        case 'd':
          unit_millis = 86400.0 * 1000;
          break;
        default:
          return std::nullopt;
      }
      ++pos;
    } else {
      return std::nullopt;
    }
    total_millis += value * unit_millis;
    if (!(total_millis <= kMaxDurationMillis)) return std::nullopt;
    first = false;
  }
  return std::chrono::milliseconds{std::llround(total_millis)};
}

std::string FormatDuration(std::chrono::milliseconds duration) {
  int64_t ms = duration.count();
  if (ms < 0) return "-" + FormatDuration(std::chrono::milliseconds{-ms});
  if (ms == 0) return "0s";
  struct Unit {
    int64_t millis;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {
      {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1'000, "s"}};
  for (const Unit& unit : kUnits) {
    if (ms % unit.millis == 0) return std::to_string(ms / unit.millis) + unit.suffix;
  }
  return std::to_string(ms) + "ms";
}

std::string FormatCompoundDuration(std::chrono::milliseconds duration) {
  int64_t ms = duration.count();
  if (ms < 0) return "-" + FormatCompoundDuration(std::chrono::milliseconds{-ms});
  if (ms == 0) return "0s";
  struct Unit {
    int64_t millis;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {
      {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1'000, "s"}, {1, "ms"}};
  std::string text;
  for (const Unit& unit : kUnits) {
    if (ms >= unit.millis) {
      text += std::to_string(ms / unit.millis) + unit.suffix;
      ms %= unit.millis;
    }
  }
  return text;
}

}  // namespace dgpu::common
