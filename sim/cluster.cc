#include "sim/cluster.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace dgpu::sim {
namespace {

constexpr int kMaxGpusPerNode = 1024;
constexpr int kMaxNodes = 1'000'000;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool ParseInt(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

Status CheckGroup(const NodeGroup& g, const std::string& where) {
  if (g.count < 1 || g.count > kMaxNodes) {
    return InvalidArgument(where + "field 'count': must be between 1 and " +
                           std::to_string(kMaxNodes));
  }
  if (g.gpus_per_node < 1 || g.gpus_per_node > kMaxGpusPerNode) {
    return InvalidArgument(where + "field 'gpus_per_node': must be between 1 and " +
                           std::to_string(kMaxGpusPerNode));
  }
  if (g.model.empty()) return InvalidArgument(where + "field 'model': must not be empty");
  for (const auto& [key, value] : g.labels) {
    if (std::string why = core::CheckLabelKey(key); !why.empty()) {
      return InvalidArgument(where + "field 'labels': key '" + key + "' is not valid: " + why);
    }
    if (std::string why = core::CheckLabelValue(value); !why.empty()) {
      return InvalidArgument(where + "field 'labels': " + key + " '" + value +
                             "' is not valid: " + why);
    }
  }
  if (std::string why = core::CheckLinkGroups(g.nvlink_groups, g.gpus_per_node); !why.empty()) {
    return InvalidArgument(where + "field 'nvlink_groups': " + why);
  }
  return OkStatus();
}

// `key=value;key=value` (a CSV field).
Status ParseLabels(std::string_view text, core::Labels& labels, const std::string& where) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = Trim(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument(where + "field 'labels': expected key=value, found '" +
                             std::string(item) + "'");
    }
    const std::string key(Trim(item.substr(0, eq)));
    if (!labels.emplace(key, std::string(Trim(item.substr(eq + 1)))).second) {
      return InvalidArgument(where + "field 'labels': key '" + key + "' is given twice");
    }
  }
  return OkStatus();
}

}  // namespace

int ClusterSpec::NodeCount() const {
  int n = 0;
  for (const auto& g : groups) n += g.count;
  return n;
}

bool ClusterSpec::HasLabelKey(const std::string& key) const {
  return std::any_of(groups.begin(), groups.end(),
                     [&](const NodeGroup& g) { return g.labels.contains(key); });
}

bool ClusterSpec::HasNvlinkGroups() const {
  return std::any_of(groups.begin(), groups.end(),
                     [](const NodeGroup& g) { return !g.nvlink_groups.empty(); });
}

int ClusterSpec::TotalGpus() const {
  int n = 0;
  for (const auto& g : groups) n += g.count * g.gpus_per_node;
  return n;
}

Status ValidateCluster(const ClusterSpec& spec) {
  if (spec.groups.empty()) return InvalidArgument("the cluster has no nodes");
  int64_t nodes = 0;
  for (size_t i = 0; i < spec.groups.size(); ++i) {
    Status s = CheckGroup(spec.groups[i], "node group " + std::to_string(i + 1) + ": ");
    if (!s.ok()) return s;
    nodes += spec.groups[i].count;
  }
  if (nodes > kMaxNodes) return InvalidArgument("more than 1000000 nodes in total");
  return OkStatus();
}

StatusOr<ClusterSpec> ParseClusterCsv(const std::string& text, const std::string& name) {
  ClusterSpec spec;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view view = Trim(line);
    if (view.empty() || view.front() == '#') continue;
    std::vector<std::string_view> f;
    size_t start = 0;
    while (true) {
      size_t comma = view.find(',', start);
      f.push_back(
          Trim(view.substr(start, comma == std::string_view::npos ? comma : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    std::string where = name + ":" + std::to_string(line_no) + ": ";
    if (spec.groups.empty() && (f.size() == 3 || f.size() == 4) && f[0] == "count") {
      continue;  // Header.
    }
    if (f.size() != 3 && f.size() != 4) {
      return InvalidArgument(where + "expected 'count,gpus_per_node,model[,labels]', found " +
                             std::to_string(f.size()) + " fields");
    }
    NodeGroup g;
    if (!ParseInt(f[0], g.count)) return InvalidArgument(where + "field 'count': not an integer");
    if (!ParseInt(f[1], g.gpus_per_node)) {
      return InvalidArgument(where + "field 'gpus_per_node': not an integer");
    }
    g.model = std::string(f[2]);
    if (f.size() == 4) {
      if (Status s = ParseLabels(f[3], g.labels, where); !s.ok()) return s;
    }
    Status s = CheckGroup(g, where);
    if (!s.ok()) return s;
    spec.groups.push_back(std::move(g));
  }
  if (spec.groups.empty()) return InvalidArgument(name + ": no node groups");
  return spec;
}

StatusOr<ClusterSpec> ParseClusterYaml(const std::string& text, const std::string& name) {
  ClusterSpec spec;
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) return InvalidArgument(name + ": expected a map with key 'nodes'");
    for (const auto& kv : root) {
      auto key = kv.first.as<std::string>();
      if (key != "nodes") return InvalidArgument(name + ": unknown key '" + key + "'");
    }
    YAML::Node nodes = root["nodes"];
    if (!nodes || !nodes.IsSequence()) {
      return InvalidArgument(name +
                             ": 'nodes' must be a list of {count, gpus_per_node, model, "
                             "labels, nvlink_groups}");
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::string where = name + ": nodes[" + std::to_string(i) + "]: ";
      const YAML::Node& entry = nodes[i];
      if (!entry.IsMap()) return InvalidArgument(where + "expected a map");
      NodeGroup g;
      for (const auto& kv : entry) {
        auto key = kv.first.as<std::string>();
        if (key == "count") {
          g.count = kv.second.as<int>();
        } else if (key == "gpus_per_node") {
          g.gpus_per_node = kv.second.as<int>();
        } else if (key == "model") {
          g.model = kv.second.as<std::string>();
        } else if (key == "labels") {
          if (!kv.second.IsMap()) {
            return InvalidArgument(where + "field 'labels': expected a map of key: value");
          }
          for (const auto& label : kv.second) {
            if (!label.second.IsScalar()) {
              return InvalidArgument(where + "field 'labels': " + label.first.as<std::string>() +
                                     ": expected a string");
            }
            g.labels[label.first.as<std::string>()] = label.second.as<std::string>();
          }
        } else if (key == "nvlink_groups") {
          if (!kv.second.IsSequence()) {
            return InvalidArgument(where +
                                   "field 'nvlink_groups': expected a list of lists of GPU "
                                   "indices ([[0, 1], [2, 3]])");
          }
          for (const auto& group : kv.second) {
            if (!group.IsSequence()) {
              return InvalidArgument(where +
                                     "field 'nvlink_groups': a group must be a list of GPU "
                                     "indices");
            }
            g.nvlink_groups.push_back(group.as<std::vector<int>>());
          }
        } else {
          return InvalidArgument(where + "unknown key '" + key + "'");
        }
      }
      Status s = CheckGroup(g, where);
      if (!s.ok()) return s;
      spec.groups.push_back(std::move(g));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(name + ": " + e.what());
  }
  if (spec.groups.empty()) return InvalidArgument(name + ": no node groups");
  return spec;
}

StatusOr<core::AutoscaleSettings> ParseAutoscaleYaml(const std::string& text,
                                                     const std::string& name) {
  core::AutoscaleSettings settings;
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsMap() && root["autoscale"]) root = root["autoscale"];
    if (!root.IsMap()) return InvalidArgument(name + ": expected the autoscale section (a map)");
    const auto seconds = [&](const YAML::Node& v, const std::string& key,
                             core::TimeMicros* out) -> Status {
      double d = 0;
      if (!v.IsScalar() || !YAML::convert<double>::decode(v, d) || !std::isfinite(d) || d < 0 ||
          d > 1e9) {
        return InvalidArgument(name + ": " + key + ": must be a number of seconds >= 0");
      }
      *out = static_cast<core::TimeMicros>(std::llround(d * 1e6));
      return OkStatus();
    };
    for (const auto& kv : root) {
      const auto key = kv.first.as<std::string>();
      Status s;
      if (key == "scale_up_delay") {
        s = seconds(kv.second, key, &settings.scale_up_delay);
      } else if (key == "idle_timeout") {
        s = seconds(kv.second, key, &settings.idle_timeout);
      } else if (key == "boot_timeout") {
        s = seconds(kv.second, key, &settings.boot_timeout);
      } else if (key == "retry_delay") {
        s = seconds(kv.second, key, &settings.retry_delay);
      } else if (key != "enabled" && key != "program_timeout" && key != "node_groups") {
        return InvalidArgument(name + ": unknown key '" + key + "'");
      }
      if (!s.ok()) return s;
    }
    const YAML::Node groups = root["node_groups"];
    if (!groups || !groups.IsSequence() || groups.size() == 0) {
      return InvalidArgument(name + ": node_groups must list at least one group");
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string where = name + ": node_groups[" + std::to_string(i) + "]: ";
      if (!groups[i].IsMap()) return InvalidArgument(where + "expected a map");
      core::NodeGroupSpec g;
      bool has_max = false;
      for (const auto& kv : groups[i]) {
        const auto key = kv.first.as<std::string>();
        if (key == "name") {
          g.name = kv.second.as<std::string>();
        } else if (key == "model") {
          g.model = kv.second.as<std::string>();
        } else if (key == "gpus_per_node") {
          g.gpus_per_node = kv.second.as<int>();
        } else if (key == "min_nodes") {
          g.min_nodes = kv.second.as<int>();
        } else if (key == "max_nodes") {
          g.max_nodes = kv.second.as<int>();
          has_max = true;
        } else if (key != "scale_up_program" && key != "scale_down_program") {
          return InvalidArgument(where + "unknown key '" + key + "'");
        }
      }
      if (g.name.empty()) return InvalidArgument(where + "name: required");
      for (const auto& other : settings.groups) {
        if (other.name == g.name)
          return InvalidArgument(where + "name: '" + g.name + "' is listed twice");
      }
      if (g.model.empty()) return InvalidArgument(where + "model: required");
      if (g.gpus_per_node < 1 || g.gpus_per_node > 1024) {
        return InvalidArgument(where + "gpus_per_node: must be 1..1024");
      }
      if (!has_max || g.max_nodes < 1 || g.max_nodes > 100000) {
        return InvalidArgument(where + "max_nodes: required, 1..100000");
      }
      if (g.min_nodes < 0 || g.min_nodes > g.max_nodes) {
        return InvalidArgument(where + "min_nodes: must be 0..max_nodes");
      }
      settings.groups.push_back(std::move(g));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(name + ": " + e.what());
  }
  if (settings.idle_timeout <= 0) return InvalidArgument(name + ": idle_timeout: must be above 0");
  return settings;
}

StatusOr<core::AutoscaleSettings> LoadAutoscaleFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open autoscale file " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseAutoscaleYaml(buf.str(), path);
}

StatusOr<ClusterSpec> LoadClusterFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open cluster file " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  return csv ? ParseClusterCsv(buf.str(), path) : ParseClusterYaml(buf.str(), path);
}

}  // namespace dgpu::sim
