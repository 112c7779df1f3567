// GPU health: each discovery method's CheckHealth (the fake's fault file, NVML through the test's
// fake libnvidia-ml.so, nvidia-smi through test-local's fake script) and the GpuMonitor that runs
// them with the health-check program.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>

#include "agent/fake_discovery.h"
#include "agent/gpu_monitor.h"
#include "agent/nvml_discovery.h"
#include "agent/smi_discovery.h"
#include "test_util.h"

namespace dgpu::agent {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;
using Faults = std::vector<GpuFault>;

TEST(FaultFileTest, ListsIndicesWithTheirReasons) {
  auto faults = ParseFaultFile("# bad GPUs\n1 xid 79\n\n  3\t\n1 listed twice\n", "/f");
  ASSERT_TRUE(faults.ok()) << faults.status().ToString();
  EXPECT_EQ(*faults, (Faults{{1, "xid 79"}, {3, "fault listed in /f"}}));
  EXPECT_EQ(ParseFaultFile("", "/f")->size(), 0u);
  for (const char* bad : {"x 1\n", "-1\n", "1024\n", "2x\n"}) {
    auto r = ParseFaultFile(std::string("0 ok\n") + bad, "/f");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("/f line 2: expected a GPU index")) << bad;
  }
}

TEST(FaultFileTest, TheFakeReadsItAtEveryCheck) {
  TempDir dir;
  FakeDiscoveryOptions options;
  options.count = 2;
  options.fault_file = dir.File("faults");
  FakeDiscovery fake(options);
  EXPECT_EQ(fake.CheckHealth().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(fake.Init().ok());
  EXPECT_EQ(*fake.CheckHealth(), Faults{}) << "no file: no fault";
  WriteFile(options.fault_file, "1 ecc\n7 not on this node\n");
  EXPECT_EQ(*fake.CheckHealth(), (Faults{{1, "ecc"}}));
  WriteFile(options.fault_file, "one\n");
  EXPECT_EQ(fake.CheckHealth().status().code(), StatusCode::kInvalidArgument);
  WriteFile(options.fault_file, "");
  EXPECT_EQ(*fake.CheckHealth(), Faults{});
}

class NvmlHealthTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("FAKE_NVML_FAULT_DIR", dir_.path().c_str(), 1); }
  void TearDown() override { unsetenv("FAKE_NVML_FAULT_DIR"); }
  TempDir dir_;
};

TEST_F(NvmlHealthTest, XidEccRetiredPagesAndLostGpus) {
  NvmlDiscovery nvml(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.Init().ok());
  EXPECT_EQ(*nvml.CheckHealth(), Faults{});

  // An application's XID (13) says nothing about the GPU; 79 does, and stays.
  WriteFile(dir_.File("xid"), "0 13\n1 79\n");
  EXPECT_EQ(*nvml.CheckHealth(), (Faults{{1, "xid 79"}}));
  EXPECT_EQ(*nvml.CheckHealth(), (Faults{{1, "xid 79"}})) << "an XID stays until a restart";

  WriteFile(dir_.File("ecc-0"), "2\n");
  WriteFile(dir_.File("pending-1"), "");
  EXPECT_EQ(*nvml.CheckHealth(),
            (Faults{{0, "uncorrectable ECC errors: 2"},
                    {1, "xid 79; retired pages pending (the GPU needs a reset)"}}));
  // A reset clears the volatile counters and the pending pages.
  std::filesystem::remove(dir_.File("ecc-0"));
  std::filesystem::remove(dir_.File("pending-1"));
  WriteFile(dir_.File("lost-0"), "");
  auto faults = nvml.CheckHealth();
  ASSERT_TRUE(faults.ok()) << faults.status().ToString();
  EXPECT_EQ(*faults, (Faults{{0, "GPU is lost (fell off the bus)"}, {1, "xid 79"}}));
  std::filesystem::remove(dir_.File("lost-0"));
  EXPECT_EQ(*nvml.CheckHealth(), (Faults{{1, "xid 79"}}));

  // A new process (an agent restarted after the GPU was reset) starts clean: NVML delivers
  // events that happen after a set is created, and the old one is past.
  std::filesystem::remove(dir_.File("xid"));
  NvmlDiscovery restarted(DGPU_FAKE_NVML_PATH);
  ASSERT_TRUE(restarted.Init().ok());
  EXPECT_EQ(*restarted.CheckHealth(), Faults{});
}

TEST(SmiHealthTest, ParsesEccAndRetiredPages) {
  auto faults = ParseNvidiaSmiHealthCsv("0, 0, No\n1, 3, No\n2, [N/A], Yes\n3, [N/A], [N/A]\n");
  ASSERT_TRUE(faults.ok()) << faults.status().ToString();
  EXPECT_EQ(*faults, (Faults{{1, "uncorrectable ECC errors: 3"},
                             {2, "retired pages pending (the GPU needs a reset)"}}));
  EXPECT_THAT(ParseNvidiaSmiHealthCsv("0, x, No\n").status().message(),
              HasSubstr("line 1: ECC count 'x'"));
  EXPECT_THAT(ParseNvidiaSmiHealthCsv("0, 0\n").status().message(),
              HasSubstr("expected 3 fields, got 2"));
  EXPECT_THAT(ParseNvidiaSmiHealthCsv("0, 0, Maybe\n").status().message(),
              HasSubstr("retired_pages.pending 'Maybe'"));
}

TEST(SmiHealthTest, RunsTheHealthQuery) {
  TempDir dir;
  setenv("FAKE_NVIDIA_SMI_FAULT_DIR", dir.path().c_str(), 1);
  SmiDiscovery smi(std::string(DGPU_TEST_LOCAL_DIR) + "/nvidia-smi", 5000);
  ASSERT_TRUE(smi.Init().ok());
  EXPECT_EQ(*smi.CheckHealth(), Faults{});
  WriteFile(dir.File("ecc-2"), "5\n");
  WriteFile(dir.File("pending-3"), "");
  auto faults = smi.CheckHealth();
  unsetenv("FAKE_NVIDIA_SMI_FAULT_DIR");
  ASSERT_TRUE(faults.ok()) << faults.status().ToString();
  EXPECT_EQ(*faults, (Faults{{2, "uncorrectable ECC errors: 5"},
                             {3, "retired pages pending (the GPU needs a reset)"}}));
}

std::unique_ptr<GpuMonitor> Monitor(const std::string& fault_file, const std::string& program,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  FakeDiscoveryOptions options;
  options.count = 2;
  options.fault_file = fault_file;
  auto fake = std::make_unique<FakeDiscovery>(options);
  EXPECT_TRUE(fake->Init().ok());
  GpuMonitorOptions o;
  o.metrics_interval = std::chrono::hours(1);  // The test drives the checks.
  o.health_interval = std::chrono::hours(1);
  o.health_check_program = program;
  o.program_timeout = timeout;
  return std::make_unique<GpuMonitor>(std::move(fake), o);
}

std::vector<std::string> Reasons(const GpuMonitor& m) {
  std::vector<std::string> out;
  for (const GpuDevice& d : m.Latest().devices) {
    EXPECT_EQ(d.healthy, d.health_reason.empty());
    out.push_back(d.health_reason);
  }
  return out;
}

TEST(GpuMonitorTest, MergesTheMethodsFaultsWithTheProgramsAndCountsChanges) {
  TempDir dir;
  const std::string program = dir.File("check.sh");
  WriteFile(program,
            "#!/bin/sh\n[ -e " + dir.File("sick") + " ] || exit 0\necho 'fan 3 stopped'\nexit 1\n",
            true);
  auto m = Monitor(dir.File("faults"), program);
  ASSERT_TRUE(m->Start().ok());
  EXPECT_EQ(Reasons(*m), (std::vector<std::string>{"", ""}));
  const uint64_t g0 = m->health_generation();

  WriteFile(dir.File("faults"), "0 xid 48\n");
  m->CheckHealth();
  EXPECT_EQ(Reasons(*m), (std::vector<std::string>{"xid 48", ""}));
  EXPECT_EQ(m->health_generation(), g0 + 1);
  m->CheckHealth();
  EXPECT_EQ(m->health_generation(), g0 + 1) << "nothing changed";

  WriteFile(dir.File("sick"), "");
  m->CheckHealth();
  const std::string node = "health check " + program + " failed (exit code 1): fan 3 stopped";
  EXPECT_EQ(Reasons(*m), (std::vector<std::string>{"xid 48; " + node, node}));
  m->RefreshMetrics();
  EXPECT_EQ(Reasons(*m), (std::vector<std::string>{"xid 48; " + node, node}))
      << "new metrics keep the health";

  // A fault file that cannot be parsed keeps what the last check found.
  WriteFile(dir.File("faults"), "zero\n");
  std::filesystem::remove(dir.File("sick"));
  m->CheckHealth();
  EXPECT_EQ(Reasons(*m), (std::vector<std::string>{"xid 48", ""}));
  WriteFile(dir.File("faults"), "");
  m->CheckHealth();
  EXPECT_EQ(Reasons(*m), (std::vector<std::string>{"", ""}));
  m->Stop();
}

TEST(GpuMonitorTest, AProgramThatHangsMakesTheNodeUnhealthy) {
  TempDir dir;
  const std::string program = dir.File("hang.sh");
  WriteFile(program, "#!/bin/sh\nsleep 30\n", true);
  auto m = Monitor("", program, std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(m->Start().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(Reasons(*m)[1], HasSubstr("did not finish within"));
}

TEST(GpuMonitorTest, ChecksOnItsOwnThread) {
  TempDir dir;
  FakeDiscoveryOptions options;
  options.count = 1;
  options.fault_file = dir.File("faults");
  auto fake = std::make_unique<FakeDiscovery>(options);
  ASSERT_TRUE(fake->Init().ok());
  GpuMonitorOptions o;
  o.metrics_interval = std::chrono::milliseconds(20);
  o.health_interval = std::chrono::milliseconds(20);
  GpuMonitor m(std::move(fake), o);
  ASSERT_TRUE(m.Start().ok());
  WriteFile(dir.File("faults"), "0 dead\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (m.Latest().devices[0].healthy && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m.Latest().devices[0].health_reason, "dead");
}

}  // namespace
}  // namespace dgpu::agent
