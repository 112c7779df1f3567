#include "agent/cpu_sets.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace dgpu::agent {
namespace {

using testing::TempDir;

TEST(CpuListTest, ParsesTheKernelsListFormat) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5"), (std::vector<int>{5}));
  EXPECT_EQ(ParseCpuList("3,1,1-2"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ParseCpuList(""), std::vector<int>{});
  EXPECT_EQ(ParseCpuList("\n"), std::vector<int>{});
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1,", "0-99999999", "1 2"}) {
    EXPECT_FALSE(ParseCpuList(bad).has_value()) << bad;
  }
}

TEST(CpuListTest, FormatsWithRangesFolded) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(FormatCpuList({1, 3, 4}), "1,3-4");
  EXPECT_EQ(FormatCpuList({7}), "7");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(CpuTopologyTest, NodesAndAGpusLocalCpusFromSysfs) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("node/node0"));
  std::filesystem::create_directories(dir.File("node/node1"));
  std::filesystem::create_directories(dir.File("node/power"));
  std::ofstream(dir.File("node/node0/cpulist")) << "0-1,4-5\n";
  std::ofstream(dir.File("node/node1/cpulist")) << "2-3,6-7\n";
  const std::map<int, int> nodes = ReadCpuNodes(dir.File("node"));
  EXPECT_EQ(nodes,
            (std::map<int, int>{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 0}, {5, 0}, {6, 1}, {7, 1}}));
  EXPECT_TRUE(ReadCpuNodes(dir.File("none")).empty());

  std::filesystem::create_directories(dir.File("pci/0000:3b:00.0"));
  std::ofstream(dir.File("pci/0000:3b:00.0/local_cpulist")) << "2-3,6-7\n";
  // NVML's bus id: an 8-digit domain, upper case.
  EXPECT_EQ(LocalCpusOfPciDevice("00000000:3B:00.0", dir.File("pci")),
            (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(LocalCpusOfPciDevice("0000:3b:00.0", dir.File("pci")), (std::vector<int>{2, 3, 6, 7}));
  EXPECT_TRUE(LocalCpusOfPciDevice("00000000:3C:00.0", dir.File("pci")).empty());
  EXPECT_TRUE(LocalCpusOfPciDevice("../../etc", dir.File("pci")).empty());
  EXPECT_TRUE(LocalCpusOfPciDevice("", dir.File("pci")).empty());
}

// Two NUMA nodes of four CPUs each: 0-3 on node 0, 4-7 on node 1.
CpuPool TwoNodes() {
  std::map<int, int> nodes;
  for (int c = 0; c < 8; ++c) nodes[c] = c / 4;
  return CpuPool({0, 1, 2, 3, 4, 5, 6, 7}, nodes);
}

TEST(CpuPoolTest, ATaskGetsCpusLocalToItsGpusFirst) {
  CpuPool pool = TwoNodes();
  EXPECT_EQ(pool.Take(2, {4, 5, 6, 7}), (std::vector<int>{4, 5}));
  EXPECT_EQ(pool.Take(3, {4, 5, 6, 7}), (std::vector<int>{0, 6, 7}));  // 2 local left.
  EXPECT_EQ(pool.free_count(), 3u);
}

TEST(CpuPoolTest, WithoutLocalCpusATaskStaysOnTheNodeWithTheMostFree) {
  CpuPool pool = TwoNodes();
  EXPECT_EQ(pool.Take(1, {}), (std::vector<int>{0}));        // A tie: the lower node.
  EXPECT_EQ(pool.Take(3, {}), (std::vector<int>{4, 5, 6}));  // Node 1 has 4 free, node 0 has 3.
  EXPECT_EQ(pool.Take(3, {}), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(pool.Take(2, {}), std::nullopt);  // One left.
  EXPECT_EQ(pool.Take(1, {}), (std::vector<int>{7}));
  EXPECT_EQ(pool.Take(1, {}), std::nullopt);
  EXPECT_EQ(pool.Take(0, {}), std::nullopt);
}

TEST(CpuPoolTest, CpusComeBackAndAdoptedTasksHoldTheirs) {
  CpuPool pool = TwoNodes();
  EXPECT_TRUE(pool.Hold({1, 2}));
  EXPECT_FALSE(pool.Hold({2, 3}));  // 2 is held already; 3 is taken now.
  EXPECT_TRUE(pool.Hold({42}));     // Not the pool's: ignored.
  EXPECT_EQ(pool.free_count(), 5u);
  EXPECT_EQ(pool.Take(4, {}), (std::vector<int>{4, 5, 6, 7}));
  pool.Give({1, 2, 42});
  EXPECT_EQ(pool.Take(3, {}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pool.free_count(), 0u);
}

}  // namespace
}  // namespace dgpu::agent
