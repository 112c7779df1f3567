"""Leader election through etcd (ha.election: etcd): a real etcd 3.4 and two real
dgpu-scheduler processes (A: configured master, B: configured standby) on free loopback ports,
temporary directories, Python 3 standard library only. Self-contained (no shared helper module).

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_etcd

etcd: $DGPU_ETCD_BIN, else etcd in PATH (package etcd-server, scripts/install-deps.sh). It is a
declared dependency: when it is missing the tests fail on CI (CI=true) and are skipped elsewhere.
DGPU_HA_KEEP_TMP=1 keeps the temporary directories (configs, logs, data) of every test; a failed
test always keeps its directory and prints the daemons' log tails.
"""

import base64
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from dgpu_testlib import bin_path, free_port, missing_dependency, wait_until  # noqa: E402
import dgpu_harness  # noqa: E402
ETCD_BIN = os.environ.get("DGPU_ETCD_BIN") or shutil.which("etcd")
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LEASE_TTL = 3.0          # ha.lease_ttl (seconds)
HB_INTERVAL = 0.5        # replication.heartbeat_interval
HB_TIMEOUT = 2.0         # replication.heartbeat_timeout
NET_ERRORS = (OSError, http.client.HTTPException)


def http_call(port, method, path, body=None, timeout=3.0, context=None):
    """One request on a fresh connection: (status, parsed JSON body or text); HTTPS with the
    ssl `context` when given."""
    if context is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
    finally:
        conn.close()
    try:
        return resp.status, json.loads(text) if text else None
    except ValueError:
        return resp.status, text


# A child process in its own session, stdout and stderr appended to one log file.
Proc = dgpu_harness.Daemon


class Etcd:
    """A single-member etcd on free loopback ports with a temporary data directory. certs: a
    directory of scripts/make-dev-certs.sh's files: clients over TLS with client certificates
    (scheduler.crt serves, the test itself uses client-test.crt)."""

    def __init__(self, tmp, certs=None):
        self.port = free_port()
        self.peer_port = free_port()
        self.endpoint = "%s://127.0.0.1:%d" % ("https" if certs else "http", self.port)
        peer = "http://127.0.0.1:%d" % self.peer_port
        tls = []
        self.context = None
        if certs:
            tls = ["--cert-file", os.path.join(certs, "scheduler.crt"),
                   "--key-file", os.path.join(certs, "scheduler.key"),
                   "--trusted-ca-file", os.path.join(certs, "ca.crt"), "--client-cert-auth"]
            self.context = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
            self.context.load_cert_chain(os.path.join(certs, "client-test.crt"),
                                         os.path.join(certs, "client-test.key"))
        self.proc = Proc("etcd", [
            ETCD_BIN, "--name", "t", "--data-dir", os.path.join(tmp, "etcd-data"),
            "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "t=" + peer] + tls, os.path.join(tmp, "etcd.log"))

    def start(self, timeout=20):
        self.proc.start()

        def healthy():
            if not self.proc.running():
                raise AssertionError("etcd exited:\n" + self.proc.log_text()[-3000:])
            try:
                status, body = http_call(self.port, "GET", "/health", timeout=1,
                                         context=self.context)
            except NET_ERRORS:
                return False
            return status == 200 and isinstance(body, dict) and body.get("health") == "true"
        wait_until(healthy, timeout, "etcd healthy on " + self.endpoint)
        return self

    def post(self, path, body):
        status, resp = http_call(self.port, "POST", "/v3/" + path, body, timeout=2,
                                 context=self.context)
        if status != 200:
            raise AssertionError("etcd %s: HTTP %d %s" % (path, status, resp))
        return resp

    def get(self, key):
        r = self.post("kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = r.get("kvs") or []
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None

    def election_leader(self, name):
        """The value of the current leader of election `name` ("<id> <http address>")."""
        r = self.post("election/leader", {"name": base64.b64encode(name.encode()).decode()})
        kv = r.get("kv") or {}
        return base64.b64decode(kv.get("value", "")).decode() if kv else None


class EtcdHaCluster:
    """etcd plus schedulers 'a' (master) and 'b' (standby) electing through it."""

    PREFIX = "/dgpu/leader"

    def __init__(self, name, tls=False):
        self.tmp = tempfile.mkdtemp(prefix="dgpu-ha-etcd-%s-" % name)
        self.certs = None
        self.context = None
        if tls:
            self.certs = os.path.join(self.tmp, "certs")
            subprocess.run([os.path.join(REPO, "scripts", "make-dev-certs.sh"), "-o", self.certs,
                            "--client", "test"], check=True, capture_output=True, timeout=60)
            self.context = ssl.create_default_context(cafile=os.path.join(self.certs, "ca.crt"))
        self.etcd = Etcd(self.tmp, self.certs)
        self.ports = {n: {"http": free_port(), "grpc": free_port()} for n in ("a", "b")}
        self.scheds = {}

    def config(self, name):
        doc = self.plain_config(name)
        if self.certs:
            ca = os.path.join(self.certs, "ca.crt")
            pair = {"cert_file": os.path.join(self.certs, "scheduler.crt"),
                    "key_file": os.path.join(self.certs, "scheduler.key")}
            doc["server"]["tls"] = dict(pair, client_ca_file=ca)
            doc["replication"]["tls"] = dict(pair, ca_file=ca)
            doc["ha"]["etcd_tls"] = dict(pair, ca_file=ca)
        return doc

    def plain_config(self, name):
        peer = "b" if name == "a" else "a"
        return {
            "server": {"grpc_address": "127.0.0.1:%d" % self.ports[name]["grpc"],
                       "http_address": "127.0.0.1:%d" % self.ports[name]["http"]},
            "scheduler": {"role": "master" if name == "a" else "standby", "id": "sched-" + name,
                          "schedule_interval": 1},
            "replication": {"enabled": True,
                            "peer_address": "127.0.0.1:%d" % self.ports[peer]["grpc"],
                            "heartbeat_interval": HB_INTERVAL, "heartbeat_timeout": HB_TIMEOUT,
                            "mode": "sync"},
            "storage": {"snapshot_dir": os.path.join(self.tmp, "state-" + name)},
            "ha": {"election": "etcd", "etcd_endpoints": [self.etcd.endpoint],
                   "lease_ttl": LEASE_TTL, "etcd_prefix": self.PREFIX},
            "logging": {"level": "info", "format": "text"},
        }

    def start_scheduler(self, name):
        path = os.path.join(self.tmp, "sched-%s.yaml" % name)
        with open(path, "w") as f:
            json.dump(self.config(name), f, indent=1)  # JSON is YAML (flow style).
        p = Proc("sched-" + name, [bin_path("dgpu-scheduler"), "--config", path],
                 os.path.join(self.tmp, "sched-%s.log" % name)).start()
        self.scheds[name] = p
        return p

    def start_pair(self):
        """etcd, then A (must lead) and B (must follow, attached to A)."""
        self.etcd.start()
        self.start_scheduler("a")
        self.wait_role("a", "leader", 15)
        self.start_scheduler("b")
        self.wait_role("b", "standby", 15)
        self.wait_attached("a", "b", 0)

    def close(self, keep):
        for p in list(self.scheds.values()) + [self.etcd.proc]:
            p.kill9()
        if not keep and not os.environ.get("DGPU_HA_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def diagnostics(self, lines=40):
        out = ["tmp: " + self.tmp]
        for p in list(self.scheds.values()) + [self.etcd.proc]:
            out.append("--- %s (%s) ---" % (p.name, "running" if p.running() else "exited"))
            out.extend(p.log_text().splitlines()[-lines:])
        return "\n".join(out)

    # --- REST -------------------------------------------------------------------------------------

    def call(self, name, method, path, body=None, timeout=3.0):
        return http_call(self.ports[name]["http"], method, path, body, timeout, self.context)

    def readyz(self, name):
        """(status, body) or (None, None) when the scheduler does not answer."""
        try:
            return self.call(name, "GET", "/readyz", timeout=1.5)
        except NET_ERRORS:
            return None, None

    def is_leader(self, name):
        status, body = self.readyz(name)
        return status == 200 and isinstance(body, dict) and body.get("role") == "leader"

    def epoch(self, name):
        _, body = self.readyz(name)
        return int(body["epoch"]) if isinstance(body, dict) else None

    def wait_role(self, name, role, timeout):
        def check():
            p = self.scheds[name]
            if not p.running():
                raise AssertionError("sched-%s exited:\n%s" % (name, self.diagnostics()))
            status, body = self.readyz(name)
            if not isinstance(body, dict) or body.get("role") != role:
                return False
            return status == (200 if role == "leader" else 503)
        wait_until(check, timeout, "sched-%s to be %s" % (name, role))

    def wait_attached(self, leader, standby, count_before, timeout=15):
        """The leader logged 'standby sched-<standby> attached' more than count_before times."""
        needle = "standby sched-%s attached" % standby
        wait_until(lambda: self.scheds[leader].log_text().count(needle) > count_before, timeout,
                   "sched-%s attached to sched-%s" % (standby, leader))

    def leaders(self):
        return [n for n in self.scheds if self.scheds[n].running() and self.is_leader(n)]

    def task_body(self, token):
        return {"priority": "low", "gpu_count": 1, "command": "true # " + token}

    def submit(self, name, token):
        return self.call(name, "POST", "/api/v1/tasks", self.task_body(token))

    def get_task(self, name, task_id):
        status, body = self.call(name, "GET", "/api/v1/tasks/" + task_id)
        return body if status == 200 else None


class Submitter:
    """Client threads posting tasks continuously. A thread posts to its current target and moves
    to the other scheduler after a connection error or a 503. Records every answer as
    (target, send time, answer time, status, body, token)."""

    def __init__(self, cluster, targets=("a", "b"), threads=2, pause=0.02):
        self.c, self.targets, self.n, self.pause = cluster, list(targets), threads, pause
        self.results = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []

    def start(self):
        for i in range(self.n):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, idx):
        which, k = 0, 0
        while not self._stop.is_set():
            name = self.targets[which]
            token = "etcd-%d-%d" % (idx, k)
            k += 1
            sent = time.monotonic()
            try:
                status, body = self.c.submit(name, token)
            except NET_ERRORS as e:
                status, body = None, repr(e)
            with self._lock:
                self.results.append((name, sent, time.monotonic(), status, body, token))
            if status != 201:
                if status is None or status == 503:
                    which = (which + 1) % len(self.targets)
                time.sleep(0.05)
            elif self.pause:
                time.sleep(self.pause)

    def acked(self, name=None, after=0.0):
        with self._lock:
            return [r for r in self.results
                    if r[3] == 201 and (name is None or r[0] == name) and r[1] >= after]

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)


class EtcdElectionTest(unittest.TestCase):
    cluster = None
    submitter = None

    def run(self, result=None):
        if result is None:
            result = self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        try:
            return super().run(result)
        finally:
            failed = len(result.failures) + len(result.errors) > before
            if self.submitter is not None:
                self.submitter.stop()
                self.submitter = None
            if self.cluster is not None:
                if failed:
                    print("\n" + self.cluster.diagnostics())
                self.cluster.close(keep=failed)
                self.cluster = None

    def setUp(self):
        if ETCD_BIN is None or not os.access(ETCD_BIN, os.X_OK):
            missing_dependency(self, "etcd not found (%s): install the Debian package etcd-server "
                                     "(make deps)" % (ETCD_BIN or "not in PATH"))
        bin_path("dgpu-scheduler")

    def new_cluster(self, tls=False):
        self.cluster = EtcdHaCluster(self.id().rsplit(".", 1)[-1], tls=tls)
        return self.cluster

    def assert_one_leader_for(self, seconds, expected):
        """For `seconds`, `expected` is the only leader (readyz 200) and etcd names it."""
        c = self.cluster
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.assertEqual(c.leaders(), [expected])
            time.sleep(0.1)
        value = c.etcd.election_leader(c.PREFIX + "/election")
        self.assertIsNotNone(value, "etcd has no election leader")
        self.assertTrue(value.startswith("sched-%s " % expected), value)

    # --- (1) ------------------------------------------------------------------------------------

    def test_election_on_start_one_leader(self):
        c = self.new_cluster()
        c.start_pair()
        self.assert_one_leader_for(1.5, "a")
        status, body = c.readyz("b")
        self.assertEqual((status, body.get("role")), (503, "standby"), body)
        epoch = c.epoch("a")
        self.assertGreaterEqual(epoch, 1)
        self.assertEqual(c.etcd.get(c.PREFIX + "/epoch"), str(epoch))
        self.assertIn("event=leader_elected", c.scheds["a"].log_text())
        self.assertNotIn("event=leader_elected", c.scheds["b"].log_text())
        # The standby refuses writes and names the leader.
        status, body = c.submit("b", "on-standby")
        self.assertEqual(status, 503, body)
        self.assertEqual(body["error"]["code"], "not_leader", body)

    def test_everything_over_tls(self):
        """etcd with client certificates (ha.etcd_tls), the standby link over mutual TLS
        (replication.tls), REST over HTTPS: the election and a failover work as in plain text."""
        c = self.new_cluster(tls=True)
        c.start_pair()
        self.assertTrue(c.etcd.endpoint.startswith("https://"), c.etcd.endpoint)
        self.assert_one_leader_for(1.0, "a")
        status, body = c.submit("a", "over-tls")
        self.assertEqual(status, 201, body)
        c.scheds["a"].kill9()
        c.wait_role("b", "leader", LEASE_TTL + 10)
        self.assert_one_leader_for(0.5, "b")
        t = c.get_task("b", body["task_id"])
        self.assertIsNotNone(t, "the task acknowledged by A is on B")

    # --- (2) ------------------------------------------------------------------------------------

    def test_kill9_leader_during_submissions(self):
        c = self.new_cluster()
        c.start_pair()
        epoch_a = c.epoch("a")
        sub = self.submitter = Submitter(c).start()
        wait_until(lambda: len(sub.acked("a")) >= 20, 15, "20 tasks acknowledged by A")
        c.scheds["a"].kill9()
        killed_at = time.monotonic()
        wait_until(lambda: c.is_leader("b"), LEASE_TTL + 2, "B to lead after A was killed")
        took = time.monotonic() - killed_at
        # New submissions succeed on B.
        wait_until(lambda: len(sub.acked("b", after=killed_at)) >= 5, 10,
                   "5 tasks acknowledged by B after the failover")
        sub.stop()
        self.submitter = None
        epoch_b = c.epoch("b")
        self.assertGreater(epoch_b, epoch_a)
        self.assertEqual(c.etcd.get(c.PREFIX + "/epoch"), str(epoch_b))
        acked = sub.acked()
        missing = []
        for (_, _, _, _, body, token) in acked:
            t = c.get_task("b", body["task_id"])
            if t is None or ("command" in t and token not in t["command"]):
                missing.append((body["task_id"], token, t))
        self.assertEqual(missing, [], "acknowledged tasks missing on B (%d acked)" % len(acked))
        print("\n  failover took %.2fs; %d acknowledged tasks all on B" % (took, len(acked)))

    # --- (3) ------------------------------------------------------------------------------------

    def test_etcd_paused_leader_steps_down(self):
        c = self.new_cluster()
        c.start_pair()
        epoch_before = c.epoch("a")
        sub = self.submitter = Submitter(c, targets=("a",), threads=1).start()
        wait_until(lambda: len(sub.acked("a")) >= 3, 10, "tasks acknowledged by A")
        c.etcd.proc.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_until(lambda: c.readyz("a")[0] == 503, LEASE_TTL + 1,
                   "A's /readyz to turn 503 after etcd was paused")
        took = time.monotonic() - stopped_at
        status, body = c.submit("a", "after-step-down")
        self.assertEqual(status, 503, body)
        self.assertEqual(body["error"]["code"], "not_leader", body)
        wait_until(lambda: "event=leader_lost" in c.scheds["a"].log_text(), 2,
                   "event=leader_lost in A's log")
        # Neither scheduler leads while etcd is paused.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            self.assertEqual(c.leaders(), [])
            time.sleep(0.1)
        sub.stop()
        self.submitter = None
        # No write was acknowledged once A's lease could have expired.
        late = [r for r in sub.acked("a") if r[1] >= stopped_at + LEASE_TTL]
        self.assertEqual(late, [], "201 after the lease could have expired")
        c.etcd.proc.signal(signal.SIGCONT)
        resumed_at = time.monotonic()
        leader = wait_until(lambda: (c.leaders() or [None])[0], 10,
                            "a leader after etcd resumed")
        took_back = time.monotonic() - resumed_at
        self.assertGreater(c.epoch(leader), epoch_before)
        self.assert_one_leader_for(1.0, leader)
        status, body = c.submit(leader, "after-resume")
        self.assertEqual(status, 201, body)
        print("\n  stepped down %.2fs after etcd paused; %s leads %.2fs after resume" %
              (took, leader, took_back))

    # --- (4) ------------------------------------------------------------------------------------

    def test_restarted_old_leader_rejoins_as_standby(self):
        c = self.new_cluster()
        c.start_pair()
        status, before = c.submit("a", "before-kill")
        self.assertEqual(status, 201, before)
        c.scheds["a"].kill9()
        wait_until(lambda: c.is_leader("b"), LEASE_TTL + 2, "B to lead after A was killed")
        status, during = c.submit("b", "while-a-down")
        self.assertEqual(status, 201, during)
        attached = c.scheds["b"].log_text().count("standby sched-a attached")
        c.start_scheduler("a")
        c.wait_role("a", "standby", 15)
        c.wait_attached("b", "a", attached)
        status, after = c.submit("b", "after-rejoin")
        self.assertEqual(status, 201, after)
        for body, token in ((before, "before-kill"), (during, "while-a-down"),
                            (after, "after-rejoin")):
            t = wait_until(lambda: c.get_task("a", body["task_id"]), 5,
                           "%s (%s) readable on A" % (body["task_id"], token))
            if "command" in t:
                self.assertIn(token, t["command"])
        self.assert_one_leader_for(1.0, "b")
        status, body = c.readyz("a")
        self.assertEqual((status, body.get("role")), (503, "standby"), body)


if __name__ == "__main__":
    unittest.main()
