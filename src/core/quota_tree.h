// QuotaTree: what admission checks before a task may take GPUs.
//
// The cluster is the root; the priority classes (online, batch) are its children; teams will be
// the classes' children. Every node has a guarantee (GPUs it can always have), a borrowing limit
// (how many GPUs beyond its guarantee it may take while others leave theirs idle) and a cap (never
// more than this, borrowed or not). A task is charged to every node on the path from its leaf to
// the root, and is admitted only if each of them below the root stays within what it may hold:
// its guarantee plus its borrowing limit, within its cap. A parent bounds what its children may
// hold in all, so what one child borrows is bounded by its parent's limits.
//
// With no borrowing (the default, and v1's behaviour) a node may hold exactly its guarantee:
// online = round(online GPUs * online_percent), batch = the rest.
#pragma once

#include <string>
#include <vector>

namespace dgpu::core {

class QuotaTree {
 public:
  using NodeId = int;
  static constexpr NodeId kRoot = 0;
  static constexpr int kNoCap = -1;

  struct Limits {
    int guarantee = 0;
    int borrowing_limit = 0;  // GPUs beyond the guarantee; 0: no borrowing.
    int cap = kNoCap;         // kNoCap: only guarantee + borrowing_limit bound it.
    bool operator==(const Limits&) const = default;
  };
  struct Node {
    std::string name;
    NodeId parent = -1;  // -1 for the root.
    Limits limits;
    int used = 0;  // GPUs held by the running tasks charged to it and to its descendants.
  };

  QuotaTree();  // Just the root, named "cluster".

  // Adds a child of `parent` (which must exist) and returns its id; ids are dense, from 1.
  NodeId Add(std::string name, NodeId parent, Limits limits);
  NodeId Add(std::string name, NodeId parent);  // With no guarantee yet.
  void SetLimits(NodeId n, Limits limits) { nodes_[static_cast<size_t>(n)].limits = limits; }

  // The most GPUs node n may hold: guarantee + borrowing limit, within the cap.
  int Allowed(NodeId n) const {
    const Limits& l = nodes_[static_cast<size_t>(n)].limits;
    const int allowed = l.guarantee + l.borrowing_limit;
    return l.cap != kNoCap && l.cap < allowed ? l.cap : allowed;
  }
  // Whether charging `gpus` more to `leaf` keeps every node on its path below the root within
  // Allowed. The root is not checked: the cluster's own bound is its free GPUs, which placement
  // enforces, and tasks restored onto nodes that have not registered yet are charged while their
  // GPUs are not counted.
  bool Admits(NodeId leaf, int gpus) const {
    for (NodeId n = leaf; n > kRoot; n = nodes_[static_cast<size_t>(n)].parent) {
      if (nodes_[static_cast<size_t>(n)].used + gpus > Allowed(n)) return false;
    }
    return true;
  }
  // Adds (or, negative, removes) GPUs held on every node of leaf's path.
  void Charge(NodeId leaf, int gpus) {
    for (NodeId n = leaf; n >= 0; n = nodes_[static_cast<size_t>(n)].parent) {
      nodes_[static_cast<size_t>(n)].used += gpus;
    }
  }

  const Node& node(NodeId n) const { return nodes_[static_cast<size_t>(n)]; }
  size_t size() const { return nodes_.size(); }
  std::vector<NodeId> Children(NodeId n) const;

 private:
  std::vector<Node> nodes_;
};

}  // namespace dgpu::core
