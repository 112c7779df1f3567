#include "ctl/format.h"

#include <gtest/gtest.h>

#include "ctl/sse.h"

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

TEST(TableTest, RowsThatFollowLineUpWithTheTablePrinted) {
  Table table({"id", "status", "node"});
  table.AddRow({"task-10", "running", "node-a"});
  const std::vector<size_t> widths = table.Widths();
  EXPECT_EQ(widths, (std::vector<size_t>{7, 7, 6}));
  Table next({"id", "status", "node"});
  next.set_min_widths(widths);
  next.AddRow({"t-2", "ok", "n"});
  EXPECT_EQ(next.Render(false), "t-2      ok       n\n");
  Table longer({"id", "status", "node"});
  longer.set_min_widths(widths);
  longer.AddRow({"task-1000", "x", "y"});  // A longer cell pushes its own line only.
  EXPECT_EQ(longer.Render(false), "task-1000  x        y\n");
}

TEST(SseParserTest, FramesSplitAnywhereComeOutWhole) {
  const std::string stream =
      "retry: 2000\nid: 7\nevent: sync\ndata: {\"seq\":7}\n\n: keepalive\n\n"
      "id: 8\r\nevent: task\r\ndata: {\"a\":1}\r\ndata: {\"b\":2}\r\n\r\n"
      "data:no space\n\nid: x\nevent: reset\ndata: {}\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser parser;
    std::vector<SseEvent> events;
    auto keep = [&](const SseEvent& e) {
      events.push_back(e);
      return true;
    };
    ASSERT_TRUE(parser.Feed(stream.substr(0, cut), keep));
    ASSERT_TRUE(parser.Feed(stream.substr(cut), keep));
    ASSERT_EQ(events.size(), 4U) << cut;
    EXPECT_EQ(events[0].id, 7U);
    EXPECT_EQ(events[0].event, "sync");
    EXPECT_EQ(events[0].data, "{\"seq\":7}");
    EXPECT_EQ(events[1].id, 8U);
    EXPECT_EQ(events[1].data, "{\"a\":1}\n{\"b\":2}");
    EXPECT_EQ(events[2].event, "message");
    EXPECT_EQ(events[2].data, "no space");
    EXPECT_FALSE(events[2].id.has_value());
    EXPECT_FALSE(events[3].id.has_value());  // Not a number.
    EXPECT_EQ(events[3].event, "reset");
  }
}

TEST(SseParserTest, StopsWhenTheCallbackSaysSo) {
  SseParser parser;
  int seen = 0;
  EXPECT_FALSE(parser.Feed("data: 1\n\ndata: 2\n\n", [&](const SseEvent&) {
    ++seen;
    return false;
  }));
  EXPECT_EQ(seen, 1);
}

TEST(TableTest, HeaderOnlyWhenEmpty) {
  Table table({"a", "bb"});
  EXPECT_EQ(table.Render(), "A  BB\n");
}

}  // namespace
}  // namespace dgpu::ctl
