"""Helpers for the HA tests: two real dgpu-scheduler processes (A and B) and dgpu-agents on
loopback, driven over REST. Python 3 standard library only.

Binaries: $DGPU_BIN_DIR (set by CTest to the directory of dgpu-scheduler), the agent from
$DGPU_AGENT_BIN_DIR or the same directory; else build/bin of the repository.
DGPU_HA_KEEP_TMP=1 keeps the temporary directory (configs, logs, databases) of every test.
"""

import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from dgpu_testlib import bin_path, free_port, pid_alive, wait_until  # noqa: E402
import dgpu_harness  # noqa: E402


class Http(dgpu_harness.Http):
    """A kept-alive connection whose requests answer (status, headers by lower-case name,
    parsed JSON or text)."""

    def __init__(self, port, timeout=5.0, ca_file=None):
        super().__init__(port, timeout=timeout, ca_file=ca_file)

    def request(self, method, path, body=None):
        r = super().request(method, path, body=body)
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.parsed


class Daemon(dgpu_harness.Daemon):
    """One child process in its own process group, stdout and stderr to one log file."""

    def terminate(self, timeout=10):
        """SIGTERM (continued first if stopped); SIGKILL to the daemon after `timeout`."""
        if self.running():
            self.stop(timeout=timeout, group=False)


class HaCluster:
    """Schedulers 'a' (configured master) and 'b' (configured standby) plus agents.

    mode: replication mode (sync | async); shared: give both a shared_storage directory (the
    lease arbiter); extra_sched: dict merged into both scheduler configs (sections merged)."""

    def __init__(self, name, mode="sync", shared=False, hb_interval=0.5, hb_timeout=2.0,
                 agent_hb_timeout=5, extra_sched=None):
        self.tmp = tempfile.mkdtemp(prefix="dgpu-ha-%s-" % name)
        self.mode = mode
        self.hb_interval = hb_interval
        self.hb_timeout = hb_timeout
        self.agent_hb_timeout = agent_hb_timeout
        self.shared_dir = os.path.join(self.tmp, "shared") if shared else ""
        if shared:
            os.makedirs(self.shared_dir)
        self.extra_sched = extra_sched or {}
        self.tls_certs = None
        self.ca_file = None
        self.ports = {n: {"http": free_port(), "grpc": free_port()} for n in ("a", "b")}
        self.schedulers = {}
        self.agents = {}
        self.marker = os.path.basename(self.tmp)  # env marker of every task process
        self._clients = {}
        self._lock = threading.Lock()

    # --- configuration ------------------------------------------------------------------------

    def use_tls(self, certs):
        """TLS everywhere with the files of scripts/make-dev-certs.sh in `certs`: HTTPS, gRPC
        with client certificates (agent-<id>.crt for agents, scheduler.crt for the standby
        link). Before the daemons start."""
        self.tls_certs = certs
        self.ca_file = os.path.join(certs, "ca.crt")

    def http_address(self, name):
        return "127.0.0.1:%d" % self.ports[name]["http"]

    def grpc_address(self, name):
        return "127.0.0.1:%d" % self.ports[name]["grpc"]

    def scheduler_doc(self, name):
        peer = "b" if name == "a" else "a"
        doc = {
            "server": {"grpc_address": self.grpc_address(name),
                       "http_address": self.http_address(name)},
            "scheduler": {"role": "master" if name == "a" else "standby", "id": "sched-" + name,
                          "schedule_interval": 1},
            "replication": {"enabled": True, "peer_address": self.grpc_address(peer),
                            "heartbeat_interval": self.hb_interval,
                            "heartbeat_timeout": self.hb_timeout, "mode": self.mode},
            "agent": {"heartbeat_timeout": self.agent_hb_timeout},
            "storage": {"snapshot_dir": os.path.join(self.tmp, "state-" + name)},
            "logging": {"level": "info", "format": "text"},
        }
        if self.shared_dir:
            doc["storage"]["shared_storage"] = self.shared_dir
        if self.tls_certs:
            cert = os.path.join(self.tls_certs, "scheduler.crt")
            key = os.path.join(self.tls_certs, "scheduler.key")
            doc["server"]["tls"] = {"cert_file": cert, "key_file": key,
                                    "client_ca_file": self.ca_file}
            doc["replication"]["tls"] = {"ca_file": self.ca_file, "cert_file": cert,
                                         "key_file": key}
        for section, values in self.extra_sched.items():
            doc.setdefault(section, {}).update(values)
        return doc

    def write_config(self, filename, doc):
        path = os.path.join(self.tmp, filename)
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)  # JSON is valid YAML (flow style).
            f.write("\n")
        return path

    # --- processes ----------------------------------------------------------------------------

    def start_scheduler(self, name, wait_role=None, timeout=15):
        """Starts scheduler 'a' or 'b'; wait_role: 'leader' | 'standby' | None."""
        cfg = self.write_config("sched-%s.yaml" % name, self.scheduler_doc(name))
        d = Daemon("sched-" + name, [bin_path("dgpu-scheduler"), "--config", cfg],
                   os.path.join(self.tmp, "sched-%s.log" % name)).start()
        self.schedulers[name] = d
        if wait_role:
            self.wait_role(name, wait_role, timeout)
        return d

    def start_agent(self, agent_id, gpus=4, heartbeat_interval=0.5):
        work = os.path.join(self.tmp, "agent-" + agent_id)
        os.makedirs(work, exist_ok=True)
        doc = {
            "agent": {"id": agent_id, "heartbeat_interval": heartbeat_interval},
            "scheduler": {"master_address": self.grpc_address("a"),
                          "standby_address": self.grpc_address("b"),
                          "connection_timeout": 2, "retry_interval": 0.2,
                          "max_retry_interval": 1},
            "gpu": {"detection_method": "fake", "fake": {"count": gpus}},
            # No cgroups: the failover tests SIGKILL agents (the isolation tests ask for them).
            "executor": {"work_dir": work, "kill_grace_period": 1, "isolation": "none"},
            "logging": {"level": "info", "format": "text"},
        }
        if self.tls_certs:
            doc["scheduler"]["tls"] = {
                "ca_file": self.ca_file,
                "cert_file": os.path.join(self.tls_certs, "agent-%s.crt" % agent_id),
                "key_file": os.path.join(self.tls_certs, "agent-%s.key" % agent_id)}
        cfg = self.write_config("agent-%s.yaml" % agent_id, doc)
        d = Daemon("agent-" + agent_id, [bin_path("dgpu-agent"), "--config", cfg],
                   os.path.join(self.tmp, "agent-%s.log" % agent_id)).start()
        self.agents[agent_id] = d
        return d

    def start_pair(self):
        """A as leader, then B as its standby, attached (A logs the attachment)."""
        self.start_scheduler("a", wait_role="leader")
        self.start_scheduler("b", wait_role="standby")
        wait_until(lambda: "standby sched-b attached" in self.schedulers["a"].log_text(), 15,
                   what="B attached to A as standby")

    def task_processes(self):
        """pids of live task processes of this cluster (found by their HA_TEST_RUN marker)."""
        mark = ("HA_TEST_RUN=" + self.marker).encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if mark in f.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                pass
        return pids

    def close(self, keep=False):
        for d in list(self.agents.values()) + list(self.schedulers.values()):
            if d.stopped:
                d.sigcont()
            d.kill9()
        for pid in self.task_processes():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for c in self._clients.values():
            c.close()
        if not keep and not os.environ.get("DGPU_HA_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def diagnostics(self, lines=40):
        out = ["tmp: " + self.tmp]
        for d in list(self.schedulers.values()) + list(self.agents.values()):
            tail = d.log_text().splitlines()[-lines:]
            out.append("--- %s (%s) ---" % (d.name, "running" if d.running() else "exited"))
            out.extend(tail)
        return "\n".join(out)

    # --- REST ---------------------------------------------------------------------------------

    def client(self, name, timeout=5.0):
        """A fresh keep-alive client (one per thread: Http is not thread-safe)."""
        return Http(self.ports[name]["http"], timeout, self.ca_file)

    def request(self, name, method, path, body=None, timeout=5.0):
        key = (name, threading.get_ident())
        with self._lock:
            c = self._clients.get(key)
            if c is None:
                c = self._clients[key] = Http(self.ports[name]["http"], timeout, self.ca_file)
        return c.request(method, path, body)

    def task_body(self, command, gpu_count=1, priority="low", name=None):
        body = {"priority": priority, "gpu_count": gpu_count, "command": command,
                "env": {"HA_TEST_RUN": self.marker}}
        if name:
            body["name"] = name
        return body

    def submit(self, name, command, gpu_count=1, priority="low", task_name=None):
        """POST a task to scheduler `name`; returns (status, headers, body)."""
        return self.request(name, "POST", "/api/v1/tasks",
                            self.task_body(command, gpu_count, priority, task_name))

    def get_task(self, name, task_id):
        status, _, body = self.request(name, "GET", "/api/v1/tasks/" + task_id)
        return body if status == 200 else None

    def readyz(self, name):
        status, _, body = self.request(name, "GET", "/readyz", timeout=2)
        return status, body

    def role(self, name):
        try:
            status, body = self.readyz(name)
        except (OSError, http.client.HTTPException):
            return None
        return body.get("role") if isinstance(body, dict) else None

    def wait_role(self, name, role, timeout=15):
        def check():
            if not self.schedulers[name].running():
                raise AssertionError("scheduler %s exited:\n%s" % (name, self.diagnostics()))
            return self.role(name) == role
        wait_until(check, timeout, what="scheduler %s to be %s" % (name, role))

    def wait_agents_online(self, name, ids, timeout=15):
        def check():
            status, _, body = self.request(name, "GET", "/api/v1/agents")
            if status != 200:
                return False
            online = {a["id"] for a in body["agents"] if a["status"] == "online"}
            return set(ids) <= online
        wait_until(check, timeout, what="agents %s online on %s" % (ids, name))

    def wait_task_status(self, name, task_id, statuses, timeout=15):
        if isinstance(statuses, str):
            statuses = (statuses,)
        last = {}

        def check():
            t = self.get_task(name, task_id)
            if t:
                last["t"] = t
            return t if t is not None and t["status"] in statuses else None
        try:
            return wait_until(check, timeout, what="%s %s on %s" % (task_id, statuses, name))
        except AssertionError as e:
            raise AssertionError("%s; last seen: %s" % (e, last.get("t")))

    # --- agent logs ---------------------------------------------------------------------------

    def task_started(self, agent_id):
        return self.agents[agent_id].events("task_started")

    def started_pids(self, task_id):
        """pid recorded by a task command that starts with `echo $$ > pids/<id>`."""
        path = os.path.join(self.tmp, "pids", task_id)
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def pid_command(self, seconds):
        """A command that records its shell pid under tmp/pids/$DGPU_TASK_ID, then sleeps."""
        d = os.path.join(self.tmp, "pids")
        os.makedirs(d, exist_ok=True)
        return "echo $$ > %s/$DGPU_TASK_ID; sleep %s" % (d, seconds)


class Storm:
    """Client threads submitting continuously. Each thread posts to its current target; on a
    connection error or a 503 it moves to the other scheduler. Every 201 is recorded as
    (task_id, scheduler, monotonic time, token) where token is unique in the command."""

    def __init__(self, cluster, threads=4, targets=("a", "b"), pause=0.0, timeout=5.0):
        self.cluster = cluster
        self.n = threads
        self.targets = list(targets)
        self.pause = pause
        self.timeout = timeout
        self.acked = []
        self.errors = []   # (scheduler, mono time, status or exception text)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = []

    def start(self):
        for i in range(self.n):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, idx):
        clients = {n: self.cluster.client(n, self.timeout) for n in self.targets}
        which = 0
        k = 0
        while not self._stop.is_set():
            name = self.targets[which]
            token = "storm-%d-%d" % (idx, k)
            k += 1
            body = self.cluster.task_body("true # " + token, 1, "low")
            try:
                status, _, resp = clients[name].request("POST", "/api/v1/tasks", body)
            except (OSError, http.client.HTTPException) as e:
                with self._lock:
                    self.errors.append((name, time.monotonic(), repr(e)))
                which = (which + 1) % len(self.targets)
                time.sleep(0.02)
                continue
            now = time.monotonic()
            if status == 201:
                with self._lock:
                    self.acked.append((resp["task_id"], name, now, token))
            else:
                with self._lock:
                    self.errors.append((name, now, status))
                if status == 503:
                    which = (which + 1) % len(self.targets)
                time.sleep(0.02)
            if self.pause:
                time.sleep(self.pause)
        for c in clients.values():
            c.close()

    def first_ack(self, name, after=0.0):
        with self._lock:
            times = [t for (_, n, t, _) in self.acked if n == name and t >= after]
        return min(times) if times else None

    def count(self, name=None):
        with self._lock:
            return sum(1 for a in self.acked if name is None or a[1] == name)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)


class HaTestCase(unittest.TestCase):
    """Kills every process of self.cluster after each test; on a failure, prints the daemons'
    log tails and keeps the temporary directory."""

    cluster = None

    def run(self, result=None):
        if result is None:
            result = self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        try:
            return super().run(result)
        finally:
            failed = len(result.failures) + len(result.errors) > before
            if self.cluster is not None:
                if failed:
                    print("\n" + self.cluster.diagnostics())
                self.cluster.close(keep=failed)
                self.cluster = None
