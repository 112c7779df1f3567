"""A standby that was down catches up: kill -9 the standby, write 100 tasks on the primary,
restart the standby: within a few seconds all 100 are readable on it.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_catchup
"""

import time
import unittest

from ha_cluster import HaCluster, HaTestCase, wait_until


class CatchUpTest(HaTestCase):
    def test_restarted_standby_catches_up_after_gap(self):
        c = self.cluster = HaCluster("catchup", mode="sync")
        c.start_pair()
        status, _, body = c.submit("a", "true # before")
        self.assertEqual(status, 201, body)
        before = body["task_id"]
        wait_until(lambda: c.get_task("b", before) is not None, 5, what=before + " on B")

        c.schedulers["b"].kill9()
        ids = []
        for i in range(100):
            status, _, body = c.submit("a", "true # gap-%d" % i)
            self.assertEqual(status, 201, body)
            ids.append(body["task_id"])
        # Also a change to an existing task and to the quota while B is away.
        status, _, body = c.request("a", "DELETE", "/api/v1/tasks/" + ids[0])
        self.assertEqual(status, 200, body)
        status, _, body = c.request("a", "PUT", "/api/v1/quota", {"online_percent": 0.6})
        self.assertEqual(status, 200, body)

        c.start_scheduler("b")
        t0 = time.monotonic()
        c.wait_role("b", "standby", 15)

        def all_there():
            return all(c.get_task("b", tid) is not None for tid in ids)
        wait_until(all_there, 5, interval=0.1, what="the 100 tasks on the restarted standby")
        print("\n[catchup] 100 tasks readable on the restarted standby %.2fs after its start"
              % (time.monotonic() - t0))
        self.assertEqual(c.get_task("b", ids[0])["status"], "cancelled")
        self.assertEqual(c.get_task("b", ids[-1])["command"], "true # gap-99")
        status, _, body = c.request("b", "GET", "/api/v1/tasks?limit=1000")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["total"], 101)

        # And it is a usable standby: it takes over with all of it.
        c.schedulers["a"].kill9()
        c.wait_role("b", "leader", c.hb_timeout + 4)
        for tid in ids[1:]:
            self.assertEqual(c.get_task("b", tid)["status"], "pending")
        status, _, body = c.submit("b", "true # after")
        self.assertEqual(status, 201, body)
        self.assertNotIn(body["task_id"], ids + [before])


if __name__ == "__main__":
    unittest.main()
