"""The standby link over mutual TLS: both schedulers serve HTTPS and gRPC with client
certificates; the standby attaches with the scheduler certificate, agents connect with their
own, a failover keeps the running task, and a client certificate that does not name the peer
scheduler (an agent's) cannot pose as the standby.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_tls
"""

import os
import shutil
import subprocess
import unittest

from ha_cluster import Daemon, HaCluster, HaTestCase, bin_path, wait_until
from dgpu_testlib import missing_dependency  # noqa: E402 (its path comes with ha_cluster)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HB_TIMEOUT = 2.0


def make_certs(directory, *args):
    subprocess.run([os.path.join(REPO, "scripts", "make-dev-certs.sh"), "-o", directory]
                   + list(args), check=True, capture_output=True, timeout=60)
    return directory


class TlsFailoverTest(HaTestCase):

    def setUp(self):
        if shutil.which("openssl") is None:
            missing_dependency(self, "openssl is not installed (make deps)")

    def test_failover_over_mutual_tls(self):
        c = self.cluster = HaCluster("tls", hb_timeout=HB_TIMEOUT)
        c.use_tls(make_certs(os.path.join(c.tmp, "certs"), "--agent", "ag1"))
        c.start_pair()
        c.start_agent("ag1", gpus=2)
        c.wait_agents_online("a", ["ag1"])
        status, _, body = c.submit("a", c.pid_command(30), 1, "high")
        self.assertEqual(status, 201, body)
        task = body["task_id"]
        c.wait_task_status("a", task, "running", 10)
        wait_until(lambda: c.started_pids(task), 5, what="the task's pid file")
        pid = c.started_pids(task)

        c.schedulers["a"].kill9()
        c.wait_role("b", "leader", HB_TIMEOUT + 10)
        c.wait_agents_online("b", ["ag1"])
        t = c.get_task("b", task)
        self.assertEqual((t["status"], t["attempts"], t["allocated_gpus"]),
                         ("running", 1, ["ag1-gpu-0"]), t)
        self.assertEqual(c.started_pids(task), pid)
        self.assertEqual([s["task_id"] for s in c.task_started("ag1")], [task])

    def test_an_agent_certificate_cannot_pose_as_the_standby(self):
        c = self.cluster = HaCluster("tls-pose", hb_timeout=HB_TIMEOUT)
        certs = make_certs(os.path.join(c.tmp, "certs"), "--agent", "ag1")
        c.use_tls(certs)
        c.start_scheduler("a", wait_role="leader")
        # B presents ag1's certificate on the standby link.
        doc = c.scheduler_doc("b")
        doc["replication"]["tls"]["cert_file"] = os.path.join(certs, "agent-ag1.crt")
        doc["replication"]["tls"]["key_file"] = os.path.join(certs, "agent-ag1.key")
        path = c.write_config("sched-b.yaml", doc)
        c.schedulers["b"] = Daemon("sched-b", [bin_path("dgpu-scheduler"), "--config", path],
                                   os.path.join(c.tmp, "sched-b.log")).start()
        wait_until(lambda: "certificate_mismatch: replication takes the peer scheduler's "
                   "certificate" in c.schedulers["b"].log_text(), 15,
                   what="B told why A refuses it")
        self.assertIn('its client certificate names "ag1", not the peer scheduler "127.0.0.1"',
                      c.schedulers["a"].log_text())
        self.assertNotIn("standby sched-b attached", c.schedulers["a"].log_text())


if __name__ == "__main__":
    unittest.main()
