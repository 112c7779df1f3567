"""Tasks outlive their agent: each runs under a shim of its own (dgpu-task-shim), and an agent
started again with the same work_dir re-attaches to it. Real agents, real processes."""

import os
import re
import time
import unittest

from harness import ClusterTestCase, pid_alive, read_pid, read_text, wait_until


def ticker(pidfile, n=40, period=0.1):
    """A task that notes its pid per run and prints `tick I` every `period` for n ticks."""
    return ("echo $$ >> %s; i=0; while [ $i -lt %d ]; do echo tick $i; i=$((i+1)); sleep %s; "
            "done" % (pidfile, n, period))


def wait_for_go(pidfile, code):
    """A task that notes its pid, waits for the file `go` in its directory and exits `code`."""
    return ("echo $$ >> %s; while [ ! -e go ]; do sleep 0.05; done; echo after-go; exit %d"
            % (pidfile, code))


class AgentRestartTest(ClusterTestCase):
    """One 4-GPU agent; agent.heartbeat_timeout 10 s, so a restart is quicker than the timeout."""
    AGENTS = 1
    GPUS = 4
    SCHEDULER = {"heartbeat_timeout": 10}

    def pids(self, pidfile):
        return [int(p) for p in read_text(pidfile).split()]

    def assert_ticked_once(self, tid, pidfile, n):
        t = self.c.wait_finished(tid, timeout=20)
        self.assertEqual((t["status"], t["attempts"], t["exit_code"]), ("success", 1, 0), t)
        self.assertEqual(len(self.pids(pidfile)), 1, "the task ran more than once")
        # No gap and no repeat: one run, from its first tick to its last.
        self.assertEqual(read_text(self.c.task_log("a1", tid)).splitlines(),
                         ["tick %d" % i for i in range(n)])
        return t

    def test_sigkill_and_restart_leave_the_task_running(self):
        pidfile = os.path.join(self.c.tmp, "ticker.pids")
        tid = self.c.submit(ticker(pidfile), gpu_count=2)
        t = self.c.wait_status(tid, "running")
        gpus = t["allocated_gpus"]
        pid = read_pid(pidfile)

        self.c.agents["a1"].kill9()
        time.sleep(0.5)
        self.assertTrue(pid_alive(pid), "the task died with its agent")
        self.c.start_agent("a1")
        wait_until(lambda: "re-attached to %s" % tid in read_text(
            self.c.agents["a1"].stdout_path), 10, what="the new agent re-attached")
        self.c.wait_agents_online(["a1"])
        t = self.c.task(tid)
        self.assertEqual((t["status"], t["attempts"], t["allocated_gpus"]),
                         ("running", 1, gpus), t)
        self.assertTrue(pid_alive(pid))
        self.assert_ticked_once(tid, pidfile, 40)
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="its GPUs free")
        self.assertGpusConsistent()
        self.assertNotIn("stopped pid", read_text(self.c.agents["a1"].stdout_path))

    def test_a_task_that_ended_while_the_agent_was_down_keeps_its_exit_code(self):
        pidfile = os.path.join(self.c.tmp, "go.pids")
        tid = self.c.submit(wait_for_go(pidfile, 3), gpu_count=1)
        self.c.wait_status(tid, "running")
        read_pid(pidfile)
        self.c.agents["a1"].kill9()
        open(os.path.join(self.c.work_dir("a1"), tid, "go"), "w").close()
        record = os.path.join(self.c.work_dir("a1"), ".run", tid + ".exit")
        wait_until(lambda: os.path.exists(record), 5, what="the shim recorded the exit")
        self.assertEqual(self.c.task(tid)["status"], "running")  # Nobody told the scheduler yet.
        self.c.start_agent("a1")
        t = self.c.wait_finished(tid, timeout=15)
        self.assertEqual((t["status"], t["exit_code"], t["attempts"]), ("failed", 3, 1), t)
        self.assertEqual(len(self.pids(pidfile)), 1)
        self.assertEqual(read_text(self.c.task_log("a1", tid)), "after-go\n")
        wait_until(lambda: not os.path.exists(record), 5, what="the records removed")

    def test_sigterm_without_keep_tasks_on_exit_stops_the_task(self):
        pidfile = os.path.join(self.c.tmp, "stopped.pids")
        tid = self.c.submit(wait_for_go(pidfile, 0), gpu_count=1)
        self.c.wait_status(tid, "running")
        pid = read_pid(pidfile)
        self.assertEqual(self.c.agents["a1"].stop(), 0)
        self.assertFalse(pid_alive(pid))
        self.assertEqual(os.listdir(os.path.join(self.c.work_dir("a1"), ".run")), [])

    def test_many_kill_and_restart_rounds_lose_no_task_and_run_none_twice_at_once(self):
        # Short tasks keep starting and ending while the agent is killed and started again. A
        # run takes its task's lock (flock) first: a second run while another is alive notes
        # "overlap". A run that starts and has no end was stopped as a leftover: the agent died
        # between starting it and noting it (its run record), so the next one could not adopt it.
        marks = os.path.join(self.c.tmp, "marks")
        os.mkdir(marks)
        ids = [self.c.submit("m=%s/$DGPU_TASK_ID; exec 9>>$m.lock; "
                             "if flock -n 9; then echo start >> $m; else echo overlap >> $m; fi; "
                             "sleep 0.%d; echo end >> $m" % (marks, 2 + i % 5), gpu_count=1)
               for i in range(24)]
        for _ in range(4):
            time.sleep(0.7)
            self.c.agents["a1"].kill9()
            self.c.start_agent("a1")
        cut = 0
        for tid in ids:
            t = self.c.wait_finished(tid, timeout=60)
            self.assertEqual(t["status"], "success", t)
            runs = read_text(os.path.join(marks, tid)).split()
            self.assertNotIn("overlap", runs, tid)
            self.assertEqual(runs[-2:], ["start", "end"], (tid, runs))
            self.assertLessEqual(runs.count("start"), t["attempts"], t)
            cut += runs.count("start") - runs.count("end")
        # At most one start cut short per kill.
        self.assertLessEqual(cut, 4)
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="all GPUs free")
        self.assertGpusConsistent()


class KeepTasksOnExitTest(ClusterTestCase):
    """executor.keep_tasks_on_exit: true."""
    AGENTS = 1
    GPUS = 4
    SCHEDULER = {"heartbeat_timeout": 10}
    AGENT_KWARGS = {"extra": {"executor": {"keep_tasks_on_exit": True}}}

    def test_sigterm_leaves_the_task_to_the_next_agent(self):
        pidfile = os.path.join(self.c.tmp, "kept.pids")
        tid = self.c.submit(ticker(pidfile, n=30), gpu_count=1)
        self.c.wait_status(tid, "running")
        pid = read_pid(pidfile)
        self.assertEqual(self.c.agents["a1"].stop(), 0)
        self.assertIn("leaving 1 tasks running (keep_tasks_on_exit)",
                      read_text(self.c.agents["a1"].stdout_path))
        self.assertTrue(pid_alive(pid))
        self.c.start_agent("a1")
        t = self.c.wait_finished(tid, timeout=20)
        self.assertEqual((t["status"], t["attempts"]), ("success", 1), t)
        self.assertEqual(read_text(pidfile).split(), [str(pid)])
        self.assertEqual(read_text(self.c.task_log("a1", tid)).splitlines(),
                         ["tick %d" % i for i in range(30)])


class RequeuedWhileAwayTest(ClusterTestCase):
    """agent.heartbeat_timeout 2 s: an agent that comes back later finds its task requeued."""
    AGENTS = 2
    GPUS = 4
    SCHEDULER = {"heartbeat_timeout": 2}

    def test_the_requeued_task_is_stopped_when_its_old_agent_re_attaches(self):
        pidfile = os.path.join(self.c.tmp, "away.pids")
        tid = self.c.submit("echo $$ >> %s; sleep 8" % pidfile, gpu_count=1)
        t = self.c.wait_status(tid, "running")
        first = t["node_id"]
        other = "a2" if first == "a1" else "a1"
        first_pid = read_pid(pidfile)
        self.c.agents[first].kill9()

        def moved():
            t = self.c.task(tid)
            return t if t["node_id"] == other and t["status"] == "running" else None
        t = wait_until(moved, 15, what="the task requeued on the other node")
        self.assertEqual(t["attempts"], 2)
        self.assertTrue(pid_alive(first_pid))
        self.c.start_agent(first)
        self.c.wait_agents_online(["a1", "a2"])
        # Re-attached, then stopped: the scheduler runs it elsewhere now.
        wait_until(lambda: not pid_alive(first_pid), 10, what="the old run stopped")
        log = read_text(self.c.agents[first].stdout_path)
        self.assertRegex(log, re.escape("re-attached to %s" % tid))
        t = self.c.wait_finished(tid, timeout=20)
        self.assertEqual((t["status"], t["attempts"], t["node_id"]), ("success", 2, other), t)
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="all GPUs free")
        self.assertGpusConsistent()


if __name__ == "__main__":
    unittest.main()
