#include "core/quota_tree.h"

#include <utility>

namespace dgpu::core {

QuotaTree::QuotaTree() { nodes_.push_back(Node{"cluster", -1, {}, 0}); }

QuotaTree::NodeId QuotaTree::Add(std::string name, NodeId parent, Limits limits) {
  nodes_.push_back(Node{std::move(name), parent, limits, 0});
  return static_cast<NodeId>(nodes_.size() - 1);
}

QuotaTree::NodeId QuotaTree::Add(std::string name, NodeId parent) {
  return Add(std::move(name), parent, Limits());
}

std::vector<QuotaTree::NodeId> QuotaTree::Children(NodeId n) const {
  std::vector<NodeId> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].parent == n) out.push_back(static_cast<NodeId>(i));
  }
  return out;
}

}  // namespace dgpu::core
