#include "agent/nvml_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;

class NvmlDiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearEnv(); }
  void TearDown() override { ClearEnv(); }
  static void ClearEnv() {
    for (const char* name :
         {"FAKE_NVML_INIT_RC", "FAKE_NVML_COUNT_RC", "FAKE_NVML_MEM_RC", "FAKE_NVML_UTIL_RC",
          "FAKE_NVML_TEMP_RC", "FAKE_NVML_NVLINK_RC", "FAKE_NVML_TOPO_RC"}) {
      unsetenv(name);
    }
  }
};

TEST_F(NvmlDiscoveryTest, DiscoversCannedGpus) {
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  ASSERT_TRUE(discovery.Init().ok());  // Idempotent.
  auto devices = discovery.Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  std::vector<GpuDevice> want = {
      {0, "GPU-aaaaaaaa-bbbb-cccc-dddd-000000000000", "NVIDIA A100-SXM4-80GB", 81920, 1024, 37, 41,
       "00000000:07:00.0"},
      {1, "GPU-aaaaaaaa-bbbb-cccc-dddd-000000000001", "NVIDIA A100-SXM4-80GB", 81920, 1536, 57, 44,
       "00000000:0F:00.0"}};
  want[0].minor_number = 1;  // The device files' minors, not the indices.
  want[1].minor_number = 0;
  EXPECT_EQ(*devices, want);
  EXPECT_EQ(discovery.name(), "nvml");
}

TEST_F(NvmlDiscoveryTest, NotSupportedMetricsAreUnknown) {
  setenv("FAKE_NVML_UTIL_RC", "3", 1);
  setenv("FAKE_NVML_TEMP_RC", "3", 1);
  setenv("FAKE_NVML_MEM_RC", "3", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  auto devices = discovery.Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  for (const auto& gpu : *devices) {
    EXPECT_EQ(gpu.utilization_pct, std::nullopt);
    EXPECT_EQ(gpu.temperature_c, std::nullopt);
    EXPECT_EQ(gpu.memory_total_mb, 0);
    EXPECT_EQ(gpu.memory_used_mb, 0);
  }
  EXPECT_EQ((*devices)[1].uuid, "GPU-aaaaaaaa-bbbb-cccc-dddd-000000000001");
}

TEST_F(NvmlDiscoveryTest, OtherMetricErrorsFail) {
  setenv("FAKE_NVML_TEMP_RC", "15", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  auto devices = discovery.Discover();
  EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(devices.status().message(),
            "nvmlDeviceGetTemperature (GPU 0) failed: GPU is lost (15)");
}

TEST_F(NvmlDiscoveryTest, MissingLibrary) {
  NvmlDiscovery discovery("/nonexistent/libnvidia-ml.so.1");
  Status status = discovery.Init();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("cannot load NVML library '/nonexistent/libnvidia-ml.so.1'"));
  EXPECT_EQ(discovery.Discover().status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(NvmlDiscoveryTest, MissingSymbol) {
  NvmlDiscovery discovery(DGPU_FAKE_NVML_NO_UUID_PATH);
  Status status = discovery.Init();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), std::string("NVML library '") + DGPU_FAKE_NVML_NO_UUID_PATH +
                                  "' lacks symbol(s): nvmlDeviceGetUUID");
}

TEST_F(NvmlDiscoveryTest, DriverNotLoaded) {
  setenv("FAKE_NVML_INIT_RC", "9", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  Status status = discovery.Init();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "nvmlInit_v2 failed: Driver Not Loaded (9)");
  // A later Init() succeeds once the driver is there.
  unsetenv("FAKE_NVML_INIT_RC");
  EXPECT_TRUE(discovery.Init().ok());
}

TEST_F(NvmlDiscoveryTest, NoPermission) {
  setenv("FAKE_NVML_INIT_RC", "4", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  EXPECT_EQ(discovery.Init().code(), StatusCode::kPermissionDenied);
}

TEST_F(NvmlDiscoveryTest, CountFailure) {
  setenv("FAKE_NVML_COUNT_RC", "999", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  auto devices = discovery.Discover();
  EXPECT_EQ(devices.status().code(), StatusCode::kInternal);
  EXPECT_EQ(devices.status().message(), "nvmlDeviceGetCount_v2 failed: Unknown Error (999)");
}

TEST_F(NvmlDiscoveryTest, Topology) {
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  auto links = discovery.DiscoverTopology();
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  EXPECT_EQ(*links, (std::vector<GpuLink>{{0, 1, 8, PcieAncestor::kHostBridge}}));
  EXPECT_EQ(LinkGroups(*links), (std::map<int, int>{{0, 0}, {1, 0}}));
}

TEST_F(NvmlDiscoveryTest, TopologyWithoutNvLinkOrAncestor) {
  setenv("FAKE_NVML_NVLINK_RC", "3", 1);  // No NVLink on this GPU.
  setenv("FAKE_NVML_TOPO_RC", "3", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  auto links = discovery.DiscoverTopology();
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  EXPECT_EQ(*links, (std::vector<GpuLink>{{0, 1, 0, std::nullopt}}));
}

TEST_F(NvmlDiscoveryTest, TopologyWithNvLinkErrorIsUnknown) {
  setenv("FAKE_NVML_NVLINK_RC", "999", 1);
  NvmlDiscovery discovery(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(discovery.Init().ok());
  auto links = discovery.DiscoverTopology();
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(*links, (std::vector<GpuLink>{{0, 1, std::nullopt, PcieAncestor::kHostBridge}}));
}

}  // namespace
}  // namespace dgpu::agent
