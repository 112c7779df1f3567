"""replication.sync_timeout bounds a sync-mode write: a standby that stops acknowledging (paused
with SIGSTOP, so its stream stays open) makes a submission wait about sync_timeout, not
heartbeat_timeout; the leader then continues alone and says so in /readyz. A write waiting for
a standby whose stream then closes (the paused standby is killed) continues at once, not after
sync_timeout.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_sync_timeout
"""

import threading
import time
import unittest

from ha_cluster import HaCluster, HaTestCase

SYNC_TIMEOUT = 1.0
HB_TIMEOUT = 8.0


class SyncTimeoutTest(HaTestCase):
    def test_silent_standby_delays_a_write_by_sync_timeout(self):
        c = self.cluster = HaCluster("sync-timeout", mode="sync", hb_timeout=HB_TIMEOUT,
                                     extra_sched={"replication": {"sync_timeout": SYNC_TIMEOUT}})
        c.start_pair()
        status, _, body = c.submit("a", "true")
        self.assertEqual(status, 201, body)

        c.schedulers["b"].sigstop()
        try:
            start = time.monotonic()
            status, _, body = c.submit("a", "true")
            waited = time.monotonic() - start
        finally:
            c.schedulers["b"].sigcont()
        self.assertEqual(status, 201, body)
        self.assertGreaterEqual(waited, SYNC_TIMEOUT * 0.9)
        self.assertLess(waited, SYNC_TIMEOUT + 2.0, "the write waited for heartbeat_timeout")
        self.assertIn("standby did not acknowledge within 1000 ms", c.schedulers["a"].log_text())

    def test_write_waiting_for_a_standby_that_goes_away_continues_at_once(self):
        long_timeout = 60.0
        c = self.cluster = HaCluster("sync-gone", mode="sync", hb_timeout=HB_TIMEOUT,
                                     extra_sched={"replication": {"sync_timeout": long_timeout}})
        c.start_pair()
        status, _, body = c.submit("a", "true")
        self.assertEqual(status, 201, body)

        # Paused, the standby keeps its stream open and acknowledges nothing: the write waits.
        c.schedulers["b"].sigstop()
        result = {}

        def submit():
            client = c.client("a", timeout=long_timeout + 10)
            result["answer"] = client.request("POST", "/api/v1/tasks", c.task_body("true"))
            result["at"] = time.monotonic()
            client.close()
        writer = threading.Thread(target=submit)
        writer.start()
        time.sleep(1.0)
        self.assertTrue(writer.is_alive(), "the write did not wait for the paused standby")
        killed = time.monotonic()
        c.schedulers["b"].kill9()  # Its socket closes: the leader's stream to it ends.
        writer.join(long_timeout + 15)
        self.assertIn("answer", result, "the write got no answer")
        status, _, body = result["answer"]
        self.assertEqual(status, 201, body)
        self.assertLess(result["at"] - killed, 5.0, "the write waited for sync_timeout")
        self.assertIn("writes waiting for it continue without it", c.schedulers["a"].log_text())


if __name__ == "__main__":
    unittest.main()
