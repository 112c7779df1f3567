"""Stop orders and start confirmations against real daemons: a cancellation's grace period
(?grace_seconds=N) reaches the agent, which kills a task that ignores SIGTERM when that grace is
over instead of its own kill_grace_period, and says so in the task's log and its own; bad grace
values are refused and change nothing; the agent's start confirmation sets started_at."""

import os
import re
import time

from harness import API, ClusterTestCase, pid_alive, read_pid, read_text, wait_until

STOP_LINE = "dgpu: stopping task (reason: cancel, grace 1 s)\n"


def agent_events(cluster, agent_id, event):
    """The agent's text-format lines for `event` as dicts of their key=value fields."""
    found = []
    text = read_text(cluster.agents[agent_id].stdout_path)
    for line in text.splitlines():
        if ("event=%s " % event) not in line:
            continue
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line[line.index("event="):]))
        found.append({k: v.strip('"') for k, v in fields.items()})
    return found


class StopOrderTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 2
    # The agent's own grace is long: a stop that ends in about 1 s used the order's grace.
    AGENT_KWARGS = {"kill_grace": 10}

    def start_stubborn_task(self):
        pidfile = os.path.join(self.c.tmp, "stubborn.pid")
        tid = self.c.submit("trap '' TERM; echo $$ > %s; sleep 100" % pidfile)
        self.c.wait_status(tid, "running", timeout=10)
        return tid, read_pid(pidfile)

    def test_cancel_grace_kills_a_task_that_ignores_sigterm(self):
        tid, pid = self.start_stubborn_task()
        log = self.c.task_log("a1", tid)
        began = time.monotonic()
        r = self.c.request("DELETE", API + "/tasks/%s?grace_seconds=1" % tid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, {"message": "Task cancelled"})
        wait_until(lambda: not pid_alive(pid), 6, what="the stubborn task killed")
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="GPU released after the stop")
        elapsed = time.monotonic() - began
        # SIGKILL comes when the order's 1 s is over, long before the agent's own 10 s.
        self.assertGreaterEqual(elapsed, 0.9)
        self.assertLess(elapsed, 5)
        t = self.c.task(tid)
        self.assertEqual(t["status"], "cancelled")
        self.assertEqual(t["error"], "cancelled")
        self.assertEqual(t["exit_code"], 128 + 9)
        self.assertEqual(read_text(log), STOP_LINE)
        stops = agent_events(self.c, "a1", "task_stopping")
        self.assertEqual(len(stops), 1, stops)
        self.assertEqual((stops[0]["task_id"], stops[0]["reason"], stops[0]["grace_seconds"],
                          stops[0]["result"]), (tid, "cancel", "1", "stopping"))

    def test_cancel_without_grace_uses_the_agents_own(self):
        tid = self.c.submit("sleep 100")
        self.c.wait_status(tid, "running", timeout=10)
        self.assertEqual(self.c.cancel(tid).status, 200)
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="GPU released after the stop")
        self.assertEqual(read_text(self.c.task_log("a1", tid)),
                         "dgpu: stopping task (reason: cancel, grace 10 s)\n")
        stops = agent_events(self.c, "a1", "task_stopping")
        self.assertEqual([(s["task_id"], s["reason"], s["grace_seconds"]) for s in stops],
                         [(tid, "cancel", "10")])

    def test_bad_grace_seconds_is_refused_and_changes_nothing(self):
        tid, pid = self.start_stubborn_task()
        for value in ("-1", "86401", "1.5", "abc", "", "+1", "99999999999"):
            r = self.c.request("DELETE", API + "/tasks/%s?grace_seconds=%s" % (tid, value))
            self.assertApiError(r, 400, "invalid_field",
                                mentions="grace_seconds must be an integer from 0 to 86400")
        r = self.c.request("DELETE", API + "/tasks/%s?grace=1" % tid)
        self.assertApiError(r, 400, "unknown_field", mentions='unknown query parameter "grace"')
        self.assertEqual(self.c.task(tid)["status"], "running")
        self.assertTrue(pid_alive(pid))
        self.assertEqual(read_text(self.c.task_log("a1", tid)), "")
        # The largest grace is accepted.
        r = self.c.request("DELETE", API + "/tasks/%s?grace_seconds=86400" % tid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.c.task(tid)["status"], "cancelled")

    def test_start_confirmation_sets_started_at(self):
        tid = self.c.submit("sleep 100")
        # The agent logs the time it spawned the task; the API shows that time once the
        # agent's confirmation has reached the scheduler.
        started = wait_until(lambda: [e for e in agent_events(self.c, "a1", "task_started")
                                      if e["task_id"] == tid], 10, what="task_started logged")
        self.assertEqual(len(started), 1, started)
        wait_until(lambda: self.c.task(tid)["started_at"] == started[0]["started_at"], 5,
                   what="started_at = the agent's start time %s" % started[0]["started_at"])
        self.assertEqual(self.c.task(tid)["status"], "running")
