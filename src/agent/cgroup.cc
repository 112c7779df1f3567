#include "agent/cgroup.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "agent/cpu_sets.h"

namespace dgpu::agent {
namespace {

// The v1 hierarchies a task cgroup may use (those mounted). A task's cgroup is made only in those
// it needs: each costs the shim two moves at the task's start.
constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu", "cpuacct", "devices", "cpuset"};
constexpr int64_t kCpuPeriodMicros = 100000;
constexpr int64_t kMinCpuQuotaMicros = 1000;  // The kernel's smallest quota.

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

// Mount points escape ' ', '\t', '\n' and '\\' as octal (\040).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])) != 0) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct Mount {
  std::string root;
  std::string point;
  std::string fstype;
  std::vector<std::string> options;  // Super options.
};

std::vector<Mount> ParseMountinfo(const std::string& text) {
  std::vector<Mount> mounts;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string word;
    while (fields >> word) f.push_back(word);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    Mount m;
    m.root = Unescape(f[3]);
    m.point = Unescape(f[4]);
    m.fstype = *(dash + 1);
    m.options = Split(*(dash + 3), ',');
    mounts.push_back(std::move(m));
  }
  return mounts;
}

// The directory of cgroup `path` (from /proc/self/cgroup) in the mount; empty when the mount
// does not show it (another namespace's root).
std::string DirIn(const Mount& m, const std::string& path) {
  if (m.root == "/") return path == "/" ? m.point : m.point + path;
  if (path == m.root) return m.point;
  if (path.compare(0, m.root.size() + 1, m.root + "/") == 0) {
    return m.point + path.substr(m.root.size());
  }
  return "";
}

// The whitespace-separated words of a cgroup file (cgroup.controllers).
std::set<std::string> Words(const std::string& text) {
  std::set<std::string> words;
  std::istringstream in(text);
  std::string word;
  while (in >> word) words.insert(word);
  return words;
}

bool SafePath(const std::string& dir) {
  return !dir.empty() && dir.find_first_of("\n\t") == std::string::npos;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `text` to an existing cgroup file in one write.
// The text without its surrounding white space (a cgroup file's trailing newline).
std::string Trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\n") - first + 1);
}

Status WriteFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Unavailable("cannot open " + path + ": " + strerror(errno));
  const ssize_t n = write(fd, text.data(), text.size());
  const int saved = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Unavailable("cannot write '" + text + "' to " + path + ": " + strerror(saved));
  }
  return OkStatus();
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// "key N" lines (memory.events, memory.oom_control): N of `key`, 0 when absent.
int64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

std::vector<pid_t> ReadPids(const std::string& path) {
  std::vector<pid_t> pids;
  std::istringstream in(ReadAll(path));
  pid_t pid = 0;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// One BPF instruction.
bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

}  // namespace

StatusOr<std::pair<CgroupVersion, std::vector<CgroupHierarchy>>> FindCgroupHierarchies(
    const std::string& proc_self_cgroup, const std::string& mountinfo, const std::string& name) {
  const std::vector<Mount> mounts = ParseMountinfo(mountinfo);
  std::string unified_path;
  std::vector<std::pair<std::vector<std::string>, std::string>> v1;  // Controllers, path.
  std::istringstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      unified_path = path;
    } else {
      v1.emplace_back(Split(controllers, ','), path);
    }
  }
  // v2 when the unified hierarchy holds the controllers that matter.
  if (!unified_path.empty()) {
    for (const Mount& m : mounts) {
      if (m.fstype != "cgroup2") continue;
      const std::string own = DirIn(m, unified_path);
      if (!SafePath(own)) continue;
      const std::set<std::string> available = Words(ReadAll(own + "/cgroup.controllers"));
      if (available.count("memory") == 0 || available.count("pids") == 0) continue;
      return std::make_pair(CgroupVersion::kV2,
                            std::vector<CgroupHierarchy>{{{"unified"}, own, own + "/" + name}});
    }
  }
  std::vector<CgroupHierarchy> hierarchies;
  std::set<std::string> seen;  // Mount points: co-mounted controllers share one.
  for (const char* controller : kV1Controllers) {
    for (const auto& [controllers, path] : v1) {
      if (!Contains(controllers, controller)) continue;
      for (const Mount& m : mounts) {
        if (m.fstype != "cgroup" || !Contains(m.options, controller)) continue;
        const std::string own = DirIn(m, path);
        if (!SafePath(own) || !seen.insert(m.point).second) break;
        CgroupHierarchy h;
        for (const std::string& c : controllers) {
          if (std::find(std::begin(kV1Controllers), std::end(kV1Controllers), c) !=
              std::end(kV1Controllers)) {
            h.controllers.push_back(c);
          }
        }
        h.own = own;
        h.parent = own + "/" + name;
        hierarchies.push_back(std::move(h));
        break;
      }
    }
  }
  if (hierarchies.empty()) {
    return Unavailable(
        "no cgroup hierarchy to use: neither a cgroup v2 hierarchy with the memory and pids "
        "controllers nor a cgroup v1 memory, pids, cpu, cpuacct or devices hierarchy is mounted "
        "for this process");
  }
  return std::make_pair(CgroupVersion::kV1, std::move(hierarchies));
}

StatusOr<std::unique_ptr<TaskCgroups>> TaskCgroups::Open(const std::string& name,
                                                         const CgroupSources& sources) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    return InvalidArgument("bad cgroup name '" + name + "'");
  }
  auto found =
      FindCgroupHierarchies(ReadAll(sources.proc_self_cgroup), ReadAll(sources.mountinfo), name);
  if (!found.ok()) return found.status();
  auto [version, hierarchies] = std::move(*found);
  if (version == CgroupVersion::kV2) {
    CgroupHierarchy& h = hierarchies[0];
    std::string want = "+memory +pids";
    const std::set<std::string> available = Words(ReadAll(h.own + "/cgroup.controllers"));
    if (available.count("cpu") > 0) want += " +cpu";
    if (available.count("cpuset") > 0) want += " +cpuset";
    // The controllers reach the parent only through the agent's own cgroup, which may hold no
    // processes then: the agent moves into a leaf of its own first.
    if (!WriteFile(h.own + "/cgroup.subtree_control", want).ok()) {
      const std::string leaf = h.own + "/" + name + "-agent";
      if (mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
        return Unavailable("cannot create " + leaf + ": " + strerror(errno));
      }
      if (Status moved = WriteFile(leaf + "/cgroup.procs", std::to_string(getpid())); !moved.ok()) {
        return moved;
      }
      if (Status enabled = WriteFile(h.own + "/cgroup.subtree_control", want); !enabled.ok()) {
        return Unavailable(enabled.message() + " (another process shares the agent's cgroup " +
                           h.own + ")");
      }
      const std::string parent = h.parent;
      h.own = leaf;
      h.parent = parent;
    }
    if (mkdir(h.parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return Unavailable("cannot create " + h.parent + ": " + strerror(errno));
    }
    if (Status enabled = WriteFile(h.parent + "/cgroup.subtree_control", want); !enabled.ok()) {
      return enabled;
    }
    auto cgroups = std::unique_ptr<TaskCgroups>(new TaskCgroups(version, std::move(hierarchies)));
    cgroups->cpuset_ = Words(ReadAll(h.parent + "/cgroup.subtree_control")).count("cpuset") > 0;
    return cgroups;
  }
  bool cpuset = false;
  std::string mems;
  for (const CgroupHierarchy& h : hierarchies) {
    if (mkdir(h.parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return Unavailable("cannot create " + h.parent + ": " + strerror(errno));
    }
    if (!Contains(h.controllers, "cpuset")) continue;
    // A v1 cpuset cgroup starts with no CPUs and no memory nodes: the parent gets the agent's.
    cpuset = true;
    for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
      if (!Trimmed(ReadAll(h.parent + "/" + file)).empty()) continue;
      if (!WriteFile(h.parent + "/" + file, Trimmed(ReadAll(h.own + "/" + file))).ok()) {
        cpuset = false;
      }
    }
    mems = Trimmed(ReadAll(h.parent + "/cpuset.mems"));
  }
  auto cgroups = std::unique_ptr<TaskCgroups>(new TaskCgroups(version, std::move(hierarchies)));
  cgroups->cpuset_ = cpuset;
  cgroups->cpuset_mems_ = std::move(mems);
  return cgroups;
}

std::string TaskCgroups::isolation() const {
  return version_ == CgroupVersion::kV2 ? "cgroup_v2" : "cgroup_v1";
}

bool TaskCgroups::Needs(const CgroupHierarchy& h, const TaskCgroupLimits& limits) const {
  if (version_ == CgroupVersion::kV2) return true;
  for (const std::string& c : h.controllers) {
    // Memory and CPU time are measured for every task (its usage).
    if (c == "memory" || c == "cpuacct" || (c == "pids" && limits.pids_max > 0) ||
        (c == "cpu" && limits.cpu_quota_milli > 0) || (c == "cpuset" && !limits.cpus.empty()) ||
        (c == "devices" && !limits.denied_devices.empty())) {
      return true;
    }
  }
  return false;
}

const CgroupHierarchy* TaskCgroups::Find(const std::string& controller) const {
  for (const CgroupHierarchy& h : hierarchies_) {
    if (version_ == CgroupVersion::kV2 || Contains(h.controllers, controller)) return &h;
  }
  return nullptr;
}

std::string TaskCgroups::PathOf(const std::string& task_id) const {
  const CgroupHierarchy* h = Find("memory");
  if (h == nullptr) h = &hierarchies_.front();
  return h->parent + "/" + task_id;
}

Status TaskCgroups::Create(const std::string& task_id, const TaskCgroupLimits& limits) {
  std::vector<std::string> made;
  auto fail = [&](const Status& why) {
    for (const std::string& dir : made) rmdir(dir.c_str());
    return why;
  };
  for (const CgroupHierarchy& h : hierarchies_) {
    if (!Needs(h, limits)) continue;
    const std::string dir = h.parent + "/" + task_id;
    // One left by an earlier run of the task goes first: its limits (a device rule, a device
    // program) are not this run's.
    if (mkdir(dir.c_str(), 0755) != 0 &&
        (errno != EEXIST || rmdir(dir.c_str()) != 0 || mkdir(dir.c_str(), 0755) != 0)) {
      return fail(Unavailable("cannot create " + dir + ": " + strerror(errno)));
    }
    made.push_back(dir);
  }
  auto set = [&](const char* controller, const std::string& file, const std::string& value) {
    const CgroupHierarchy* h = Find(controller);
    if (h == nullptr) return OkStatus();  // Not mounted: that limit is not enforced.
    if (!Needs(*h, limits)) return OkStatus();
    return WriteFile(h->parent + "/" + task_id + "/" + file, value);
  };
  const bool v2 = version_ == CgroupVersion::kV2;
  if (limits.memory_bytes > 0) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    if (Status s = set("memory", v2 ? "memory.max" : "memory.limit_in_bytes", bytes); !s.ok()) {
      return fail(s);
    }
    // Swap counts too where the kernel accounts it (absent files: it does not).
    const CgroupHierarchy* h = Find("memory");
    if (h != nullptr) {
      const std::string dir = h->parent + "/" + task_id + "/";
      if (v2) {
        if (access((dir + "memory.swap.max").c_str(), F_OK) == 0) {
          (void)WriteFile(dir + "memory.swap.max", "0");
        }
      } else if (access((dir + "memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
        (void)WriteFile(dir + "memory.memsw.limit_in_bytes", bytes);
      }
    }
  }
  if (limits.pids_max > 0) {
    if (Status s = set("pids", "pids.max", std::to_string(limits.pids_max)); !s.ok()) {
      return fail(s);
    }
  }
  if (limits.cpu_quota_milli > 0) {
    const int64_t quota =
        std::max(kMinCpuQuotaMicros, limits.cpu_quota_milli * kCpuPeriodMicros / 1000);
    Status s =
        v2 ? set("cpu", "cpu.max", std::to_string(quota) + " " + std::to_string(kCpuPeriodMicros))
           : set("cpu", "cpu.cfs_period_us", std::to_string(kCpuPeriodMicros));
    if (s.ok() && !v2) s = set("cpu", "cpu.cfs_quota_us", std::to_string(quota));
    if (!s.ok()) return fail(s);
  }
  if (!limits.cpus.empty()) {
    if (!cpuset_) return fail(Unavailable("no cpuset cgroup controller: CPUs cannot be bound"));
    Status s = OkStatus();
    if (!v2) {
      // v1: the memory nodes first (a v1 cpuset cgroup takes no process without them).
      s = set("cpuset", "cpuset.mems", cpuset_mems_);
    }
    if (s.ok()) s = set("cpuset", "cpuset.cpus", FormatCpuList(limits.cpus));
    if (!s.ok()) return fail(s);
  }
  if (!limits.denied_devices.empty()) {
    if (v2) {
      const std::string dir = hierarchies_[0].parent + "/" + task_id;
      const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) return fail(Unavailable("cannot open " + dir + ": " + strerror(errno)));
      Status attached = AttachDeviceFilter(fd, limits.denied_devices);
      close(fd);
      if (!attached.ok()) return fail(attached);
    } else if (Find("devices") != nullptr) {
      for (dev_t d : limits.denied_devices) {
        const std::string rule =
            "c " + std::to_string(major(d)) + ":" + std::to_string(minor(d)) + " rwm";
        if (Status s = set("devices", "devices.deny", rule); !s.ok()) return fail(s);
      }
    } else {
      return fail(
          Unavailable("no devices cgroup is mounted: GPU device files cannot be kept "
                      "from other tasks"));
    }
  }
  return OkStatus();
}

Status TaskCgroups::CreateSlot(const std::string& name) {
  if (version_ != CgroupVersion::kV1) return FailedPrecondition("slots are for cgroup v1");
  std::vector<std::string> made;
  auto fail = [&](const Status& why) {
    for (const std::string& dir : made) rmdir(dir.c_str());
    return why;
  };
  for (const CgroupHierarchy& h : hierarchies_) {
    const std::string dir = h.parent + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0) {
      const int saved = errno;
      return fail(Status(saved == EEXIST ? StatusCode::kAlreadyExists : StatusCode::kUnavailable,
                         "cannot create " + dir + ": " + strerror(saved)));
    }
    made.push_back(dir);
    if (Contains(h.controllers, "cpuset") && cpuset_) {
      // A v1 cpuset cgroup takes no process before it has memory nodes and CPUs.
      Status s = WriteFile(dir + "/cpuset.mems", cpuset_mems_);
      if (s.ok()) s = WriteFile(dir + "/cpuset.cpus", Trimmed(ReadAll(h.parent + "/cpuset.cpus")));
      if (!s.ok()) return fail(s);
    }
    if (Contains(h.controllers, "cpu")) {
      if (Status s = WriteFile(dir + "/cpu.cfs_period_us", std::to_string(kCpuPeriodMicros));
          !s.ok()) {
        return fail(s);
      }
    }
  }
  return OkStatus();
}

Status TaskCgroups::Enter(const std::string& name, pid_t pid) {
  for (const CgroupHierarchy& h : hierarchies_) {
    if (Status s = WriteFile(h.parent + "/" + name + "/cgroup.procs", std::to_string(pid));
        !s.ok()) {
      return s;
    }
  }
  return OkStatus();
}

Status TaskCgroups::Apply(const std::string& name, const TaskCgroupLimits& limits,
                          const std::optional<TaskCgroupLimits>& previous) {
  if (version_ != CgroupVersion::kV1) return FailedPrecondition("slots are for cgroup v1");
  const TaskCgroupLimits was = previous.value_or(TaskCgroupLimits{});
  auto dir_of = [&](const char* controller) -> std::optional<std::string> {
    const CgroupHierarchy* h = Find(controller);
    if (h == nullptr) return std::nullopt;
    return h->parent + "/" + name + "/";
  };
  if (limits.memory_bytes != was.memory_bytes) {
    if (auto dir = dir_of("memory")) {
      const std::string value =
          limits.memory_bytes > 0 ? std::to_string(limits.memory_bytes) : std::string("-1");
      // memory.memsw (swap counted too, where the kernel accounts it) is never below
      // memory.limit: the larger goes first when the limit rises, last when it falls.
      const bool swap = access((*dir + "memory.memsw.limit_in_bytes").c_str(), F_OK) == 0;
      const bool rises = limits.memory_bytes <= 0 ||
                         (was.memory_bytes > 0 && limits.memory_bytes > was.memory_bytes);
      Status s = OkStatus();
      if (swap && rises) s = WriteFile(*dir + "memory.memsw.limit_in_bytes", value);
      if (s.ok()) s = WriteFile(*dir + "memory.limit_in_bytes", value);
      if (s.ok() && swap && !rises) s = WriteFile(*dir + "memory.memsw.limit_in_bytes", value);
      if (!s.ok()) return s;
    }
  }
  if (limits.pids_max != was.pids_max) {
    if (auto dir = dir_of("pids")) {
      const std::string value =
          limits.pids_max > 0 ? std::to_string(limits.pids_max + 1) : std::string("max");
      if (Status s = WriteFile(*dir + "pids.max", value); !s.ok()) return s;
    }
  }
  if (limits.cpu_quota_milli != was.cpu_quota_milli) {
    if (auto dir = dir_of("cpu")) {
      const std::string value =
          limits.cpu_quota_milli > 0
              ? std::to_string(
                    std::max(kMinCpuQuotaMicros, limits.cpu_quota_milli * kCpuPeriodMicros / 1000))
              : std::string("-1");
      if (Status s = WriteFile(*dir + "cpu.cfs_quota_us", value); !s.ok()) return s;
    }
  }
  if (limits.cpus != was.cpus) {
    if (!limits.cpus.empty() && !cpuset_) {
      return Unavailable("no cpuset cgroup controller: CPUs cannot be bound");
    }
    if (cpuset_) {
      const CgroupHierarchy* h = Find("cpuset");
      const std::string value = limits.cpus.empty() ? Trimmed(ReadAll(h->parent + "/cpuset.cpus"))
                                                    : FormatCpuList(limits.cpus);
      if (Status s = WriteFile(h->parent + "/" + name + "/cpuset.cpus", value); !s.ok()) return s;
    }
  }
  if (limits.denied_devices != was.denied_devices) {
    auto dir = dir_of("devices");
    if (!dir.has_value() && !limits.denied_devices.empty()) {
      return Unavailable(
          "no devices cgroup is mounted: GPU device files cannot be kept from other tasks");
    }
    if (dir.has_value()) {
      // The last task's denials that this one does not have are allowed again (which removes
      // them), then this one's are added.
      auto has = [](const std::vector<dev_t>& list, dev_t d) {
        return std::find(list.begin(), list.end(), d) != list.end();
      };
      auto rule = [](dev_t d) {
        return "c " + std::to_string(major(d)) + ":" + std::to_string(minor(d)) + " rwm";
      };
      for (dev_t d : was.denied_devices) {
        if (has(limits.denied_devices, d)) continue;
        if (Status s = WriteFile(*dir + "devices.allow", rule(d)); !s.ok()) return s;
      }
      for (dev_t d : limits.denied_devices) {
        if (has(was.denied_devices, d)) continue;
        if (Status s = WriteFile(*dir + "devices.deny", rule(d)); !s.ok()) return s;
      }
    }
  }
  // The counters start again from what the slot holds now (its shim).
  if (auto dir = dir_of("memory")) {
    if (Status s = WriteFile(*dir + "memory.max_usage_in_bytes", "0"); !s.ok()) return s;
  }
  if (auto dir = dir_of("cpuacct")) {
    if (Status s = WriteFile(*dir + "cpuacct.usage", "0"); !s.ok()) return s;
  }
  return OkStatus();
}

void TaskCgroups::Recycle(const std::string& name) {
  if (const CgroupHierarchy* h = Find("memory"); h != nullptr && version_ == CgroupVersion::kV1) {
    (void)WriteFile(h->parent + "/" + name + "/memory.force_empty", "0");
  }
}

Status TaskCgroups::SetCpus(const std::string& task_id, const std::vector<int>& cpus) {
  if (!cpuset_) return Unavailable("no cpuset cgroup controller: CPUs cannot be bound");
  const CgroupHierarchy* h = Find("cpuset");
  const std::string dir = h->parent + "/" + task_id;
  if (!IsDir(dir)) return NotFound("no cpuset cgroup " + dir);
  return WriteFile(dir + "/cpuset.cpus", FormatCpuList(cpus));
}

std::vector<std::pair<std::string, std::string>> TaskCgroups::JoinFiles(
    const std::string& task_id, const TaskCgroupLimits& limits) const {
  std::vector<std::pair<std::string, std::string>> files;
  if (version_ == CgroupVersion::kV2) {
    files.emplace_back(hierarchies_[0].parent + "/" + task_id, "");
    return files;
  }
  for (const CgroupHierarchy& h : hierarchies_) {
    if (!Needs(h, limits)) continue;
    files.emplace_back(h.parent + "/" + task_id + "/cgroup.procs", h.own + "/cgroup.procs");
  }
  return files;
}

bool TaskCgroups::Exists(const std::string& task_id) const {
  return std::any_of(hierarchies_.begin(), hierarchies_.end(),
                     [&](const CgroupHierarchy& h) { return IsDir(h.parent + "/" + task_id); });
}

std::vector<pid_t> TaskCgroups::Pids(const std::string& task_id) const {
  std::set<pid_t> pids;
  for (const CgroupHierarchy& h : hierarchies_) {
    for (pid_t p : ReadPids(h.parent + "/" + task_id + "/cgroup.procs")) pids.insert(p);
  }
  return {pids.begin(), pids.end()};
}

void TaskCgroups::Kill(const std::string& task_id, pid_t spare) {
  // The shim is spared only where it is (it could not leave): then nothing is frozen either.
  if (spare != 0) {
    const std::vector<pid_t> pids = Pids(task_id);
    if (std::find(pids.begin(), pids.end(), spare) == pids.end()) spare = 0;
  }
  if (version_ == CgroupVersion::kV2) {
    const std::string dir = hierarchies_[0].parent + "/" + task_id;
    if (spare == 0 && access((dir + "/cgroup.kill").c_str(), F_OK) == 0 &&
        WriteFile(dir + "/cgroup.kill", "1").ok()) {
      return;
    }
  }
  // v2: frozen, no process of the task can fork while the others are signalled. v1 (no freezer
  // hierarchy is used: each costs every task start two moves) signals round after round; the
  // pids limit bounds what a fork loop adds meanwhile.
  const std::string freeze_file = hierarchies_[0].parent + "/" + task_id + "/cgroup.freeze";
  const bool freezing =
      version_ == CgroupVersion::kV2 && spare == 0 && WriteFile(freeze_file, "1").ok();
  for (int round = 0; round < 20; ++round) {
    bool any = false;
    for (pid_t pid : Pids(task_id)) {
      if (pid == spare) continue;
      any = true;
      kill(pid, SIGKILL);
    }
    if (!any || freezing) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (freezing) (void)WriteFile(freeze_file, "0");
}

int64_t TaskCgroups::OomKills(const std::string& task_id) const {
  const CgroupHierarchy* h = Find("memory");
  if (h == nullptr) return 0;
  const std::string dir = h->parent + "/" + task_id + "/";
  if (version_ == CgroupVersion::kV2) return KeyedValue(ReadAll(dir + "memory.events"), "oom_kill");
  return KeyedValue(ReadAll(dir + "memory.oom_control"), "oom_kill");
}

std::optional<core::ResourceUsage> TaskCgroups::Usage(const std::string& task_id) const {
  const CgroupHierarchy* memory = Find("memory");
  if (memory == nullptr || !IsDir(memory->parent + "/" + task_id)) return std::nullopt;
  const std::string memory_dir = memory->parent + "/" + task_id + "/";
  core::ResourceUsage usage;
  if (version_ == CgroupVersion::kV2) {
    usage.cpu_micros = KeyedValue(ReadAll(memory_dir + "cpu.stat"), "usage_usec");
    std::istringstream(ReadAll(memory_dir + "memory.peak")) >> usage.max_memory_bytes;
    return usage;
  }
  std::istringstream(ReadAll(memory_dir + "memory.max_usage_in_bytes")) >> usage.max_memory_bytes;
  if (const CgroupHierarchy* cpuacct = Find("cpuacct")) {
    int64_t nanos = 0;
    std::istringstream(ReadAll(cpuacct->parent + "/" + task_id + "/cpuacct.usage")) >> nanos;
    usage.cpu_micros = nanos / 1000;
  }
  return usage;
}

Status TaskCgroups::Remove(const std::string& task_id) {
  Status result = OkStatus();
  for (const CgroupHierarchy& h : hierarchies_) {
    const std::string dir = h.parent + "/" + task_id;
    if (rmdir(dir.c_str()) != 0 && errno != ENOENT && result.ok()) {
      result = FailedPrecondition("cannot remove " + dir + ": " + strerror(errno));
    }
  }
  return result;
}

std::vector<std::string> TaskCgroups::List() const {
  std::set<std::string> ids;
  for (const CgroupHierarchy& h : hierarchies_) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(h.parent, ec)) {
      if (entry.is_directory(ec)) ids.insert(entry.path().filename().string());
    }
  }
  return {ids.begin(), ids.end()};
}

void TaskCgroups::Close() {
  for (const CgroupHierarchy& h : hierarchies_) rmdir(h.parent.c_str());
}

std::map<int, dev_t> GpuDeviceNumbers(const std::vector<GpuDevice>& gpus, bool fake,
                                      const std::string& fake_device_dir) {
  std::map<int, dev_t> devices;
  if (fake && fake_device_dir.empty()) return devices;
  for (const GpuDevice& gpu : gpus) {
    const std::string path =
        fake ? fake_device_dir + "/nvidia" + std::to_string(gpu.index)
             : "/dev/nvidia" + std::to_string(gpu.minor_number.value_or(gpu.index));
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) devices[gpu.index] = st.st_rdev;
  }
  return devices;
}

Status AttachDeviceFilter(int dir_fd, const std::vector<dev_t>& denied) {
  // struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }, access_type's low 16
  // bits the device's type (BPF_DEVCG_DEV_CHAR). Returns 0 (refused) for a denied character
  // device, 1 otherwise.
  constexpr uint8_t kLdxW = BPF_LDX | BPF_W | BPF_MEM;
  std::vector<bpf_insn> prog = {
      Insn(kLdxW, BPF_REG_2, BPF_REG_1, 0, 0),
      Insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff),
      Insn(kLdxW, BPF_REG_3, BPF_REG_1, 4, 0),
      Insn(kLdxW, BPF_REG_4, BPF_REG_1, 8, 0),
      Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, static_cast<int16_t>(4 * denied.size()),
           BPF_DEVCG_DEV_CHAR),
  };
  for (dev_t d : denied) {
    prog.push_back(
        Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, 3, static_cast<int32_t>(major(d))));
    prog.push_back(
        Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, 2, static_cast<int32_t>(minor(d))));
    prog.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
    prog.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  prog.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
  prog.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  static const char kLicense[] = "Apache-2.0";
  bpf_attr load{};
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uint64_t>(prog.data());
  load.insn_cnt = static_cast<uint32_t>(prog.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  const int prog_fd = static_cast<int>(syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof(load)));
  if (prog_fd < 0) {
    return Unavailable(std::string("cannot load the device filter (bpf): ") + strerror(errno));
  }
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(dir_fd);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog_fd);
  attach.attach_type = BPF_CGROUP_DEVICE;
  attach.attach_flags = BPF_F_ALLOW_MULTI;
  const long rc = syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof(attach));
  const int saved = errno;
  close(prog_fd);  // The attachment holds the program.
  if (rc != 0) {
    return Unavailable(std::string("cannot attach the device filter (bpf): ") + strerror(saved));
  }
  return OkStatus();
}

}  // namespace dgpu::agent
