"""dgpuctl against the real scheduler (skipped when dgpuctl is not built)."""

import datetime
import json
import os
import re
import subprocess
import unittest

import harness
from harness import BIN_DIR, ClusterTestCase

CTL = os.environ.get("DGPU_CTL_BIN") or os.path.join(BIN_DIR, "dgpuctl")


@unittest.skipUnless(os.access(CTL, os.X_OK), "dgpuctl not built: " + CTL)
class CtlSmokeTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 4

    def ctl(self, *args, timeout=30):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)
        return subprocess.run([CTL, "--server", self.c.base] + list(args), capture_output=True,
                              text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)

    def test_submit_wait_get(self):
        p = self.ctl("submit", "--gpus", "1", "--priority", "high", "--", "echo", "hi")
        self.assertEqual(p.returncode, 0, p)
        tid = p.stdout.strip()
        self.assertRegex(tid, r"^task-[1-9][0-9]*$", p)
        self.assertEqual(self.c.task(tid)["command"], "echo hi")

        p = self.ctl("wait", tid, "--interval", "100ms", "--timeout", "20s")
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(self.c.task(tid)["status"], "success")

        p = self.ctl("get", "task", tid)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn(tid, p.stdout)
        self.assertIn("success", p.stdout)

        p = self.ctl("-o", "json", "get", "task", tid)
        self.assertEqual(p.returncode, 0, p)
        doc = json.loads(p.stdout)
        self.assertEqual((doc["task_id"], doc["status"]), (tid, "success"))

    def test_wait_on_failed_task_exits_1(self):
        tid = self.c.submit("exit 2")
        p = self.ctl("wait", tid, "--interval", "100ms", "--timeout", "20s")
        self.assertEqual(p.returncode, 1, p)

    def test_unknown_task(self):
        p = self.ctl("get", "task", "task-999999")
        self.assertNotEqual(p.returncode, 0, p)
        self.assertTrue(re.search("not.found|404", p.stderr + p.stdout, re.I), p)

    def test_top_shows_the_node_with_its_busy_gpus(self):
        tid = self.c.submit("sleep 30", gpu_count=2)
        self.c.wait_status(tid, "running")
        # The fake GPUs report 0% in each heartbeat.
        harness.wait_until(lambda: all(g["utilization"] == 0 for g in
                                       self.c.get(harness.API + "/gpus").json["gpus"]), 10,
                           what="the agent's utilization")
        p = self.ctl("top")
        self.assertEqual(p.returncode, 0, p)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["NODE", "GPUS", "BUSY", "IDLE", "DOWN", "UTIL", "GPU",
                                            "USE"])
        self.assertEqual(lines[1].split(), ["a1", "4", "2", "2", "0", "0%", "##.."])
        self.assertIn("4 GPUs: 2 busy (50%), 2 idle, 0 offline; utilization 0% on 4 reporting "
                      "GPUs", p.stdout)



@unittest.skipUnless(os.access(CTL, os.X_OK), "dgpuctl not built: " + CTL)
class TimeLimitTest(ClusterTestCase):
    """scheduler.default_time_limit, a team's default_time_limit and dgpuctl submit --time: a
    task's time limit, and a run past it fails with timeout."""
    AGENTS = 1
    SCHEDULER = {"extra": {"scheduler": {"default_time_limit": "1h"}}}

    def ctl(self, *args, timeout=30):
        return subprocess.run([CTL, "--server", self.c.base, *args], capture_output=True,
                              text=True, timeout=timeout)

    def submit(self, *args):
        p = self.ctl("submit", "--gpus", "1", "--priority", "low", *args)
        self.assertEqual(p.returncode, 0, p)
        return p.stdout.strip()

    def test_a_task_gets_the_limit_it_asks_for_else_its_teams_else_the_schedulers(self):
        plain = self.submit("--", "sleep", "60")
        self.assertEqual(self.c.task(plain)["timeout_seconds"], 3600)
        asked = self.submit("--time", "2d", "--", "sleep", "60")
        self.assertEqual(self.c.task(asked)["timeout_seconds"], 2 * 86400)

        p = self.ctl("team", "set", "vision", "--time-limit", "30m")
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("Time limit:  30m for tasks submitted without one\n", p.stdout)
        team = self.submit("--team", "vision", "--", "sleep", "60")
        self.assertEqual(self.c.task(team)["timeout_seconds"], 1800)
        p = self.ctl("team", "set", "vision", "--time-limit", "none")
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("Time limit:  the scheduler's default\n", p.stdout)
        self.assertEqual(self.c.task(self.submit("--team", "vision", "--", "true"))
                         ["timeout_seconds"], 3600)
        # Refused before anything is sent.
        p = self.ctl("submit", "--gpus", "1", "--priority", "low", "--time", "soon", "--", "x")
        self.assertEqual((p.returncode, p.stderr),
                         (2, "error: --time expects a positive whole number of seconds or a "
                             "duration like 30s, 90m, 2h, 7d; got 'soon'\n"))

        for tid in (plain, asked, team):
            self.assertEqual(self.ctl("cancel", tid).returncode, 0)
            self.c.wait_finished(tid)

        # The limit is enforced: a run past it is stopped and fails with timeout.
        short = self.submit("--time", "1", "--", "sleep", "60")
        t = self.c.wait_finished(short, timeout=30)
        self.assertEqual((t["status"], t["error"]), ("failed", "timeout"), t)

class DependencyTest(ClusterTestCase):
    """dgpuctl submit --after-ok and friends: a pipeline (preprocess, a training gang, an
    evaluation) runs in order through a scheduler restart, and what can never run fails."""
    AGENTS = 2

    def ctl(self, *args, timeout=30):
        return subprocess.run([CTL, "--server", self.c.base, *args], capture_output=True,
                              text=True, timeout=timeout)

    def submit(self, *args):
        p = self.ctl("submit", "--priority", "low", *args)
        self.assertEqual(p.returncode, 0, p)
        return p.stdout.strip()

    def test_a_pipeline_runs_in_order_through_a_restart(self):
        # The first step runs until the test lets it end, after the restart below.
        go = os.path.join(self.c.tmp, "preprocess-may-end")
        pre = self.submit("--gpus", "1", "--", "sh", "-c",
                          "while [ ! -e %s ]; do sleep 0.1; done" % go)
        train = self.submit("--nodes", "2", "--gpus-per-node", "1", "--after-ok", pre, "--",
                            "sleep", "1")
        evaluate = self.submit("--gpus", "1", "--after-ok", train, "--", "true")
        cleanup = self.submit("--gpus", "1", "--after-not-ok", train, "--", "true")
        self.c.wait_status(pre, "running")
        t = self.c.task(evaluate)
        self.assertEqual((t["status"], t["pending_reason"]), ("pending", "dependency"), t)
        p = self.ctl("get", "task", evaluate)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("Depends On:        %s (afterok, waiting)\n" % train, p.stdout)
        # The scheduler restarts while the pipeline waits: the waits are durable.
        self.assertEqual(self.c.scheduler.stop(timeout=15), 0)
        self.c.start_scheduler()
        self.assertEqual(self.c.task(train)["pending_reason"], "dependency")
        self.assertEqual(self.c.task(evaluate)["pending_reason"], "dependency")
        with open(go, "w", encoding="utf-8"):
            pass
        done = self.c.wait_finished(evaluate, timeout=60)
        self.assertEqual(done["status"], "success", done)
        ended = {tid: self.c.task(tid) for tid in (pre, train)}
        self.assertEqual(ended[pre]["status"], "success")
        self.assertEqual(ended[train]["status"], "success")
        at = datetime.datetime.fromisoformat
        self.assertGreaterEqual(at(ended[train]["started_at"]), at(ended[pre]["finished_at"]))
        self.assertGreaterEqual(at(done["started_at"]), at(ended[train]["finished_at"]))
        self.assertEqual([d["state"] for d in done["depends_on"]], ["satisfied"])
        never = self.c.wait_finished(cleanup)
        self.assertEqual((never["status"], never["error"], never["started_at"]),
                         ("failed", "dependency_never_satisfied", None), never)
        # A parent that has ended and left memory is read from the database.
        late = self.submit("--gpus", "1", "--after-ok", pre, "--", "true")
        self.assertEqual(self.c.wait_finished(late)["status"], "success")
        late = self.submit("--gpus", "1", "--after-not-ok", pre, "--", "true")
        self.assertEqual(self.c.wait_finished(late)["error"], "dependency_never_satisfied")
        # A parent that does not exist is refused, naming the entry.
        p = self.ctl("submit", "--gpus", "1", "--priority", "low", "--after-any", "task-99999",
                     "--", "true")
        self.assertNotEqual(p.returncode, 0, p)
        self.assertIn("depends_on[0]: task-99999 does not exist", p.stderr)


if __name__ == "__main__":
    unittest.main()
