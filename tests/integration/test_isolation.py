"""A cgroup per task (executor.isolation: cgroup) with real agents and fake GPUs whose device
files the test makes with mknod under gpu.fake.device_dir: a task opens its own GPU (ENXIO: no
driver here) and no other (EPERM); 300 MiB under memory_mb 64 fails out_of_memory; a fork loop
stops at max_pids_per_task; cpus binds whole CPUs of the task's own (a CPU quota once none is
free); a cancelled task leaves no process and no cgroup, and a stopped agent removes its cgroup
parent. With isolation none every GPU device file opens, as before. The cgroups are made below the test's own (the agents inherit it)."""

import os
import re
import stat
import subprocess
import unittest

from harness import (CTL_BIN, GPU_MODEL, ClusterTestCase, agent_cgroup_name, own_cgroup_dirs,
                     read_text, wait_until)

DEVICES_SCRIPT = r"""
import errno, os, sys
for i in range(4):
    try:
        os.close(os.open(os.path.join(sys.argv[1], "nvidia%d" % i), os.O_RDWR))
        print("%d:opened" % i)
    except OSError as e:
        print("%d:%s" % (i, errno.errorcode[e.errno]))
"""

FORK_SCRIPT = r"""
import errno, os, signal, time
forked, why, kids = 0, "nothing", []
while forked < 100:
    try:
        pid = os.fork()
    except OSError as e:
        why = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
    forked += 1
print("forked %d then %s" % (forked, why), flush=True)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
"""


def cpu_list(cpus):
    """Sorted CPU ids in the kernel's list format: [0, 1, 2, 5] -> "0-2,5"."""
    ranges = []
    for c in cpus:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in ranges)


def agent_parents(cluster, agent_id, controllers=("memory", "pids")):
    """The agent's cgroup parents that exist (dgpu-<node>-<hash of its work_dir>)."""
    name = agent_cgroup_name(agent_id, cluster.work_dir(agent_id))
    return sorted(p for p in (os.path.join(d, name) for d in own_cgroup_dirs(controllers))
                  if os.path.isdir(p))


def task_cgroup_name(cluster, agent_id, tid):
    """The name of the task's cgroup, from the agent's log line ("<id>: cgroup <path> (...)"):
    its id, or (cgroup v1, kept shims) the slot it runs in."""
    pattern = re.compile(r"%s: cgroup (\S+) \(" % re.escape(tid))

    def named():
        found = pattern.findall(read_text(cluster.agents[agent_id].stdout_path))
        return os.path.basename(found[-1]) if found else None
    return wait_until(named, 10, what="the agent's log line of %s's cgroup" % tid)


SHIMS = ("dgpu-task-shim", "dgpu-agent")  # How a task's shim is named in /proc/<pid>/comm.


def task_pids(directory):
    """The processes in the cgroup `directory` but a slot's shim (none when it is gone)."""
    try:
        pids = [int(x) for x in read_text(os.path.join(directory, "cgroup.procs")).split()]
    except FileNotFoundError:
        return []
    kept = []
    for pid in pids:
        try:
            if read_text("/proc/%d/comm" % pid).strip() not in SHIMS:
                kept.append(pid)
        except FileNotFoundError:
            pass
    return kept


class IsolatedCluster(ClusterTestCase):
    """One agent of 4 fake GPUs with device files, 2 CPUs and 4096 MiB, executor.isolation
    ISOLATION, at most 20 processes per task."""

    ISOLATION = "cgroup"

    def start_cluster(self):
        self.devices = os.path.join(self.c.tmp, "dev")
        os.makedirs(self.devices)
        for i in range(4):
            os.mknod(os.path.join(self.devices, "nvidia%d" % i), 0o666 | stat.S_IFCHR,
                     os.makedev(195, i))
        for name, text in (("devices.py", DEVICES_SCRIPT), ("fork.py", FORK_SCRIPT)):
            with open(os.path.join(self.c.tmp, name), "w") as f:
                f.write(text)
        self.c.start(agents=1, gpus=4, online_percent=1.0, agent_kwargs={"extra": {
            "gpu": {"detection_method": "fake", "health_check_interval": 30,
                    "fake": {"count": 4, "model": GPU_MODEL, "memory_mb": 32768,
                             "device_dir": self.devices}},
            "resources": {"cpus": 2, "memory_mb": 4096},
            "executor": {"isolation": self.ISOLATION, "max_pids_per_task": 20}}})

    def run_task(self, command, status="success", **fields):
        tid = self.c.submit(command, **fields)
        t = self.c.wait_status(tid, status, timeout=30)
        with open(self.c.task_log("a1", tid)) as f:
            return t, f.read()

    def devices_seen(self):
        return self.run_task("exec python3 %s/devices.py %s" % (self.c.tmp, self.devices))


@unittest.skipUnless(os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup"),
                     "cgroups and mknod need root")
class IsolationTest(IsolatedCluster):
    def test_a_task_opens_its_own_gpu_only(self):
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")  # The unified hierarchy only.
        self.assertEqual(self.c.agents_view()["a1"]["isolation"],
                         "cgroup_v2" if v2 else "cgroup_v1")
        t, log = self.devices_seen()
        own = t["allocation"][0]["gpu_indices"][0]
        self.assertEqual(log.split(),
                         ["%d:%s" % (i, "ENXIO" if i == own else "EPERM") for i in range(4)])

    def test_memory_above_the_limit_fails_out_of_memory(self):
        t, log = self.run_task("exec python3 -c 'b = b\"x\" * (300 << 20)'", status="failed",
                               memory_mb=64)
        self.assertEqual(t["error"],
                         "out_of_memory: killed at its memory limit of 64 MiB (memory_mb)")
        self.assertIn("dgpu: task failed: out_of_memory", log)
        # Within the limit the same kind of task succeeds.
        self.run_task("exec python3 -c 'b = b\"x\" * (16 << 20)'", memory_mb=64)

    def test_forks_stop_at_max_pids_per_task(self):
        _, log = self.run_task("exec python3 %s/fork.py" % self.c.tmp)
        self.assertEqual(log.strip(), "forked 19 then EAGAIN")

    def test_cpus_bind_cpus_of_the_tasks_own_and_a_cancel_leaves_nothing(self):
        # executor.cpu_binding cpuset (the default): ceil(cpus) whole CPUs of a task's own while
        # enough are free (the node's 2 here), then a CPU quota.
        script = "grep Cpus_allowed_list /proc/self/status; sleep 300 & sleep 300 & wait"
        first = [self.c.submit(script, cpus=0.5) for _ in range(2)]

        def bound(tid):
            return wait_until(lambda: self.c.task(tid)["cpu_set"], 10,
                              what="the CPUs %s is bound to" % tid)
        node_cpus = sorted(os.sched_getaffinity(0))[:2]  # Those of resources.cpus 2.
        sets = [bound(tid) for tid in first]
        self.assertEqual(sorted(sets), [[c] for c in node_cpus], sets)
        for tid, cpus in zip(first, sets):
            self.assertEqual(self.c.task(tid)["allocation"][0]["cpu_set"], cpus)
            wait_until(lambda: "Cpus_allowed_list" in read_text(self.c.task_log("a1", tid)), 10,
                       what="the task's CPUs in its log")
            self.assertEqual(read_text(self.c.task_log("a1", tid)).split(),
                             ["Cpus_allowed_list:", str(cpus[0])])
        if os.access(CTL_BIN, os.X_OK):
            p = subprocess.run([CTL_BIN, "--server", self.c.base, "get", "task", first[0]],
                               capture_output=True, text=True, timeout=30)
            self.assertRegex(p.stdout, r"(?m)^CPUs / Memory: +0\.5 / 1024 MiB "
                             r"\(bound to CPUs %d\)$" % sets[0][0])
        # No CPU left to bind: a quota of its cpus instead, and its log says so.
        tid = self.c.submit(script, cpus=1)
        self.c.wait_status(tid, "running")
        wait_until(lambda: "Cpus_allowed_list" in read_text(self.c.task_log("a1", tid)), 10,
                   what="the task's CPUs in its log")
        self.assertEqual(read_text(self.c.task_log("a1", tid)).splitlines()[0],
                         "dgpu: 1 CPU(s) to bind the task to and 0 free: a CPU quota of 1 "
                         "instead")
        self.assertIsNone(self.c.task(tid)["cpu_set"])
        # Not bound, it runs on the CPUs no task is bound to (all of them while every one is).
        allowed = sorted(os.sched_getaffinity(0))
        shared = [c for c in allowed if c not in node_cpus] or allowed
        self.assertEqual(read_text(self.c.task_log("a1", tid)).split()[-2:],
                         ["Cpus_allowed_list:", cpu_list(shared)])
        parents = agent_parents(self.c, "a1")
        self.assertEqual(len(parents), len(own_cgroup_dirs(("memory", "pids"))), parents)
        task_dirs = [os.path.join(p, task_cgroup_name(self.c, "a1", tid)) for p in parents]

        def the_task():
            # The shell and its two sleeps (the shim passes through the cgroup at the start, or
            # lives in it: a slot's).
            pids = task_pids(task_dirs[0])
            names = sorted(read_text("/proc/%d/comm" % p).strip() for p in pids)
            return pids if names == ["sh", "sleep", "sleep"] else None
        pids = wait_until(the_task, 10, what="the shell and its two sleeps in the task's cgroup")
        cpu = [os.path.join(p, task_cgroup_name(self.c, "a1", tid))
               for p in agent_parents(self.c, "a1", ("cpu",))]
        self.assertEqual(len(cpu), 1, cpu)
        name = "cpu.max" if os.path.exists(os.path.join(cpu[0], "cpu.max")) else \
            "cpu.cfs_quota_us"
        with open(os.path.join(cpu[0], name)) as f:
            self.assertEqual(f.read().split()[0], "100000")
        # Each in a cgroup of its own, in every hierarchy of the agent's.
        names = {t: task_cgroup_name(self.c, "a1", t) for t in first + [tid]}
        self.assertEqual(len(set(names.values())), 3, names)
        everywhere = agent_parents(self.c, "a1", ("memory", "pids", "cpu", "devices", "cpuset"))
        dirs = {t: [os.path.join(p, n) for p in everywhere] for t, n in names.items()}
        for t in first + [tid]:
            self.assertEqual(self.c.cancel(t).status, 200)
        for t in first + [tid]:
            self.c.wait_status(t, "cancelled")
        # A cgroup of a task's own goes with it; a slot (cgroup v1: kept for the next task) is
        # left with its shim alone.
        wait_until(lambda: not any(task_pids(d) or (os.path.exists(d) and n == t)
                                   for t, n in names.items() for d in dirs[t]), 10,
                   what="the tasks' processes gone and the cgroups of their own removed")
        for pid in pids:
            self.assertFalse(os.path.exists("/proc/%d" % pid), pid)
        # Their CPUs are free again.
        again = self.c.submit("sleep 1", cpus=2)
        self.assertEqual(self.c.wait_status(again, "success", timeout=20)["cpu_set"], node_cpus)
        # The agent's own end removes its parents.
        self.c.agents["a1"].stop()
        self.assertEqual(agent_parents(self.c, "a1", ("memory", "pids", "cpu", "devices",
                                                      "freezer", "cpuset")), [])

    def test_an_agent_restarted_adopts_its_tasks_cgroup_and_removes_leftovers(self):
        tid = self.c.submit("exec sleep 300", memory_mb=256)
        self.c.wait_status(tid, "running")
        parents = agent_parents(self.c, "a1")
        task_dirs = [os.path.join(p, task_cgroup_name(self.c, "a1", tid)) for p in parents]

        def the_sleep():
            # Its one process (the shim passes through the cgroup around the start, or lives in
            # it: a slot's).
            pids = task_pids(task_dirs[0])
            return pids if len(pids) == 1 and \
                read_text("/proc/%s/comm" % pids[0]).strip() == "sleep" else None
        pids = wait_until(the_sleep, 10, what="the task alone in its cgroup")
        self.c.agents["a1"].kill9()
        # A cgroup no task owns, as a crashed agent leaves one after its task ended.
        leftovers = [os.path.join(p, "task-999") for p in parents]
        for d in leftovers:
            os.mkdir(d)
        self.c.start_agent("a1")
        self.c.wait_agents_online(["a1"])
        wait_until(lambda: not any(os.path.exists(d) for d in leftovers), 10,
                   what="the leftover cgroup removed")
        self.assertIn("cgroup %s was left by an earlier agent process with 0 process(es): "
                      "removed" % leftovers[0], read_text(self.c.agents["a1"].stdout_path))
        # The task runs on in its cgroup, adopted; its end removes the cgroup.
        t = self.c.task(tid)
        self.assertEqual((t["status"], t["attempts"]), ("running", 1), t)
        self.assertEqual(task_pids(task_dirs[0]), pids)
        self.assertEqual(self.c.cancel(tid).status, 200)
        self.c.wait_status(tid, "cancelled")
        wait_until(lambda: not any(os.path.exists(d) for d in task_dirs), 10,
                   what="the adopted task's cgroup removed")

    def test_usage_of_a_task_that_spins_one_second(self):
        spin = ("exec python3 -c \"import time\n"
                "while time.process_time() < 1.0: pass\n"
                "time.sleep(1.5)\"")
        tid = self.c.submit(spin, cpus=2)
        # While it runs, its agent's heartbeats bring what it used so far.
        t = wait_until(lambda: (lambda t: t if t["usage"] else None)(self.c.task(tid)), 10,
                       what="a usage figure while it runs")
        self.assertEqual(t["status"], "running")
        self.assertGreater(t["usage"]["cpu_seconds"], 0)
        t = self.c.wait_status(tid, "success", timeout=20)
        self.assertGreaterEqual(t["usage"]["cpu_seconds"], 1.0)
        self.assertLess(t["usage"]["cpu_seconds"], 1.2)
        self.assertGreaterEqual(t["usage"]["max_memory_mb"], 1)
        metrics = self.c.get("/metrics").body.decode()
        line = [x for x in metrics.splitlines()
                if x.startswith('dgpu_task_cpu_seconds_total{priority="high",team="default"}')]
        self.assertEqual(len(line), 1, metrics)
        self.assertAlmostEqual(float(line[0].split()[-1]), t["usage"]["cpu_seconds"], places=3)
        self.assertIn('dgpu_task_max_memory_bytes_count 1', metrics)
        if os.access(CTL_BIN, os.X_OK):
            p = subprocess.run([CTL_BIN, "--server", self.c.base, "get", "task", tid],
                               capture_output=True, text=True, timeout=30)
            self.assertRegex(p.stdout, r"(?m)^Usage: +1\.\d CPU seconds, peak memory \d+ MiB$")


class NoIsolationTest(IsolatedCluster):
    ISOLATION = "none"

    def test_every_gpu_device_file_opens(self):
        self.assertEqual(self.c.agents_view()["a1"]["isolation"], "none")
        _, log = self.devices_seen()
        self.assertEqual(log.split(), ["%d:ENXIO" % i for i in range(4)])
        self.assertEqual(agent_parents(self.c, "a1"), [])
        # Nothing measures what it used.
        self.assertIsNone(self.c.task("task-1")["usage"])


if __name__ == "__main__":
    unittest.main()
