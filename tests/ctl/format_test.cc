#include "ctl/format.h"

#include <gtest/gtest.h>

namespace dgpu::ctl {
namespace {

using std::chrono::milliseconds;

TEST(ParseDurationTest, AcceptsSecondsAndUnits) {
  EXPECT_EQ(ParseDuration("30"), milliseconds(30'000));
  EXPECT_EQ(ParseDuration("1.5"), milliseconds(1'500));
  EXPECT_EQ(ParseDuration("0"), milliseconds(0));
  EXPECT_EQ(ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(ParseDuration("30s"), milliseconds(30'000));
  EXPECT_EQ(ParseDuration("5m"), milliseconds(300'000));
  EXPECT_EQ(ParseDuration("2h"), milliseconds(7'200'000));
  EXPECT_EQ(ParseDuration("1d"), milliseconds(86'400'000));
  EXPECT_EQ(ParseDuration("1h30m"), milliseconds(5'400'000));
  EXPECT_EQ(ParseDuration("0.5m"), milliseconds(30'000));
}

TEST(ParseDurationTest, RejectsGarbage) {
  for (const char* text :
       {"", "-1", "5x", "m", "1.2.3", "1 s", "s5", "5m3", "1e3", "99999999999999999999999h"}) {
    EXPECT_EQ(ParseDuration(text), std::nullopt) << text;
  }
}

TEST(FormatAgeTest, PicksOneUnit) {
  using std::chrono::seconds;
  EXPECT_EQ(FormatAge(seconds(-5)), "0s");
  EXPECT_EQ(FormatAge(seconds(0)), "0s");
  EXPECT_EQ(FormatAge(seconds(119)), "119s");
  EXPECT_EQ(FormatAge(seconds(120)), "2m");
  EXPECT_EQ(FormatAge(seconds(7199)), "119m");
  EXPECT_EQ(FormatAge(seconds(7200)), "2h");
  EXPECT_EQ(FormatAge(seconds(47 * 3600)), "47h");
  EXPECT_EQ(FormatAge(seconds(48 * 3600)), "2d");
  EXPECT_EQ(FormatAge(seconds(800LL * 86400)), "2y");
}

TEST(FormatDurationTest, IsExactAndShort) {
  EXPECT_EQ(FormatDuration(milliseconds(0)), "0s");
  EXPECT_EQ(FormatDuration(milliseconds(300)), "300ms");
  EXPECT_EQ(FormatDuration(milliseconds(90'000)), "1m30s");
  EXPECT_EQ(FormatDuration(milliseconds(7'200'000)), "2h");
  EXPECT_EQ(FormatDuration(milliseconds(90'061'001)), "1d1h1m1s1ms");
}

TEST(ParseRfc3339Test, ParsesUtcOffsetsAndFractions) {
  using std::chrono::sys_days;
  using namespace std::chrono_literals;
  auto base = sys_days(std::chrono::year(2024) / 5 / 1) + 10h;
  EXPECT_EQ(ParseRfc3339("2024-05-01T10:00:00Z"), base);
  EXPECT_EQ(ParseRfc3339("2024-05-01t10:00:00z"), base);
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00+02:00"), base);
  EXPECT_EQ(ParseRfc3339("2024-05-01T09:30:00-00:30"), base);
  EXPECT_EQ(ParseRfc3339("2024-05-01T10:00:00.250Z"), base + 250ms);
}

TEST(ParseRfc3339Test, RejectsInvalidTimes) {
  for (const char* text : {"", "2024-05-01", "2024-05-01T10:00:00", "2024-13-01T10:00:00Z",
                           "2024-02-30T10:00:00Z", "2024-05-01T24:00:00Z", "2024-05-01T10:00Z",
                           "2024-05-01T10:00:00.Z", "2024-05-01T10:00:00Zjunk"}) {
    EXPECT_EQ(ParseRfc3339(text), std::nullopt) << text;
  }
}

TEST(ShellQuoteTest, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(ShellQuote("python"), "python");
  EXPECT_EQ(ShellQuote("--lr=0.1"), "--lr=0.1");
  EXPECT_EQ(ShellQuote("/data/x,y:z@1%"), "/data/x,y:z@1%");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("a;b|c&d>e"), "'a;b|c&d>e'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("*"), "'*'");
}

TEST(JoinCommandTest, JoinsQuotedWordsButKeepsASingleWordVerbatim) {
  EXPECT_EQ(JoinCommand({"python", "train.py", "--name", "my run", "it's"}),
            "python train.py --name 'my run' 'it'\\''s'");
  EXPECT_EQ(JoinCommand({"echo hi | tee out.txt"}), "echo hi | tee out.txt");
  EXPECT_EQ(JoinCommand({"sh", "-c", "echo $X"}), "sh -c 'echo $X'");
  EXPECT_EQ(JoinCommand({}), "");
}

TEST(UrlEncodeTest, KeepsUnreservedOnly) {
  EXPECT_EQ(UrlEncode("task-1_a.b~"), "task-1_a.b~");
  EXPECT_EQ(UrlEncode("a b/c?d&e"), "a%20b%2Fc%3Fd%26e");
}

TEST(TableTest, AlignsColumnsWithTwoSpaces) {
  Table table({"id", "status", "node"});
  table.AddRow({"task-10", "running", "node-a"});
  table.AddRow({"t", "ok"});
  EXPECT_EQ(table.Render(),
            "ID       STATUS   NODE\n"
            "task-10  running  node-a\n"
            "t        ok\n");
  EXPECT_EQ(table.Render(false),
            "task-10  running  node-a\n"
            "t        ok\n");
  EXPECT_EQ(table.size(), 2u);
}

TEST(TableTest, HeaderOnlyWhenEmpty) {
  Table table({"a", "bb"});
  EXPECT_EQ(table.Render(), "A  BB\n");
}

}  // namespace
}  // namespace dgpu::ctl
