"""Quotas at the 70/30 boundary with exact numbers: 2 agents x 4 GPUs = 8 GPUs;
online quota round(8 * 0.7) = round(5.6) = 6, batch quota 8 - 6 = 2."""

import time
import unittest

from harness import API, ClusterTestCase, wait_until


def quota_numbers(q):
    return (q["total_gpus"],
            (q["online"]["quota"], q["online"]["used"], q["online"]["available"]),
            (q["batch"]["quota"], q["batch"]["used"], q["batch"]["available"]))


class QuotaTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 4

    def test_batch_quota_boundary_and_quota_change(self):
        self.assertEqual(quota_numbers(self.c.quota()), (8, (6, 0, 6), (2, 0, 2)))
        q = self.c.quota()
        self.assertAlmostEqual(q["online_percent"], 0.7)
        self.assertAlmostEqual(q["batch_percent"], 0.3)

        low = [self.c.submit("sleep 30", gpu_count=1, priority="low") for _ in range(3)]
        wait_until(lambda: self.c.tasks("?status=running")["total"] == 2, 5,
                   what="2 low tasks running")
        time.sleep(0.5)  # A third one must not start.
        running = self.c.tasks("?status=running&priority=low")
        self.assertEqual(running["total"], 2)
        self.assertEqual(sorted(t["task_id"] for t in running["tasks"]), sorted(low[:2]))
        third = self.c.task(low[2])
        self.assertEqual(third["status"], "pending")
        self.assertEqual(third["pending_reason"], "quota_exhausted")
        self.assertEqual(quota_numbers(self.c.quota()), (8, (6, 0, 6), (2, 2, 0)))
        g = self.c.gpus()
        self.assertEqual((g["total"], g["idle"], g["busy"], g["offline"]), (8, 6, 2, 0))

        # High-priority work still has its own 6 GPUs.
        high = self.c.submit("sleep 30", gpu_count=1, priority="high")
        self.c.wait_status(high, "running", timeout=10)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (6, 1, 5), (2, 2, 0)))

        # 50/50: 4 and 4; the waiting low task starts.
        r = self.c.set_quota(0.5)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, {"message": "Quota updated"})
        self.c.wait_status(low[2], "running", timeout=10)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (4, 1, 3), (4, 3, 1)))
        self.assertEqual(self.c.tasks("?status=running")["total"], 4)
        self.assertEqual(self.c.tasks("?status=pending")["total"], 0)

        # batch_percent alone is accepted too (online = 1 - batch).
        r = self.c.request("PUT", API + "/quota", {"batch_percent": 0.25})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (6, 1, 5), (2, 3, 0)))
        # Over its new quota, batch keeps all 3 running tasks (never killed by a quota change).
        time.sleep(1.5)
        self.assertEqual(self.c.tasks("?status=running&priority=low")["total"], 3)
        self.assertGpusConsistent()

    def test_quota_change_never_stops_running_tasks(self):
        high = [self.c.submit("sleep 30", gpu_count=2, priority="high") for _ in range(3)]
        for tid in high:
            self.c.wait_status(tid, "running", timeout=10)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (6, 6, 0), (2, 0, 2)))
        # A fourth high task waits on the quota.
        waiting = self.c.submit("sleep 30", gpu_count=1, priority="high")
        time.sleep(0.3)
        t = self.c.task(waiting)
        self.assertEqual((t["status"], t["pending_reason"]), ("pending", "quota_exhausted"))

        r = self.c.set_quota(0.0)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (0, 6, 0), (8, 0, 8)))
        # Several heartbeats and scheduling passes later, all three still run.
        time.sleep(2.5)
        for tid in high:
            t = self.c.task(tid)
            self.assertEqual(t["status"], "running", t)
            self.assertEqual(t["attempts"], 1, t)
        t = self.c.task(waiting)
        self.assertEqual((t["status"], t["pending_reason"]), ("pending", "quota_exhausted"))
        # Batch gets the free GPUs: 2 left on the nodes.
        low = self.c.submit("sleep 30", gpu_count=2, priority="low")
        self.c.wait_status(low, "running", timeout=10)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (0, 6, 0), (8, 2, 6)))

        # All online: 8/0. The waiting high task still has no free GPU (all 8 busy).
        r = self.c.set_quota(1.0)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(quota_numbers(self.c.quota()), (8, (8, 6, 2), (0, 2, 0)))
        time.sleep(0.5)
        self.assertEqual(self.c.task(low)["status"], "running")
        t = self.c.task(waiting)
        self.assertEqual(t["status"], "pending")
        self.assertEqual(t["pending_reason"], "no_node_fits")
        # One high task ends: the waiting one takes its place.
        self.assertEqual(self.c.cancel(high[0]).status, 200)
        self.c.wait_status(waiting, "running", timeout=8)
        self.assertGpusConsistent()

    def test_rounding(self):
        # round(8 * 0.55) = round(4.4) = 4; round(8 * 0.6) = round(4.8) = 5.
        for pct, online in [(0.55, 4), (0.6, 5), (0.7, 6), (0.74, 6), (0.0, 0), (1.0, 8)]:
            with self.subTest(online_percent=pct):
                self.assertEqual(self.c.set_quota(pct).status, 200)
                q = self.c.quota()
                self.assertEqual((q["online"]["quota"], q["batch"]["quota"]), (online, 8 - online))


if __name__ == "__main__":
    unittest.main()
