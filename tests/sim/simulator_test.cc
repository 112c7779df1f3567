// End-to-end replays through the dgpu-sim command, on small traces whose outcome is worked out
// by hand in the comments.
#include "sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim_run.h"
#include "test_files.h"

namespace dgpu::sim {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using testing_util::kGenericHeader;
using testing_util::RunSim;
using testing_util::SimRun;
using testing_util::SyntheticTrace;
using testing_util::WriteTempFile;

// 1 node x 4 GPUs, all batch with the whole cluster as batch quota.
//   t=0  A(2 GPUs, 10 s) and B(2 GPUs, 5 s) start: the node is full.
//   t=1  C(4 GPUs, 4 s) waits.   t=2  D(2 GPUs, 1 s) waits.
//   t=5  B ends; C still cannot start (needs 4), D overtakes it: starts at 5, ends at 6.
//   t=10 A ends; C starts, ends at 14.
// Delays 0, 0, 9, 3 (mean 3); completion times 10, 5, 13, 4 (mean 8);
// busy = 2*10 + 2*5 + 4*4 + 2*1 = 48 GPU-s over 4 GPUs x 14 s.
TEST(SimulatorTest, ExactDelaysAndUtilizationOnOneNode) {
  std::string trace = WriteTempFile("t.csv", std::string(kGenericHeader) +
                                                 "0,10,2,low,,t\n0,5,2,low,,t\n1,4,4,low,,t\n"
                                                 "2,1,2,low,,t\n");
  SimRun r = RunSim({"--trace", trace, "--nodes", "1", "--gpus-per-node", "4", "--online-percent",
                     "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& j = r.json;
  EXPECT_EQ(j["jobs"]["submitted"], 4);
  EXPECT_EQ(j["jobs"]["completed"], 4);
  EXPECT_EQ(j["jobs"]["rejected"], 0);
  EXPECT_EQ(j["jobs"]["pending_at_end"], 0);
  const Json& low = j["queueing_delay_seconds"]["low"];
  EXPECT_EQ(low["count"], 4);
  EXPECT_DOUBLE_EQ(low["mean"], 3.0);
  EXPECT_DOUBLE_EQ(low["p50"], 0.0);
  EXPECT_DOUBLE_EQ(low["p95"], 9.0);
  EXPECT_DOUBLE_EQ(low["p99"], 9.0);
  EXPECT_EQ(j["queueing_delay_seconds"]["high"]["count"], 0);
  EXPECT_EQ(j["queueing_delay_seconds"]["all"], low);
  EXPECT_DOUBLE_EQ(j["completion_time_seconds"]["mean"], 8.0);
  EXPECT_DOUBLE_EQ(j["completion_time_seconds"]["p50"], 5.0);
  EXPECT_DOUBLE_EQ(j["makespan_seconds"], 14.0);
  EXPECT_DOUBLE_EQ(j["busy_gpu_seconds"], 48.0);
  EXPECT_DOUBLE_EQ(j["utilization"], 48.0 / 56.0);
  // C waited for quota (the whole cluster is in use by the batch class), not for a node.
  EXPECT_DOUBLE_EQ(j["fragmentation"]["fragmented_seconds"], 0.0);
  EXPECT_EQ(j["decisions"], 4);
  EXPECT_TRUE(j.contains("speed"));
}

// Two nodes of 2 GPUs, models a and b. A (model a) and B (model b) take one GPU on each node;
// E (2 GPUs, any model) arrives at t=1: 2 GPUs are free, but on two nodes.
//   dgpu:     E waits (no_node_fits) until A ends at 10; runs 10..11. Fragmented 1..10 with
//             2 free GPUs.
//   original: E starts at 1 on the two idle GPUs, one per node: one multi-node task.
std::string StrandedTrace() {
  return WriteTempFile(
      "t.csv", std::string(kGenericHeader) + "0,10,1,high,a,t\n0,20,1,high,b,t\n1,1,2,high,,t\n");
}

TEST(SimulatorTest, FragmentationWhenFreeGpusAreOnDifferentNodes) {
  std::string cluster = WriteTempFile("c.csv", "count,gpus_per_node,model\n1,2,a\n1,2,b\n");
  SimRun r =
      RunSim({"--trace", StrandedTrace(), "--cluster", cluster, "--online-percent", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& j = r.json;
  EXPECT_DOUBLE_EQ(j["queueing_delay_seconds"]["high"]["mean"], 3.0);  // (0 + 0 + 9) / 3.
  EXPECT_DOUBLE_EQ(j["queueing_delay_seconds"]["high"]["p99"], 9.0);
  EXPECT_DOUBLE_EQ(j["makespan_seconds"], 20.0);
  EXPECT_DOUBLE_EQ(j["fragmentation"]["fragmented_seconds"], 9.0);
  EXPECT_DOUBLE_EQ(j["fragmentation"]["mean_free_gpus_while_fragmented"], 2.0);
  EXPECT_DOUBLE_EQ(j["fragmentation"]["fragmented_time_fraction"], 9.0 / 20.0);
  EXPECT_EQ(j["multi_node_tasks"], 0);
  // busy = 10 + 20 + 2 GPU-s over 4 GPUs x 20 s.
  EXPECT_DOUBLE_EQ(j["utilization"], 32.0 / 80.0);
}

TEST(SimulatorTest, OriginalPolicySpreadsOverNodes) {
  std::string cluster = WriteTempFile("c.csv", "1,2,a\n1,2,b\n");
  for (const char* seed : {"1", "2", "3"}) {
    SimRun r = RunSim({"--trace", StrandedTrace(), "--cluster", cluster, "--online-percent", "1",
                       "--policy", "original", "--seed", seed, "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.json["config"]["policy"], "original");
    EXPECT_EQ(r.json["multi_node_tasks"], 1);
    EXPECT_EQ(r.json["multi_node_task_nodes"], 2);
    EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["all"]["mean"], 0.0);
    EXPECT_DOUBLE_EQ(r.json["fragmentation"]["fragmented_seconds"], 0.0);
  }
}

TEST(SimulatorTest, JobsLargerThanANodeRunAsGangsAndOnlyWhatNoClusterHoldsIsRejected) {
  // 8 GPUs on 4-GPU nodes: a gang of 2 x 4; 16: four members, but there are two nodes.
  std::string trace =
      WriteTempFile("t.csv", std::string(kGenericHeader) +
                                 "0,1,8,low,,t\n0,1,4,low,,t\n1,1,1,low,H100,t\n2,1,16,high,,t\n");
  SimRun r = RunSim({"--trace", trace, "--nodes", "2", "--gpus-per-node", "4", "--model", "V100",
                     "--online-percent", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["jobs"]["total"], 4);
  EXPECT_EQ(r.json["jobs"]["rejected"], 2);
  EXPECT_EQ(r.json["jobs"]["rejected_exceeds_node"], 1);
  EXPECT_EQ(r.json["jobs"]["rejected_no_gpu_model"], 1);
  EXPECT_EQ(r.json["jobs"]["submitted"], 2);
  EXPECT_EQ(r.json["jobs"]["gangs"], 1);
  EXPECT_EQ(r.json["jobs"]["completed"], 2);
  EXPECT_EQ(r.json["multi_node_tasks"], 1);
  EXPECT_EQ(r.json["multi_node_task_nodes"], 2);
  // The gang (first in the trace) started at once on both nodes, the 4-GPU job once it ended.
  EXPECT_EQ(r.json["queueing_delay_seconds"]["gangs"]["count"], 1);
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["gangs"]["mean"], 0.0);
  EXPECT_DOUBLE_EQ(r.json["queueing_delay_seconds"]["low"]["mean"], 0.5);
  EXPECT_EQ(r.json["config"]["gangs"], true);

  // Without gangs, every job larger than a node is rejected, as before gangs existed.
  r = RunSim({"--trace", trace, "--nodes", "2", "--gpus-per-node", "4", "--model", "V100",
              "--online-percent", "0", "--gangs", "off", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["jobs"]["rejected_exceeds_node"], 2);
  EXPECT_EQ(r.json["jobs"]["submitted"], 1);
  EXPECT_EQ(r.json["jobs"]["gangs"], 0);
  EXPECT_EQ(r.json["config"]["gangs"], false);
}

// --topology-key: node-0 is rack r1, node-1 and node-2 rack r2 (4 GPUs each). An 8-GPU job is
// a gang of 2 x 4: best fit takes the first two free nodes (node-0 and node-1, two racks), the
// key takes r2's two. The spread is reported per label key of the cluster either way.
TEST(SimulatorTest, TopologyKeyPacksAGangIntoOneRackAndTheSpreadIsReported) {
  const std::string cluster = WriteTempFile(
      "racks.yaml",
      "nodes:\n  - {count: 1, gpus_per_node: 4, model: V100, labels: {rack: r1}}\n"
      "  - {count: 2, gpus_per_node: 4, model: V100, labels: {rack: r2, ib: 'yes'}}\n");
  const std::string trace = WriteTempFile("t.csv", std::string(kGenericHeader) + "0,10,8,low,,t\n");
  for (const bool key : {false, true}) {
    std::vector<std::string> args = {"--trace",          trace, "--cluster", cluster,
                                     "--online-percent", "0",   "--json"};
    if (key) args.insert(args.end(), {"--topology-key", "rack"});
    SimRun r = RunSim(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.json["multi_node_tasks"], 1);
    EXPECT_EQ(r.json["config"]["topology_key"], key ? "rack" : "");
    EXPECT_EQ(r.json["config"]["node_groups"][0]["labels"], (Json{{"rack", "r1"}}));
    const Json& spread = r.json["multi_node_spread"];
    ASSERT_EQ(spread.size(), 2u);
    // ib: node-1 and node-2 have it, node-0 does not (a value of its own).
    EXPECT_EQ(spread[0]["key"], "ib");
    EXPECT_DOUBLE_EQ(spread[0]["mean_values"], key ? 1.0 : 2.0);
    EXPECT_EQ(spread[1]["key"], "rack");
    EXPECT_EQ(spread[1]["starts"], 1);
    EXPECT_DOUBLE_EQ(spread[1]["mean_values"], key ? 1.0 : 2.0);
    EXPECT_DOUBLE_EQ(spread[1]["one_value_fraction"], key ? 1.0 : 0.0);
  }
  SimRun text = RunSim(
      {"--trace", trace, "--cluster", cluster, "--online-percent", "0", "--topology-key", "rack"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("gangs on, topology_key rack\n"));
  EXPECT_THAT(
      text.out,
      HasSubstr("values of rack                       1.00 mean, 1.0000 of starts on one\n"));

  SimRun bad = RunSim({"--trace", trace, "--cluster", cluster, "--topology-key", "zone"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err,
              HasSubstr("--topology-key zone: no node group of the cluster has that label"));
  bad = RunSim(
      {"--trace", trace, "--cluster", cluster, "--topology-key", "rack", "--policy", "original"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--topology-key needs --policy dgpu"));
}

// NVLink groups: one node of 4 GPUs in the groups [0, 2] and [1, 3].
//   t=0  A (1 GPU, 10 s) takes GPU 0; B (1 GPU, 10 s) the fullest group's other GPU, 2.
//   t=1  C (2 GPUs, 10 s) gets group [1, 3] whole. Lowest-first would have given A and B GPUs 0
//        and 1 and C GPUs 2 and 3, one of each group.
// C is the one placement of several GPUs: in one group, no GPU outside (with --nvlink off, one
// GPU outside). The original policy
// takes GPUs anywhere: nothing is reported for it.
TEST(SimulatorTest, NvlinkGroupsKeepAPairInOneGroupAndTheReportSaysSo) {
  const std::string cluster = WriteTempFile(
      "links.yaml",
      "nodes:\n  - {count: 1, gpus_per_node: 4, model: V100, nvlink_groups: [[0, 2], [1, 3]]}\n");
  const std::string trace = WriteTempFile(
      "t.csv", std::string(kGenericHeader) + "0,10,1,low,,t\n0,10,1,low,,t\n1,10,2,low,,t\n");
  SimRun r = RunSim({"--trace", trace, "--cluster", cluster, "--online-percent", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["config"]["node_groups"][0]["nvlink_groups"], (Json{{0, 2}, {1, 3}}));
  EXPECT_EQ(r.json["nvlink"]["placements"], 1);
  EXPECT_DOUBLE_EQ(r.json["nvlink"]["one_group_fraction"], 1.0);
  EXPECT_DOUBLE_EQ(r.json["nvlink"]["mean_gpus_outside_group"], 0.0);
  SimRun text = RunSim({"--trace", trace, "--cluster", cluster, "--online-percent", "0"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("in one NVLink group                  1.0000 of 1 placements, "
                                  "0.000 GPUs outside on average\n"));
  // The core not told of the groups: GPUs lowest first, C split over both groups.
  r = RunSim({"--trace", trace, "--cluster", cluster, "--online-percent", "0", "--nvlink", "off",
              "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["config"]["nvlink"], false);
  EXPECT_EQ(r.json["nvlink"]["placements"], 1);
  EXPECT_DOUBLE_EQ(r.json["nvlink"]["one_group_fraction"], 0.0);
  EXPECT_DOUBLE_EQ(r.json["nvlink"]["mean_gpus_outside_group"], 1.0);
  r = RunSim({"--trace", trace, "--cluster", cluster, "--online-percent", "0", "--policy",
              "original", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.json["nvlink"].is_null());
  // A cluster without groups reports none either.
  r = RunSim({"--trace", trace, "--nodes", "1", "--gpus-per-node", "4", "--online-percent", "0",
              "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.json["nvlink"].is_null());
}

// The core's model rule (core::MatchGpuModels) decides what a job's model selects: an exact name
// ignoring case ("a100" is the 2-GPU A100 node only, so 4 GPUs exceed it), else a substring
// ("v100" selects both V100 nodes, the larger of which has 8 GPUs).
TEST(SimulatorTest, JobModelsMatchLikeTheCore) {
  std::string cluster =
      WriteTempFile("c.yaml",
                    "nodes:\n  - {count: 1, gpus_per_node: 8, model: Tesla V100-SXM2}\n"
                    "  - {count: 1, gpus_per_node: 4, model: Tesla V100-PCIE}\n"
                    "  - {count: 1, gpus_per_node: 2, model: A100}\n"
                    "  - {count: 1, gpus_per_node: 8, model: A100-80GB}\n");
  std::string trace = WriteTempFile(
      "t.csv", std::string(kGenericHeader) +
                   "0,1,8,low,v100,t\n0,1,4,low,a100,t\n0,1,2,low,a100,t\n0,1,8,low,80gb,t\n"
                   "0,1,1,low,V100-PCIE-16GB,t\n");
  SimRun r = RunSim({"--trace", trace, "--cluster", cluster, "--online-percent", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["jobs"]["total"], 5);
  EXPECT_EQ(r.json["jobs"]["rejected_exceeds_node"], 1);  // 4 GPUs of the exact A100.
  EXPECT_EQ(r.json["jobs"]["rejected_no_gpu_model"], 1);  // V100-PCIE-16GB: no such model.
  EXPECT_EQ(r.json["jobs"]["submitted"], 3);
  EXPECT_EQ(r.json["jobs"]["completed"], 3);
}

// A batch job larger than the batch quota can never start: it is reported pending at the end.
TEST(SimulatorTest, PendingAtEndAndMaxTime) {
  std::string trace = WriteTempFile(
      "t.csv", std::string(kGenericHeader) + "0,100,1,high,,t\n0,5,4,low,,t\n50,1,1,high,,t\n");
  SimRun r = RunSim({"--trace", trace, "--nodes", "1", "--gpus-per-node", "4", "--online-percent",
                     "0.5", "--max-time", "30", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["jobs"]["submitted"], 2);
  EXPECT_EQ(r.json["jobs"]["running_at_end"], 1);
  EXPECT_EQ(r.json["jobs"]["pending_at_end_low"], 1);
  EXPECT_EQ(r.json["jobs"]["not_arrived"], 1);
  EXPECT_DOUBLE_EQ(r.json["makespan_seconds"], 30.0);
  EXPECT_DOUBLE_EQ(r.json["utilization"], 30.0 / 120.0);
}

TEST(SimulatorTest, SameInputAndSeedGiveIdenticalOutput) {
  std::string trace = WriteTempFile("t.csv", SyntheticTrace(3000));
  std::string cluster = WriteTempFile("c.yaml",
                                      "nodes:\n  - {count: 6, gpus_per_node: 8, model: A}\n"
                                      "  - {count: 4, gpus_per_node: 4, model: B}\n");
  for (const char* policy : {"dgpu", "original"}) {
    std::vector<std::string> args = {"--trace", trace,    "--cluster", cluster, "--policy",
                                     policy,    "--seed", "9",         "--json"};
    SimRun first = RunSim(args);
    SimRun second = RunSim(args);
    ASSERT_EQ(first.code, 0) << first.err;
    ASSERT_EQ(second.code, 0) << second.err;
    EXPECT_EQ(
        first.json["jobs"]["completed"].get<int>() + first.json["jobs"]["rejected"].get<int>(),
        3000);
    EXPECT_GT(first.json["jobs"]["gangs"].get<int>(), 0);  // 8 GPUs of model B: 2 x 4.
    EXPECT_GT(first.json["queueing_delay_seconds"]["all"]["p99"].get<double>(), 0);
    first.json.erase("speed");
    second.json.erase("speed");
    EXPECT_EQ(first.json.dump(), second.json.dump()) << policy;
  }
}

TEST(SimulatorTest, PhillyTraceWithTeamsAsPriorities) {
  std::string trace = WriteTempFile("p.csv",
                                    "timestamp,duration,num_gpus,gpu_time,cluster\n"
                                    "2017-10-09 00:00:10,10,1,10,x\n"
                                    "2017-10-09 00:00:00,10,2,20,y\n"
                                    "2017-10-09 00:00:20,10,16,160,y\n");
  SimRun r = RunSim(
      {"--trace", trace, "--online-teams", "x", "--nodes", "1", "--gpus-per-node", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["input"]["format"], "philly");
  EXPECT_EQ(r.json["input"]["online_teams"], Json::array({"x"}));
  EXPECT_EQ(r.json["queueing_delay_seconds"]["high"]["count"], 1);
  EXPECT_EQ(r.json["queueing_delay_seconds"]["low"]["count"], 1);
  EXPECT_EQ(r.json["jobs"]["rejected_exceeds_node"], 1);
  EXPECT_DOUBLE_EQ(r.json["makespan_seconds"], 20.0);
}

TEST(SimulatorTest, TextReportAndErrors) {
  std::string trace =
      WriteTempFile("t.csv", std::string(kGenericHeader) + "0,10,2,low,,t\n0,x,2,low,,t\n");
  SimRun r = RunSim({"--trace", trace});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(trace + ":3: field 'duration'"));

  trace = WriteTempFile("ok.csv", std::string(kGenericHeader) + "0,10,2,low,,t\n");
  r = RunSim({"--trace", trace});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("queueing delay"));
  EXPECT_THAT(r.out, HasSubstr("speed:"));

  r = RunSim({"--trace", trace, "--policy", "magic"});
  EXPECT_EQ(r.code, 2);
  r = RunSim({"--trace", trace, "--online-percent", "1.5"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--online-percent"));
}

}  // namespace
}  // namespace dgpu::sim
