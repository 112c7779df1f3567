#include "sim/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace dgpu::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Trace ParseOrDie(const std::string& text) {
  std::istringstream in(text);
  auto trace = ParseTrace(in, "w.csv", std::nullopt);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  return std::move(trace).value();
}

const char kGeneric[] =
    "submit_time,duration,gpu_count,priority,gpu_model,team\n"
    "100,5,1,,,a\n"
    "110,5,2,,,b\n"
    "120,5,1,high,,c\n"
    "130,5,4,,,d\n";

std::vector<core::TimeMicros> Submits(const Workload& w) {
  std::vector<core::TimeMicros> out;
  for (const auto& j : w.jobs) out.push_back(j.submit / core::kMicrosPerSecond);
  return out;
}

TEST(WorkloadTest, RebasesToFirstArrivalAndScalesInterArrivals) {
  WorkloadOptions options;
  options.arrival_scale = 2;
  auto w = BuildWorkload(ParseOrDie(kGeneric), options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_THAT(Submits(*w), ElementsAre(0, 5, 10, 15));
  EXPECT_EQ(w->jobs[1].duration, 5 * core::kMicrosPerSecond);  // Durations are not scaled.
}

TEST(WorkloadTest, WindowThenLimitThenRepeat) {
  WorkloadOptions options;
  options.window = {{10, 30}};
  auto w = BuildWorkload(ParseOrDie(kGeneric), options);
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(Submits(*w), ElementsAre(0, 10));
  EXPECT_EQ(w->jobs[0].gpus, 2);

  options.window.reset();
  options.limit = 3;
  options.repeat = 2;
  w = BuildWorkload(ParseOrDie(kGeneric), options);
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(Submits(*w), ElementsAre(0, 10, 20, 20, 30, 40));
}

TEST(WorkloadTest, ExplicitPriorityWinsOverTeamMapping) {
  WorkloadOptions options;
  options.online_teams = {"a"};
  auto w = BuildWorkload(ParseOrDie(kGeneric), options);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->jobs[0].priority, core::Priority::kHigh);  // Team a.
  EXPECT_EQ(w->jobs[1].priority, core::Priority::kLow);
  EXPECT_EQ(w->jobs[2].priority, core::Priority::kHigh);  // Column says high.
  EXPECT_EQ(w->jobs[3].priority, core::Priority::kLow);
  EXPECT_THAT(w->online_teams, ElementsAre("a"));
}

TEST(WorkloadTest, OnlineFractionChoosesTeamsBySeed) {
  WorkloadOptions options;
  options.online_fraction = 0.5;
  options.seed = 7;
  auto first = BuildWorkload(ParseOrDie(kGeneric), options);
  auto second = BuildWorkload(ParseOrDie(kGeneric), options);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->online_teams.size(), 2u);
  EXPECT_EQ(first->online_teams, second->online_teams);

  options.online_fraction.reset();  // Default: 30% of 4 teams = 1.
  auto defaulted = BuildWorkload(ParseOrDie(kGeneric), options);
  ASSERT_TRUE(defaulted.ok());
  EXPECT_EQ(defaulted->online_teams.size(), 1u);
}

TEST(WorkloadTest, BadOptionsAreNamed) {
  Trace trace = ParseOrDie(kGeneric);
  WorkloadOptions options;
  options.online_teams = {"nobody"};
  auto w = BuildWorkload(trace, options);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("'nobody'"));

  options = {};
  options.arrival_scale = 0;
  w = BuildWorkload(trace, options);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("--arrival-scale"));
}

}  // namespace
}  // namespace dgpu::sim
