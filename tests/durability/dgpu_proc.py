"""Small helpers for the durability tests: start the real dgpu daemons, talk REST to them.

Python 3 standard library only. The binaries are looked up in $DGPU_BIN_DIR (set by CTest to
the directory of dgpu-scheduler), else in build/bin of the repository.
"""

import http.client
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from dgpu_testlib import bin_path, free_port, wait_until  # noqa: E402
import dgpu_harness  # noqa: E402
from dgpu_harness import to_yaml  # noqa: E402,F401


class Http(dgpu_harness.Http):
    """A kept-alive connection whose requests answer (status, parsed JSON or text). A `body` of
    bytes or str is sent as it is, as JSON."""

    def request(self, method, path, body=None, headers=None):
        hdrs = dict(headers or {})
        if isinstance(body, (bytes, str)):
            hdrs.setdefault("Content-Type", "application/json")
            r = super().request(method, path, raw=body, headers=hdrs)
        else:
            r = super().request(method, path, body=body, headers=hdrs)
        return r.status, r.parsed


def http_once(port, method, path, body=None, timeout=10.0):
    c = Http(port, timeout)
    try:
        return c.request(method, path, body)
    finally:
        c.close()


def submit_body(command="true", gpu_count=1, priority="low", **extra):
    body = {"priority": priority, "gpu_count": gpu_count, "command": command}
    body.update(extra)
    return body


class Daemon(dgpu_harness.Daemon):
    """A dgpu daemon (`name`, the binary) with its config in workdir/<tag>.yaml, its stdout in
    <tag>.log (kept across restarts) and its stderr in <tag>.err (of the last start). It stays
    in the test's process group."""

    def __init__(self, name, workdir, config, tag):
        super().__init__(name, None, os.path.join(workdir, tag + ".log"),
                         stderr_path=os.path.join(workdir, tag + ".err"), new_session=False)
        self.workdir = workdir
        self.config = config
        self.tag = tag
        self.config_path = os.path.join(workdir, tag + ".yaml")
        self.err_path = self.stderr_path

    def write_config(self):
        with open(self.config_path, "w") as f:
            f.write(to_yaml(self.config))

    def start(self):
        self.write_config()
        return super().start([bin_path(self.name), "--config", self.config_path],
                             truncate_stderr=True)

    def run_to_exit(self, timeout=20):
        """Starts the daemon and waits for it to exit; returns (rc, stderr text)."""
        self.start()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None, self.stderr()
        return rc, self.stderr()

    def stderr(self):
        return self.stderr_text()

    def log(self):
        return self.log_text()

    def alive(self):
        return self.running()

    def kill(self):
        """SIGKILL and reap."""
        self.kill9()

    def stop(self, timeout=15):
        """SIGTERM, wait; SIGKILL if it does not exit. Returns the exit code."""
        return super().stop(timeout=timeout, group=False)


class Scheduler(Daemon):
    def __init__(self, workdir, state_dir=None, http_port=None, grpc_port=None, tag="sched",
                 **sections):
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.state_dir = state_dir or os.path.join(workdir, "state")
        config = {
            "server": {"grpc_address": "127.0.0.1:%d" % self.grpc_port,
                       "http_address": "127.0.0.1:%d" % self.http_port},
            "storage": {"snapshot_dir": self.state_dir},
            "logging": {"level": "info", "format": "text", "output": "stdout"},
        }
        for key, value in sections.items():
            config.setdefault(key, {}).update(value)
        super().__init__("dgpu-scheduler", workdir, config, tag)

    def wait_ready(self, timeout=15.0):
        """Waits until /healthz answers; raises with the daemon's stderr if it exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("dgpu-scheduler exited with %s: %s" %
                                   (self.proc.returncode, self.stderr().strip()))
            try:
                status, _ = http_once(self.http_port, "GET", "/healthz", timeout=1.0)
                if status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.01)
        raise RuntimeError("dgpu-scheduler did not answer /healthz within %.0fs" % timeout)

    def http(self, method, path, body=None, timeout=10.0):
        return http_once(self.http_port, method, path, body, timeout)

    def metrics(self):
        status, text = self.http("GET", "/metrics")
        if status != 200:
            raise RuntimeError("/metrics: %s" % status)
        values = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                pass
        return values


class Agent(Daemon):
    def __init__(self, workdir, scheduler, agent_id, gpus=4, heartbeat=0.5, tag=None):
        config = {
            "agent": {"id": agent_id, "heartbeat_interval": heartbeat},
            "scheduler": {"master_address": "127.0.0.1:%d" % scheduler.grpc_port,
                          "retry_interval": 0.1, "max_retry_interval": 0.5},
            "gpu": {"detection_method": "fake", "fake": {"count": gpus}},
            "executor": {"work_dir": os.path.join(workdir, agent_id), "kill_grace_period": 1,
                         "isolation": "none"},
            "logging": {"level": "info", "format": "text", "output": "stdout"},
        }
        super().__init__("dgpu-agent", workdir, config, tag or agent_id)
        self.agent_id = agent_id

    def events(self, event):
        """[(task_id, line)] of `event=<event>` lines in the agent's log."""
        out = []
        pattern = re.compile(r"event=%s\b.*?\btask_id=(\S+)" % re.escape(event))
        for line in self.log().splitlines():
            m = pattern.search(line)
            if m:
                out.append((m.group(1), line))
        return out


def task_number(task_id):
    return int(task_id.rsplit("-", 1)[1])


PRELOAD_COLUMNS = ("id, name, priority, gpu_count, gpu_model, command, env, timeout_seconds, "
                   "image, status, queue_seq, allocation, attempts, exit_code, error, created_at, "
                   "started_at, finished_at, stopping")


def preload_pending(db_path, n):
    """Writes n pending tasks (task-1 .. task-n, every fourth one high) into a stopped
    scheduler's database, straight into SQLite: the fast way to a large queue."""
    created = int(time.time() * 1e6)
    rows = ((i, "bulk-%d" % i, "high" if i % 4 == 0 else "low", 1 + i % 2, "", "true", "[]", 0,
             "", "pending", i, "[]", 0, 0, "", created, 0, 0, 0) for i in range(1, n + 1))
    con = sqlite3.connect(db_path)
    try:
        with con:
            con.executemany("INSERT INTO tasks (%s) VALUES (%s)"
                            % (PRELOAD_COLUMNS, ", ".join("?" * 19)), rows)
            con.execute("UPDATE meta SET value = ? WHERE key = 'next_task_number'", (n + 1,))
            # The scheduler keeps the counts its pages show as it writes; rows written here
            # are counted here.
            con.execute("DELETE FROM task_counts")
            con.execute("INSERT INTO task_counts (status, priority, n) "
                        "SELECT status, priority, count(*) FROM tasks GROUP BY status, priority")
    finally:
        con.close()


def start_preloaded(sched, n, timeout=120):
    """Starts `sched` on its database with n pending tasks written into it (preload_pending):
    a first start creates the database, the tasks go in while it is stopped."""
    sched.start()
    sched.wait_ready()
    if sched.stop() != 0:
        raise RuntimeError("dgpu-scheduler did not stop cleanly: %s" % sched.stderr().strip())
    preload_pending(os.path.join(sched.state_dir, "dgpu.db"), n)
    sched.start()
    sched.wait_ready(timeout=timeout)


def start_submitter(sched, at_least=10):
    """A RepeatingClient submitting one-GPU high tasks to `sched`, started and past `at_least`
    acknowledgements."""
    client = RepeatingClient(sched.http_port, "POST", "/api/v1/tasks",
                             submit_body(gpu_count=1, priority="high"))
    client.start()
    wait_until(lambda: len(client.acked) >= at_least, 30.0, what="submissions")
    return client


class RepeatingClient(threading.Thread):
    """Repeats one request on a keep-alive connection, recording (sent, latency, status)."""

    def __init__(self, port, method, path, body=None):
        super().__init__(daemon=True)
        self.http = Http(port, timeout=60.0)
        self.method, self.path, self.body = method, path, body
        self.samples = []
        self.acked = []  # (task number, wall time of the 201), for submissions.
        self.stop = False

    def run(self):
        while not self.stop:
            sent = time.time()
            status, body = self.http.request(self.method, self.path, self.body)
            done = time.time()
            self.samples.append((sent, done - sent, status))
            if status == 201:
                self.acked.append((task_number(body["task_id"]), done))
        self.http.close()


class TempDir:
    def __init__(self, prefix):
        base = os.environ.get("DGPU_TEST_TMP") or None
        self.path = tempfile.mkdtemp(prefix=prefix, dir=base)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)


def can_mount(where):
    """(True, "") when a tmpfs can be mounted at `where`, else (False, reason)."""
    if os.geteuid() != 0:
        return False, "mount needs root (running as uid %d)" % os.geteuid()
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return False, "mount/umount not installed"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", where],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return False, "mount -t tmpfs not permitted: " + (r.stderr.strip() or r.stdout.strip())
    subprocess.run(["umount", where], capture_output=True)
    return True, ""


def mount_tmpfs(where, options):
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", where], check=True,
                   capture_output=True)


def umount(where):
    for _ in range(50):
        r = subprocess.run(["umount", where], capture_output=True, text=True)
        if r.returncode == 0 or "not mounted" in r.stderr:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", where], capture_output=True)
