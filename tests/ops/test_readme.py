"""The README is a contract: its quick start walked as a newcomer walks it.

From a copy of the repository's layout (scripts/, test-local/ and build/bin) in a temporary
folder, with the default relative directories (state under ./var/), on free ports:
- the local cluster of `make run` (scripts/run-local-cluster.sh, what `make run` starts once
  deps and build are done; tests/ops/test_make_run.py covers the make part), then every line of
  the README's tour run as written, in one shell, with the built dgpuctl; the dashboard answers;
- the single-machine layout of test-local/, started with the README's two commands, then its
  curl lines.
The tours of README.md and README_CN.md must hold the same commands.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest
import urllib.request

from test_make_run import free_port, get_json, processes_with, wait_for

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("DGPU_BIN_DIR", os.path.join(REPO, "build", "bin"))


def sh_block(readme, after):
    """The first ```sh block after the line that starts with `after`."""
    with open(os.path.join(REPO, readme), encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n" + after)
    m = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    return m.group(1)


def commands(block):
    """The block's commands without comments and blank lines."""
    out = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line) if not line.startswith("#") else ""
        if line.strip():
            out.append(line.rstrip())
    return out


class ReadmeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dgpu-readme-")
        self.root = os.path.join(self.tmp, "dgpu")
        os.makedirs(os.path.join(self.root, "build"))
        for d in ("scripts", "test-local"):
            shutil.copytree(os.path.join(REPO, d), os.path.join(self.root, d))
        os.symlink(BIN, os.path.join(self.root, "build", "bin"))
        self.http, self.grpc = free_port(), free_port()
        self.base = "http://127.0.0.1:%d" % self.http
        self.marker = "DGPU_README_TEST=%d-%d" % (os.getpid(), self.http)
        self.env = dict(os.environ, DGPU_SERVER=self.base)
        self.env.pop("DGPU_VAR_DIR", None)
        self.env.pop("DGPU_BIN_DIR", None)
        key, value = self.marker.split("=")
        self.env[key] = value
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pid in processes_with(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait_for(lambda: not processes_with(self.marker), 30, "every process of the test to exit")
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, argv, log, env=None):
        out = open(os.path.join(self.tmp, log), "w")
        p = subprocess.Popen(argv, cwd=self.root, env=env or self.env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.procs.append(p)
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name), errors="replace") as f:
            return f.read()

    def agents_online(self, n):
        wait_for(lambda: len([a for a in get_json(self.base + "/api/v1/agents")["agents"]
                              if a["status"] == "online"]) == n, 60, "%d agents online" % n)

    def run_shell(self, lines, timeout):
        """Runs `lines` in one bash (errexit, pipefail) in the copy; each line's output is
        returned under the line, in order."""
        script = ["set -eo pipefail"]
        for i, line in enumerate(lines):
            script.append("printf '\\n@@%d@@\\n'" % i)  # After output without a newline too.
            script.append(line)
        out = subprocess.run(["bash", "-c", "\n".join(script)], cwd=self.root, env=self.env,
                             capture_output=True, text=True, timeout=timeout)
        self.assertEqual(out.returncode, 0, "the walk stopped:\n%s\n%s" % (out.stdout, out.stderr))
        parts = re.split(r"\n@@(\d+)@@\n", out.stdout)
        return [parts[i + 1] for i in range(1, len(parts), 2)]

    def test_tour_on_the_local_cluster_with_relative_directories(self):
        tour = sh_block("README.md", "## A five-minute tour")
        self.assertEqual(commands(tour), commands(sh_block("README_CN.md", "## 五分钟上手")))
        env = dict(self.env, DGPU_HTTP_PORT=str(self.http), DGPU_GRPC_PORT=str(self.grpc))
        self.start(["bash", "scripts/run-local-cluster.sh"], "cluster.log", env)
        self.agents_online(2)

        lines = commands(tour)
        # The one line that runs until Ctrl-C: its first screen, then an interrupt.
        watch = lines.index("dgpuctl get tasks --watch")
        lines[watch] = "timeout -s INT 3 dgpuctl get tasks --watch || test $? -eq 124"
        out = dict(zip(lines, self.run_shell(lines, timeout=120)))

        task_id = out['dgpuctl get task "$id"']
        self.assertRegex(task_id, r"task-1\b")
        self.assertEqual(out['dgpuctl wait "$id" && echo done'].splitlines()[-1], "done")
        types = [l.split()[1] for l in out['dgpuctl events "$id"'].splitlines()[1:]]
        self.assertEqual(types, ["submitted", "scheduled", "started", "finished"])
        self.assertEqual(out['dgpuctl logs "$id"'], "0,1\n")
        self.assertIn("task-1", out[lines[watch]])
        self.assertEqual(out['dgpuctl cancel "$id2" --grace 5'], "task-2 cancelled\n")
        long_task = get_json(self.base + "/api/v1/tasks/task-2")
        self.assertEqual(long_task["name"], "long")
        wait_for(lambda: get_json(self.base + "/api/v1/tasks/task-2")["status"] == "cancelled",
                 30, "the long task cancelled")
        # State and logs where the README says: under ./var/ of the folder it was started in.
        for path in ("var/local/scheduler", "var/local/agent-1", "var/local/scheduler.log"):
            self.assertTrue(os.path.exists(os.path.join(self.root, path)), path)
        with urllib.request.urlopen(self.base + "/ui/", timeout=10) as page:
            self.assertEqual(page.status, 200)
            self.assertIn(b'<script type="module" src="app.js">', page.read())
        self.assertIn("Dashboard: %s/ui/" % self.base, self.log("cluster.log"))

    def test_single_machine_layout_and_curl(self):
        for name in ("scheduler.yaml", "agent.yaml"):
            path = os.path.join(self.root, "test-local", name)
            with open(path) as f:
                text = f.read()
            text = text.replace("127.0.0.1:8080", "127.0.0.1:%d" % self.http)
            text = text.replace("127.0.0.1:9090", "127.0.0.1:%d" % self.grpc)
            with open(path, "w") as f:
                f.write(text)
        start = commands(sh_block("README.md", "The original layout of a single machine"))
        self.assertEqual(start, ["./build/bin/dgpu-scheduler --config test-local/scheduler.yaml",
                                 "./build/bin/dgpu-agent --config test-local/agent.yaml"])
        self.start(start[0].split(), "scheduler.log")
        wait_for(lambda: get_json(self.base + "/healthz") is not None, 30, "the scheduler")
        self.start(start[1].split(), "agent.log")
        self.agents_online(1)

        curl = [l.replace("127.0.0.1:8080", "127.0.0.1:%d" % self.http)
                for l in commands(sh_block("README.md", "The same with curl"))]
        # The POST spans two lines.
        curl = [curl[0] + "\n" + curl[1]] + curl[2:]
        out = self.run_shell(curl, timeout=60)
        created = json.loads(out[0])
        self.assertEqual((created["task_id"], created["status"]), ("task-1", "pending"))
        self.assertEqual(json.loads(out[1])["task_id"], "task-1")
        self.assertIn("dgpu_", out[3])

        ctl = os.path.join(self.root, "build", "bin", "dgpuctl")
        sub = subprocess.run([ctl, "submit", "--gpus", "2", "--priority", "high", "--",
                              "echo $CUDA_VISIBLE_DEVICES"], cwd=self.root, env=self.env,
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(sub.returncode, 0, sub.stderr)
        task = sub.stdout.strip()
        waited = subprocess.run([ctl, "wait", task, "--timeout", "60s"], cwd=self.root,
                                env=self.env, capture_output=True, text=True, timeout=90)
        self.assertEqual(waited.returncode, 0, waited.stdout + waited.stderr +
                         self.log("agent.log")[-3000:])
        logs = subprocess.run([ctl, "logs", task], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(logs.returncode, 0, logs.stderr)
        self.assertEqual(len(logs.stdout.strip().split(",")), 2, logs.stdout)
        self.assertTrue(os.path.isdir(os.path.join(self.root, "var", "test-local", "agent")))


if __name__ == "__main__":
    unittest.main()
