"""A large queue with the real dgpu-scheduler: keyset pages, kept counts, shutdown.

A scheduler starts on a database holding DGPU_QUEUE_TASKS pending tasks (rows written straight
into its SQLite file) and no agents, so every task stays pending. Checked:
  - walking `status=pending` page by page with `after=<next>` while another client keeps
    submitting returns every task that existed when the walk began exactly once, newest first,
    and nothing else (the new ones are newer than the walk's start); the last page has no next;
  - every page's `total` is the kept count: it never goes down during the walk, it is never
    below what the walk has seen, and once the submitter stops it equals the preloaded tasks
    plus every acknowledged submission, for every filter;
  - SIGTERM with the queue full exits 0 within scheduler.shutdown_timeout (plus the test's
    slack for a loaded machine), and every acknowledged task is there after a restart.
The large figures (a million tasks, latencies) are in bench/run_queue_bench.sh.
"""

import os
import time
import unittest

import dgpu_proc as dp

TASKS = int(os.environ.get("DGPU_QUEUE_TASKS", "200000"))
PAGE = 1000
SHUTDOWN_TIMEOUT = 5.0
SLACK = 5.0  # The process's own exit after the deadline, on a loaded 2-core machine.


class LargeQueueTest(unittest.TestCase):
    def setUp(self):
        self.tmp = dp.TempDir("dgpu-queue-")
        self.sched = dp.Scheduler(self.tmp.path, logging={"level": "warn"},
                                  scheduler={"shutdown_timeout": "%gs" % SHUTDOWN_TIMEOUT})
        self.submitter = None

    def tearDown(self):
        if self.submitter is not None:
            self.submitter.stop = True
            self.submitter.join(60)
        self.sched.stop()
        self.tmp.cleanup()

    def page(self, query):
        status, body = self.sched.http("GET", "/api/v1/tasks?" + query, timeout=60.0)
        self.assertEqual(status, 200, body)
        return body

    def totals(self):
        out = {}
        for query in ("limit=1", "status=pending&limit=1", "status=running&limit=1",
                      "priority=high&limit=1", "status=pending&priority=low&limit=1"):
            out[query] = self.page(query)["total"]
        return out

    def test_keyset_walk_counts_and_shutdown_with_a_large_queue(self):
        dp.start_preloaded(self.sched, TASKS)
        self.submitter = dp.start_submitter(self.sched, at_least=10)

        walked, totals, pages = [], [], 0
        after = None
        while True:
            query = "status=pending&limit=%d" % PAGE + ("&after=" + after if after else "")
            body = self.page(query)
            pages += 1
            walked += [dp.task_number(t["task_id"]) for t in body["tasks"]]
            totals.append(body["total"])
            self.assertEqual({t["status"] for t in body["tasks"]} - {"pending"}, set())
            if body["next"] is None:
                break
            self.assertEqual(body["next"], body["tasks"][-1]["task_id"])
            after = body["next"]
        self.submitter.stop = True
        self.submitter.join(60)
        acked = [n for n, _ in self.submitter.acked]
        during = len(acked)
        print("walked %d tasks in %d pages while %d were submitted" % (len(walked), pages, during))

        top = walked[0]
        self.assertGreater(top, TASKS, "the walk began after the first submissions")
        self.assertEqual(walked, list(range(top, 0, -1)),
                         "not every task once, newest first")
        self.assertEqual(totals, sorted(totals), "a kept count went down")
        self.assertGreaterEqual(totals[0], top)
        self.assertGreater(totals[-1], totals[0], "submissions during the walk were not counted")

        n = TASKS + during
        self.assertEqual(sorted(acked), list(range(TASKS + 1, n + 1)))
        high = TASKS // 4 + during
        self.assertEqual(self.totals(), {
            "limit=1": n, "status=pending&limit=1": n, "status=running&limit=1": 0,
            "priority=high&limit=1": high, "status=pending&priority=low&limit=1": n - high})

        began = time.monotonic()
        rc = self.sched.stop(timeout=60)
        took = time.monotonic() - began
        print("SIGTERM with %d tasks queued: exit %s in %.2fs" % (n, rc, took))
        self.assertEqual(rc, 0)
        self.assertLess(took, SHUTDOWN_TIMEOUT + SLACK)

        began = time.monotonic()
        self.sched.start()
        self.sched.wait_ready(timeout=120)
        print("restart to serving with %d tasks: %.2fs" % (n, time.monotonic() - began))
        self.assertEqual(self.totals()["status=pending&limit=1"], n)
        status, body = self.sched.http("GET", "/api/v1/tasks/task-%d" % n)
        self.assertEqual((status, body["status"]), (200, "pending"), body)


if __name__ == "__main__":
    unittest.main()
