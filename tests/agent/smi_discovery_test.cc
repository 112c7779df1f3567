#include "agent/smi_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

GpuDevice Gpu(int index, std::string uuid, std::string name, int64_t total, int64_t used,
              std::optional<int> util, std::optional<int> temp, std::string bus) {
  return {index, std::move(uuid), std::move(name), total, used, util, temp, std::move(bus)};
}

TEST(ParseNvidiaSmiCsvTest, NormalOutput) {
  auto devices = ParseNvidiaSmiCsv(
      "0, GPU-aaa, NVIDIA A100-SXM4-80GB, 81920, 1024, 37, 41, 00000000:07:00.0\n"
      "1, GPU-bbb, NVIDIA A100-SXM4-80GB, 81920, 0, 0, 40, 00000000:0F:00.0\n");
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ(*devices,
            (std::vector<GpuDevice>{
                Gpu(0, "GPU-aaa", "NVIDIA A100-SXM4-80GB", 81920, 1024, 37, 41, "00000000:07:00.0"),
                Gpu(1, "GPU-bbb", "NVIDIA A100-SXM4-80GB", 81920, 0, 0, 40, "00000000:0F:00.0")}));
}

TEST(ParseNvidiaSmiCsvTest, UnavailableValuesAreUnknown) {
  auto devices = ParseNvidiaSmiCsv(
      "0, GPU-aaa, Tesla T4, 15360, 5, [N/A], [Not Supported], 00000000:3B:00.0\n"
      "1, GPU-bbb, Tesla T4, [N/A], [Not Supported], N/A, 35, [N/A]\n");
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ(*devices,
            (std::vector<GpuDevice>{Gpu(0, "GPU-aaa", "Tesla T4", 15360, 5, std::nullopt,
                                        std::nullopt, "00000000:3B:00.0"),
                                    Gpu(1, "GPU-bbb", "Tesla T4", 0, 0, std::nullopt, 35, "")}));
}

TEST(ParseNvidiaSmiCsvTest, OddSpacingBlankLinesAndCrlf) {
  auto devices = ParseNvidiaSmiCsv(
      "\r\n"
      "  0 ,GPU-aaa,   Tesla V100-SXM2-32GB ,32768,\t0 ,  0,34,00000000:06:00.0   \r\n"
      "\n"
      "   \n"
      "1,GPU-bbb,Tesla V100-SXM2-32GB,32768,12,100,35,00000000:07:00.0");
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ(
      *devices,
      (std::vector<GpuDevice>{
          Gpu(0, "GPU-aaa", "Tesla V100-SXM2-32GB", 32768, 0, 0, 34, "00000000:06:00.0"),
          Gpu(1, "GPU-bbb", "Tesla V100-SXM2-32GB", 32768, 12, 100, 35, "00000000:07:00.0")}));
}

TEST(ParseNvidiaSmiCsvTest, EmptyOutputHasNoGpus) {
  auto devices = ParseNvidiaSmiCsv("\n\n");
  ASSERT_TRUE(devices.ok());
  EXPECT_TRUE(devices->empty());
}

TEST(ParseNvidiaSmiCsvTest, MalformedLinesNameTheLine) {
  struct Case {
    std::string output;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"0, GPU-a, T4, 1, 0, 0, 30, bus\nNo devices were found\n",
       "nvidia-smi output line 2: expected 8 fields, got 1: 'No devices were found'"},
      {"x, GPU-a, T4, 1, 0, 0, 30, bus\n", "nvidia-smi output line 1: index 'x'"},
      {"\n0, GPU-a, T4, 16 MiB, 0, 0, 30, bus\n",
       "nvidia-smi output line 2: memory.total '16 MiB'"},
      {"0, GPU-a, T4, 16, -3, 0, 30, bus\n", "nvidia-smi output line 1: memory.used '-3'"},
      {"0, GPU-a, T4, 16, 0, 7 %, 30, bus\n", "nvidia-smi output line 1: utilization.gpu '7 %'"},
      {"0, GPU-a, T4, 16, 0, 7, hot, bus\n", "nvidia-smi output line 1: temperature.gpu 'hot'"},
      {"0, , T4, 16, 0, 7, 30, bus\n", "nvidia-smi output line 1: missing uuid"},
      {"0, GPU-a, [N/A], 16, 0, 7, 30, bus\n", "nvidia-smi output line 1: missing name"},
      {"0, GPU-a, T4, 16, 0, 7, 30, bus, extra\n",
       "nvidia-smi output line 1: expected 8 fields, got 9"},
  };
  for (const auto& c : cases) {
    auto devices = ParseNvidiaSmiCsv(c.output);
    ASSERT_FALSE(devices.ok()) << c.output;
    EXPECT_EQ(devices.status().code(), StatusCode::kInvalidArgument) << c.output;
    EXPECT_THAT(devices.status().message(), HasSubstr(c.message)) << c.output;
  }
}

TEST(NvidiaSmiQueryArgsTest, ExactQuery) {
  EXPECT_EQ(NvidiaSmiQueryArgs(),
            (std::vector<std::string>{"--query-gpu=index,uuid,name,memory.total,memory.used,"
                                      "utilization.gpu,temperature.gpu,pci.bus_id",
                                      "--format=csv,noheader,nounits"}));
}

TEST(SmiDiscoveryTest, RunsTestLocalScript) {
  SmiDiscovery discovery(std::string(DGPU_TEST_LOCAL_DIR) + "/nvidia-smi", 5000);
  ASSERT_TRUE(discovery.Init().ok());
  auto devices = discovery.Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  const std::string model = "Tesla V100-SXM2-32GB";
  EXPECT_EQ(*devices, (std::vector<GpuDevice>{Gpu(0, "GPU-5e0d7a3c-0000-4000-8000-000000000000",
                                                  model, 32768, 0, 0, 34, "00000000:06:00.0"),
                                              Gpu(1, "GPU-5e0d7a3c-0000-4000-8000-000000000001",
                                                  model, 32768, 0, 0, 35, "00000000:07:00.0"),
                                              Gpu(2, "GPU-5e0d7a3c-0000-4000-8000-000000000002",
                                                  model, 32768, 0, 0, 36, "00000000:0A:00.0"),
                                              Gpu(3, "GPU-5e0d7a3c-0000-4000-8000-000000000003",
                                                  model, 32768, 0, 0, 37, "00000000:0B:00.0")}));
  auto topology = discovery.DiscoverTopology();
  ASSERT_TRUE(topology.ok());
  EXPECT_TRUE(topology->empty());
  EXPECT_EQ(discovery.name(), "nvidia-smi");
}

TEST(SmiDiscoveryTest, DiscoverBeforeInitIsRefused) {
  SmiDiscovery discovery(std::string(DGPU_TEST_LOCAL_DIR) + "/nvidia-smi");
  EXPECT_EQ(discovery.Discover().status().code(), StatusCode::kFailedPrecondition);
}

TEST(SmiDiscoveryTest, MissingBinaryIsUnavailable) {
  SmiDiscovery discovery("/nonexistent/nvidia-smi");
  Status status = discovery.Init();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/nvidia-smi"));
}

TEST(SmiDiscoveryTest, FailingBinaryReportsExitAndMessage) {
  TempDir dir;
  WriteFile(dir.File("nvidia-smi"),
            "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the "
            "NVIDIA driver.\"\nexit 9\n",
            true);
  SmiDiscovery discovery(dir.File("nvidia-smi"));
  Status status = discovery.Init();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("failed with exit code 9: NVIDIA-SMI has failed because it couldn't "
                        "communicate with the NVIDIA driver."));
}

TEST(SmiDiscoveryTest, HangingBinaryTimesOut) {
  TempDir dir;
  WriteFile(dir.File("nvidia-smi"), "#!/bin/sh\nsleep 30\n", true);
  SmiDiscovery discovery(dir.File("nvidia-smi"), 200);
  const auto start = std::chrono::steady_clock::now();
  Status status = discovery.Init();
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace dgpu::agent
