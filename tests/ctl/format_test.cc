#include "ctl/format.h"

#include <gtest/gtest.h>

namespace dgpu::ctl {
namespace {

using std::chrono::milliseconds;

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
