#include "sim/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace dgpu::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

StatusOr<Trace> Parse(const std::string& text, std::optional<TraceFormat> format = std::nullopt) {
  std::istringstream in(text);
  return ParseTrace(in, "t.csv", format);
}

TEST(ParseUtcTimestampTest, ConvertsCalendarTimeAsUtc) {
  EXPECT_EQ(ParseUtcTimestamp("2017-10-09 07:01:55"), 1507532515);
  EXPECT_EQ(ParseUtcTimestamp("2000-02-29 00:00:00"), 951782400);
  EXPECT_EQ(ParseUtcTimestamp("1970-01-01 00:00:00"), 0);
}

TEST(ParseUtcTimestampTest, RejectsMalformedOrImpossibleTimes) {
  for (const char* bad : {"2017-10-09", "2017-13-01 00:00:00", "2017-02-29 00:00:00",
                          "2017-10-09 24:00:00", "2017-10-09 07:01:5x", "17-10-09 07:01:55"}) {
    EXPECT_FALSE(ParseUtcTimestamp(bad).has_value()) << bad;
  }
}

TEST(ParseSecondsTest, AcceptsIntegersAndDecimals) {
  EXPECT_EQ(ParseSeconds("12"), 12'000'000);
  EXPECT_EQ(ParseSeconds("0.5"), 500'000);
  EXPECT_EQ(ParseSeconds("66.0"), 66'000'000);
  EXPECT_FALSE(ParseSeconds("-1").has_value());
  EXPECT_FALSE(ParseSeconds("1e3").has_value());
  EXPECT_FALSE(ParseSeconds("").has_value());
  EXPECT_FALSE(ParseSeconds("abc").has_value());
}

TEST(ParseTraceTest, PhillySortsBySubmitTimeKeepingFileOrderOnTies) {
  auto trace = Parse(
      "timestamp,duration,num_gpus,gpu_time,cluster\r\n"
      "2017-10-09 07:01:55,66.0,1,66.0,aa\r\n"
      "2017-10-09 06:13:03,2951.5,2,5903.0,bb\r\n"
      "2017-10-09 07:01:55,10,4,40,bb\r\n");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->format, TraceFormat::kPhilly);
  ASSERT_EQ(trace->jobs.size(), 3u);
  EXPECT_EQ(trace->jobs[0].line, 3);
  EXPECT_EQ(trace->jobs[0].submit, 1507529583LL * 1'000'000);
  EXPECT_EQ(trace->jobs[0].duration, 2'951'500'000);
  EXPECT_EQ(trace->jobs[0].gpus, 2);
  EXPECT_EQ(trace->jobs[1].line, 2);
  EXPECT_EQ(trace->jobs[2].line, 4);
  EXPECT_EQ(trace->teams, (std::vector<std::string>{"aa", "bb"}));
  EXPECT_EQ(trace->teams[trace->jobs[0].team], "bb");
  EXPECT_FALSE(trace->jobs[0].priority.has_value());
}

TEST(ParseTraceTest, GenericReadsPriorityModelAndTeam) {
  auto trace = Parse(
      "submit_time,duration,gpu_count,priority,gpu_model,team\n"
      "\n"
      "1.5,10,2,high,V100,search\n"
      "0,3,1,,,ads\n");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->format, TraceFormat::kGeneric);
  ASSERT_EQ(trace->jobs.size(), 2u);
  EXPECT_EQ(trace->jobs[0].submit, 0);
  EXPECT_FALSE(trace->jobs[0].priority.has_value());
  EXPECT_EQ(trace->models[trace->jobs[0].model], "");
  EXPECT_EQ(trace->jobs[1].submit, 1'500'000);
  EXPECT_EQ(trace->jobs[1].priority, core::Priority::kHigh);
  EXPECT_EQ(trace->models[trace->jobs[1].model], "V100");
  EXPECT_EQ(trace->teams[trace->jobs[1].team], "search");
}

struct BadLineCase {
  std::string text;
  std::string expected;
};

TEST(ParseTraceTest, BadLinesNameFileLineAndField) {
  const std::string philly = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  const std::string generic = "submit_time,duration,gpu_count,priority,gpu_model,team\n";
  const BadLineCase cases[] = {
      {philly + "2017-10-09 07:01:55,66,1,66,a\n2017-10-09 07:01:55,abc,1,66,a\n",
       "t.csv:3: field 'duration'"},
      {philly + "2017-10-32 07:01:55,66,1,66,a\n", "t.csv:2: field 'timestamp'"},
      {philly + "2017-10-09 07:01:55,66,0,66,a\n", "t.csv:2: field 'num_gpus'"},
      {philly + "2017-10-09 07:01:55,66,1,66\n", "t.csv:2: expected 5 fields"},
      {philly + "2017-10-09 07:01:55,66,1,66,\n", "t.csv:2: field 'cluster'"},
      {generic + "x,1,1,low,,a\n", "t.csv:2: field 'submit_time'"},
      {generic + "1,1,1.5,low,,a\n", "t.csv:2: field 'gpu_count'"},
      {generic + "1,1,1,urgent,,a\n", "t.csv:2: field 'priority'"},
      {"a,b,c\n1,2,3\n", "t.csv:1: unrecognized header"},
      {"", "empty trace"},
  };
  for (const auto& c : cases) {
    auto trace = Parse(c.text);
    ASSERT_FALSE(trace.ok()) << c.text;
    EXPECT_EQ(trace.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(trace.status().message(), HasSubstr(c.expected)) << c.text;
  }
}

TEST(ParseTraceTest, ExplicitFormatMustMatchHeader) {
  auto trace =
      Parse("submit_time,duration,gpu_count,priority,gpu_model,team\n", TraceFormat::kPhilly);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(),
              AllOf(HasSubstr("t.csv:1"), HasSubstr("generic"), HasSubstr("--format")));
}

TEST(LoadTraceTest, MissingFileIsNotFound) {
  auto trace = LoadTrace("/nonexistent/dir/trace.csv", std::nullopt);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dgpu::sim
