// The simulated cluster: groups of identical nodes.
//
// Given on the command line (`--nodes N --gpus-per-node G --model M`) or in a file: YAML
// (`nodes: [{count, gpus_per_node, model, labels, nvlink_groups}]`, labels a map, NVLink groups
// lists of GPU indices) or CSV
// (`count,gpus_per_node,model[,labels]` per line, labels as `key=value;key=value`, the header
// optional). A group's labels are every one of its nodes' labels (a rack: a group of the nodes
// in it). Errors name the file, the line (CSV) or entry (YAML) and the field.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "core/autoscale.h"
#include "core/types.h"

namespace dgpu::sim {

struct NodeGroup {
  int count = 0;
  int gpus_per_node = 0;
  std::string model;
  core::Labels labels;
  // Its nodes' GPUs joined by NVLink, as lists of GPU indices (YAML `nvlink_groups`); empty:
  // none.
  std::vector<std::vector<int>> nvlink_groups;
};

struct ClusterSpec {
  std::vector<NodeGroup> groups;

  int NodeCount() const;
  int TotalGpus() const;
  // Whether some group has a label with this key.
  bool HasLabelKey(const std::string& key) const;
  // Whether some group has NVLink groups.
  bool HasNvlinkGroups() const;
};

// Checks counts (>= 1, GPUs per node <= 1024), non-empty models and labels as the agent does.
// InvalidArgument otherwise.
Status ValidateCluster(const ClusterSpec& spec);

// Reads a cluster file: CSV when the name ends in ".csv", YAML otherwise.
StatusOr<ClusterSpec> LoadClusterFile(const std::string& path);
StatusOr<ClusterSpec> ParseClusterCsv(const std::string& text, const std::string& name);
StatusOr<ClusterSpec> ParseClusterYaml(const std::string& text, const std::string& name);

// An autoscale file: the `autoscale` section of a scheduler configuration, or a whole
// configuration holding one. Durations are numbers of seconds; the programs and `enabled` are
// read past (the replay runs none). Errors name the file and the key.
StatusOr<core::AutoscaleSettings> LoadAutoscaleFile(const std::string& path);
StatusOr<core::AutoscaleSettings> ParseAutoscaleYaml(const std::string& text,
                                                     const std::string& name);

}  // namespace dgpu::sim
