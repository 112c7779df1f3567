// Teams, borrowing and preemption in dgpu-sim: team names, teams files, proportional
// guarantees, and replays whose outcome is worked out by hand in the comments.
#include "sim/teams.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/trace.h"
#include "sim/workload.h"
#include "sim_run.h"
#include "test_files.h"

namespace dgpu::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using testing_util::kGenericHeader;
using testing_util::RunSim;
using testing_util::SimRun;
using testing_util::SyntheticTrace;
using testing_util::WriteTempFile;

// --- Names, files, guarantees -----------------------------------------------------------------

TEST(TeamNamesTest, TraceTeamsBecomeValidCoreNames) {
  EXPECT_EQ(CoreTeamName(""), "default");
  EXPECT_EQ(CoreTeamName("11cb48"), "11cb48");  // Philly cluster ids stay as they are.
  EXPECT_EQ(CoreTeamName("search_ads-2"), "search_ads-2");
  EXPECT_EQ(CoreTeamName("Vision Team"), "vision-team");
  EXPECT_EQ(CoreTeamName("_x"), "t_x");
  EXPECT_EQ(CoreTeamName("-"), "t-");
  EXPECT_EQ(CoreTeamName("a.b/c"), "a-b-c");
  EXPECT_EQ(CoreTeamName(std::string(80, 'z')), std::string(63, 'z'));
  for (const char* name : {"", "Vision Team", "_x", "-", "\xC3\xA9quipe"}) {
    EXPECT_TRUE(core::IsValidTeamName(CoreTeamName(name))) << name;
  }
}

Trace ParseOrDie(const std::string& text) {
  std::istringstream in(text);
  auto trace = ParseTrace(in, "w.csv", std::nullopt);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  return std::move(trace).value();
}

TEST(TeamNamesTest, WorkloadTeamsAreCoreNamesAndMustNotCollide) {
  auto w =
      BuildWorkload(ParseOrDie(std::string(kGenericHeader) +
                               "0,1,1,,,Vision Team\n1,1,1,,,\n2,1,1,,,default\n3,1,1,,,ads\n"),
                    {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // An empty team is the default team.
  EXPECT_THAT(w->teams, ElementsAre("ads", "default", "vision-team"));
  ASSERT_EQ(w->jobs.size(), 4u);
  EXPECT_EQ(w->teams[w->jobs[0].team], "vision-team");
  EXPECT_EQ(w->teams[w->jobs[1].team], "default");
  EXPECT_EQ(w->teams[w->jobs[2].team], "default");

  w = BuildWorkload(ParseOrDie(std::string(kGenericHeader) + "0,1,1,,,Ads\n1,1,1,,,ads\n"), {});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(),
              HasSubstr("w.csv: teams 'Ads' and 'ads' both become team 'ads'"));
}

TEST(TeamsFileTest, FieldsAndDefaults) {
  auto teams = ParseTeamsYaml(
      "teams:\n  search: {online: 16, max_gpus: 40, weight: 2.5}\n  nlp:\n    batch: 3\n"
      "  idle:\n",
      "t.yaml");
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  ASSERT_EQ(teams->size(), 3u);
  EXPECT_EQ(teams->at("search"), (core::TeamLimits{16, 0, 40, 2.5}));
  EXPECT_EQ(teams->at("nlp"), (core::TeamLimits{0, 3, -1, 1}));
  EXPECT_EQ(teams->at("idle"), core::TeamLimits{});
}

TEST(TeamsFileTest, ErrorsNameTheFileTeamAndField) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"teams:\n  a: {online: -1}\n", "t.yaml: teams.a: field 'online': must not be negative"},
      {"teams:\n  a: {batch: 1.5}\n",
       "t.yaml: teams.a: field 'batch': expected a whole number, found '1.5'"},
      {"teams:\n  a: {online: x}\n",
       "t.yaml: teams.a: field 'online': expected a whole number, found 'x'"},
      {"teams:\n  a: {max_gpus: -2}\n", "t.yaml: teams.a: field 'max_gpus'"},
      {"teams:\n  a: {online: 2, batch: 2, max_gpus: 3}\n",
       "t.yaml: teams.a: field 'max_gpus': 3 is below the team's guarantees"},
      {"teams:\n  a: {weight: 0}\n", "t.yaml: teams.a: field 'weight': must be a number above 0"},
      {"teams:\n  a: {weight: heavy}\n", "t.yaml: teams.a: field 'weight': expected a number"},
      {"teams:\n  a: {onlin: 1}\n", "t.yaml: teams.a: unknown field 'onlin'"},
      {"teams:\n  a: [1, 2]\n", "t.yaml: teams.a: expected a map"},
      {"teams:\n  Bad Name: {online: 1}\n", "t.yaml: teams.Bad Name: not a valid team name"},
      {"team:\n  a: {online: 1}\n", "t.yaml: unknown key 'team'"},
      {"teams: [a, b]\n", "t.yaml: 'teams' must be a map"},
      {"teams: {a: {online: 1}\n", "t.yaml: "},  // Not YAML.
  };
  for (const Case& c : cases) {
    auto teams = ParseTeamsYaml(c.text, "t.yaml");
    ASSERT_FALSE(teams.ok()) << c.text;
    EXPECT_EQ(teams.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(teams.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(GuaranteesTest, ProportionalIsTheFloorOfTheShareOfTheClassQuota) {
  // Online quota 4: 300 and 100 of 400 -> 3 and 1. Batch quota 4: 200, 100 and 10 of 310 ->
  // floor(2.58) = 2, floor(1.29) = 1, floor(0.13) = 0 (no limits); 1 GPU stays shared.
  auto teams = ProportionalGuarantees({"ads", "misc", "nlp", "vision", "web"},
                                      {{100, 0}, {0, 10}, {0, 200}, {0, 100}, {300, 0}}, {4, 4});
  EXPECT_EQ(teams.size(), 4u);
  EXPECT_EQ(teams.count("misc"), 0u);
  EXPECT_EQ(teams["ads"].online, 1);
  EXPECT_EQ(teams["web"].online, 3);
  EXPECT_EQ(teams["nlp"].batch, 2);
  EXPECT_EQ(teams["vision"].batch, 1);
  EXPECT_EQ(teams["web"].max_gpus, -1);
  EXPECT_EQ(teams["web"].weight, 1);
  // Exact with amounts whose products exceed 64 bits.
  const uint64_t big = uint64_t{1} << 62;
  teams = ProportionalGuarantees({"x", "y"}, {{big, 0}, {big - 1, 0}}, {1001, 0});
  EXPECT_EQ(teams["x"].online, 500);
  EXPECT_EQ(teams["y"].online, 500);
  EXPECT_THAT(ClassQuotas(800, 0.7), ElementsAre(560, 240));
  EXPECT_THAT(ClassQuotas(5, 0.5), ElementsAre(3, 2));  // round() as in the core.
}

// --- Replays ----------------------------------------------------------------------------------

const Json* TeamRow(const Json& j, const std::string& team, const std::string& cls) {
  for (const Json& row : j["teams"]) {
    if (row["team"] == team && row["class"] == cls) return &row;
  }
  return nullptr;
}

// One node of 2 GPUs, online quota 1, batch quota 1; teams without guarantees.
//   t=0   batch A (1 GPU, 100 s) starts within the batch quota; batch B (1 GPU, 50 s) starts on
//         the idle online GPU, borrowed.
//   t=10  online O (1 GPU, 20 s) arrives: the core orders B stopped (preempt) with the grace.
std::string PreemptionTrace() {
  return WriteTempFile("t.csv", std::string(kGenericHeader) +
                                    "0,100,1,low,,batch\n0,50,1,low,,batch\n10,20,1,high,,web\n");
}

std::vector<std::string> OneNodeTwoGpus(std::vector<std::string> more) {
  std::vector<std::string> args = {
      "--trace", PreemptionTrace(),  "--nodes", "1",     "--gpus-per-node",
      "2",       "--online-percent", "0.5",     "--json"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Grace 5: B ends at 15 (its 15 GPU-s are lost); O starts at 15 and ends at 35; B starts again
// from zero at 35 (borrowing again) and ends at 85, not at 50 (its first finish is dropped); A
// ends at 100.
TEST(PreemptionTest, ABorrowerStopsAfterTheGraceAndRestartsFromZero) {
  SimRun r = RunSim(OneNodeTwoGpus({"--borrowing", "--preemption-grace", "5"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& j = r.json;
  EXPECT_EQ(j["config"]["borrowing"], true);
  EXPECT_EQ(j["config"]["preemption_grace_seconds"], 5);
  EXPECT_EQ(j["preemptions"], 1);
  EXPECT_DOUBLE_EQ(j["preempted_gpu_seconds"], 15.0);
  // Busy: A 100 + B 15 (lost) + B 50 + O 20.
  EXPECT_DOUBLE_EQ(j["busy_gpu_seconds"], 185.0);
  EXPECT_DOUBLE_EQ(j["preempted_busy_fraction"], 15.0 / 185.0);
  EXPECT_DOUBLE_EQ(j["makespan_seconds"], 100.0);
  EXPECT_DOUBLE_EQ(j["utilization"], 185.0 / 200.0);
  EXPECT_EQ(j["jobs"]["started"], 3);
  EXPECT_EQ(j["jobs"]["completed"], 3);
  EXPECT_EQ(j["jobs"]["pending_at_end"], 0);
  EXPECT_EQ(j["decisions"], 4);  // B started twice.
  // Delay is arrival to first start: B's restart adds none.
  EXPECT_DOUBLE_EQ(j["queueing_delay_seconds"]["low"]["mean"], 0.0);
  EXPECT_DOUBLE_EQ(j["queueing_delay_seconds"]["high"]["mean"], 5.0);
  EXPECT_DOUBLE_EQ(j["queueing_delay_seconds"]["high"]["p99"], 5.0);
  // Completion times 100 (A), 85 (B), 25 (O).
  EXPECT_DOUBLE_EQ(j["completion_time_seconds"]["mean"], 70.0);
  const Json* batch = TeamRow(j, "batch", "batch");
  ASSERT_NE(batch, nullptr) << j["teams"].dump();
  EXPECT_EQ((*batch)["jobs"], 2);
  EXPECT_EQ((*batch)["guarantee"], 0);
  EXPECT_EQ((*batch)["preemptions"], 1);
  const Json* web = TeamRow(j, "web", "online");
  ASSERT_NE(web, nullptr);
  EXPECT_EQ((*web)["preemptions"], 0);
  EXPECT_DOUBLE_EQ((*web)["queueing_delay_seconds"]["mean"], 5.0);
  EXPECT_EQ(j["teams"].size(), 2u);
}

// Grace 0: B ends at 10 itself, and O starts in a second pass at 10; B restarts at 30.
TEST(PreemptionTest, ZeroGraceEndsTheStopAtOnce) {
  SimRun r = RunSim(OneNodeTwoGpus({"--borrowing", "--preemption-grace", "0"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["high"]["mean"], 0.0);
  EXPECT_DOUBLE_EQ(r.json["preempted_gpu_seconds"], 10.0);
  EXPECT_DOUBLE_EQ(r.json["busy_gpu_seconds"], 180.0);
  // A 100, B 30 + 50 = 80, O 20.
  EXPECT_DOUBLE_EQ(r.json["completion_time_seconds"]["mean"], 200.0 / 3.0);
}

// The default grace is the core's 30 s: B ends at 40, O runs 40..60, B again 60..110.
TEST(PreemptionTest, DefaultGraceIsThirtySeconds) {
  SimRun r = RunSim(OneNodeTwoGpus({"--borrowing"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["high"]["mean"], 30.0);
  EXPECT_DOUBLE_EQ(r.json["preempted_gpu_seconds"], 40.0);
  EXPECT_DOUBLE_EQ(r.json["makespan_seconds"], 110.0);
}

// Minimum run time 20: at 10, B is too young; at 20 (a wake-up, no other event) it is stopped,
// ends at 25; O runs 25..45; B again 45..95.
TEST(PreemptionTest, MinRuntimeDelaysThePreemptionToTheExactTime) {
  SimRun r =
      RunSim(OneNodeTwoGpus({"--borrowing", "--preemption-grace", "5", "--min-runtime", "20"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(r.json["config"]["min_runtime_seconds"], 20.0);
  EXPECT_EQ(r.json["preemptions"], 1);
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["high"]["mean"], 15.0);
  EXPECT_DOUBLE_EQ(r.json["preempted_gpu_seconds"], 25.0);
  EXPECT_DOUBLE_EQ(r.json["busy_gpu_seconds"], 195.0);
  EXPECT_DOUBLE_EQ(r.json["makespan_seconds"], 100.0);
}

// Stopped at 12, while B is stopping: A and B hold their GPUs, O waits; B's 12 s are lost.
TEST(PreemptionTest, MaxTimeWhileAVictimStops) {
  SimRun r = RunSim(OneNodeTwoGpus({"--borrowing", "--preemption-grace", "5", "--max-time", "12"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["jobs"]["running_at_end"], 2);
  EXPECT_EQ(r.json["jobs"]["pending_at_end_high"], 1);
  EXPECT_EQ(r.json["jobs"]["completed"], 0);
  EXPECT_EQ(r.json["preemptions"], 1);
  EXPECT_DOUBLE_EQ(r.json["preempted_gpu_seconds"], 12.0);
  EXPECT_DOUBLE_EQ(r.json["busy_gpu_seconds"], 24.0);
  EXPECT_DOUBLE_EQ(r.json["makespan_seconds"], 12.0);
}

// Without borrowing the quotas are hard: B waits for A (100..150), O starts at once.
TEST(PreemptionTest, StrictQuotasNeverPreempt) {
  SimRun r = RunSim(OneNodeTwoGpus({"--preemption-grace", "5"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["preemptions"], 0);
  EXPECT_DOUBLE_EQ(r.json["preempted_gpu_seconds"], 0.0);
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["low"]["mean"], 50.0);
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["high"]["mean"], 0.0);
  EXPECT_DOUBLE_EQ(r.json["makespan_seconds"], 150.0);
}

TEST(PreemptionTest, TextReportShowsPreemptionsAndTeams) {
  std::vector<std::string> args = OneNodeTwoGpus({"--borrowing", "--preemption-grace", "5"});
  args.erase(std::find(args.begin(), args.end(), "--json"));
  SimRun r = RunSim(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("teams     guarantees none, borrowing on, preemption grace 5 s"));
  EXPECT_THAT(r.out, HasSubstr("preemptions                               1, 15.0 GPU-s lost"));
  EXPECT_THAT(r.out, HasSubstr("  web                        online"));
  EXPECT_THAT(r.out, HasSubstr("speed:"));
}

// Two nodes of 4 GPUs, online-percent 0.5: quotas 4 and 4. GPU time: web 300 and ads 100
// online; nlp 200, "Vision Team" 100 and misc 10 batch; the 16-GPU job is rejected and counts
// for nothing. Guarantees as in ProportionalIsTheFloorOfTheShareOfTheClassQuota.
TEST(GuaranteesTest, ProportionalGuaranteesReachTheCore) {
  std::string trace = WriteTempFile(
      "t.csv", std::string(kGenericHeader) +
                   "0,100,3,high,,web\n0,100,1,high,,ads\n0,100,2,low,,nlp\n"
                   "0,100,1,low,,Vision Team\n0,10,1,low,,misc\n0,1000,16,low,,huge\n");
  SimRun r = RunSim({"--trace", trace, "--nodes", "2", "--gpus-per-node", "4", "--online-percent",
                     "0.5", "--team-guarantees", "proportional", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& j = r.json;
  EXPECT_EQ(j["config"]["team_guarantees"], "proportional");
  std::vector<std::string> rows;
  for (const Json& row : j["teams"]) {
    rows.push_back(row["team"].get<std::string>() + " " + row["class"].get<std::string>() + " " +
                   std::to_string(row["guarantee"].get<int>()));
  }
  EXPECT_THAT(rows, ElementsAre("ads online 1", "misc batch 0", "nlp batch 2",
                                "vision-team batch 1", "web online 3"));
  EXPECT_EQ(j["jobs"]["completed"], 5);
}

TEST(GuaranteesTest, AFileSetsTheLimits) {
  std::string teams = WriteTempFile("t.yaml", "teams:\n  web: {online: 1}\n  batch: {batch: 1}\n");
  SimRun r = RunSim(OneNodeTwoGpus({"--team-guarantees", teams, "--borrowing"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["config"]["team_guarantees"], teams);
  EXPECT_EQ((*TeamRow(r.json, "web", "online"))["guarantee"], 1);
  EXPECT_EQ((*TeamRow(r.json, "batch", "batch"))["guarantee"], 1);
  EXPECT_EQ(r.json["preemptions"], 1);  // The same story as without guarantees.
}

TEST(GuaranteesTest, BadValuesAreErrorsNamingTheOptionOrFile) {
  auto expect_error = [](std::vector<std::string> more, const std::string& message) {
    SimRun r = RunSim(OneNodeTwoGpus(std::move(more)));
    EXPECT_EQ(r.code, 1) << message;
    EXPECT_THAT(r.err, HasSubstr(message));
  };
  std::string bad = WriteTempFile("bad.yaml", "teams:\n  web: {online: -1}\n");
  expect_error({"--team-guarantees", bad}, bad + ": teams.web: field 'online'");
  std::string unknown = WriteTempFile("unknown.yaml", "teams:\n  nobody: {online: 1}\n");
  expect_error({"--team-guarantees", unknown}, unknown + ": teams.nobody: no such team");
  std::string over = WriteTempFile("over.yaml", "teams:\n  web: {online: 2}\n");
  expect_error({"--team-guarantees", over},
               over + ": the online guarantees add up to 2 GPUs, more than the online quota of 1");
  expect_error({"--team-guarantees", "/nonexistent/teams.yaml"},
               "cannot open teams file /nonexistent/teams.yaml");
  expect_error({"--preemption-grace", "-1"}, "--preemption-grace");
  expect_error({"--min-runtime", "-1"}, "--min-runtime");
  expect_error({"--borrowing", "--policy", "original"}, "--policy dgpu");
  expect_error({"--team-guarantees", "proportional", "--policy", "original"}, "--policy dgpu");
}

// Without --borrowing and --team-guarantees (and with --gangs off) the replay is the one before
// teams existed: figures recorded with the simulator before teams (same trace, cluster, seed).
TEST(GuaranteesTest, WithoutBorrowingResultsAreAsBefore) {
  std::string trace = WriteTempFile("t.csv", SyntheticTrace(3000));
  std::string cluster = WriteTempFile("c.yaml",
                                      "nodes:\n  - {count: 6, gpus_per_node: 8, model: A}\n"
                                      "  - {count: 4, gpus_per_node: 4, model: B}\n");
  SimRun r =
      RunSim({"--trace", trace, "--cluster", cluster, "--seed", "9", "--gangs", "off", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& q = r.json["queueing_delay_seconds"];
  EXPECT_EQ(q["high"]["mean"], 45557.02512027491);
  EXPECT_EQ(q["high"]["p99"], 123424.11);
  EXPECT_EQ(q["low"]["mean"], 182795.46387231504);
  EXPECT_EQ(q["low"]["p99"], 452894.52);
  EXPECT_EQ(r.json["completion_time_seconds"]["mean"], 128018.23298943663);
  EXPECT_EQ(r.json["makespan_seconds"], 481293.0);
  EXPECT_EQ(r.json["busy_gpu_seconds"], 14842473.0);
  EXPECT_EQ(r.json["fragmentation"]["fragmented_seconds"], 5756.25);
  EXPECT_EQ(r.json["decisions"], 2840);
  EXPECT_EQ(r.json["passes"], 5831);
  EXPECT_EQ(r.json["preemptions"], 0);

  r = RunSim({"--trace", trace, "--cluster", cluster, "--seed", "9", "--online-percent", "0.5",
              "--max-bypass", "3", "--max-time", "200000", "--gangs", "off", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& capped = r.json["queueing_delay_seconds"];
  EXPECT_EQ(capped["high"]["mean"], 87725.73690455718);
  EXPECT_EQ(capped["high"]["p99"], 180083.3);
  EXPECT_EQ(capped["low"]["mean"], 93122.86389789302);
  EXPECT_EQ(capped["low"]["p99"], 187586.32);
  EXPECT_EQ(r.json["completion_time_seconds"]["mean"], 91275.65987815126);
  EXPECT_EQ(r.json["busy_gpu_seconds"], 12189849.0);
  EXPECT_EQ(r.json["fragmentation"]["fragmented_seconds"], 20401.9);
  EXPECT_EQ(r.json["jobs"]["running_at_end"], 17);
  EXPECT_EQ(r.json["jobs"]["pending_at_end_high"], 1);
  EXPECT_EQ(r.json["jobs"]["pending_at_end_low"], 442);
  EXPECT_EQ(r.json["passes"], 5371);

  // A grace and a minimum run time change nothing without borrowing.
  SimRun again = RunSim({"--trace", trace, "--cluster", cluster, "--seed", "9", "--online-percent",
                         "0.5", "--max-bypass", "3", "--max-time", "200000", "--gangs", "off",
                         "--json", "--preemption-grace", "7", "--min-runtime", "100"});
  ASSERT_EQ(again.code, 0) << again.err;
  for (Json* j : {&r.json, &again.json}) {
    j->erase("speed");
    j->erase("config");
  }
  EXPECT_EQ(r.json.dump(), again.json.dump());
}

// Borrowing replays are deterministic too, and every preempted job still completes.
TEST(PreemptionTest, SyntheticReplayWithBorrowingIsDeterministic) {
  std::string trace = WriteTempFile("t.csv", SyntheticTrace(2000));
  std::vector<std::string> args = {
      "--trace",      trace,         "--nodes",       "8",  "--seed", "3", "--team-guarantees",
      "proportional", "--borrowing", "--min-runtime", "60", "--json"};
  SimRun first = RunSim(args);
  SimRun second = RunSim(args);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_GT(first.json["preemptions"].get<int>(), 0);
  EXPECT_EQ(first.json["jobs"]["completed"], first.json["jobs"]["submitted"]);
  EXPECT_EQ(first.json["jobs"]["pending_at_end"], 0);
  EXPECT_GT(first.json["decisions"].get<int>(), first.json["jobs"]["submitted"].get<int>());
  first.json.erase("speed");
  second.json.erase("speed");
  EXPECT_EQ(first.json.dump(), second.json.dump());
}

}  // namespace
}  // namespace dgpu::sim
