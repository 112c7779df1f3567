#include "core/quota_tree.h"

#include <gtest/gtest.h>

namespace dgpu::core {
namespace {

using Limits = QuotaTree::Limits;

TEST(QuotaTreeTest, WithoutBorrowingANodeHoldsExactlyItsGuarantee) {
  QuotaTree tree;
  tree.SetLimits(QuotaTree::kRoot, {10, 0, QuotaTree::kNoCap});
  auto online = tree.Add("online", QuotaTree::kRoot, {7, 0, QuotaTree::kNoCap});
  auto batch = tree.Add("batch", QuotaTree::kRoot, {3, 0, QuotaTree::kNoCap});
  EXPECT_EQ(tree.Allowed(online), 7);
  EXPECT_TRUE(tree.Admits(online, 7));
  EXPECT_FALSE(tree.Admits(online, 8));
  tree.Charge(online, 7);
  EXPECT_EQ(tree.node(QuotaTree::kRoot).used, 7);
  EXPECT_TRUE(tree.Admits(batch, 3));
  EXPECT_FALSE(tree.Admits(batch, 4));
  tree.Charge(online, -2);
  EXPECT_EQ(tree.node(online).used, 5);
  EXPECT_EQ(tree.node(QuotaTree::kRoot).used, 5);
}

TEST(QuotaTreeTest, BorrowingIsBoundedByTheLimitTheCapAndTheParent) {
  QuotaTree tree;
  tree.SetLimits(QuotaTree::kRoot, {10, 0, QuotaTree::kNoCap});
  auto online = tree.Add("online", QuotaTree::kRoot, {7, 0, QuotaTree::kNoCap});
  auto batch = tree.Add("batch", QuotaTree::kRoot, {3, 5, QuotaTree::kNoCap});
  EXPECT_EQ(tree.Allowed(batch), 8);
  EXPECT_TRUE(tree.Admits(batch, 8));
  EXPECT_FALSE(tree.Admits(batch, 9));
  tree.SetLimits(batch, {3, 5, 6});
  EXPECT_EQ(tree.Allowed(batch), 6);
  EXPECT_FALSE(tree.Admits(batch, 7));
  // The root is bounded by placement, not by admission.
  tree.Charge(online, 7);
  EXPECT_TRUE(tree.Admits(batch, 6));
}

TEST(QuotaTreeTest, TeamsChargeTheirClassAndTheCluster) {
  QuotaTree tree;
  tree.SetLimits(QuotaTree::kRoot, {16, 0, QuotaTree::kNoCap});
  auto batch = tree.Add("batch", QuotaTree::kRoot, {8, 0, QuotaTree::kNoCap});
  auto vision = tree.Add("vision", batch, {4, 4, QuotaTree::kNoCap});
  auto speech = tree.Add("speech", batch, {4, 0, QuotaTree::kNoCap});
  EXPECT_EQ(tree.Children(batch), (std::vector<QuotaTree::NodeId>{vision, speech}));
  EXPECT_EQ(tree.node(vision).parent, batch);
  tree.Charge(vision, 6);  // Borrows 2 of its class's 8.
  EXPECT_EQ(tree.node(batch).used, 6);
  EXPECT_EQ(tree.node(QuotaTree::kRoot).used, 6);
  EXPECT_TRUE(tree.Admits(speech, 2));
  EXPECT_FALSE(tree.Admits(speech, 3));  // The class is full: vision's borrowing bounds it.
  tree.Charge(vision, -6);
  EXPECT_TRUE(tree.Admits(vision, 8));
  EXPECT_FALSE(tree.Admits(vision, 9));
}

}  // namespace
}  // namespace dgpu::core
