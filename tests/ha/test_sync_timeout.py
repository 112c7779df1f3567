"""replication.sync_timeout bounds a sync-mode write: a standby that stops acknowledging (paused
with SIGSTOP, so its stream stays open) makes a submission wait about sync_timeout, not
heartbeat_timeout; the leader then continues alone and says so in /readyz.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_sync_timeout
"""

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


if __name__ == "__main__":
    unittest.main()
