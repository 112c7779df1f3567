// Time: the clock, RFC 3339 timestamps and human-friendly durations.
//
// Timestamps in this project are int64 microseconds since 1970-01-01T00:00:00Z ("micros").
// SystemClock is the one place that reads the operating system's clocks; everything else takes
// a `const Clock&` (or the value it returned) so tests can substitute a FakeClock and never sleep.
//
// Thread-safety: every function here is thread-safe; SystemClock is stateless and FakeClock uses
// atomics, so one instance may be shared by any number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dgpu::common {

class Clock {
 public:
  virtual ~Clock() = default;

  // Wall-clock time in micros since the Unix epoch (UTC). May jump when the system time is set;
  // use it for timestamps shown to people or stored, never to measure an elapsed time.
  virtual int64_t NowMicros() const = 0;

  // Monotonic time in microseconds from an unspecified origin. Never goes backwards; use it for
  // timeouts and elapsed times.
  virtual int64_t MonotonicMicros() const = 0;
};

// The operating system's clocks (CLOCK_REALTIME and CLOCK_MONOTONIC through std::chrono).
class SystemClock final : public Clock {
 public:
  int64_t NowMicros() const override;
  int64_t MonotonicMicros() const override;

  // A process-wide instance; it holds no state, so sharing it is safe.
  static const SystemClock& Instance();
};

// A clock that only moves when told to. Both readings start at `start_micros`.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_micros = 0) : now_(start_micros), monotonic_(start_micros) {}

  int64_t NowMicros() const override { return now_.load(std::memory_order_relaxed); }
  int64_t MonotonicMicros() const override { return monotonic_.load(std::memory_order_relaxed); }

  // Moves both the wall clock and the monotonic clock forward. `delta` must not be negative.
  void Advance(std::chrono::microseconds delta);

  // Sets the wall clock only (it may go backwards, as a real one can); the monotonic reading
  // is unchanged.
  void SetNowMicros(int64_t micros) { now_.store(micros, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
  std::atomic<int64_t> monotonic_;
};

// SystemClock::Instance().NowMicros().
int64_t NowMicros();

// Formats micros as RFC 3339 in UTC with the shortest exact fraction:
//   whole seconds         -> "2026-11-29T19:05:35Z"
//   whole milliseconds    -> "2026-11-29T19:05:35.123Z"
//   anything else         -> "2026-11-29T19:05:35.123456Z"
// so that ParseRfc3339(FormatRfc3339(t)) == t for every t in years 0000..9999.
std::string FormatRfc3339(int64_t micros);

// Formats micros as RFC 3339 in UTC with exactly three fractional digits (truncated), e.g.
// "2026-11-29T19:05:35.000Z". Fixed width: used for log lines.
std::string FormatRfc3339Millis(int64_t micros);

// Parses an RFC 3339 timestamp: "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)". 'T' may
// also be 't' or a space and 'Z' may be 'z'. Digits of the fraction beyond microseconds are
// truncated. A leap second (":60") is read as the first second of the next minute. Returns
// nullopt for anything else, including out-of-range fields such as "2026-02-30".
std::optional<int64_t> ParseRfc3339(std::string_view text);

// ParseRfc3339 as a time point of the system clock.
std::optional<std::chrono::system_clock::time_point> ParseRfc3339TimePoint(std::string_view text);

// Parses a non-negative duration, rounded to the nearest millisecond:
//   - a plain number of seconds, integer or decimal: "5", "1.5", "0.25";
//   - one or more <number><unit> terms with unit ms, s, m, h or d: "500ms", "10s", "5m",
//     "2h", "7d", "1.5h", "1h30m".
// Surrounding whitespace is ignored. Negative values, empty text, unknown units, exponents and
// values above 100 years return nullopt.
std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text);

// Formats a duration with the largest unit that represents it exactly: "7d", "2h", "5m", "10s",
// "1500ms", "0s". Negative durations get a leading '-'. ParseDuration reads the result back.
// For configuration values and logs, where the unit of a setting should stay as written.
std::string FormatDuration(std::chrono::milliseconds duration);

// Formats a duration as a sum of units, largest first, for people: "1m30s", "2h",
// "1d1h1m1s1ms", "300ms", "0s". Negative durations get a leading '-'. ParseDuration reads the
// result back.
std::string FormatCompoundDuration(std::chrono::milliseconds duration);

}  // namespace dgpu::common
