// NVLink groups: a task of several GPUs gets them inside one group (the tightest that holds
// them), else from the fewest groups; a single GPU comes from the fullest group, keeping whole
// groups free; nodes with room inside one group come first; a node's groups in its view.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/scheduler_core.h"
#include "test_util.h"

namespace dgpu::core {
namespace {

using testing::kSec;
using Groups = std::vector<std::vector<int>>;

std::vector<GpuInfo> LinkedGpus(int count, const Groups& groups) {
  std::vector<GpuInfo> gpus = testing::MakeGpus(count);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int i : groups[g]) gpus[static_cast<size_t>(i)].link_group = static_cast<int>(g);
  }
  return gpus;
}

class LinkGroupsTest : public ::testing::Test {
 protected:
  LinkGroupsTest() : core_(Config()) {}
  static CoreConfig Config() {
    CoreConfig c;
    c.online_percent = 0.0;
    return c;
  }
  void Node(const std::string& id, int count, const Groups& groups) {
    ASSERT_TRUE(core_.RegisterNode(id, "", LinkedGpus(count, groups), {}, {}, kSec).ok());
  }
  // Submits a task of `gpus`, runs a pass and says where it went: "node:i,j", or "pending".
  std::string Start(int gpus) {
    auto id = core_.Submit(testing::Spec(Priority::kLow, gpus), kSec);
    EXPECT_TRUE(id.ok());
    core_.Schedule(kSec);
    core_.TakeDecisions();
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
    const Task* t = core_.FindTask(*id);
    if (t->status != TaskStatus::kRunning) return "pending";
    last_ = *id;
    std::string out = t->allocation[0].node_id + ":";
    for (size_t i = 0; i < t->allocation[0].gpu_indices.size(); ++i) {
      out += (i == 0 ? "" : ",") + std::to_string(t->allocation[0].gpu_indices[i]);
    }
    return out;
  }
  void End(TaskNumber id) {
    const Task* t = core_.FindTask(id);
    ASSERT_EQ(t->status, TaskStatus::kRunning);
    FinishReport r{id, true, 0, "", 2 * kSec};
    ASSERT_TRUE(core_.TaskFinished(t->allocation[0].node_id, r, 2 * kSec).ok());
    EXPECT_TRUE(core_.CheckInvariants().ok()) << core_.CheckInvariants().ToString();
  }

  SchedulerCore core_;
  TaskNumber last_ = 0;
};

TEST_F(LinkGroupsTest, SingleGpusFillTheFullestGroupAndPairsGetAWholeOne) {
  // Groups interleaved over the indices: lowest-first would split both.
  Node("a", 4, {{0, 2}, {1, 3}});
  EXPECT_EQ(Start(1), "a:0");
  EXPECT_EQ(Start(1), "a:2");  // Group 0 has the fewest free: group 1 stays whole.
  EXPECT_EQ(Start(2), "a:1,3");
}

TEST_F(LinkGroupsTest, WithoutGroupsTheLowestFreeGpusAreTaken) {
  Node("a", 4, {});
  EXPECT_EQ(Start(1), "a:0");
  EXPECT_EQ(Start(1), "a:1");
  EXPECT_EQ(Start(2), "a:2,3");
}

TEST_F(LinkGroupsTest, AGpuInNoGroupGoesFirstToASingleGpuTask) {
  Node("a", 5, {{0, 1}, {2, 3}});
  EXPECT_EQ(Start(1), "a:4");
  EXPECT_EQ(Start(1), "a:0");
  EXPECT_EQ(Start(2), "a:2,3");
}

TEST_F(LinkGroupsTest, ATaskTakesTheTightestGroupThatHoldsIt) {
  Node("a", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  EXPECT_EQ(Start(1), "a:0");
  EXPECT_EQ(Start(3), "a:1,2,3");  // Group 0 has 3 free, group 1 has 4.
  EXPECT_EQ(Start(2), "a:4,5");
}

TEST_F(LinkGroupsTest, WhenNoGroupHoldsItTheGroupsWithTheMostFreeComeFirst) {
  Node("a", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  EXPECT_EQ(Start(1), "a:0");
  const TaskNumber first = last_;
  EXPECT_EQ(Start(1), "a:1");
  EXPECT_EQ(Start(2), "a:2,3");
  EXPECT_EQ(Start(1), "a:4");
  End(first);
  // Free: GPU 0 (group 0), GPUs 5, 6, 7 (group 1): four GPUs span both, group 1 first.
  EXPECT_EQ(Start(4), "a:0,5,6,7");
}

TEST_F(LinkGroupsTest, ANodeWithRoomInsideOneGroupComesBeforeATighterOne) {
  Node("a", 4, {{0, 1}, {2, 3}});
  Node("b", 4, {{0, 1}, {2, 3}});
  // Fill a, then free one GPU of each of its groups: a has 2 free, but not in one group.
  std::vector<TaskNumber> on_a;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Start(1).substr(0, 2), "a:");
    on_a.push_back(last_);
  }
  End(on_a[1]);                  // GPU 1 (group 0); the tasks took 0, 1, then 2, 3.
  End(on_a[3]);                  // GPU 3 (group 1).
  EXPECT_EQ(Start(2), "b:0,1");  // Best fit alone would take a's GPUs 1 and 3.
  // b's other group is whole: the next pair goes there too.
  EXPECT_EQ(Start(2), "b:2,3");
  // No node has room inside one group: best fit across groups.
  EXPECT_EQ(Start(2), "a:1,3");
}

TEST_F(LinkGroupsTest, ANodeWithoutGroupsIsAsGoodAsOneWithAWholeGroup) {
  Node("a", 4, {{0, 1}, {2, 3}});
  Node("b", 3, {});
  // b is the best fit for a pair (3 free against 4), and no GPU of b is split from another.
  EXPECT_EQ(Start(2), "b:0,1");
}

TEST_F(LinkGroupsTest, TheNodesViewListsItsGroups) {
  Node("a", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  Node("b", 4, {});
  EXPECT_EQ(core_.FindNode("a")->nvlink_groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(core_.FindNode("b")->nvlink_groups, Groups{});
}

// Random starts and ends on nodes with and without groups: every task of several GPUs that
// some node could hold inside one group is given GPUs of one group, and the core's index agrees
// with its nodes at every step (CheckInvariants, which compares each node's room in one group).
TEST(LinkGroupsRandomTest, PairsGetOneGroupWheneverSomeNodeHasRoomInOne) {
  for (uint32_t seed = 1; seed <= testing::Sequences(8); ++seed) {
    std::mt19937 rng(seed);
    CoreConfig config;
    config.online_percent = 0.0;
    SchedulerCore core(config);
    const Groups kPairs = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    const Groups kQuads = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    for (int n = 0; n < 6; ++n) {
      const Groups& groups = n % 3 == 0 ? kPairs : n % 3 == 1 ? kQuads : Groups{};
      ASSERT_TRUE(
          core.RegisterNode("n" + std::to_string(n), "", LinkedGpus(8, groups), {}, {}, kSec).ok());
    }
    std::vector<TaskNumber> running;
    for (int step = 0; step < 300; ++step) {
      if (!running.empty() && rng() % 2 == 0) {
        const size_t i = rng() % running.size();
        const Task* t = core.FindTask(running[i]);
        FinishReport r{running[i], true, 0, "", kSec};
        ASSERT_TRUE(core.TaskFinished(t->allocation[0].node_id, r, kSec).ok());
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const int gpus = 1 + static_cast<int>(rng() % 4);
      // Whether some node has `gpus` free inside one group (a node without groups counts).
      bool one_group_possible = false;
      for (int n = 0; n < 6; ++n) {
        const std::string id = "n" + std::to_string(n);
        std::vector<int> held(8, 0);
        for (TaskNumber r : running) {
          const NodeAllocation& a = core.FindTask(r)->allocation[0];
          if (a.node_id != id) continue;
          for (int g : a.gpu_indices) held[static_cast<size_t>(g)] = 1;
        }
        const Groups groups = core.FindNode(id)->nvlink_groups;
        if (groups.empty()) {
          int free = 0;
          for (int h : held) free += 1 - h;
          one_group_possible = one_group_possible || free >= gpus;
        }
        for (const auto& g : groups) {
          int free = 0;
          for (int i : g) free += 1 - held[static_cast<size_t>(i)];
          one_group_possible = one_group_possible || free >= gpus;
        }
      }
      auto id = core.Submit(testing::Spec(Priority::kLow, gpus), kSec);
      ASSERT_TRUE(id.ok());
      core.Schedule(kSec);
      core.TakeDecisions();
      ASSERT_TRUE(core.CheckInvariants().ok())
          << "seed " << seed << " step " << step << ": " << core.CheckInvariants().ToString();
      const Task* t = core.FindTask(*id);
      if (t->status != TaskStatus::kRunning) {
        ASSERT_TRUE(core.Cancel(*id, kSec).ok());
        continue;
      }
      running.push_back(*id);
      if (!one_group_possible || gpus == 1) continue;
      const NodeAllocation& a = t->allocation[0];
      const Groups groups = core.FindNode(a.node_id)->nvlink_groups;
      if (groups.empty()) continue;
      bool inside = false;
      for (const auto& g : groups) {
        inside = inside || std::all_of(a.gpu_indices.begin(), a.gpu_indices.end(), [&](int i) {
                   return std::find(g.begin(), g.end(), i) != g.end();
                 });
      }
      EXPECT_TRUE(inside) << "seed " << seed << " step " << step << ": " << gpus
                          << " GPUs split over groups on " << a.node_id;
    }
  }
}

}  // namespace
}  // namespace dgpu::core
