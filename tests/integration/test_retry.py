"""Retries with real agents and real task processes: a run that fails is queued again after its
backoff until max_retries are used up; attempts counts every start."""

import datetime
import os
import subprocess
import time
import unittest

from harness import API, CTL_BIN, ClusterTestCase, read_text, wait_until


class RetryTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0}

    def test_a_task_that_fails_twice_succeeds_on_its_third_run(self):
        count = os.path.join(self.c.tmp, "runs")
        # Each run appends a line; the first two exit 3.
        cmd = "echo run >> %s; [ $(wc -l < %s) -ge 3 ]" % (count, count)
        r = self.c.request("POST", API + "/tasks", {"priority": "high", "gpu_count": 1,
                                                     "command": cmd, "max_retries": 3,
                                                     "retry_backoff_seconds": 2})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        wait_until(lambda: self.c.task(tid)["pending_reason"] == "retry_backoff", 10,
                   what="the first retry's backoff")
        t = self.c.task(tid)
        self.assertEqual((t["status"], t["retries"], t["attempts"], t["exit_code"]),
                         ("pending", 1, 1, None), t)
        self.assertIsNotNone(t["retry_at"])
        started = time.monotonic()
        t = self.c.wait_finished(tid, timeout=30)
        self.assertEqual((t["status"], t["retries"], t["attempts"], t["retry_at"]),
                         ("success", 2, 3, None), t)
        self.assertEqual(read_text(count), "run\nrun\nrun\n")
        # What was left of the first 2 s backoff, then the second's 4 s.
        self.assertGreaterEqual(time.monotonic() - started, 4.0)

    def test_the_history_tells_every_run(self):
        count = os.path.join(self.c.tmp, "history-runs")
        # Run 1 exits 1 after 0.5 s, run 2 succeeds (each lives long enough to confirm its start).
        cmd = "sleep 0.5; echo run >> %s; [ $(wc -l < %s) -ge 2 ]" % (count, count)
        r = self.c.request("POST", API + "/tasks", {"priority": "high", "gpu_count": 1,
                                                     "command": cmd, "max_retries": 1,
                                                     "retry_backoff_seconds": 1})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        self.assertEqual(self.c.wait_finished(tid, timeout=30)["status"], "success")
        r = self.c.request("GET", API + "/tasks/%s/events" % tid)
        self.assertEqual(r.status, 200, r)
        events = r.json["events"]
        self.assertEqual([e["type"] for e in events],
                         ["submitted", "scheduled", "started", "requeued", "scheduled", "started",
                          "finished"], events)
        node = "a1"
        self.assertNotIn("node_id", events[0])
        self.assertEqual(events[0]["message"], "high priority, 1 GPU, team default")
        self.assertEqual([e.get("node_id") for e in events[1:]], [node] * 6)
        self.assertRegex(events[1]["message"], r"^run 1 ordered to start on %s, GPU [01]$" % node)
        self.assertEqual(events[2]["message"], "run 1 started on %s" % node)
        self.assertEqual(events[3]["message"], "queued again: retry 1 of 1 after exit code 1")
        self.assertRegex(events[4]["message"], r"^run 2 ordered to start on %s, GPU [01]$" % node)
        self.assertEqual(events[6]["message"], "succeeded")
        times = [e["time"] for e in events]
        self.assertEqual(times, sorted(times))
        self.assertEqual(events[0]["time"], self.c.task(tid)["created_at"])

        # Usage: each run from its "scheduled" entry to the entry that ended it, 1 GPU.
        def micros(text):
            return round(datetime.datetime.fromisoformat(text).timestamp() * 1e6)
        ran = (micros(events[3]["time"]) - micros(events[1]["time"]) +
               micros(events[6]["time"]) - micros(events[4]["time"]))
        r = self.c.request("GET", API + "/usage")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["group_by"], "team")
        self.assertEqual([(g["name"], g["tasks"]) for g in r.json["groups"]], [("default", 1)])
        self.assertAlmostEqual(r.json["groups"][0]["gpu_seconds"], ran / 1e6, places=6)
        r = self.c.request("GET", API + "/usage?group_by=user&to=" + events[6]["time"])
        self.assertEqual(r.status, 200, r)
        self.assertEqual([(g["name"], g["tasks"]) for g in r.json["groups"]], [("", 1)], r)
        self.assertAlmostEqual(r.json["groups"][0]["gpu_seconds"], ran / 1e6, places=6)
        # Only the second run: from the second "scheduled" on.
        r = self.c.request("GET", API + "/usage?from=" + events[4]["time"])
        self.assertAlmostEqual(r.json["groups"][0]["gpu_seconds"],
                               (micros(events[6]["time"]) - micros(events[4]["time"])) / 1e6,
                               places=6)
        for query, field in (("group_by=node", "group_by"), ("from=yesterday", "from"),
                             ("from=2030-01-01T00:00:00Z", "from"), ("x=1", "x")):
            r = self.c.request("GET", API + "/usage?" + query)
            self.assertEqual(r.status, 400, r)
            self.assertIn(field, r.json["error"]["message"], r)

        r = self.c.request("GET", API + "/tasks/task-99999/events")
        self.assertApiError(r, 404, "not_found", None)
        r = self.c.request("DELETE", API + "/tasks/%s/events" % tid)
        self.assertEqual(r.status, 405, r)
        if os.access(CTL_BIN, os.X_OK):
            p = subprocess.run([CTL_BIN, "--server", self.c.base, "events", tid],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p)
            lines = p.stdout.splitlines()
            self.assertRegex(lines[0], r"^TIME +TYPE +NODE +MESSAGE$")
            self.assertEqual(len(lines), 8, p.stdout)
            self.assertRegex(lines[4], r"^\S+ +requeued +%s +queued again: retry 1 of 1 after "
                             r"exit code 1$" % node)

    def test_retries_are_used_up(self):
        tid = self.c.submit("exit 7", max_retries=1, retry_backoff_seconds=1)
        t = self.c.wait_finished(tid, timeout=15)
        self.assertEqual((t["status"], t["exit_code"], t["retries"], t["attempts"]),
                         ("failed", 7, 1, 2), t)
        # Without max_retries a failure is final, as always.
        t = self.c.wait_finished(self.c.submit("exit 7"))
        self.assertEqual((t["status"], t["retries"], t["attempts"], t["max_retries"]),
                         ("failed", 0, 1, 0))

    def test_bad_values_are_refused(self):
        for field, value in (("max_retries", -1), ("max_retries", 101),
                             ("retry_backoff_seconds", 0), ("retry_backoff_seconds", "5")):
            r = self.c.request("POST", API + "/tasks", {"priority": "low", "gpu_count": 1,
                                                         "command": "true", field: value})
            self.assertApiError(r, 400, "invalid_field", field)
        self.assertEqual(self.c.tasks()["total"], 0)

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl(self):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)
        run = lambda *a: subprocess.run([CTL_BIN, "--server", self.c.base] + list(a),
                                        capture_output=True, text=True, timeout=30, env=env)
        p = run("submit", "--gpus", "1", "--priority", "high", "--max-retries", "2",
                "--retry-backoff", "30", "--", "exit 1")
        self.assertEqual(p.returncode, 0, p)
        tid = p.stdout.strip()
        wait_until(lambda: self.c.task(tid)["pending_reason"] == "retry_backoff", 10,
                   what="the backoff")
        p = run("get", "task", tid)
        self.assertRegex(p.stdout, r"(?m)^Retries: +1 of 2 \(backoff 30 s, doubling\); queued again "
                         r"\S+ \(in [0-9]+s\)$")
        self.assertRegex(p.stdout, r"(?m)^Pending Reason: +retry_backoff$")
        p = run("cancel", tid)
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(self.c.task(tid)["status"], "cancelled")


if __name__ == "__main__":
    unittest.main()
