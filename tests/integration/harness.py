"""Harness for the dgpu integration tests: runs the real dgpu-scheduler and dgpu-agent binaries on
loopback, talks to them over REST, and cleans up every process it started.

Python 3 standard library only. The binaries are taken from $DGPU_BIN_DIR (set by CTest), else
from <repo>/build/bin.

Process hygiene: every daemon runs in its own session (process group) and is SIGKILLed as a group
on teardown and at exit. Task processes started by an agent run in sessions of their own (the
process executor calls setsid()), so they are not in the agent's group: each agent is started with
the environment variable DGPU_IT_MARKER=<unique per cluster>, which its tasks inherit, and the
cleanup kills every process whose environment carries that marker.
"""

import atexit
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from dgpu_testlib import bin_dir, bin_path, free_port, pid_alive, wait_until  # noqa: E402,F401
import dgpu_harness  # noqa: E402
from dgpu_harness import http  # noqa: E402

BIN_DIR = bin_dir()
SCHEDULER_BIN = bin_path("dgpu-scheduler", must_exist=False)
AGENT_BIN = bin_path("dgpu-agent", must_exist=False)
CTL_BIN = bin_path("dgpuctl", must_exist=False)

API = "/api/v1"
FINISHED = ("success", "failed", "cancelled")
GPU_MODEL = "Tesla V100-SXM2-32GB"
KEEP_TMP = os.environ.get("DGPU_IT_KEEP_TMP") == "1"

_LIVE_CLUSTERS = set()


# ----------------------------------------------------------------------------------------------
# Small helpers


def pids_with_env(marker_key, marker_value):
    """Pids of the processes whose environment contains marker_key=marker_value."""
    needle = ("%s=%s" % (marker_key, marker_value)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            found.append(int(entry))
    return found


def read_text(path):
    """The file's text, or "" when it does not exist (yet)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def read_pid(path, timeout=5):
    """Waits for a pid file written by a task and returns the pid in it."""
    text = wait_until(lambda: read_text(path).strip(), timeout, what="pid file " + path)
    return int(text.split()[0])


def write_config(path, doc):
    """Writes a config. JSON is a subset of YAML, so the daemons read it as YAML."""
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


class EventStream:
    """A GET /api/v1/watch stream (Server-Sent Events), read frame by frame. Each frame is a dict:
    id (int or None), event (str), data (parsed JSON). Comment lines (keepalives) are counted in
    `comments`."""

    def __init__(self, base, path, headers=None, ca_file=None, timeout=10, deflate=False):
        import http.client
        import urllib.parse
        u = urllib.parse.urlsplit(base)
        if u.scheme == "https":
            self.conn = http.client.HTTPSConnection(
                u.hostname, u.port, timeout=timeout,
                context=ssl.create_default_context(cafile=ca_file))
        else:
            self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        headers = dict(headers or {})
        if deflate:
            headers["Accept-Encoding"] = "deflate"
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.headers = self.response.headers
        self.comments = 0
        self.body = self.response.read() if self.status != 200 else None
        # With Content-Encoding: deflate the body is one zlib stream that never ends.
        self._inflate = (zlib.decompressobj()
                         if self.headers.get("Content-Encoding") == "deflate" else None)
        self._pending = b""
        self.wire_bytes = 0  # Bytes of the body as sent (compressed or not).

    def _readline(self):
        while b"\n" not in self._pending:
            data = self.response.read1(65536)
            if not data:
                line, self._pending = self._pending, b""
                return line
            self.wire_bytes += len(data)
            self._pending += self._inflate.decompress(data) if self._inflate else data
        line, _, self._pending = self._pending.partition(b"\n")
        return line + b"\n"

    def next(self, timeout=5):
        """The next frame; socket.timeout (TimeoutError) when none comes within `timeout`."""
        self.conn.sock.settimeout(timeout)
        frame = {"id": None, "event": "message", "data": ""}
        seen = False
        while True:
            line = self._readline()
            if not line:
                raise EOFError("the watch stream ended")
            line = line.decode("utf-8").rstrip("\n")
            if line == "":
                if seen:
                    frame["data"] = json.loads(frame["data"]) if frame["data"] else None
                    return frame
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "id":
                frame["id"] = int(value)
            elif key in ("event", "data"):
                frame[key] = value
            elif key != "retry":
                raise AssertionError("unexpected SSE field %r" % line)
            seen = True

    def until(self, predicate, timeout=5, what="an event"):
        """Frames until one satisfies `predicate`; returns (that frame, the frames before it)."""
        deadline = time.monotonic() + timeout
        before = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no %s within %.1f s; got %r" % (what, timeout, before[-5:]))
            try:
                frame = self.next(left)
            except (TimeoutError, OSError) as e:
                raise AssertionError("no %s within %.1f s (%s); got %r" %
                                     (what, timeout, e, before[-5:])) from None
            if predicate(frame):
                return frame, before
            before.append(frame)

    def close(self):
        self.conn.close()


# ----------------------------------------------------------------------------------------------
# Task cgroups (executor.isolation)


def agent_cgroup_name(agent_id, work_dir):
    """The parent of an agent's task cgroups: dgpu-<node>-<FNV-1a of its work_dir>."""
    h = 2166136261
    for b in work_dir.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return "dgpu-%s-%08x" % (agent_id, h)


def own_cgroup_dirs(controllers=None):
    """This process's cgroup directories (agents inherit them): one per hierarchy; with
    `controllers`, those of the v1 hierarchies holding one of them, else the v2 one whose
    controllers include memory."""
    v1, v2 = [], []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if names.startswith("name="):
                    continue
                if names and (controllers is None or set(names.split(",")) & set(controllers)):
                    v1.append("/sys/fs/cgroup/" + names + path)
                elif not names:
                    v2 += [base + path for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")]
    except OSError:
        pass
    v1 = [d.rstrip("/") for d in v1 if os.path.isdir(d)]
    v2 = [d.rstrip("/") for d in v2 if os.path.isdir(d)]
    if controllers is None:
        return v1 + v2
    return v1 or [d for d in v2 if "memory" in read_text(d + "/cgroup.controllers").split()]


def remove_agent_cgroups(agent_id, work_dir):
    """What a killed agent left of its task cgroups: their processes killed, the cgroups
    removed (an agent that ends by itself removes them)."""
    name = agent_cgroup_name(agent_id, work_dir)
    for own in own_cgroup_dirs():
        for parent in (os.path.join(own, name), os.path.join(own, name + "-agent")):
            if not os.path.isdir(parent):
                continue
            for entry in os.listdir(parent):
                child = os.path.join(parent, entry)
                if not os.path.isdir(child):
                    continue
                deadline = time.monotonic() + 5
                while True:
                    try:
                        with open(os.path.join(child, "cgroup.procs")) as f:
                            pids = [int(x) for x in f.read().split()]
                        for pid in pids:
                            try:
                                os.kill(pid, signal.SIGKILL)
                            except ProcessLookupError:
                                pass
                        os.rmdir(child)
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.02)
            try:
                os.rmdir(parent)
            except OSError:
                pass


# ----------------------------------------------------------------------------------------------
# Daemons


class Daemon(dgpu_harness.Daemon):
    """One daemon process in its own process group, stdout and stderr to files in `log_dir`."""

    def __init__(self, name, argv, log_dir, env=None):
        super().__init__(name, argv, os.path.join(log_dir, name + ".out"),
                         stderr_path=os.path.join(log_dir, name + ".err"), env=env)
        self.stdout_path = self.log_path

    def kill_all(self):
        """SIGKILL to the whole group, the daemon included; reaped."""
        self.signal_group(signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


class Cluster:
    """A scheduler and its agents on loopback, all in one temporary directory."""

    def __init__(self, name="cluster"):
        for b in (SCHEDULER_BIN, AGENT_BIN):
            if not os.access(b, os.X_OK):
                if os.environ.get("DGPU_BIN_DIR"):  # Under CTest: the build is incomplete.
                    raise AssertionError("binary not built: %s" % b)
                raise unittest.SkipTest("binary not built: %s (set DGPU_BIN_DIR)" % b)
        self.tmp = tempfile.mkdtemp(prefix="dgpu-it-%s-" % name)
        self.marker = uuid.uuid4().hex
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.base = "http://127.0.0.1:%d" % self.http_port
        self.scheduler = None
        self.scheduler_overrides = {}
        self.agents = {}  # id -> Daemon
        self.agent_configs = {}
        self.old_daemons = []  # killed/replaced incarnations, for their logs
        self.token = None  # Sent as "Authorization: Bearer" by request() and get() when set.
        self.ca_file = None  # Verifies the scheduler's HTTPS certificate (use_tls).
        self.tls_certs = None  # use_tls: the directory of make-dev-certs.sh's files
        self.tls_server = None  # use_tls: the scheduler's server.tls
        _LIVE_CLUSTERS.add(self)

    # -- configuration ------------------------------------------------------------------------

    def scheduler_config(self, heartbeat_timeout=3, online_percent=0.7, schedule_interval=1,
                         extra=None):
        doc = {
            "server": {"grpc_address": "127.0.0.1:%d" % self.grpc_port,
                       "http_address": "127.0.0.1:%d" % self.http_port},
            "scheduler": {"role": "master", "schedule_interval": schedule_interval,
                          "snapshot_interval": 30, "id": "it-scheduler"},
            "quota": {"online_percent": online_percent,
                      "batch_percent": round(1.0 - online_percent, 6)},
            "agent": {"heartbeat_timeout": heartbeat_timeout},
            "storage": {"snapshot_dir": os.path.join(self.tmp, "state")},
            "logging": {"level": "info", "format": "text", "output": "stdout"},
        }
        if self.tls_server:
            doc["server"]["tls"] = dict(self.tls_server)
        for section, values in (extra or {}).items():
            doc.setdefault(section, {}).update(values)
        return doc

    def agent_config(self, agent_id, gpus=4, heartbeat_interval=0.5, kill_grace=1, extra=None):
        doc = {
            "agent": {"id": agent_id, "heartbeat_interval": heartbeat_interval},
            "scheduler": {"master_address": "127.0.0.1:%d" % self.grpc_port,
                          "connection_timeout": 2, "retry_interval": 0.2,
                          "max_retry_interval": 1},
            "gpu": {"detection_method": "fake", "health_check_interval": 30,
                    "fake": {"count": gpus, "model": GPU_MODEL, "memory_mb": 32768}},
            # Tasks share the machine (no cgroups): a test that kills its agents leaves no
            # cgroups behind; the isolation tests ask for them.
            "executor": {"execution_method": "process", "work_dir": self.work_dir(agent_id),
                         "kill_grace_period": kill_grace, "isolation": "none"},
            "logging": {"level": "info", "format": "text", "output": "stdout"},
        }
        if self.tls_server:
            doc["scheduler"]["tls"] = self.agent_tls(agent_id)
        for section, values in (extra or {}).items():
            doc.setdefault(section, {}).update(values)
        return doc

    def work_dir(self, agent_id):
        return os.path.join(self.tmp, "agent-" + agent_id)

    def task_log(self, agent_id, task_id):
        return os.path.join(self.work_dir(agent_id), task_id + ".log")

    # -- processes ----------------------------------------------------------------------------

    def start_scheduler(self, wait=True, **kwargs):
        if kwargs or not self.scheduler_overrides:
            self.scheduler_overrides = kwargs
        path = os.path.join(self.tmp, "scheduler.yaml")
        write_config(path, self.scheduler_config(**self.scheduler_overrides))
        if self.scheduler is not None:
            self.old_daemons.append(self.scheduler)
        n = sum(1 for d in self.old_daemons if d.name.startswith("scheduler")) + 1
        self.scheduler = Daemon("scheduler.%d" % n, [SCHEDULER_BIN, "--config", path],
                                self.tmp).start()
        if wait:
            self.wait_ready()
        return self.scheduler

    def start_agent(self, agent_id, **kwargs):
        if kwargs or agent_id not in self.agent_configs:
            self.agent_configs[agent_id] = kwargs
        path = os.path.join(self.tmp, "agent-%s.yaml" % agent_id)
        write_config(path, self.agent_config(agent_id, **self.agent_configs[agent_id]))
        env = dict(os.environ)
        env["DGPU_IT_MARKER"] = self.marker
        old = self.agents.get(agent_id)
        if old is not None:
            self.old_daemons.append(old)
        n = sum(1 for d in self.old_daemons if d.name.startswith("agent-%s." % agent_id)) + 1
        d = Daemon("agent-%s.%d" % (agent_id, n), [AGENT_BIN, "--config", path], self.tmp,
                   env=env).start()
        self.agents[agent_id] = d
        return d

    def start_agent_from(self, name, doc, wrapper=(), track_as=None):
        """An agent from a config `doc` the test made itself (a clone of another agent's, one
        in another network namespace), run under `wrapper` (an argv prefix), with the cluster's
        marker, and stopped with the cluster. `track_as`: its id in self.agents (checked by
        wait_agents_online); else it is kept with the old daemons."""
        path = os.path.join(self.tmp, "%s.yaml" % name)
        write_config(path, doc)
        env = dict(os.environ)
        env["DGPU_IT_MARKER"] = self.marker
        d = Daemon(name, list(wrapper) + [AGENT_BIN, "--config", path], self.tmp,
                   env=env).start()
        if track_as is None:
            self.old_daemons.append(d)
        else:
            self.agents[track_as] = d
        return d

    def start(self, agents=2, gpus=4, agent_kwargs=None, **scheduler_kwargs):
        """Scheduler plus agents a1..aN; returns once all agents are online."""
        self.start_scheduler(**scheduler_kwargs)
        for i in range(1, agents + 1):
            self.start_agent("a%d" % i, gpus=gpus, **(agent_kwargs or {}))
        self.wait_agents_online(["a%d" % i for i in range(1, agents + 1)])
        return self

    def wait_ready(self, timeout=15):
        def ready():
            if self.scheduler and not self.scheduler.running():
                raise AssertionError("scheduler exited with %s\n%s"
                                     % (self.scheduler.proc.returncode,
                                        self.scheduler.log_tails()))
            try:
                return self.get("/readyz").status == 200
            except OSError:
                return False
        wait_until(ready, timeout, what="scheduler /readyz")

    def agents_view(self):
        r = self.get(API + "/agents")
        if r.status != 200:
            return {}
        return {a["id"]: a for a in r.json["agents"]}

    def wait_agents_online(self, ids, timeout=15):
        def online():
            for i in ids:
                d = self.agents.get(i)
                if d is not None and not d.running():
                    raise AssertionError("agent %s exited with %s\n%s"
                                         % (i, d.proc.returncode, d.log_tails()))
            view = self.agents_view()
            return all(view.get(i, {}).get("status") == "online" for i in ids)
        wait_until(online, timeout, what="agents %s online" % ids)

    def task_processes(self):
        """Pids of the live processes started by this cluster's agents (tasks and children)."""
        daemons = {d.pid for d in [self.scheduler] + list(self.agents.values()) if d}
        return [p for p in pids_with_env("DGPU_IT_MARKER", self.marker)
                if p not in daemons and pid_alive(p)]

    def kill_task_processes(self):
        for _ in range(3):
            pids = pids_with_env("DGPU_IT_MARKER", self.marker)
            if not pids:
                return
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)

    def shutdown(self):
        """Kills everything this cluster started. Safe to call twice."""
        daemons = [self.scheduler] + list(self.agents.values()) + self.old_daemons
        for d in daemons:
            if d is not None:
                d.kill_all()
        self.kill_task_processes()
        for agent_id in self.agent_configs:
            remove_agent_cgroups(agent_id, self.work_dir(agent_id))
        _LIVE_CLUSTERS.discard(self)

    def remove_files(self):
        if not KEEP_TMP:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def log_tails(self, lines=60):
        daemons = self.old_daemons + [self.scheduler] + list(self.agents.values())
        return "".join(d.log_tails(lines) for d in daemons if d is not None)

    # -- REST ---------------------------------------------------------------------------------

    def use_tls(self, certs, client_certificates=True):
        """Turns on server.tls with the certificates of scripts/make-dev-certs.sh in `certs`
        (scheduler.crt, agent-<id>.crt), REST over HTTPS and agents over TLS with their own
        certificate; before start_scheduler and start_agent."""
        tls = {"cert_file": os.path.join(certs, "scheduler.crt"),
               "key_file": os.path.join(certs, "scheduler.key")}
        if client_certificates:
            tls["client_ca_file"] = os.path.join(certs, "ca.crt")
        self.tls_certs = certs
        self.tls_server = tls
        self.ca_file = os.path.join(certs, "ca.crt")
        self.base = "https://127.0.0.1:%d" % self.http_port

    def agent_tls(self, agent_id, cert_of=None):
        """scheduler.tls of an agent: the CA, and the certificate made for `cert_of` (default:
        agent_id itself; None when no such certificate exists)."""
        name = cert_of or agent_id
        tls = {"ca_file": self.ca_file}
        cert = os.path.join(self.tls_certs, "agent-%s.crt" % name)
        if os.path.exists(cert):
            tls.update(cert_file=cert, key_file=os.path.join(self.tls_certs, "agent-%s.key" % name))
        return tls

    def _with_token(self, kw):
        if self.ca_file is not None:
            kw.setdefault("ca_file", self.ca_file)
        if self.token is not None:
            headers = dict(kw.get("headers") or {})
            headers.setdefault("Authorization", "Bearer " + self.token)
            kw["headers"] = headers
        return kw

    def request(self, method, path, body=None, **kw):
        return http(self.base, method, path, body=body, **self._with_token(kw))

    def get(self, path, **kw):
        return http(self.base, "GET", path, **self._with_token(kw))

    def watch(self, query="", headers=None, timeout=10, deflate=False):
        """Opens GET /api/v1/watch<query> (an EventStream); `deflate` asks for it compressed."""
        kw = self._with_token({"headers": headers})
        return EventStream(self.base, API + "/watch" + query, headers=kw.get("headers"),
                           ca_file=kw.get("ca_file"), timeout=timeout, deflate=deflate)

    def submit(self, command, gpu_count=1, priority="high", expect=201, **fields):
        body = {"priority": priority, "gpu_count": gpu_count, "command": command}
        body.update(fields)
        r = self.request("POST", API + "/tasks", body)
        if expect is not None and r.status != expect:
            raise AssertionError("submit %r: expected %d, got %r" % (body, expect, r))
        return r.json["task_id"] if r.status == 201 else r

    def task(self, task_id):
        r = self.get(API + "/tasks/" + task_id)
        if r.status != 200:
            raise AssertionError("GET task %s: %r" % (task_id, r))
        return r.json

    def tasks(self, query=""):
        r = self.get(API + "/tasks" + query)
        if r.status != 200:
            raise AssertionError("GET tasks%s: %r" % (query, r))
        return r.json

    def cancel(self, task_id):
        return self.request("DELETE", API + "/tasks/" + task_id)

    def gpus(self):
        return self.get(API + "/gpus").json

    def quota(self):
        return self.get(API + "/quota").json

    def set_quota(self, online_percent):
        return self.request("PUT", API + "/quota", {"online_percent": online_percent})

    def wait_status(self, task_id, statuses, timeout=15):
        if isinstance(statuses, str):
            statuses = (statuses,)

        def check():
            t = self.task(task_id)
            return t if t["status"] in statuses else None
        return wait_until(check, timeout, interval=0.05,
                          what="%s to reach %s" % (task_id, "/".join(statuses)))

    def wait_finished(self, task_id, timeout=15):
        return self.wait_status(task_id, FINISHED, timeout)


def _cleanup_all():
    for c in list(_LIVE_CLUSTERS):
        c.shutdown()


atexit.register(_cleanup_all)


def _on_signal(signum, frame):
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    try:
        signal.signal(_sig, _on_signal)
    except (ValueError, OSError):
        pass


# ----------------------------------------------------------------------------------------------
# A network namespace joined to this one by a veth pair: a peer that is not loopback.


def ip(*args):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True)


class NetNs:
    """Namespace `dgpu-it-<tag>` holding `remote` (here: `local`), /30 addresses on a veth pair.
    Needs root and iproute2 (create() says why not). cut() and heal() take the host's end of
    the pair down and up: a partition, with both ends' processes still running. Give each test
    module its own `local`/`remote` pair: modules run in parallel."""

    def __init__(self, tag, local, remote):
        self.ns = "dgpu-it-" + tag
        self.veth = "dgv" + tag
        self.local, self.remote = local, remote

    def create(self, test):
        if os.geteuid() != 0 or shutil.which("ip") is None:
            test.skipTest("needs root and iproute2 to make a network namespace")
        if ip("netns", "add", self.ns).returncode != 0:
            test.skipTest("cannot create a network namespace here")
        test.addCleanup(ip, "netns", "del", self.ns)
        for cmd in (["link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "p"],
                    ["link", "set", self.veth + "p", "netns", self.ns],
                    ["addr", "add", self.local + "/30", "dev", self.veth],
                    ["link", "set", self.veth, "up"],
                    ["-n", self.ns, "addr", "add", self.remote + "/30", "dev", self.veth + "p"],
                    ["-n", self.ns, "link", "set", self.veth + "p", "up"]):
            r = ip(*cmd)
            test.assertEqual(r.returncode, 0, (cmd, r.stderr))
        test.addCleanup(ip, "link", "del", self.veth)
        return self

    def wrapper(self):
        """The argv prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.ns]

    def cut(self):
        r = ip("link", "set", self.veth, "down")
        assert r.returncode == 0, r.stderr

    def heal(self):
        r = ip("link", "set", self.veth, "up")
        assert r.returncode == 0, r.stderr


# ----------------------------------------------------------------------------------------------
# Test base class


class ClusterTestCase(unittest.TestCase):
    """A fresh cluster per test (self.c), torn down afterwards; on failure the daemons' log tails
    are printed. Subclasses set AGENTS / GPUS / SCHEDULER / AGENT_KWARGS, or override
    start_cluster()."""

    AGENTS = 2
    GPUS = 4
    SCHEDULER = {}
    AGENT_KWARGS = {}

    def setUp(self):
        self.c = Cluster(self.id().rsplit(".", 1)[-1])
        self.addCleanup(self._teardown_cluster)
        self.start_cluster()

    def start_cluster(self):
        self.c.start(agents=self.AGENTS, gpus=self.GPUS, agent_kwargs=self.AGENT_KWARGS,
                     **self.SCHEDULER)

    def _failed(self):
        outcome = getattr(self, "_outcome", None)
        if outcome is None:
            return False
        if not getattr(outcome, "success", True):
            return True
        errors = getattr(outcome, "errors", None)  # Python <= 3.10
        if errors:
            return any(exc is not None for _, exc in errors)
        result = getattr(outcome, "result", None)
        if result is not None:
            return any(t is self for t, _ in list(result.errors) + list(result.failures))
        return False

    def _teardown_cluster(self):
        failed = self._failed()
        self.c.shutdown()
        if failed:
            sys.stderr.write("\n==== daemon logs for %s (%s) ====\n%s\n"
                             % (self.id(), self.c.tmp, self.c.log_tails()))
            sys.stderr.flush()
        self.c.remove_files()

    # -- assertions ---------------------------------------------------------------------------

    def assertApiError(self, r, status, code, mentions=None):
        """r is an HttpResult carrying {"error": {"code", "message"}} with this status."""
        self.assertEqual(r.status, status, r)
        self.assertIsInstance(r.json, dict, r)
        self.assertEqual(set(r.json.keys()), {"error"}, r)
        err = r.json["error"]
        self.assertIsInstance(err, dict, r)
        self.assertEqual(set(err.keys()), {"code", "message"}, r)
        self.assertEqual(err["code"], code, r)
        self.assertIsInstance(err["message"], str)
        self.assertTrue(err["message"], r)
        if mentions is not None:
            self.assertIn(mentions, err["message"], r)
        ctype = r.headers.get("Content-Type", "")
        self.assertTrue(ctype.startswith("application/json"), ctype)

    def assertGpusConsistent(self):
        """No GPU is held by two tasks; every busy GPU is held by a running task that lists it,
        and every running task's GPUs are busy and point back at it."""
        gpus = self.c.gpus()["gpus"]
        tasks = self.c.tasks("?limit=1000")["tasks"]
        by_id = {t["task_id"]: t for t in tasks}
        held = {}
        for g in gpus:
            if g["current_task"] is not None:
                self.assertNotIn(g["id"], held)
                held[g["id"]] = g["current_task"]
                t = by_id.get(g["current_task"])
                self.assertIsNotNone(t, "GPU %s held by unknown task %s" % (g["id"],
                                                                           g["current_task"]))
                # A cancelled task keeps its GPUs until its agent confirms the stop.
                self.assertIn(t["status"], ("running", "cancelled"), (g, t))
                self.assertIn(g["id"], t["allocated_gpus"])
        for t in tasks:
            if t["status"] == "running":
                for gid in t["allocated_gpus"]:
                    self.assertEqual(held.get(gid), t["task_id"], (gid, t))
        return held
