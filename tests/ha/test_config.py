"""HA configuration errors fail fast and clearly.

ha.election: etcd: while etcd election is not built, the scheduler must exit non-zero with a
one-line message that names etcd. Once it is built, the same test checks that a scheduler whose
etcd endpoints are unreachable keeps running but never leads (readyz 503, logs name etcd).

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_config
"""

import os
import subprocess
import unittest

import time

from ha_cluster import Daemon, HaCluster, HaTestCase, bin_path, free_port, wait_until


class HaConfigTest(HaTestCase):
    def run_scheduler(self, doc, timeout=20):
        path = self.cluster.write_config("bad.yaml", doc)
        return subprocess.run([bin_path("dgpu-scheduler"), "--config", path],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)

    def test_etcd_election_fails_clearly(self):
        c = self.cluster = HaCluster("config")
        doc = c.scheduler_doc("a")
        doc["replication"]["enabled"] = False
        doc["ha"] = {"election": "etcd", "etcd_endpoints": ["http://127.0.0.1:%d" % free_port()]}
        try:
            proc = self.run_scheduler(doc, timeout=5)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is not None:
            # Not built: a clear one-line failure.
            self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            lines = [l for l in proc.stderr.splitlines() if l.strip()]
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertIn("etcd", lines[0])
            return
        # etcd election is built (the scheduler kept running): with no etcd reachable it must
        # never lead. (subprocess.run killed it; check it again under our control.)
        c.write_config("etcd.yaml", doc)
        d = c.schedulers["a"] = Daemon("sched-a", [bin_path("dgpu-scheduler"), "--config",
                                                   os.path.join(c.tmp, "etcd.yaml")],
                                       os.path.join(c.tmp, "sched-a.log")).start()
        wait_until(lambda: c.role("a") is not None, 10, what="the scheduler answering")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            status, body = c.readyz("a")
            self.assertEqual((status, body["role"]), (503, "standby"), body)
            time.sleep(0.2)
        self.assertTrue(d.running())
        self.assertIn("etcd", d.log_text())

    def test_lease_election_requires_shared_storage(self):
        c = self.cluster = HaCluster("config")
        doc = c.scheduler_doc("a")
        doc["ha"] = {"election": "lease"}
        proc = self.run_scheduler(doc)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("shared_storage", proc.stderr)

    def test_unknown_replication_key_is_named(self):
        c = self.cluster = HaCluster("config")
        doc = c.scheduler_doc("a")
        doc["replication"]["heartbeat_timout"] = 3
        proc = self.run_scheduler(doc)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("heartbeat_timout", proc.stderr)


if __name__ == "__main__":
    unittest.main()
