"""`make run`: the one-command local cluster, started for real, used, and stopped with SIGINT.

Runs `make run` from the repository root (dependencies present and build up to date make its
first two steps no-ops), on free ports and a temporary state directory, submits a task with
dgpuctl, waits for it to succeed, then sends SIGINT to the whole foreground process group as a
terminal's Ctrl-C would, and checks that no process of the cluster is left.
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("DGPU_BIN_DIR", os.path.join(REPO, "build", "bin"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=2) as r:
        return json.loads(r.read())


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - keep polling until the deadline
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def processes_with(marker):
    """Pids whose environment holds `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue
    return found


class MakeRunTest(unittest.TestCase):
    def test_make_run_serves_a_task_and_stops_cleanly_on_sigint(self):
        tmp = tempfile.mkdtemp(prefix="dgpu-make-run-")
        http, grpc = free_port(), free_port()
        marker = f"DGPU_MAKE_RUN_TEST={os.getpid()}-{http}"
        env = dict(os.environ, DGPU_BIN_DIR=BIN, DGPU_HTTP_PORT=str(http),
                   DGPU_GRPC_PORT=str(grpc), DGPU_VAR_DIR=os.path.join(tmp, "var"))
        env[marker.split("=")[0]] = marker.split("=")[1]
        log = open(os.path.join(tmp, "make-run.log"), "w")
        proc = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=REPO, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{http}"
            wait_for(lambda: len([a for a in get_json(base + "/api/v1/agents")["agents"]
                                  if a["status"] == "online"]) == 2, 120, "two agents online")
            gpus = get_json(base + "/api/v1/gpus")
            self.assertEqual(gpus["total"], 8)
            self.assertEqual(gpus["idle"], 8)
            ctl = os.path.join(BIN, "dgpuctl")
            out = subprocess.run([ctl, "--server", base, "submit", "--gpus", "2", "--priority",
                                  "high", "--", "echo $CUDA_VISIBLE_DEVICES"],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            task_id = out.stdout.strip()
            self.assertRegex(task_id, r"^task-\d+$")
            waited = subprocess.run([ctl, "--server", base, "wait", task_id, "--timeout", "60s"],
                                    capture_output=True, text=True, timeout=90)
            self.assertEqual(waited.returncode, 0, waited.stdout + waited.stderr)
            task = get_json(f"{base}/api/v1/tasks/{task_id}")
            self.assertEqual(task["status"], "success")
            self.assertEqual(len(task["allocated_gpus"]), 2)
            logs = subprocess.run([ctl, "--server", base, "logs", task_id], capture_output=True,
                                  text=True, timeout=30)
            self.assertEqual((logs.returncode, logs.stdout), (0, "0,1\n"), logs.stderr)
            with urllib.request.urlopen(base + "/ui/", timeout=10) as page:
                self.assertEqual(page.status, 200)
                self.assertIn(b'<script type="module" src="app.js">', page.read())
            self.assertGreater(len(processes_with(marker)), 2)  # make, script, daemons
            # Ctrl-C: SIGINT to the foreground process group.
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
            wait_for(lambda: not processes_with(marker), 30, "every cluster process to exit")
            with self.assertRaises(OSError):
                get_json(base + "/healthz")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            for pid in processes_with(marker):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            log.close()
            with open(os.path.join(tmp, "make-run.log")) as f:
                output = f.read()
            if "dgpu local cluster is up" not in output:
                print(output[-4000:])
            self.assertIn("dgpu local cluster is up", output)
            self.assertIn("Dashboard: http://127.0.0.1:%d/ui/" % http, output)


if __name__ == "__main__":
    unittest.main()
