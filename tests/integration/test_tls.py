"""TLS: REST over HTTPS (curl --cacert, dgpuctl --cacert), agents over gRPC with client
certificates that bind them to their node, plain-text and certificate-less agents refused,
stalled TLS handshakes closed, and bad certificate files named at start-up. Certificates come
from scripts/make-dev-certs.sh, run by the test.

  cd tests/integration && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_tls
"""

import os
import shutil
import socket
import subprocess
import time
import unittest

from harness import (API, CTL_BIN, SCHEDULER_BIN, ClusterTestCase, read_text, wait_until,
                     write_config)
from dgpu_testlib import missing_dependency

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAKE_CERTS = os.path.join(REPO, "scripts", "make-dev-certs.sh")


def make_certs(directory, *args):
    r = subprocess.run([MAKE_CERTS, "-o", directory] + list(args), capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("make-dev-certs.sh failed: %s" % r.stderr)
    return r


def curl(*args):
    return subprocess.run(["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"]
                          + list(args), capture_output=True, text=True, timeout=30)


class TlsTestCase(ClusterTestCase):
    CLIENT_CERTIFICATES = True
    AGENTS = ["a1"]

    def setUp(self):
        if shutil.which("openssl") is None:
            missing_dependency(self, "openssl is not installed (make deps)")
        super().setUp()

    def start_cluster(self):
        self.certs = os.path.join(self.c.tmp, "certs")
        make_certs(self.certs, "--agent", "a1", "--agent", "a2", "--agent", "other")
        self.c.use_tls(self.certs, client_certificates=self.CLIENT_CERTIFICATES)
        self.c.start_scheduler(extra={"server": {"read_timeout": 1}})
        for a in self.AGENTS:
            self.c.start_agent(a, gpus=2)
        self.c.wait_agents_online(self.AGENTS)

    def agent_doc(self, agent_id, tls):
        doc = self.c.agent_config(agent_id, gpus=2)
        if tls is None:
            del doc["scheduler"]["tls"]
        else:
            doc["scheduler"]["tls"] = tls
        return doc

    def assertNeverRegisters(self, agent_id, log_says):
        d = self.c.start_agent_from("agent-" + agent_id, self.agent_doc(agent_id, self.tls_of))
        wait_until(lambda: log_says in read_text(d.stdout_path), 10,
                   what="the agent's log saying %r" % log_says)
        self.assertNotIn(agent_id, self.c.agents_view())
        return d


class MutualTlsTest(TlsTestCase):

    def test_rest_over_https_with_curl(self):
        url = self.c.base + API + "/agents"
        self.assertTrue(url.startswith("https://"), url)
        self.assertEqual(curl("--cacert", self.c.ca_file, url).stdout, "200")
        # Without the CA, curl cannot verify the certificate (exit 60).
        self.assertEqual(curl(url).returncode, 60)
        # Plain HTTP on the HTTPS port gets no answer.
        r = curl(url.replace("https://", "http://"))
        self.assertNotEqual(r.stdout, "200", r)
        self.assertNotEqual(r.returncode, 0, r)

    def test_a_task_submitted_over_https_runs_on_an_agent_over_mutual_tls(self):
        task = self.c.submit("echo over-tls", gpu_count=1, priority="high")
        t = self.c.wait_finished(task)
        self.assertEqual((t["status"], t["node_id"], t["allocated_gpus"]),
                         ("success", "a1", ["a1-gpu-0"]), t)
        self.assertIn("over-tls", read_text(self.c.task_log("a1", task)))

    def test_dgpuctl_with_cacert(self):
        if not os.access(CTL_BIN, os.X_OK):
            self.skipTest("dgpuctl not built")
        env = dict(os.environ, DGPU_SERVER=self.c.base, HOME=self.c.tmp)
        for k in ("DGPU_TOKEN", "DGPU_CONFIG", "XDG_CONFIG_HOME"):
            env.pop(k, None)

        def ctl(*args):
            return subprocess.run([CTL_BIN] + list(args), env=env, capture_output=True,
                                  text=True, timeout=30)
        r = ctl("--cacert", self.c.ca_file, "get", "agents")
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("a1", r.stdout)
        r = ctl("get", "agents")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("certificate", r.stderr.lower(), r)
        # The CA from the config file.
        os.makedirs(os.path.join(self.c.tmp, ".config", "dgpu"))
        with open(os.path.join(self.c.tmp, ".config", "dgpu", "config.yaml"), "w") as f:
            f.write("ca_file: %s\n" % self.c.ca_file)
        r = ctl("submit", "--gpus", "1", "--priority", "low", "--", "true")
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(self.c.wait_finished(r.stdout.strip())["status"], "success")

    def test_an_agent_with_another_nodes_certificate_is_refused(self):
        self.tls_of = self.c.agent_tls("a2", cert_of="other")
        self.assertNeverRegisters("a2", 'certificate_mismatch: the client certificate names '
                                        '"other"')
        self.assertIn('refused RegisterAgent for node "a2"', read_text(self.c.scheduler.stdout_path))
        # The node the certificate names is not taken over either: a1 keeps its GPUs.
        self.assertEqual([(a["id"], a["gpus"]) for a in self.c.agents_view().values()],
                         [("a1", 2)])

    def test_a_plain_text_agent_is_refused(self):
        self.tls_of = None
        self.assertNeverRegisters("a2", "closes plain-text connections: set scheduler.tls.ca_file")

    def test_an_agent_without_a_client_certificate_is_refused(self):
        self.tls_of = {"ca_file": self.c.ca_file}
        self.assertNeverRegisters("a2", "also needs scheduler.tls.cert_file and key_file")

    def test_stalled_tls_handshakes_are_closed_after_the_read_timeout(self):
        socks = [socket.create_connection(("127.0.0.1", self.c.http_port)) for _ in range(20)]
        socks[0].sendall(b"\x16\x03\x01\x00\xff")  # half a ClientHello
        start = time.monotonic()
        for s in socks:
            s.settimeout(10)
            self.assertEqual(s.recv(16), b"")  # closed by the scheduler
            s.close()
        # read_timeout 1 s, checked every second.
        self.assertLess(time.monotonic() - start, 4.0)
        wait_until(lambda: "closed 20 REST connection(s) whose TLS handshake did not finish"
                   in read_text(self.c.scheduler.stdout_path), 5, what="the scheduler's warning")
        self.assertEqual(self.c.get(API + "/agents").status, 200)


class ServerTlsOnlyTest(TlsTestCase):
    """server.tls without client_ca_file: TLS without client certificates; an agent needs only
    the CA."""
    CLIENT_CERTIFICATES = False
    AGENTS = []

    def test_an_agent_with_only_the_ca_registers(self):
        self.c.start_agent_from("agent-a2", self.agent_doc("a2", {"ca_file": self.c.ca_file}),
                                track_as="a2")
        self.c.wait_agents_online(["a2"])
        task = self.c.submit("true", gpu_count=1, priority="high")
        self.assertEqual(self.c.wait_finished(task)["allocated_gpus"], ["a2-gpu-0"])


class BadTlsFilesTest(unittest.TestCase):
    """Each problem with server.tls's files stops the scheduler at start with the key and the
    reason."""

    def setUp(self):
        if shutil.which("openssl") is None:
            missing_dependency(self, "openssl is not installed (make deps)")
        if not os.access(SCHEDULER_BIN, os.X_OK):
            self.skipTest("dgpu-scheduler not built")
        import tempfile
        self.tmp = tempfile.mkdtemp(prefix="dgpu-it-badtls-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.certs = os.path.join(self.tmp, "certs")
        make_certs(self.certs, "--agent", "a1")

    def start(self, tls, replication=None):
        doc = {"server": {"grpc_address": "127.0.0.1:0", "http_address": "127.0.0.1:0",
                          "tls": tls},
               "storage": {"snapshot_dir": os.path.join(self.tmp, "state")}}
        if replication:
            doc["replication"] = replication
        path = os.path.join(self.tmp, "s.yaml")
        write_config(path, doc)
        return subprocess.run([SCHEDULER_BIN, "--config", path], capture_output=True, text=True,
                              timeout=30)

    def cert(self, name):
        return os.path.join(self.certs, name)

    def assertRefused(self, r, message):
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn(message, r.stderr + r.stdout)

    def test_a_key_of_another_certificate(self):
        r = self.start({"cert_file": self.cert("scheduler.crt"),
                        "key_file": self.cert("agent-a1.key")})
        self.assertRefused(r, "server.tls.key_file: %s is not the key of the certificate in "
                              "server.tls.cert_file" % self.cert("agent-a1.key"))

    def test_a_missing_file(self):
        r = self.start({"cert_file": self.cert("nope.crt"), "key_file": self.cert("scheduler.key")})
        self.assertRefused(r, "server.tls.cert_file: cannot read %s: No such file or directory"
                              % self.cert("nope.crt"))

    def test_a_file_that_is_not_pem(self):
        r = self.start({"cert_file": self.cert("scheduler.key"),
                        "key_file": self.cert("scheduler.key")})
        self.assertRefused(r, "server.tls.cert_file: %s holds no PEM certificate"
                              % self.cert("scheduler.key"))

    def test_an_expired_certificate(self):
        key, csr, crt = self.cert("old.key"), self.cert("old.csr"), self.cert("old.crt")
        subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=old", "-keyout",
                        key, "-out", csr], check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", self.cert("ca.crt"),
                        "-CAkey", self.cert("ca.key"), "-days", "-1", "-out", crt], check=True,
                       capture_output=True)
        r = self.start({"cert_file": crt, "key_file": key})
        self.assertRefused(r, "server.tls.cert_file: the certificate in %s expired on " % crt)

    def test_client_ca_without_a_certificate(self):
        r = self.start({"client_ca_file": self.cert("ca.crt")})
        self.assertRefused(r, "server.tls.client_ca_file: needs server.tls.cert_file and key_file")

    def test_replication_without_its_tls_section(self):
        r = self.start({"cert_file": self.cert("scheduler.crt"),
                        "key_file": self.cert("scheduler.key"),
                        "client_ca_file": self.cert("ca.crt")},
                       replication={"enabled": True, "peer_address": "127.0.0.1:1"})
        self.assertRefused(r, "replication.tls.ca_file: is required when server.tls is set")


if __name__ == "__main__":
    unittest.main()
