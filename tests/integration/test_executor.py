"""The process executor as seen through the whole system: exit codes, timeouts, and cancellation
that reaches every process of the task (executor.kill_grace_period 1 s)."""

import os
import time
import unittest

from harness import ClusterTestCase, pid_alive, read_pid, read_text, wait_until


def gone(pid):
    """True once os.kill(pid, 0) raises ProcessLookupError (exited and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class ExecutorTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 4
    AGENT_KWARGS = {"kill_grace": 1}

    def test_exit_code_3(self):
        tid = self.c.submit("exit 3", priority="low")
        t = self.c.wait_finished(tid)
        self.assertEqual(t["status"], "failed")
        self.assertEqual(t["exit_code"], 3)

    def test_output_goes_to_task_log(self):
        tid = self.c.submit("echo to-stdout; echo to-stderr >&2; pwd")
        t = self.c.wait_finished(tid)
        self.assertEqual(t["status"], "success")
        lines = read_text(self.c.task_log("a1", tid)).splitlines()
        self.assertIn("to-stdout", lines)
        self.assertIn("to-stderr", lines)

    def test_timeout(self):
        start = time.monotonic()
        tid = self.c.submit("sleep 30", timeout_seconds=1)
        t = self.c.wait_finished(tid, timeout=8)
        elapsed = time.monotonic() - start
        self.assertEqual(t["status"], "failed", t)
        self.assertEqual(t["error"], "timeout", t)
        self.assertIsNotNone(t["exit_code"])
        self.assertNotEqual(t["exit_code"], 0)
        self.assertGreaterEqual(elapsed, 1.0)
        self.assertLess(elapsed, 5.0, "timeout took %.1fs" % elapsed)
        self.assertEqual(self.c.gpus()["busy"], 0)

    def test_timeout_kills_a_task_ignoring_sigterm(self):
        pidfile = os.path.join(self.c.tmp, "stubborn.pid")
        start = time.monotonic()
        tid = self.c.submit("trap '' TERM; echo $$ > %s; while :; do sleep 0.1; done" % pidfile,
                            timeout_seconds=1)
        pid = read_pid(pidfile)
        t = self.c.wait_finished(tid, timeout=10)
        self.assertEqual((t["status"], t["error"]), ("failed", "timeout"), t)
        self.assertLess(time.monotonic() - start, 6.0)  # 1 s timeout + 1 s grace + slack
        wait_until(lambda: gone(pid), 3, what="stubborn task gone")

    def test_cancel_kills_grandchildren(self):
        pidfile = os.path.join(self.c.tmp, "grandchild.pid")
        tid = self.c.submit("sh -c 'sleep 300 & echo $! > %s; wait'" % pidfile)
        self.c.wait_status(tid, "running", timeout=10)
        pid = read_pid(pidfile)
        self.assertTrue(pid_alive(pid))
        self.assertEqual(self.c.cancel(tid).status, 200)
        # Within the grace period (1 s) plus delivery and polling.
        wait_until(lambda: gone(pid), 4, what="grandchild %d gone" % pid)
        wait_until(lambda: self.c.gpus()["busy"] == 0, 4, what="GPU released")
        self.assertEqual(self.c.task(tid)["status"], "cancelled")
        self.assertEqual(self.c.task_processes(), [])

    def test_cancel_kills_processes_that_left_the_group(self):
        # setsid puts the child in a session of its own; the agent still finds it by the
        # DGPU_TASK_ID it inherited.
        pidfile = os.path.join(self.c.tmp, "escaped.pid")
        tid = self.c.submit("setsid sleep 300 & echo $! > %s; wait" % pidfile)
        self.c.wait_status(tid, "running", timeout=10)
        pid = read_pid(pidfile)
        wait_until(lambda: pid_alive(pid), 2, what="escaped child started")
        self.assertEqual(self.c.cancel(tid).status, 200)
        wait_until(lambda: gone(pid), 6, what="escaped child %d gone" % pid)
        self.assertEqual(self.c.task_processes(), [])

    def test_leftover_background_process_is_stopped_when_task_ends(self):
        # The main process exits at once but leaves a child behind: the task only ends (and
        # frees its GPU) once nothing of it runs any more.
        pidfile = os.path.join(self.c.tmp, "leftover.pid")
        tid = self.c.submit("sleep 300 & echo $! > %s; exit 0" % pidfile)
        pid = read_pid(pidfile)
        t = self.c.wait_finished(tid, timeout=8)
        self.assertEqual(t["status"], "success", t)
        wait_until(lambda: gone(pid), 4, what="leftover %d gone" % pid)
        self.assertEqual(self.c.gpus()["busy"], 0)


if __name__ == "__main__":
    unittest.main()
