"""Placement on two 4-GPU agents, GPU isolation in the task's environment, agent loss and
rescheduling, and reconciliation after a quick agent restart (the task goes on: its agent
re-attaches)."""

import os
import sys
import time
import unittest

from harness import ClusterTestCase, pid_alive, read_pid, read_text, wait_until


def note(message):
    sys.stderr.write("\n  [observed] %s\n" % message)


def node_of(gpu_id):
    return gpu_id.split("-gpu-")[0]


def index_of(gpu_id):
    return int(gpu_id.split("-gpu-")[1])


class PlacementTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 4

    def test_two_gpu_tasks_fill_both_nodes(self):
        self.assertEqual(self.c.set_quota(1.0).status, 200)
        cmd = ("echo CVD=$CUDA_VISIBLE_DEVICES; echo NVD=$NVIDIA_VISIBLE_DEVICES; "
               "echo ORDER=$CUDA_DEVICE_ORDER; echo TID=$DGPU_TASK_ID; echo FOO=$FOO; "
               "exec sleep 30")
        ids = [self.c.submit(cmd, gpu_count=2, priority="high", env={"FOO": "bar %d" % i})
               for i in range(4)]
        tasks = [self.c.wait_status(t, "running", timeout=10) for t in ids]
        seen = set()
        per_node = {}
        for t in tasks:
            gpus = t["allocated_gpus"]
            self.assertEqual(len(gpus), 2, t)
            self.assertEqual({node_of(g) for g in gpus}, {t["node_id"]}, t)
            self.assertEqual(t["allocation"], [{"node_id": t["node_id"],
                                                "gpu_indices": [index_of(g) for g in gpus],
                                                "cpu_set": None}])
            self.assertFalse(seen & set(gpus), "GPU given twice")
            seen |= set(gpus)
            per_node.setdefault(t["node_id"], []).append(t["task_id"])
        self.assertEqual(len(seen), 8)
        self.assertEqual(sorted(len(v) for v in per_node.values()), [2, 2])
        # Best fit with ties broken on the node id: the first two fill a1, in index order.
        self.assertEqual(tasks[0]["allocated_gpus"], ["a1-gpu-0", "a1-gpu-1"])
        self.assertEqual(tasks[1]["allocated_gpus"], ["a1-gpu-2", "a1-gpu-3"])
        self.assertEqual(tasks[2]["allocated_gpus"], ["a2-gpu-0", "a2-gpu-1"])
        self.assertEqual(tasks[3]["allocated_gpus"], ["a2-gpu-2", "a2-gpu-3"])

        # The task sees exactly its GPUs.
        for i, t in enumerate(tasks):
            indices = ",".join(str(index_of(g)) for g in t["allocated_gpus"])
            log = self.c.task_log(t["node_id"], t["task_id"])
            text = wait_until(lambda: "FOO=" in read_text(log) and read_text(log), 5,
                              what="log of " + t["task_id"])
            lines = text.splitlines()
            self.assertIn("CVD=" + indices, lines, text)
            self.assertIn("NVD=" + indices, lines, text)
            self.assertIn("ORDER=PCI_BUS_ID", lines, text)
            self.assertIn("TID=" + t["task_id"], lines, text)
            self.assertIn("FOO=bar %d" % i, lines, text)
        self.assertEqual(self.c.tasks()["tasks"][0]["env"], {"FOO": "bar 3"})

        g = self.c.gpus()
        self.assertEqual((g["total"], g["idle"], g["busy"], g["offline"]), (8, 0, 8, 0))
        self.assertGpusConsistent()

        fifth = self.c.submit("true", gpu_count=2, priority="high")
        time.sleep(0.5)
        t = self.c.task(fifth)
        self.assertEqual(t["status"], "pending")
        self.assertEqual(t["pending_reason"], "quota_exhausted")  # 8 of 8 online GPUs in use
        self.assertEqual(self.c.cancel(ids[0]).status, 200)
        t = self.c.wait_status(fifth, "success", timeout=8)
        self.assertEqual(t["allocated_gpus"], ["a1-gpu-0", "a1-gpu-1"])

    def test_no_node_fits_when_fragmented(self):
        self.assertEqual(self.c.set_quota(1.0).status, 200)
        a = self.c.submit("sleep 30", gpu_count=3)
        b = self.c.submit("sleep 30", gpu_count=3)
        ta = self.c.wait_status(a, "running", timeout=10)
        tb = self.c.wait_status(b, "running", timeout=10)
        self.assertEqual({ta["node_id"], tb["node_id"]}, {"a1", "a2"})
        # 2 GPUs are free, one on each node: a 2-GPU task fits the quota but no node.
        c = self.c.submit("true", gpu_count=2)
        time.sleep(0.5)
        t = self.c.task(c)
        self.assertEqual((t["status"], t["pending_reason"]), ("pending", "no_node_fits"))
        # A 1-GPU task still runs.
        d = self.c.submit("true", gpu_count=1)
        self.assertEqual(self.c.wait_finished(d)["status"], "success")
        self.assertEqual(self.c.cancel(a).status, 200)
        t = self.c.wait_status(c, "success", timeout=8)
        self.assertEqual(t["node_id"], ta["node_id"])


class AgentLossTest(ClusterTestCase):
    """agent.heartbeat_timeout 3 s, agents heartbeat every 0.5 s."""
    AGENTS = 2
    GPUS = 4
    SCHEDULER = {"heartbeat_timeout": 3}

    def test_killed_agent_goes_offline_and_task_is_rescheduled(self):
        pidfile = os.path.join(self.c.tmp, "run.pids")
        # Runs 6 s; appends its pid per attempt.
        tid = self.c.submit("echo $$ >> %s; sleep 6" % pidfile, gpu_count=1, priority="high")
        t = self.c.wait_status(tid, "running", timeout=10)
        self.assertEqual(t["node_id"], "a1")
        self.assertEqual(t["attempts"], 1)
        first_pid = read_pid(pidfile)

        killed_at = time.monotonic()
        self.c.agents["a1"].kill9()

        def a1_offline():
            return self.c.agents_view()["a1"]["status"] == "offline"
        wait_until(a1_offline, 10, what="a1 offline")
        elapsed = time.monotonic() - killed_at
        self.assertGreaterEqual(elapsed, 2.0, "a1 declared offline before heartbeat_timeout")
        view = self.c.agents_view()
        self.assertEqual(view["a2"]["status"], "online")

        g = self.c.gpus()
        self.assertEqual((g["total"], g["offline"]), (8, 4))
        for gpu in g["gpus"]:
            self.assertEqual(gpu["status"], "offline" if gpu["node_id"] == "a1" else gpu["status"])
            if gpu["node_id"] == "a1":
                self.assertIsNone(gpu["current_task"], gpu)
        # Quota follows the GPUs online: 4 -> online round(2.8) = 3, batch 1.
        q = self.c.quota()
        self.assertEqual((q["total_gpus"], q["online"]["quota"], q["batch"]["quota"]), (4, 3, 1))

        t = self.c.wait_status(tid, "running", timeout=10)
        # Observed behaviour (not asserted): the first attempt's process outlives the SIGKILLed
        # agent (tasks run in sessions of their own) and runs on, orphaned, on the lost node.
        note("agent loss: first attempt pid %d alive after a1's SIGKILL and the reschedule: %s"
             % (first_pid, pid_alive(first_pid)))
        self.assertEqual(t["node_id"], "a2")
        self.assertEqual(t["attempts"], 2)
        self.assertEqual(len(t["allocated_gpus"]), 1)
        self.assertTrue(t["allocated_gpus"][0].startswith("a2-gpu-"))
        self.assertGpusConsistent()
        t = self.c.wait_finished(tid, timeout=10)
        self.assertEqual(t["status"], "success")
        self.assertEqual(t["attempts"], 2)
        self.assertEqual(t["node_id"], "a2")

    def test_agent_back_after_timeout_is_online_again(self):
        self.c.agents["a2"].kill9()
        wait_until(lambda: self.c.agents_view()["a2"]["status"] == "offline", 10,
                   what="a2 offline")
        self.assertEqual(self.c.gpus()["offline"], 4)
        self.c.start_agent("a2")
        self.c.wait_agents_online(["a1", "a2"])
        g = self.c.gpus()
        self.assertEqual((g["total"], g["idle"], g["offline"]), (8, 8, 0))
        self.assertEqual(self.c.quota()["total_gpus"], 8)


class DuplicateAgentIdTest(ClusterTestCase):
    """A second agent started with a1's id (a copied configuration) while a1 is alive."""
    AGENTS = 1
    GPUS = 4
    SCHEDULER = {"heartbeat_timeout": 3}

    def start_clone(self):
        # Its own work directory, hence its own instance id; 8 GPUs, to tell it apart.
        work = os.path.join(self.c.tmp, "clone-work")
        doc = self.c.agent_config("a1", gpus=8, extra={"executor": {"work_dir": work}})
        return self.c.start_agent_from("clone", doc)

    def test_a_second_agent_with_a_live_agents_id_is_refused(self):
        tid = self.c.submit("sleep 30", gpu_count=1)
        t = self.c.wait_status(tid, "running")
        clone = self.start_clone()
        refused = "agent id a1 is in use by a live agent at "
        wait_until(lambda: refused in read_text(clone.stdout_path), 10,
                   what="the clone's log to say it was refused")
        wait_until(lambda: refused in read_text(self.c.scheduler.stdout_path), 5,
                   what="the scheduler's log to say it refused the clone")
        # Both sides name both addresses: the live agent's and the clone's.
        line = [ln for ln in read_text(self.c.scheduler.stdout_path).splitlines()
                if refused in ln][0]
        self.assertEqual(line.count("127.0.0.1:"), 2, line)
        time.sleep(1.5)  # The clone keeps trying; nothing changes.
        view = self.c.agents_view()
        self.assertEqual((view["a1"]["status"], view["a1"]["gpus"]), ("online", 4), view)
        after = self.c.task(tid)
        self.assertEqual((after["status"], after["attempts"], after["node_id"]),
                         ("running", 1, "a1"), after)
        self.assertTrue(clone.running())
        # The same agent coming back (its own work directory) is not refused.
        self.c.agents["a1"].kill9()
        self.c.start_agent("a1")
        wait_until(lambda: self.c.agents_view()["a1"]["gpus"] == 4 and
                   "agent_connected" in read_text(self.c.agents["a1"].stdout_path), 10,
                   what="a1 back with its 4 GPUs")
        self.assertNotIn("is in use by a live agent", read_text(self.c.agents["a1"].stdout_path))
        # Once a1 is gone for good and declared lost, the clone may take the id.
        self.c.agents["a1"].kill9()
        wait_until(lambda: self.c.agents_view()["a1"]["gpus"] == 8, 15,
                   what="the clone registered as a1 after a1 was lost")


class ReconcileTest(ClusterTestCase):
    """An agent with a running task is SIGKILLed and restarted with the same id and work_dir
    before agent.heartbeat_timeout (10 s here) runs out."""
    AGENTS = 2
    GPUS = 4
    SCHEDULER = {"heartbeat_timeout": 10}

    def test_quick_agent_restart_reconciles(self):
        pidfile = os.path.join(self.c.tmp, "attempts.pids")
        running = self.c.submit("echo $$ >> %s; sleep 5" % pidfile, gpu_count=2)
        t = self.c.wait_status(running, "running", timeout=10)
        self.assertEqual(t["node_id"], "a1")
        first_pid = read_pid(pidfile)
        short = self.c.submit("true", gpu_count=1)
        self.assertEqual(self.c.wait_finished(short)["status"], "success")

        self.c.agents["a1"].kill9()
        self.c.start_agent("a1")
        self.c.wait_agents_online(["a1", "a2"])

        # The new agent re-attached to the task's shim: the same run goes on, on the same GPUs.
        t = self.c.task(running)
        self.assertEqual((t["status"], t["attempts"], t["node_id"]), ("running", 1, "a1"), t)
        held = self.assertGpusConsistent()
        self.assertEqual(sorted(g for g, owner in held.items() if owner == running),
                         sorted(t["allocated_gpus"]))
        self.assertTrue(pid_alive(first_pid))
        t = self.c.wait_finished(running, timeout=15)
        self.assertEqual((t["status"], t["attempts"]), ("success", 1), t)
        self.assertEqual(self.c.task(short)["attempts"], 1)
        self.assertEqual(self.c.task(short)["status"], "success")
        for tk in self.c.tasks()["tasks"]:
            self.assertIn(tk["status"], ("success",), tk)
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="all GPUs idle")
        self.assertEqual(read_text(pidfile).split(), [str(first_pid)])


if __name__ == "__main__":
    unittest.main()
