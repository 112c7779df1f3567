"""Task life cycle through the REST API against real daemons: pending -> running -> finished,
failures, cancellation of running and pending tasks, listing filters and paging."""

import os
import re
import time
import unittest

from harness import API, ClusterTestCase, pid_alive, read_pid, wait_until

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class LifecycleTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 4

    def check_success(self, priority):
        r = self.c.request("POST", API + "/tasks",
                           {"priority": priority, "gpu_count": 1, "command": "sleep 1",
                            "name": "lc-" + priority})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(set(r.json.keys()), {"task_id", "status", "created_at"})
        self.assertEqual(r.json["status"], "pending")
        self.assertRegex(r.json["task_id"], r"^task-[1-9][0-9]*$")
        self.assertRegex(r.json["created_at"], RFC3339)
        tid = r.json["task_id"]

        t = self.c.wait_status(tid, "running", timeout=10)
        self.assertEqual(t["task_id"], tid)
        self.assertEqual(t["priority"], priority)
        self.assertEqual(t["name"], "lc-" + priority)
        self.assertEqual(t["gpu_count"], 1)
        self.assertEqual(t["attempts"], 1)
        self.assertIn(t["node_id"], ("a1", "a2"))
        self.assertEqual(len(t["allocated_gpus"]), 1)
        self.assertTrue(t["allocated_gpus"][0].startswith(t["node_id"] + "-gpu-"))
        self.assertIsNone(t["pending_reason"])
        self.assertIsNone(t["exit_code"])
        self.assertRegex(t["started_at"], RFC3339)
        self.assertIsNone(t["finished_at"])
        gpu = [g for g in self.c.gpus()["gpus"] if g["id"] == t["allocated_gpus"][0]][0]
        self.assertEqual(gpu["status"], "busy")
        self.assertEqual(gpu["current_task"], tid)

        t = self.c.wait_finished(tid, timeout=10)
        self.assertEqual(t["status"], "success")
        self.assertEqual(t["exit_code"], 0)
        self.assertEqual(t["error"], "")
        self.assertEqual(t["attempts"], 1)
        self.assertRegex(t["finished_at"], RFC3339)
        self.assertGreaterEqual(t["finished_at"], t["started_at"])
        self.assertGreaterEqual(t["started_at"], t["created_at"])
        # Its GPU is free again.
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="GPUs released")
        self.assertEqual(self.c.gpus()["idle"], 8)

    def test_high_priority_success(self):
        self.check_success("high")

    def test_low_priority_success(self):
        self.check_success("low")

    def test_failing_command_reports_exit_code(self):
        for priority in ("high", "low"):
            tid = self.c.submit("echo boom >&2; exit 7", priority=priority)
            t = self.c.wait_finished(tid)
            self.assertEqual(t["status"], "failed", t)
            self.assertEqual(t["exit_code"], 7, t)
            self.assertEqual(t["attempts"], 1, t)
        self.assertEqual(self.c.gpus()["busy"], 0)

    def test_cancel_running_task_kills_process(self):
        pidfile = os.path.join(self.c.tmp, "cancel.pid")
        tid = self.c.submit("echo $$ > %s; exec sleep 100" % pidfile, priority="low")
        t = self.c.wait_status(tid, "running", timeout=10)
        pid = read_pid(pidfile)
        self.assertTrue(pid_alive(pid))

        r = self.c.cancel(tid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, {"message": "Task cancelled"})
        t = self.c.task(tid)
        self.assertEqual(t["status"], "cancelled")
        self.assertEqual(t["error"], "cancelled")
        self.assertIsNotNone(t["finished_at"])
        # The process is gone within the kill grace period (1 s) plus delivery.
        wait_until(lambda: not pid_alive(pid), 5, what="cancelled process %d gone" % pid)
        # ...and its GPU is given back once the agent confirms the stop.
        wait_until(lambda: self.c.gpus()["busy"] == 0, 5, what="GPU released after cancel")
        self.assertEqual(self.c.task(tid)["status"], "cancelled")
        self.assertEqual(self.c.quota()["batch"]["used"], 0)
        # A finished task cannot be cancelled again.
        r = self.c.cancel(tid)
        self.assertApiError(r, 409, "conflict", mentions=tid)

    def test_cancel_pending_task(self):
        # 5 GPUs never fit on a 4-GPU node: it waits (exceeds_cluster) until cancelled.
        tid = self.c.submit("echo never", gpu_count=5, priority="high")
        t = self.c.task(tid)
        self.assertEqual(t["status"], "pending")
        self.assertEqual(t["pending_reason"], "exceeds_cluster")
        self.assertIsNone(t["node_id"])
        self.assertEqual(t["allocated_gpus"], [])
        r = self.c.cancel(tid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, {"message": "Task cancelled"})
        t = self.c.task(tid)
        self.assertEqual(t["status"], "cancelled")
        self.assertIsNone(t["pending_reason"])
        self.assertIsNone(t["started_at"])
        self.assertEqual(t["attempts"], 0)
        self.assertEqual(self.c.tasks("?status=pending")["total"], 0)
        self.assertEqual(self.c.gpus()["busy"], 0)
        self.assertApiError(self.c.cancel(tid), 409, "conflict")
        # It never runs.
        time.sleep(0.5)
        self.assertEqual(self.c.task(tid)["status"], "cancelled")

    def test_list_filters_paging_newest_first(self):
        ids = []
        for cmd, prio in [("true", "high"), ("true", "low"), ("true", "high"),
                          ("exit 1", "low"), ("true", "high")]:
            ids.append(self.c.submit(cmd, priority=prio))
        for tid in ids:
            self.c.wait_finished(tid)
        pending = self.c.submit("echo never", gpu_count=5, priority="low")  # exceeds_cluster
        ids.append(pending)
        newest_first = list(reversed(ids))

        everything = self.c.tasks()
        self.assertEqual(everything["total"], 6)
        self.assertEqual([t["task_id"] for t in everything["tasks"]], newest_first)

        def listed(query):
            page = self.c.tasks(query)
            return page["total"], [t["task_id"] for t in page["tasks"]]

        self.assertEqual(listed("?status=success"), (4, [ids[4], ids[2], ids[1], ids[0]]))
        self.assertEqual(listed("?status=failed"), (1, [ids[3]]))
        self.assertEqual(listed("?status=pending"), (1, [pending]))
        self.assertEqual(listed("?status=running"), (0, []))
        self.assertEqual(listed("?status=cancelled"), (0, []))
        self.assertEqual(listed("?priority=high"), (3, [ids[4], ids[2], ids[0]]))
        self.assertEqual(listed("?priority=low"), (3, [pending, ids[3], ids[1]]))
        self.assertEqual(listed("?status=success&priority=low"), (1, [ids[1]]))
        self.assertEqual(listed("?status=pending")[1], [pending])
        self.assertEqual(self.c.tasks("?status=pending")["tasks"][0]["pending_reason"],
                         "exceeds_cluster")

        # Paging: limit/offset slices of the newest-first order; total is the full count.
        self.assertEqual(listed("?limit=2"), (6, newest_first[0:2]))
        self.assertEqual(listed("?limit=2&offset=2"), (6, newest_first[2:4]))
        self.assertEqual(listed("?limit=2&offset=4"), (6, newest_first[4:6]))
        self.assertEqual(listed("?limit=4&offset=4"), (6, newest_first[4:6]))
        self.assertEqual(listed("?limit=2&offset=6"), (6, []))
        self.assertEqual(listed("?offset=5"), (6, newest_first[5:]))
        self.assertEqual(listed("?priority=high&limit=1&offset=1"), (3, [ids[2]]))
        self.assertEqual(listed("?limit=1000"), (6, newest_first))

        # Bad query parameters are 400s naming the parameter.
        for query, word in [("?limit=0", "limit"), ("?limit=1001", "limit"), ("?limit=x", "limit"),
                            ("?offset=-1", "offset"), ("?status=done", "status"),
                            ("?priority=urgent", "priority")]:
            with self.subTest(query=query):
                self.assertApiError(self.c.get(API + "/tasks" + query), 400, "invalid_field",
                                    mentions=word)
        self.assertApiError(self.c.get(API + "/tasks?colour=red"), 400, "unknown_field",
                            mentions="colour")


if __name__ == "__main__":
    unittest.main()
