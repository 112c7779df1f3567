#include "sim/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_files.h"

namespace dgpu::sim {
namespace {

using ::testing::HasSubstr;

TEST(ClusterTest, CsvWithHeaderAndComments) {
  auto spec =
      ParseClusterCsv("count,gpus_per_node,model\n# big nodes\n2,8,A100\n3,4,T4\n", "c.csv");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->groups.size(), 2u);
  EXPECT_EQ(spec->NodeCount(), 5);
  EXPECT_EQ(spec->TotalGpus(), 28);
  EXPECT_EQ(spec->groups[1].model, "T4");
}

TEST(ClusterTest, CsvErrorsNameLineAndField) {
  auto spec = ParseClusterCsv("2,8,A100\n2,x,T4\n", "c.csv");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("c.csv:2: field 'gpus_per_node'"));
  spec = ParseClusterCsv("0,8,A100\n", "c.csv");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("c.csv:1: field 'count'"));
}

TEST(ClusterTest, Yaml) {
  auto spec = ParseClusterYaml(
      "nodes:\n  - {count: 2, gpus_per_node: 8, model: A100}\n"
      "  - count: 1\n    gpus_per_node: 2\n    model: T4\n",
      "c.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->TotalGpus(), 18);
}

TEST(ClusterTest, YamlUnknownKeyIsAnError) {
  auto spec = ParseClusterYaml("nodes:\n  - {count: 2, gpus: 8, model: A100}\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("nodes[0]: unknown key 'gpus'"));
}

TEST(ClusterTest, LabelsInYamlAndCsv) {
  auto yaml = ParseClusterYaml(
      "nodes:\n  - {count: 2, gpus_per_node: 8, model: A100, labels: {rack: r1, ib: 'yes'}}\n"
      "  - {count: 1, gpus_per_node: 8, model: A100}\n",
      "c.yaml");
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  EXPECT_EQ(yaml->groups[0].labels, (core::Labels{{"ib", "yes"}, {"rack", "r1"}}));
  EXPECT_TRUE(yaml->groups[1].labels.empty());
  EXPECT_TRUE(yaml->HasLabelKey("rack"));
  EXPECT_FALSE(yaml->HasLabelKey("zone"));
  auto csv = ParseClusterCsv(
      "count,gpus_per_node,model,labels\n2,8,A100,rack=r1; ib=yes\n1,8,A100\n", "c.csv");
  ASSERT_TRUE(csv.ok()) << csv.status().ToString();
  EXPECT_EQ(csv->groups[0].labels, yaml->groups[0].labels);
  EXPECT_TRUE(csv->groups[1].labels.empty());
}

TEST(ClusterTest, BadLabelsNameTheEntryAndTheLabel) {
  auto yaml = ParseClusterYaml(
      "nodes:\n  - {count: 2, gpus_per_node: 8, model: A100, labels: {rack: 'r 1'}}\n", "c.yaml");
  ASSERT_FALSE(yaml.ok());
  EXPECT_EQ(yaml.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(yaml.status().message(), HasSubstr("c.yaml: nodes[0]: field 'labels': rack 'r 1'"));
  yaml = ParseClusterYaml("nodes:\n  - {count: 2, gpus_per_node: 8, model: A, labels: [r1]}\n",
                          "c.yaml");
  ASSERT_FALSE(yaml.ok());
  EXPECT_THAT(yaml.status().message(), HasSubstr("nodes[0]: field 'labels': expected a map"));
  auto csv = ParseClusterCsv("2,8,A100,rack=r1;rack=r2\n", "c.csv");
  ASSERT_FALSE(csv.ok());
  EXPECT_THAT(csv.status().message(),
              HasSubstr("c.csv:1: field 'labels': key 'rack' is given twice"));
  csv = ParseClusterCsv("1,8,A100\n2,8,A100,rack\n", "c.csv");
  ASSERT_FALSE(csv.ok());
  EXPECT_THAT(csv.status().message(),
              HasSubstr("c.csv:2: field 'labels': expected key=value, found 'rack'"));
  csv = ParseClusterCsv("2,8,A100,-rack=r1\n", "c.csv");
  ASSERT_FALSE(csv.ok());
  EXPECT_THAT(csv.status().message(), HasSubstr("c.csv:1: field 'labels': key '-rack'"));
}

TEST(ClusterTest, NvlinkGroupsInYamlAreCheckedAgainstTheNodesGpus) {
  auto yaml = ParseClusterYaml(
      "nodes:\n  - {count: 2, gpus_per_node: 4, model: A100, nvlink_groups: [[0, 1], [2, 3]]}\n"
      "  - {count: 1, gpus_per_node: 8, model: A100}\n",
      "c.yaml");
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  EXPECT_EQ(yaml->groups[0].nvlink_groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(yaml->groups[1].nvlink_groups.empty());
  EXPECT_TRUE(yaml->HasNvlinkGroups());
  const std::pair<const char*, const char*> bad[] = {
      {"[[0, 4]]",
       "c.yaml: nodes[0]: field 'nvlink_groups': group 0: GPU 4 is not one of the "
       "node's GPUs (0 to 3)"},
      {"[[0, 1], [1, 2]]",
       "c.yaml: nodes[0]: field 'nvlink_groups': group 1: GPU 1 is in a "
       "group already"},
      {"[[0]]", "c.yaml: nodes[0]: field 'nvlink_groups': group 0: a group has at least 2 GPUs"},
      {"[0, 1]",
       "c.yaml: nodes[0]: field 'nvlink_groups': a group must be a list of GPU "
       "indices"},
      {"x", "c.yaml: nodes[0]: field 'nvlink_groups': expected a list of lists of GPU indices"},
  };
  for (const auto& [groups, message] : bad) {
    auto spec = ParseClusterYaml(std::string("nodes:\n  - {count: 1, gpus_per_node: 4, model: A, "
                                             "nvlink_groups: ") +
                                     groups + "}\n",
                                 "c.yaml");
    ASSERT_FALSE(spec.ok()) << groups;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(message)) << groups;
  }
}

TEST(ClusterTest, LoadPicksParserByExtension) {
  auto csv = LoadClusterFile(testing_util::WriteTempFile("c.csv", "1,4,V100\n"));
  ASSERT_TRUE(csv.ok()) << csv.status().ToString();
  EXPECT_EQ(csv->TotalGpus(), 4);
  auto yaml = LoadClusterFile(
      testing_util::WriteTempFile("c.yaml", "nodes: [{count: 3, gpus_per_node: 2, model: X}]\n"));
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  EXPECT_EQ(yaml->TotalGpus(), 6);
}

}  // namespace
}  // namespace dgpu::sim
