// The node's CPUs and memory for tasks: `auto` read from this process's affinity mask and
// /proc/meminfo, numbers taken as configured, reserves subtracted (never below 0).
#include "agent/node_resources.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace dgpu::agent {
namespace {

TEST(NodeResourcesTest, AutoReadsTheAffinityMaskAndMemTotal) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(DetectCpusMilli(), int64_t{CPU_COUNT(&set)} * 1000);
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t mb = pages * page / (1024 * 1024);
  // MemTotal and the page count agree to within a page's worth of rounding.
  EXPECT_NEAR(static_cast<double>(DetectMemoryMb()), static_cast<double>(mb), 1.0);

  const common::NodeResourcesConfig config{common::NodeResourcesConfig::kAuto,
                                           common::NodeResourcesConfig::kAuto, 500, 1024};
  const NodeResourceFigures f = ResolveNodeResources(config);
  EXPECT_EQ(f.detected_cpus_milli, DetectCpusMilli());
  EXPECT_EQ(f.cpus_milli, f.detected_cpus_milli - 500);
  EXPECT_EQ(f.memory_mb, f.detected_memory_mb - 1024);
}

TEST(NodeResourcesTest, ConfiguredNumbersLessTheirReservesAndNeverNegative) {
  const NodeResourceFigures f = ResolveNodeResources({16000, 64000, 2000, 4096});
  EXPECT_EQ(std::make_tuple(f.cpus_milli, f.memory_mb, f.detected_cpus_milli, f.detected_memory_mb),
            std::make_tuple(int64_t{14000}, int64_t{59904}, int64_t{0}, int64_t{0}));
  const NodeResourceFigures over = ResolveNodeResources({1000, 512, 2000, 1024});
  EXPECT_EQ(std::make_pair(over.cpus_milli, over.memory_mb),
            std::make_pair(int64_t{0}, int64_t{0}));
}

TEST(NodeResourcesTest, MemTotalIsFoundAmongTheOtherLines) {
  const std::string path = ::testing::TempDir() + "/meminfo";
  {
    std::ofstream out(path);
    out << "MemFree:         1000 kB\nMemTotal:       32768000 kB\nBuffers: 4 kB\n";
  }
  EXPECT_EQ(DetectMemoryMb(path), 32000);
  EXPECT_EQ(DetectMemoryMb(path + ".missing"), 0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dgpu::agent
