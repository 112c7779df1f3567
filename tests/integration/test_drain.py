"""Cordon, drain and uncordon with real agents and real task processes: 2 agents x 2 GPUs.

A cordoned node takes no new task; a drain that evicts stops the node's tasks (SIGTERM, grace,
SIGKILL) and they run again on the other node; the modes survive a scheduler restart; dgpuctl
drives the same endpoints; bad requests get precise errors."""

import os
import subprocess
import unittest

from harness import (API, CTL_BIN, ClusterTestCase, pid_alive, read_pid, read_text,
                     wait_until)


class DrainTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 2
    # Long enough that no agent is declared lost while the scheduler restarts.
    # Every GPU for high priority (the default of submit), so quotas never hold a task back.
    SCHEDULER = {"heartbeat_timeout": 10, "online_percent": 1.0}

    def mode(self, agent, verb, body=None, expect=200):
        r = self.c.request("POST", "%s/agents/%s/%s" % (API, agent, verb), body)
        self.assertEqual(r.status, expect, r)
        return r.json

    def ctl(self, *args):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)
        return subprocess.run([CTL_BIN, "--server", self.c.base] + list(args), capture_output=True,
                              text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)

    def node_of(self, task_id):
        return self.c.wait_status(task_id, "running")["node_id"]

    def test_a_cordoned_node_takes_no_new_task_and_keeps_its_running_ones(self):
        long_running = self.c.submit("sleep 300", gpu_count=2)
        first = self.node_of(long_running)
        other = "a2" if first == "a1" else "a1"
        answer = self.mode(first, "cordon")
        self.assertEqual(answer["evicted"], 0)
        self.assertEqual((answer["agent"]["id"], answer["agent"]["status"],
                          answer["agent"]["mode"], answer["agent"]["tasks"]),
                         (first, "cordoned", "cordoned", 1))
        ids = [self.c.submit("sleep 300") for _ in range(2)]
        self.assertEqual([self.node_of(t) for t in ids], [other, other])
        self.assertEqual(self.c.task(long_running)["status"], "running")
        # Nothing fits now: the third waits rather than go to the cordoned node's idle GPUs...
        self.c.cancel(long_running)
        self.c.wait_finished(long_running)
        third = self.c.submit("true")
        wait_until(lambda: self.c.task(third)["pending_reason"] == "no_node_fits", 10,
                   what="the third task to wait for room")
        metrics = self.c.get("/metrics").body.decode()
        self.assertIn('dgpu_agents{status="cordoned"} 1', metrics)
        self.assertIn('dgpu_agents{status="online"} 1', metrics)
        # ...until the node is uncordoned.
        answer = self.mode(first, "uncordon")
        self.assertEqual(answer["agent"]["status"], "online")
        done = self.c.wait_finished(third)
        self.assertEqual((done["status"], done["node_id"]), ("success", first))

    def test_a_drain_that_evicts_requeues_the_task_on_the_other_node(self):
        pidfile = os.path.join(self.c.tmp, "pid")
        self.mode("a2", "cordon")
        tid = self.c.submit("echo $$ >> %s; exec sleep 300" % pidfile, gpu_count=2)
        self.assertEqual(self.node_of(tid), "a1")
        pid = read_pid(pidfile)
        self.mode("a2", "uncordon")

        answer = self.mode("a1", "drain", {"evict": True, "grace_seconds": 1})
        self.assertEqual(answer["evicted"], 1)
        self.assertEqual(answer["agent"]["status"], "draining")
        wait_until(lambda: not pid_alive(pid), 10, what="the evicted process to end")
        t = self.c.wait_status(tid, "running")
        wait_until(lambda: self.c.task(tid)["node_id"] == "a2", 10, what="the task on a2")
        t = self.c.task(tid)
        self.assertEqual((t["node_id"], t["attempts"], t["preemptions"]), ("a2", 1, 1), t)
        self.assertEqual(self.c.agents_view()["a1"]["tasks"], 0)
        log = read_text(self.c.task_log("a1", tid))
        self.assertIn("reason: drain", log)

    def test_modes_survive_a_scheduler_restart(self):
        pidfile = os.path.join(self.c.tmp, "pid")
        runs = self.c.submit("echo $$ > %s; exec sleep 300" % pidfile)
        node = self.node_of(runs)
        read_pid(pidfile)  # Its agent runs it: it reports it when it registers again.
        self.mode("a1", "cordon")
        self.mode("a2", "drain")  # No eviction: its task runs on.
        self.c.scheduler.kill9()
        self.c.start_scheduler()
        wait_until(lambda: {a: v["status"] for a, v in self.c.agents_view().items()}
                   == {"a1": "cordoned", "a2": "draining"}, 15,
                   what="both agents back in their modes")
        self.assertEqual(self.c.task(runs)["status"], "running")
        self.assertEqual(self.c.agents_view()[node]["tasks"], 1)
        waiting = self.c.submit("true")
        wait_until(lambda: self.c.task(waiting)["pending_reason"] not in (None, "queued"), 10,
                   what="a pass over the new task")
        self.assertEqual(self.c.task(waiting)["status"], "pending")
        self.mode("a1", "uncordon")
        self.assertEqual(self.c.wait_finished(waiting)["node_id"], "a1")

    def test_bad_requests(self):
        r = self.c.request("POST", API + "/agents/nope/cordon")
        self.assertApiError(r, 404, "not_found", "node nope is not registered")
        r = self.c.request("POST", API + "/agents/a1/drain", {"evict": "yes"})
        self.assertApiError(r, 400, "invalid_field", "evict must be true or false")
        r = self.c.request("POST", API + "/agents/a1/drain", {"grace_seconds": 86401})
        self.assertApiError(r, 400, "invalid_field", "grace_seconds")
        r = self.c.request("POST", API + "/agents/a1/drain", {"evict": True, "force": 1})
        self.assertApiError(r, 400, "unknown_field", "force")
        r = self.c.request("POST", API + "/agents/a1/drain", raw=b"[1]",
                           headers={"Content-Type": "application/json"})
        self.assertApiError(r, 400, "invalid_json")
        r = self.c.request("GET", API + "/agents/a1/cordon")
        self.assertApiError(r, 405, "method_not_allowed")
        # Nothing half-applied.
        self.assertEqual({a: v["status"] for a, v in self.c.agents_view().items()},
                         {"a1": "online", "a2": "online"})

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl(self):
        tid = self.c.submit("sleep 300", gpu_count=2)
        node = self.node_of(tid)
        p = self.ctl("cordon", node)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "node %s is cordoned\n" % node, ""))
        p = self.ctl("drain", node, "--grace", "1")
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("--grace needs --evict", p.stderr)
        p = self.ctl("drain", node)
        self.assertEqual(p.stdout, "node %s is draining; its 1 task(s) run to their end\n" % node)
        p = self.ctl("drain", node, "--evict", "--grace", "0")
        self.assertEqual(p.stdout, "node %s is draining; 1 task(s) evicted (requeued)\n" % node)
        p = self.ctl("get", "agents")
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stdout, r"(?m)^%s +\S+ +draining +2 " % node)
        p = self.ctl("uncordon", node)
        self.assertEqual(p.stdout, "node %s is online\n" % node)
        p = self.ctl("cordon", "nope")
        self.assertEqual(p.returncode, 3, p)
        self.assertIn("node nope is not registered", p.stderr)


if __name__ == "__main__":
    unittest.main()
