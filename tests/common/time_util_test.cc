#include "common/time_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

namespace dgpu::common {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kExample = 1795979135 * kSecond;  // 2026-11-29T19:05:35Z

TEST(FormatRfc3339Test, PrintsShortestExactFraction) {
  struct Case {
    int64_t micros;
    const char* expected;
  };
  const Case cases[] = {
      {0, "1970-01-01T00:00:00Z"},
      {kExample, "2026-11-29T19:05:35Z"},
      {kExample + 123'000, "2026-11-29T19:05:35.123Z"},
      {kExample + 1'000, "2026-11-29T19:05:35.001Z"},
      {kExample + 123'456, "2026-11-29T19:05:35.123456Z"},
      {kExample + 1, "2026-11-29T19:05:35.000001Z"},
      {1709251199 * kSecond, "2024-02-29T23:59:59Z"},
      {-1, "1969-12-31T23:59:59.999999Z"},
      {-1 * kSecond, "1969-12-31T23:59:59Z"},
      {-62135596800 * kSecond, "0001-01-01T00:00:00Z"},
      {253402300799 * kSecond + 999'999, "9999-12-31T23:59:59.999999Z"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FormatRfc3339(c.micros), c.expected) << c.micros;
  }
}

TEST(FormatRfc3339Test, MillisVariantIsFixedWidthAndTruncates) {
  EXPECT_EQ(FormatRfc3339Millis(kExample), "2026-11-29T19:05:35.000Z");
  EXPECT_EQ(FormatRfc3339Millis(kExample + 123'999), "2026-11-29T19:05:35.123Z");
  EXPECT_EQ(FormatRfc3339Millis(-1), "1969-12-31T23:59:59.999Z");
}

TEST(ParseRfc3339Test, ParsesValidForms) {
  struct Case {
    const char* text;
    int64_t expected;
  };
  const Case cases[] = {
      {"2026-11-29T19:05:35Z", kExample},
      {"2026-11-29t19:05:35z", kExample},
      {"2026-11-29 19:05:35Z", kExample},
      {"2026-11-29T19:05:35.123Z", kExample + 123'000},
      {"2026-11-29T19:05:35.1Z", kExample + 100'000},
      {"2026-11-29T19:05:35.123456789Z", kExample + 123'456},
      {"2026-11-29T21:05:35+02:00", kExample},
      {"2026-11-29T13:35:35-05:30", kExample},
      {"1969-12-31T23:59:59.999999Z", -1},
      {"2016-12-31T23:59:60Z", 1483228800 * kSecond},  // leap second: next second
      {"2000-03-01T00:00:00Z", 951868800 * kSecond},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseRfc3339(c.text), std::optional<int64_t>(c.expected)) << c.text;
  }
}

TEST(ParseRfc3339Test, RejectsMalformedAndOutOfRange) {
  const char* cases[] = {
      "",
      "2026-11-29",
      "2026-11-29T19:05:35",        // no offset
      "2026-11-29T19:05:35.Z",      // empty fraction
      "2026-11-29T19:05Z",          // no seconds
      "2026-13-01T00:00:00Z",       // month
      "2026-02-29T00:00:00Z",       // not a leap year
      "2026-04-31T00:00:00Z",       // day
      "2026-11-29T24:00:00Z",       // hour
      "2026-11-29T19:60:00Z",       // minute
      "2026-11-29T19:05:61Z",       // second
      "2026-11-29T19:05:35+24:00",  // offset
      "2026-11-29T19:05:35+0200",   // offset without colon
      "2026-11-29T19:05:35Zjunk",
      " 2026-11-29T19:05:35Z",
      "26-11-29T19:05:35Z",
      "2026/11/29T19:05:35Z",
  };
  for (const char* text : cases) {
    EXPECT_EQ(ParseRfc3339(text), std::nullopt) << text;
  }
}

TEST(ParseRfc3339Test, RoundTripsFormat) {
  const int64_t samples[] = {0,
                             1,
                             -1,
                             kExample,
                             kExample + 123'000,
                             kExample + 654'321,
                             951868800 * kSecond - 1,
                             -62135596800 * kSecond,
                             253402300799 * kSecond + 999'999};
  for (int64_t micros : samples) {
    EXPECT_EQ(ParseRfc3339(FormatRfc3339(micros)), std::optional<int64_t>(micros)) << micros;
  }
}

TEST(ParseDurationTest, AcceptsNumbersAndUnits) {
  struct Case {
    const char* text;
    int64_t expected_ms;
  };
  const Case cases[] = {
      {"2", 2'000},       {"1.5", 1'500},      {"0.25", 250},       {".5", 500},
      {"0", 0},           {"500ms", 500},      {"10s", 10'000},     {"5m", 300'000},
      {"2h", 7'200'000},  {"7d", 604'800'000}, {"1.5h", 5'400'000}, {"1h30m", 5'400'000},
      {"1m30s", 90'000},  {" 10s ", 10'000},   {"0.0004", 0},       {"0.0006", 1},
      {"1s500ms", 1'500},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseDuration(c.text), std::optional<milliseconds>(c.expected_ms)) << c.text;
  }
}

TEST(ParseDurationTest, RejectsInvalid) {
  const char* cases[] = {"",     " ",     "-1", "-5s", "+5", "abc", "5x", "s", "10 s", "1e3",
                         "5s10",  // a bare number only on its own
                         "1..5", "36601d"};
  for (const char* text : cases) {
    EXPECT_EQ(ParseDuration(text), std::nullopt) << text;
  }
}

TEST(FormatDurationTest, UsesLargestExactUnitAndRoundTrips) {
  EXPECT_EQ(FormatDuration(milliseconds{0}), "0s");
  EXPECT_EQ(FormatDuration(milliseconds{500}), "500ms");
  EXPECT_EQ(FormatDuration(milliseconds{1'500}), "1500ms");
  EXPECT_EQ(FormatDuration(milliseconds{2'000}), "2s");
  EXPECT_EQ(FormatDuration(milliseconds{90'000}), "90s");
  EXPECT_EQ(FormatDuration(milliseconds{300'000}), "5m");
  EXPECT_EQ(FormatDuration(milliseconds{7'200'000}), "2h");
  EXPECT_EQ(FormatDuration(milliseconds{604'800'000}), "7d");
  EXPECT_EQ(FormatDuration(milliseconds{-2'000}), "-2s");
  for (int64_t ms : {1, 999, 1'000, 61'000, 3'600'000, 86'400'000}) {
    EXPECT_EQ(ParseDuration(FormatDuration(milliseconds{ms})), milliseconds{ms});
  }
}

// The forms dgpuctl's --timeout and --request-timeout accept.
TEST(ParseDurationTest, AcceptsWhatDgpuctlAccepts) {
  EXPECT_EQ(ParseDuration("30"), milliseconds(30'000));
  EXPECT_EQ(ParseDuration("1.5"), milliseconds(1'500));
  EXPECT_EQ(ParseDuration("5."), milliseconds(5'000));
  EXPECT_EQ(ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(ParseDuration("30s"), milliseconds(30'000));
  EXPECT_EQ(ParseDuration("1d"), milliseconds(86'400'000));
  EXPECT_EQ(ParseDuration("0.5m"), milliseconds(30'000));
  EXPECT_EQ(ParseDuration("36600d"), milliseconds(3'162'240'000'000));
}

TEST(ParseDurationTest, RejectsWhatDgpuctlRejects) {
  for (const char* text :
       {"", "-1", "5x", "m", "1.2.3", "1 s", "s5", "5m3", "1e3", "99999999999999999999999h", "5min",
        "1h30", "inf", "nan", "0x10", "1e400"}) {
    EXPECT_EQ(ParseDuration(text), std::nullopt) << text;
  }
}

TEST(FormatCompoundDurationTest, SumsUnitsLargestFirstAndRoundTrips) {
  EXPECT_EQ(FormatCompoundDuration(milliseconds(0)), "0s");
  EXPECT_EQ(FormatCompoundDuration(milliseconds(300)), "300ms");
  EXPECT_EQ(FormatCompoundDuration(milliseconds(1'500)), "1s500ms");
  EXPECT_EQ(FormatCompoundDuration(milliseconds(90'000)), "1m30s");
  EXPECT_EQ(FormatCompoundDuration(milliseconds(7'200'000)), "2h");
  EXPECT_EQ(FormatCompoundDuration(milliseconds(90'061'001)), "1d1h1m1s1ms");
  EXPECT_EQ(FormatCompoundDuration(milliseconds(-90'000)), "-1m30s");
  for (int64_t ms : {1, 999, 1'001, 61'000, 3'600'001, 90'061'001, 604'800'000}) {
    EXPECT_EQ(ParseDuration(FormatCompoundDuration(milliseconds{ms})), milliseconds{ms}) << ms;
  }
}

TEST(ParseRfc3339TimePointTest, ParsesUtcOffsetsAndFractions) {
  using std::chrono::sys_days;
  using namespace std::chrono_literals;
  const auto base = sys_days(std::chrono::year(2024) / 5 / 1) + 10h;
  EXPECT_EQ(ParseRfc3339TimePoint("2024-05-01T10:00:00Z"), base);
  EXPECT_EQ(ParseRfc3339TimePoint("2024-05-01t10:00:00z"), base);
  EXPECT_EQ(ParseRfc3339TimePoint("2024-05-01T12:00:00+02:00"), base);
  EXPECT_EQ(ParseRfc3339TimePoint("2024-05-01T09:30:00-00:30"), base);
  EXPECT_EQ(ParseRfc3339TimePoint("2024-05-01T10:00:00.250Z"), base + 250ms);
  EXPECT_EQ(ParseRfc3339TimePoint("2024-05-01T10:00:00.123456789Z"), base + 123'456us);
}

TEST(ParseRfc3339TimePointTest, RejectsInvalidTimes) {
  for (const char* text : {"", "2024-05-01", "2024-05-01T10:00:00", "2024-13-01T10:00:00Z",
                           "2024-02-30T10:00:00Z", "2024-05-01T24:00:00Z", "2024-05-01T10:00Z",
                           "2024-05-01T10:00:00.Z", "2024-05-01T10:00:00Zjunk"}) {
    EXPECT_EQ(ParseRfc3339TimePoint(text), std::nullopt) << text;
  }
}

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  FakeClock clock(kExample);
  EXPECT_EQ(clock.NowMicros(), kExample);
  EXPECT_EQ(clock.MonotonicMicros(), kExample);
  clock.Advance(std::chrono::seconds{3});
  EXPECT_EQ(clock.NowMicros(), kExample + 3 * kSecond);
  EXPECT_EQ(clock.MonotonicMicros(), kExample + 3 * kSecond);
  clock.SetNowMicros(0);  // a wall-clock jump backwards leaves the monotonic clock alone
  EXPECT_EQ(clock.NowMicros(), 0);
  EXPECT_EQ(clock.MonotonicMicros(), kExample + 3 * kSecond);
}

TEST(ClockTest, SystemClockIsCloseToNowAndMonotonic) {
  const Clock& clock = SystemClock::Instance();
  const int64_t now = clock.NowMicros();
  EXPECT_GT(now, 1'700'000'000 * kSecond);  // after November 2023
  EXPECT_LE(now, NowMicros());
  const int64_t first = clock.MonotonicMicros();
  EXPECT_LE(first, clock.MonotonicMicros());
}

}  // namespace
}  // namespace dgpu::common
