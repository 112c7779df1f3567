"""The examples (examples/*.py) run against a local cluster: the sweep finds the best value
through the tasks' exit codes; the pipeline step exits with its task's exit code."""

import os
import re
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLES = os.path.join(REPO, "examples")


def run(cluster, script, *args, timeout=120):
    env = dict(os.environ, DGPU_SERVER=cluster.base)
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script)] + list(args),
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_sweep_prints_the_best_of_twenty(cluster):
    out = run(cluster, "sweep.py", "--count", "20", "--priority", "high", "--timeout", "90")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "submitted 20 tasks"
    rows = [l for l in lines if re.match(r"^task-\d+ ", l)]
    assert len(rows) == 20
    scores = {int(m.group(1)): int(m.group(2))
              for m in (re.search(r"x=(\d+)\s+score=(\d+)$", r) for r in rows)}
    assert scores == {x: max(0, 100 - (x - 13) * (x - 13)) for x in range(20)}
    assert re.fullmatch(r"best: sweep-x13 score 100 \(task-\d+\)", lines[-1]), lines[-1]


def test_pipeline_step_exits_with_the_task_exit_code(cluster):
    ok = run(cluster, "pipeline_step.py", "--name", "step", "--", "true")
    assert ok.returncode == 0, ok.stderr
    assert re.fullmatch(r"submitted (task-\d+)\n\1 success exit_code=0\n", ok.stdout)
    failed = run(cluster, "pipeline_step.py", "--priority", "low", "--", "exit", "7")
    assert failed.returncode == 7, failed.stderr
    assert re.search(r" failed exit_code=7( error=.*)?\n$", failed.stdout), failed.stdout
    slow = run(cluster, "pipeline_step.py", "--timeout", "1", "--", "sleep", "60")
    assert slow.returncode == 4, slow.stderr
    assert re.search(r"task-\d+ did not finish within 1s: cancelled", slow.stderr)
    tid = re.match(r"submitted (task-\d+)", slow.stdout).group(1)
    import dgpu
    assert dgpu.Client(cluster.base).get(tid).status == "cancelled"
    bad = run(cluster, "pipeline_step.py", "--gpu-count", "0", "--", "true")
    assert bad.returncode == 3
    assert "gpu_count must be between 1 and 1024" in bad.stderr
