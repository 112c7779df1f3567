#include "agent/fake_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/gpu_discovery.h"

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;

TEST(FakeDiscoveryTest, DeterministicGpus) {
  FakeDiscovery discovery({2, "NVIDIA H100 80GB HBM3", 81559, "node-a"});
  ASSERT_TRUE(discovery.Init().ok());
  auto devices = discovery.Discover();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(*devices, (std::vector<GpuDevice>{{0, "GPU-fake-node-a-0", "NVIDIA H100 80GB HBM3",
                                               81559, 0, 0, std::nullopt, "00000000:01:00.0"},
                                              {1, "GPU-fake-node-a-1", "NVIDIA H100 80GB HBM3",
                                               81559, 0, 0, std::nullopt, "00000000:02:00.0"}}));
  auto links = discovery.DiscoverTopology();
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(*links, (std::vector<GpuLink>{{0, 1, 0, PcieAncestor::kHostBridge}}));
}

TEST(FakeDiscoveryTest, NvlinkGroupsJoinTheirPairs) {
  FakeDiscoveryOptions options;
  options.nvlink_groups = {{0, 2}, {1, 3}};
  FakeDiscovery discovery(options);
  ASSERT_TRUE(discovery.Init().ok());
  auto links = discovery.DiscoverTopology();
  ASSERT_TRUE(links.ok());
  const auto h = PcieAncestor::kHostBridge;
  EXPECT_EQ(
      *links,
      (std::vector<GpuLink>{
          {0, 1, 0, h}, {0, 2, 2, h}, {0, 3, 0, h}, {1, 2, 0, h}, {1, 3, 2, h}, {2, 3, 0, h}}));
  EXPECT_EQ(LinkGroups(*links), (std::map<int, int>{{0, 0}, {1, 1}, {2, 0}, {3, 1}}));
  options.nvlink_groups = {{0, 4}};
  Status bad = FakeDiscovery(options).Init();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "gpu.fake.nvlink_groups: group 0: GPU 4 is not one of the node's GPUs (0 to 3)");
}

TEST(LinkGroupsTest, GpusJoinedThroughOthersAreOneGroupNumberedByTheirLowestIndex) {
  const auto h = PcieAncestor::kHostBridge;
  // 5-3 and 3-4 (a chain), 1-2; 0 and 6 joined to none.
  std::vector<GpuLink> links = {{1, 2, 4, h}, {3, 5, 1, h}, {3, 4, 2, h}, {0, 6, 0, h}};
  EXPECT_EQ(LinkGroups(links), (std::map<int, int>{{1, 0}, {2, 0}, {3, 1}, {4, 1}, {5, 1}}));
  // Unknown NVLink state (nullopt), or links that lead to NVSwitches only: no group.
  links = {{0, 1, std::nullopt, h}, {0, 2, 0, h}, {1, 2, 0, h}};
  EXPECT_EQ(LinkGroups(links), (std::map<int, int>{}));
}

TEST(FakeDiscoveryTest, DefaultsAreFourV100s) {
  FakeDiscovery discovery(FakeDiscoveryOptions{});
  ASSERT_TRUE(discovery.Init().ok());
  auto devices = discovery.Discover();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ((*devices)[3].uuid, "GPU-fake-0-3");
  EXPECT_EQ((*devices)[3].name, "Tesla V100-SXM2-32GB");
  EXPECT_EQ((*devices)[3].memory_total_mb, 32768);
}

TEST(FakeDiscoveryTest, InvalidOptions) {
  EXPECT_EQ(FakeDiscovery({-1, "m", 1, "0"}).Init().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeDiscovery({1, "", 1, "0"}).Init().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeDiscovery({1, "m", 0, "0"}).Init().code(), StatusCode::kInvalidArgument);
}

TEST(MakeDiscoveryTest, Methods) {
  DiscoveryOptions options;
  for (const char* method : {"nvml", "nvidia-smi", "fake"}) {
    auto discovery = MakeDiscovery(method, options);
    ASSERT_TRUE(discovery.ok()) << method;
    EXPECT_EQ((*discovery)->name(), method);
  }
  auto unknown = MakeDiscovery("cuda", options);
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'cuda'"));
}

TEST(InitDiscoveryWithFallbackTest, NvmlFallsBackToNvidiaSmi) {
  DiscoveryOptions options;
  options.nvml_library_path = "/nonexistent/libnvidia-ml.so.1";
  options.nvidia_smi_path = std::string(DGPU_TEST_LOCAL_DIR) + "/nvidia-smi";
  auto result = InitDiscoveryWithFallback("nvml", options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->discovery->name(), "nvidia-smi");
  ASSERT_EQ(result->skipped.size(), 1u);
  EXPECT_EQ(result->skipped[0].code(), StatusCode::kUnavailable);
  EXPECT_THAT(result->skipped[0].message(), HasSubstr("nvml: cannot load NVML library"));
  auto devices = result->discovery->Discover();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(devices->size(), 4u);
}

TEST(InitDiscoveryWithFallbackTest, NothingWorks) {
  DiscoveryOptions options;
  options.nvml_library_path = "/nonexistent/libnvidia-ml.so.1";
  options.nvidia_smi_path = "/nonexistent/nvidia-smi";
  auto result = InitDiscoveryWithFallback("nvidia-smi", options);
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(), HasSubstr("no GPU discovery method works: nvidia-smi: "));
  EXPECT_THAT(result.status().message(), HasSubstr("; nvml: cannot load NVML library"));
}

TEST(InitDiscoveryWithFallbackTest, NvmlWorks) {
  DiscoveryOptions options;
  options.nvml_library_path = DGPU_FAKE_NVML_PATH;
  auto result = InitDiscoveryWithFallback("nvml", options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->discovery->name(), "nvml");
  EXPECT_TRUE(result->skipped.empty());
}

TEST(InitDiscoveryWithFallbackTest, FakeNeverFallsBack) {
  DiscoveryOptions options;
  options.fake.count = -1;
  auto result = InitDiscoveryWithFallback("fake", options);
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dgpu::agent
