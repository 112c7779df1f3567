// dgpu-sim --autoscale: the file, and replays whose nodes come and go, worked out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/cluster.h"
#include "sim_run.h"
#include "test_files.h"

namespace dgpu::sim {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using testing_util::kGenericHeader;
using testing_util::RunSim;
using testing_util::SimRun;
using testing_util::WriteTempFile;

constexpr char kGroup[] =
    "scale_up_delay: 60\n"
    "idle_timeout: 600\n"
    "node_groups:\n"
    "  - {name: g, model: gpu, gpus_per_node: 8, min_nodes: 0, max_nodes: 10,\n"
    "     scale_up_program: /usr/local/bin/up, scale_down_program: /usr/local/bin/down}\n";

TEST(SimAutoscaleFileTest, SectionOrWholeConfigurationAndPreciseErrors) {
  auto s = ParseAutoscaleYaml(kGroup, "a.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->scale_up_delay, 60 * core::kMicrosPerSecond);
  EXPECT_EQ(s->idle_timeout, 600 * core::kMicrosPerSecond);
  ASSERT_EQ(s->groups.size(), 1u);
  EXPECT_EQ(std::make_tuple(s->groups[0].name, s->groups[0].model, s->groups[0].gpus_per_node,
                            s->groups[0].min_nodes, s->groups[0].max_nodes),
            std::make_tuple(std::string("g"), std::string("gpu"), 8, 0, 10));
  // A scheduler configuration: its autoscale section.
  auto whole = ParseAutoscaleYaml(
      "server: {http_address: ':8080'}\nautoscale:\n  enabled: true\n  idle_timeout: 30\n"
      "  node_groups: [{name: a, model: A100, max_nodes: 2}]\n",
      "scheduler.yaml");
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->idle_timeout, 30 * core::kMicrosPerSecond);
  EXPECT_EQ(whole->groups[0].gpus_per_node, 8);

  const std::pair<const char*, const char*> bad[] = {
      {"idle_timeout: 5\n", "b.yaml: node_groups must list at least one group"},
      {"idle_timeout: -1\nnode_groups: [{name: a, model: m, max_nodes: 1}]\n",
       "b.yaml: idle_timeout: must be a number of seconds >= 0"},
      {"idle_timeout: 0\nnode_groups: [{name: a, model: m, max_nodes: 1}]\n",
       "b.yaml: idle_timeout: must be above 0"},
      {"idle: 5\nnode_groups: [{name: a, model: m, max_nodes: 1}]\n", "b.yaml: unknown key 'idle'"},
      {"node_groups: [{name: a, model: m}]\n",
       "b.yaml: node_groups[0]: max_nodes: required, 1..100000"},
      {"node_groups: [{name: a, model: m, max_nodes: 2, min_nodes: 3}]\n",
       "b.yaml: node_groups[0]: min_nodes: must be 0..max_nodes"},
      {"node_groups: [{name: a, max_nodes: 2}]\n", "b.yaml: node_groups[0]: model: required"},
      {"node_groups: [{name: a, model: m, max_nodes: 2}, {name: a, model: m, max_nodes: 2}]\n",
       "b.yaml: node_groups[1]: name: 'a' is listed twice"},
      {"node_groups: [{name: a, model: m, max_nodes: 2, gpus_per_node: 0}]\n",
       "b.yaml: node_groups[0]: gpus_per_node: must be 1..1024"},
      {"node_groups: [{name: a, model: m, max_nodes: 2, size: 1}]\n",
       "b.yaml: node_groups[0]: unknown key 'size'"},
  };
  for (const auto& [text, error] : bad) {
    auto r = ParseAutoscaleYaml(text, "b.yaml");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message(), error) << text;
  }
}

// Group g: 8-GPU nodes, none at first; scale_up_delay 60 s, boot 300 s, the planner every 10 s.
//   t=0    three high 8-GPU jobs of 3600 s wait (no_gpu_model).
//   t=10   a low 4-GPU job of 3600 s waits too.
//   t=60   the high jobs have waited 60 s: three nodes asked for (boot until 360).
//   t=70   the low job has waited 60 s: the nodes asked for are full with the high jobs: a
//          fourth node (boot until 370).
//   t=360  three nodes register (24 GPUs: online quota 17, batch 7). The low job runs first,
//          within its quota; two high jobs fill two nodes, the third waits for a whole node.
//   t=370  the fourth node: the third high job starts.
// Delays: high 360, 360, 370; low 350. Provisioned: 3 nodes from 60 and one from 70 to the end
// (3970): (3 * 3910 + 3900) * 8 GPU-s = 34.7333 GPU-hours.
TEST(SimAutoscaleTest, NodesComeUpForWaitingWorkAfterTheDelayAndTheBoot) {
  std::string trace =
      WriteTempFile("t.csv", std::string(kGenericHeader) +
                                 "0,3600,8,high,,a\n0,3600,8,high,,a\n0,3600,8,high,,a\n"
                                 "10,3600,4,low,,b\n");
  std::string groups = WriteTempFile("as.yaml", kGroup);
  SimRun r = RunSim(
      {"--trace", trace, "--autoscale", groups, "--boot-time", "300", "--borrowing", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& j = r.json;
  EXPECT_EQ(j["queueing_delay_seconds"]["high"]["mean"].get<double>(), (360.0 * 2 + 370) / 3);
  EXPECT_EQ(j["queueing_delay_seconds"]["high"]["p99"], 370.0);
  EXPECT_EQ(j["queueing_delay_seconds"]["low"]["mean"], 350.0);
  const Json& a = j["autoscale"];
  EXPECT_EQ(a["scale_ups"], 2);
  EXPECT_EQ(a["nodes_requested"], 4);
  EXPECT_EQ(a["nodes_released"], 0);
  EXPECT_EQ(a["peak_nodes"], 4);
  EXPECT_NEAR(a["provisioned_gpu_hours"].get<double>(), (3 * 3910 + 3900) * 8 / 3600.0, 1e-9);
  EXPECT_EQ(j["makespan_seconds"], 3970.0);
}

// One 1-GPU job of 100 s at 0, another at 5000. The first brings a node up (ask at 60, runs
// 360-460); idle from 460, it is released at the first look 600 s later (1060). The second job
// waits 60 s, then a new node boots for 300 s: delay 360. The node is provisioned 60-1060 and
// 5060-5460: 1400 node-seconds of 8 GPUs.
TEST(SimAutoscaleTest, IdleNodesAreReleasedAndNewOnesAskedForLater) {
  std::string trace =
      WriteTempFile("t.csv", std::string(kGenericHeader) + "0,100,1,high,,a\n5000,100,1,high,,a\n");
  std::string groups = WriteTempFile("as.yaml", kGroup);
  SimRun r = RunSim({"--trace", trace, "--autoscale", groups, "--boot-time", "300", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json& a = r.json["autoscale"];
  EXPECT_EQ(r.json["queueing_delay_seconds"]["all"]["mean"], 360.0);
  EXPECT_EQ(std::make_tuple(a["scale_ups"].get<int>(), a["nodes_requested"].get<int>(),
                            a["nodes_released"].get<int>(), a["peak_nodes"].get<int>()),
            std::make_tuple(2, 2, 1, 1));
  EXPECT_NEAR(a["provisioned_gpu_hours"].get<double>(), 1400.0 * 8 / 3600.0, 1e-9);
  EXPECT_EQ(r.json["makespan_seconds"], 5460.0);
}

TEST(SimAutoscaleTest, MinNodesAreUpFromTheStartAndOptionErrors) {
  std::string trace = WriteTempFile("t.csv", std::string(kGenericHeader) + "0,100,8,high,,a\n");
  std::string groups = WriteTempFile(
      "min.yaml", "node_groups: [{name: g, model: gpu, min_nodes: 1, max_nodes: 2}]\n");
  SimRun r = RunSim({"--trace", trace, "--autoscale", groups, "--borrowing", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.json["queueing_delay_seconds"]["all"]["mean"], 0.0);
  EXPECT_EQ(r.json["autoscale"]["nodes_requested"], 0);
  EXPECT_EQ(r.json["autoscale"]["peak_nodes"], 1);

  r = RunSim({"--trace", trace, "--autoscale", groups, "--nodes", "4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--autoscale sets the cluster"));
  r = RunSim({"--trace", trace, "--boot-time", "5"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--boot-time needs --autoscale"));
  r = RunSim({"--trace", trace, "--autoscale", groups, "--boot-time", "-1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--boot-time must be a non-negative number of seconds"));
  r = RunSim({"--trace", trace, "--autoscale", groups, "--policy", "original"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--autoscale needs --policy dgpu"));
  r = RunSim({"--trace", trace, "--autoscale", "/nonexistent.yaml"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot open autoscale file /nonexistent.yaml"));
  // The text report says what was provisioned.
  r = RunSim({"--trace", trace, "--autoscale", groups});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("provisioned"));
  EXPECT_THAT(r.out, HasSubstr("GPU-hours"));
}

}  // namespace
}  // namespace dgpu::sim
