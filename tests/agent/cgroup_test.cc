// Task cgroups (cgroup.h) on this machine's kernel: the v1 hierarchies where they are mounted,
// the v2 device program on the unified hierarchy, and the parsing of both layouts.
#include "agent/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "agent/cpu_sets.h"
#include "test_util.h"

namespace dgpu::agent {
namespace {

using testing::ReadFile;
using testing::TempDir;

constexpr char kV1Cgroup[] =
    "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n4:memory:/api/x1\n"
    "3:cpuset:/\n2:cpu,cpuacct:/\n0::/\n";
constexpr char kV1Mounts[] =
    "30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "32 30 0:28 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
    "33 30 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "34 30 0:30 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
    "35 30 0:31 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
    "36 30 0:32 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    "37 30 0:33 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";

TEST(CgroupLayoutTest, V1HierarchiesBelowTheProcesssOwn) {
  auto found = FindCgroupHierarchies(kV1Cgroup, kV1Mounts, "dgpu-n1");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->first, CgroupVersion::kV1);
  const auto& h = found->second;
  ASSERT_EQ(h.size(), 5u);  // memory, pids, cpu+cpuacct (one mount), devices, cpuset.
  EXPECT_EQ(h[0].controllers, std::vector<std::string>{"memory"});
  EXPECT_EQ(h[0].own, "/sys/fs/cgroup/memory/api/x1");
  EXPECT_EQ(h[0].parent, "/sys/fs/cgroup/memory/api/x1/dgpu-n1");
  EXPECT_EQ(h[1].own, "/sys/fs/cgroup/pids");
  EXPECT_EQ(h[2].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(h[2].parent, "/sys/fs/cgroup/cpu,cpuacct/dgpu-n1");
  EXPECT_EQ(h[3].controllers, std::vector<std::string>{"devices"});
  EXPECT_EQ(h[4].controllers, std::vector<std::string>{"cpuset"});
  EXPECT_EQ(h[4].parent, "/sys/fs/cgroup/cpuset/dgpu-n1");
}

TEST(CgroupLayoutTest, V2WhenTheUnifiedHierarchyHoldsMemoryAndPids) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("a b/svc"));
  std::ofstream(dir.File("a b/svc/cgroup.controllers")) << "cpuset cpu io memory hugetlb pids\n";
  const std::string point = dir.path();
  const std::string mounts = "40 1 0:35 / " + point + " rw - cgroup2 cgroup2 rw\n";
  // /proc/self/cgroup does not escape a space; mountinfo does (\040).
  auto found = FindCgroupHierarchies("0::/a b/svc\n", mounts, "dgpu-n1");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->first, CgroupVersion::kV2);
  ASSERT_EQ(found->second.size(), 1u);
  EXPECT_EQ(found->second[0].own, point + "/a b/svc");
  EXPECT_EQ(found->second[0].parent, point + "/a b/svc/dgpu-n1");

  // Without memory and pids there, and no v1 hierarchy: nothing to use.
  std::ofstream(dir.File("a b/svc/cgroup.controllers")) << "cpu io\n";
  found = FindCgroupHierarchies("0::/a b/svc\n", mounts, "dgpu-n1");
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(found.status().message().find("no cgroup hierarchy"), std::string::npos);
}

// Runs `body` in a child that joined the task's cgroups first (as the shim makes the task's
// first process do); its wait status. The child has 20 s.
template <typename Body>
int RunInCgroup(const TaskCgroups& cgroups, const std::string& task_id,
                const TaskCgroupLimits& limits, Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    for (const auto& [join, home] : cgroups.JoinFiles(task_id, limits)) {
      // v2 names the directory (the shim starts the task there): its cgroup.procs.
      const std::string procs = home.empty() ? join + "/cgroup.procs" : join;
      const int fd = open(procs.c_str(), O_WRONLY);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(100);
      close(fd);
    }
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Maps `bytes` and writes to every page of it (the memory is charged to the cgroup then).
bool TouchMemory(size_t bytes) {
  auto* p = static_cast<char*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) return false;
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  return true;
}

class TaskCgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Root on a machine with cgroups (this project's test machines): the test must run.
    if (geteuid() != 0 || !std::filesystem::exists("/sys/fs/cgroup")) {
      GTEST_SKIP() << "making cgroups needs root and /sys/fs/cgroup";
    }
    auto opened = TaskCgroups::Open(name_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    cgroups_ = std::move(*opened);
  }
  void TearDown() override {
    if (cgroups_ == nullptr) return;
    for (const std::string& id : cgroups_->List()) {
      cgroups_->Kill(id);
      for (int i = 0; i < 100 && !cgroups_->Remove(id).ok(); ++i) usleep(10000);
    }
    cgroups_->Close();
    for (const auto& h : cgroups_->hierarchies()) {
      EXPECT_FALSE(std::filesystem::exists(h.parent)) << h.parent;
    }
  }
  std::string name_ = "dgpu-test-" + std::to_string(getpid());
  std::unique_ptr<TaskCgroups> cgroups_;
};

TEST_F(TaskCgroupsTest, GpuDeviceFilesOfOtherTasksCannotBeOpened) {
  TempDir dir;
  ASSERT_EQ(mknod(dir.File("nvidia0").c_str(), S_IFCHR | 0666, makedev(195, 0)), 0);
  ASSERT_EQ(mknod(dir.File("nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)), 0);
  TaskCgroupLimits limits;
  limits.denied_devices = {makedev(195, 1)};
  ASSERT_TRUE(cgroups_->Create("task-dev", limits).ok());
  const std::string own = dir.File("nvidia0");
  const std::string other = dir.File("nvidia1");
  // Bit 0: its own GPU reaches the (missing) driver; bit 1: the other is refused; bit 2:
  // /dev/null opens.
  const int status = RunInCgroup(*cgroups_, "task-dev", limits, [&] {
    int result = 0;
    if (open(own.c_str(), O_RDWR) < 0 && errno == ENXIO) result |= 1;
    if (open(other.c_str(), O_RDWR) < 0 && errno == EPERM) result |= 2;
    if (open("/dev/null", O_RDWR) >= 0) result |= 4;
    return result;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  // Outside the cgroup the other GPU reaches the driver too.
  const int fd = open(other.c_str(), O_RDWR);
  EXPECT_EQ(fd < 0 ? errno : 0, ENXIO);
  EXPECT_TRUE(cgroups_->Remove("task-dev").ok());
  EXPECT_FALSE(cgroups_->Exists("task-dev"));
}

TEST_F(TaskCgroupsTest, ATaskBoundToCpusRunsOnThoseAlone) {
  ASSERT_TRUE(cgroups_->can_bind_cpus());  // A cpuset hierarchy on this project's machines.
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  TaskCgroupLimits limits;
  limits.cpus = {allowed.back()};
  ASSERT_TRUE(cgroups_->Create("task-cpus", limits).ok());
  // The child reports the CPUs it may run on, as the kernel lists them.
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const int status = RunInCgroup(*cgroups_, "task-cpus", limits, [&] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
      const std::string list = line.substr(line.find_first_not_of(" \t", 18));
      return write(report[1], list.data(), list.size()) == static_cast<ssize_t>(list.size()) ? 0
                                                                                             : 2;
    }
    return 3;
  });
  close(report[1]);
  char buffer[64] = {};
  const ssize_t n = read(report[0], buffer, sizeof(buffer) - 1);
  close(report[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(std::string(buffer, n > 0 ? static_cast<size_t>(n) : 0),
            std::to_string(allowed.back()));
  EXPECT_TRUE(cgroups_->Remove("task-cpus").ok());
}

TEST_F(TaskCgroupsTest, MemoryAboveTheLimitIsAnOutOfMemoryKill) {
  TaskCgroupLimits limits;
  limits.memory_bytes = int64_t{64} << 20;
  ASSERT_TRUE(cgroups_->Create("task-mem", limits).ok());
  EXPECT_EQ(cgroups_->OomKills("task-mem"), 0);
  const int status = RunInCgroup(*cgroups_, "task-mem", limits,
                                 [] { return TouchMemory(size_t{300} << 20) ? 0 : 3; });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(cgroups_->OomKills("task-mem"), 1);
  EXPECT_TRUE(cgroups_->Remove("task-mem").ok());
}

TEST_F(TaskCgroupsTest, ForksStopAtThePidsLimitAndKillEndsThemAll) {
  TaskCgroupLimits limits;
  limits.pids_max = 20;
  ASSERT_TRUE(cgroups_->Create("task-pids", limits).ok());
  int counts[2];
  ASSERT_EQ(pipe(counts), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    for (const auto& [join, home] : cgroups_->JoinFiles("task-pids", limits)) {
      const std::string procs = home.empty() ? join + "/cgroup.procs" : join;
      const int fd = open(procs.c_str(), O_WRONLY);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(100);
      close(fd);
    }
    int forked = 0;
    int error = 0;
    for (int i = 0; i < 100; ++i) {
      const pid_t child = fork();
      if (child == 0) {
        pause();
        _exit(0);
      }
      if (child < 0) {
        error = errno;
        break;
      }
      ++forked;
    }
    const int report[2] = {forked, error};
    (void)!write(counts[1], report, sizeof(report));
    pause();
    _exit(0);
  }
  close(counts[1]);
  int report[2] = {-1, -1};
  ASSERT_EQ(read(counts[0], report, sizeof(report)), static_cast<ssize_t>(sizeof(report)));
  close(counts[0]);
  EXPECT_EQ(report[0], 19);  // 20 processes with the first.
  EXPECT_EQ(report[1], EAGAIN);
  EXPECT_EQ(cgroups_->Pids("task-pids").size(), 20u);
  EXPECT_FALSE(cgroups_->Remove("task-pids").ok());  // Busy while they run.
  cgroups_->Kill("task-pids");
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // The forked ones were orphaned to init (or a subreaper): gone once killed and reaped.
  for (int i = 0; i < 200 && !cgroups_->Pids("task-pids").empty(); ++i) usleep(10000);
  EXPECT_TRUE(cgroups_->Pids("task-pids").empty());
  EXPECT_TRUE(cgroups_->Remove("task-pids").ok());
  EXPECT_EQ(cgroups_->List(), std::vector<std::string>{});
}

TEST_F(TaskCgroupsTest, UsageIsTheCpuTimeAndPeakMemoryOfTheTasksProcesses) {
  ASSERT_TRUE(cgroups_->Create("task-use", TaskCgroupLimits{}).ok());
  auto before = cgroups_->Usage("task-use");
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->cpu_micros, 0);
  // 0.3 s of CPU and 64 MiB touched, in a child of the cgroup.
  const int status = RunInCgroup(*cgroups_, "task-use", TaskCgroupLimits{}, [] {
    if (!TouchMemory(size_t{64} << 20)) return 3;
    timespec start{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    for (timespec now = start; now.tv_sec * 1000000000L + now.tv_nsec <
                               start.tv_sec * 1000000000L + start.tv_nsec + 300000000L;) {
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    }
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto used = cgroups_->Usage("task-use");
  ASSERT_TRUE(used.has_value());
  EXPECT_GE(used->cpu_micros, 300000);
  EXPECT_LT(used->cpu_micros, 450000);
  EXPECT_GE(used->max_memory_bytes, int64_t{64} << 20);
  EXPECT_LT(used->max_memory_bytes, int64_t{96} << 20);
  EXPECT_TRUE(cgroups_->Remove("task-use").ok());
  EXPECT_FALSE(cgroups_->Usage("task-use").has_value());
}

TEST_F(TaskCgroupsTest, CpuQuotaAndAFailedCreateLeavesNothing) {
  TaskCgroupLimits limits;
  limits.cpu_quota_milli = 1500;
  ASSERT_TRUE(cgroups_->Create("task-cpu", limits).ok());
  const auto& h = cgroups_->hierarchies();
  bool checked = false;
  for (const auto& x : h) {
    if (std::find(x.controllers.begin(), x.controllers.end(), "cpu") != x.controllers.end()) {
      EXPECT_EQ(ReadFile(x.parent + "/task-cpu/cpu.cfs_quota_us"), "150000\n");
      checked = true;
    } else if (x.controllers == std::vector<std::string>{"unified"}) {
      EXPECT_EQ(ReadFile(x.parent + "/task-cpu/cpu.max"), "150000 100000\n");
      checked = true;
    }
  }
  EXPECT_TRUE(checked);
  EXPECT_EQ(cgroups_->List(), std::vector<std::string>{"task-cpu"});
  // A limit the kernel refuses: nothing of the new cgroup stays.
  limits.pids_max = int64_t{1} << 40;  // Above the kernel's PID_MAX_LIMIT.
  EXPECT_FALSE(cgroups_->Create("task-bad", limits).ok());
  EXPECT_FALSE(cgroups_->Exists("task-bad"));
  EXPECT_TRUE(cgroups_->Remove("task-cpu").ok());
}

// The unified hierarchy's mount point and this process's cgroup there; empty when none.
std::pair<std::string, std::string> UnifiedCgroup() {
  std::string mount;
  std::istringstream mounts(ReadFile("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(mounts, line)) {
    if (line.find(" - cgroup2 ") == std::string::npos) continue;
    std::istringstream f(line);
    std::string skip;
    f >> skip >> skip >> skip >> skip >> mount;
    break;
  }
  std::string own;
  std::istringstream cg(ReadFile("/proc/self/cgroup"));
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  return {mount, own == "/" ? "" : own};
}

// The cgroup v2 device program, on this machine's unified hierarchy (it needs no controller).
TEST(DeviceFilterTest, V2ProgramRefusesTheDeniedDevicesOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  const auto [mount, own] = UnifiedCgroup();
  if (mount.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted";
  const std::string dir = mount + own + "/dgpu-bpf-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << strerror(errno);
  TempDir devices;
  ASSERT_EQ(mknod(devices.File("nvidia0").c_str(), S_IFCHR | 0666, makedev(195, 0)), 0);
  ASSERT_EQ(mknod(devices.File("nvidia3").c_str(), S_IFCHR | 0666, makedev(195, 3)), 0);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  Status attached = AttachDeviceFilter(fd, {makedev(195, 3), makedev(195, 7)});
  close(fd);
  ASSERT_TRUE(attached.ok()) << attached.ToString();
  const std::string own_gpu = devices.File("nvidia0");
  const std::string other = devices.File("nvidia3");
  const std::string procs = dir + "/cgroup.procs";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(10);
    const int p = open(procs.c_str(), O_WRONLY);
    if (p < 0 || write(p, "0", 1) != 1) _exit(100);
    close(p);
    int result = 0;
    if (open(own_gpu.c_str(), O_RDWR) < 0 && errno == ENXIO) result |= 1;
    if (open(other.c_str(), O_RDWR) < 0 && errno == EPERM) result |= 2;
    if (open("/dev/null", O_RDWR) >= 0) result |= 4;
    _exit(result);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_EQ(rmdir(dir.c_str()), 0) << strerror(errno);
}

// Runs dgpu-task-shim (the static binary agents use) for one task with `args` after
// `--task-shim`; its handshake line and the task's log.
std::pair<std::string, std::string> RunShim(const TempDir& dir, std::vector<std::string> args) {
  int hello[2];
  if (pipe(hello) != 0) return {};
  const std::string log = dir.File("shim.log");
  args.insert(args.begin(), {DGPU_TASK_SHIM_PATH, "--task-shim"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(hello[1], 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(hello[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(hello[1]);
  char line[4096] = {};
  const ssize_t n = read(hello[0], line, sizeof(line) - 1);
  close(hello[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {std::string(line, n > 0 ? static_cast<size_t>(n) : 0), ReadFile(log)};
}

// v2: the shim starts the task's first process in its cgroup directly (clone3 with
// CLONE_INTO_CGROUP, on this machine's unified hierarchy) and does not move itself.
TEST(ShimCgroupTest, TheTaskStartsInItsV2CgroupAndTheShimStaysOut) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  const auto [mount, own] = UnifiedCgroup();
  if (mount.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted";
  const std::string name = "/dgpu-clone-" + std::to_string(getpid());
  const std::string dir = mount + own + name;
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << strerror(errno);
  TempDir tmp;
  auto [hello, log] =
      RunShim(tmp, {"2", tmp.File("t1"), "0", "1", dir, "", "--", "/bin/sh", "-c",
                    "grep '^0::' /proc/self/cgroup; grep '^0::' /proc/$PPID/cgroup"});
  EXPECT_EQ(hello.rfind("1 ok ", 0), 0u) << hello;
  EXPECT_EQ(log, "0::" + own + name + "\n0::" + (own.empty() ? "/" : own) + "\n");
  EXPECT_EQ(rmdir(dir.c_str()), 0) << strerror(errno);  // Empty again: nothing stayed there.

  std::tie(hello, log) = RunShim(tmp, {"2", tmp.File("t2"), "0", "1", dir, "", "--", "/bin/true"});
  EXPECT_EQ(hello,
            "1 error cannot open the task's cgroup " + dir + ": No such file or directory\n");
  // A command that cannot run is refused alike.
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  std::tie(hello, log) = RunShim(tmp, {"2", tmp.File("t3"), "0", "1", dir, "", "--", "/no/such"});
  EXPECT_EQ(hello, "1 error cannot run /no/such: No such file or directory\n");
  EXPECT_EQ(rmdir(dir.c_str()), 0) << strerror(errno);
}

TEST(GpuDeviceNumbersTest, FakeGpusUseTheDeviceDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  TempDir dir;
  ASSERT_EQ(mknod(dir.File("nvidia0").c_str(), S_IFCHR | 0666, makedev(195, 0)), 0);
  ASSERT_EQ(mknod(dir.File("nvidia2").c_str(), S_IFCHR | 0666, makedev(195, 9)), 0);
  std::ofstream(dir.File("nvidia1")) << "not a device\n";
  std::vector<GpuDevice> gpus(4);
  for (int i = 0; i < 4; ++i) gpus[static_cast<size_t>(i)].index = i;
  const auto numbers = GpuDeviceNumbers(gpus, /*fake=*/true, dir.path());
  EXPECT_EQ(numbers, (std::map<int, dev_t>{{0, makedev(195, 0)}, {2, makedev(195, 9)}}));
  EXPECT_TRUE(GpuDeviceNumbers(gpus, /*fake=*/true, "").empty());
}

}  // namespace
}  // namespace dgpu::agent
