"""Autoscaling with real programs that start and stop real fake-GPU agents.

The scheduler runs `up GROUP COUNT` and `down GROUP NODE` (shell scripts written by the test):
`up` starts COUNT agents with agent.node_group GROUP and ids GROUP-1, GROUP-2, ... (2 GPUs each),
`down` stops one with SIGTERM. Work that waits for room brings nodes up; idle nodes go back after
idle_timeout; min_nodes and max_nodes hold; a failing program is retried and its error shown."""

import os
import stat
import subprocess
import time
import unittest

from harness import (AGENT_BIN, API, CTL_BIN, ClusterTestCase, pid_alive, read_text, wait_until,
                     write_config)

UP = """#!/bin/bash
# up GROUP COUNT
dir=%(dir)s
echo "$@" >> "$dir/up.calls"
if [ -e "$dir/fail-up" ]; then echo "no capacity in zone z1"; exit 3; fi
for i in $(seq 1 "$2"); do
  n=$(( $(cat "$dir/next-$1" 2>/dev/null || echo 0) + 1 )); echo $n > "$dir/next-$1"
  id="$1-$n"
  sed "s/@ID@/$id/g" "$dir/agent.json.in" > "$dir/$id.json"
  DGPU_IT_MARKER=%(marker)s setsid %(agent)s --config "$dir/$id.json" \\
    > "$dir/$id.log" 2>&1 < /dev/null &
  echo $! > "$dir/$id.pid"
done
echo "asked for $2 node(s) of $1"
"""

DOWN = """#!/bin/bash
# down GROUP NODE
dir=%(dir)s
echo "$@" >> "$dir/down.calls"
if [ -e "$dir/fail-down" ]; then echo "cannot stop $2" >&2; exit 4; fi
pid=$(cat "$dir/$2.pid")
kill -TERM "$pid"
for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
kill -KILL "$pid"
"""


class FleetTestCase(ClusterTestCase):
    """A scheduler with one autoscaled group "g" of 2-GPU nodes and no agent of its own."""
    AGENTS = 0
    MIN_NODES = 0
    MAX_NODES = 2

    def start_cluster(self):
        self.dir = os.path.join(self.c.tmp, "fleet")
        os.makedirs(self.dir)
        values = {"dir": self.dir, "marker": self.c.marker, "agent": AGENT_BIN}
        self.programs = {}
        for name, text in (("up", UP), ("down", DOWN)):
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(text % values)
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
            self.programs[name] = path
        doc = self.c.agent_config("@ID@", gpus=2, extra={"agent": {"node_group": "g"}})
        write_config(os.path.join(self.dir, "agent.json.in"), doc)
        self.c.start(agents=0, heartbeat_timeout=3, online_percent=1.0,
                     extra={"autoscale": self.autoscale_config()})

    def autoscale_config(self):
        return {"enabled": True, "scale_up_delay": 1, "idle_timeout": 4, "boot_timeout": 30,
                "program_timeout": 15, "retry_delay": 1,
                "node_groups": [{"name": "g", "model": "V100", "gpus_per_node": 2,
                                 "min_nodes": self.MIN_NODES, "max_nodes": self.MAX_NODES,
                                 "scale_up_program": self.programs["up"],
                                 "scale_down_program": self.programs["down"]}]}

    def calls(self, name):
        try:
            return read_text(os.path.join(self.dir, name + ".calls")).splitlines()
        except OSError:
            return []

    def group(self):
        r = self.c.get(API + "/autoscale")
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.json["enabled"])
        (g,) = r.json["groups"]
        return g

    def agent_pid(self, node):
        return int(read_text(os.path.join(self.dir, node + ".pid")).strip())

    def scheduler_log(self):
        return read_text(self.c.scheduler.stdout_path)


class AutoscaleTest(FleetTestCase):
    def test_waiting_work_brings_a_node_up_and_an_idle_node_goes_back(self):
        tid = self.c.submit("echo on $CUDA_VISIBLE_DEVICES", gpu_count=2)
        # No node at all: the task waits for its model until the node it brought up registers.
        self.assertEqual(self.c.task(tid)["pending_reason"], "no_gpu_model")
        done = self.c.wait_finished(tid, timeout=30)
        self.assertEqual((done["status"], done["node_id"], done["allocated_gpus"]),
                         ("success", "g-1", ["g-1-gpu-0", "g-1-gpu-1"]), done)
        self.assertEqual(self.calls("up"), ["g 1"])
        wait_until(lambda: self.group()["booting"] == 0, 5, what="the autoscaler to see g-1")
        g = self.group()
        self.assertEqual((g["name"], g["gpus_per_node"], g["min_nodes"], g["max_nodes"],
                          g["nodes_requested"], g["booting"], g["requested"], g["failures"]),
                         ("g", 2, 0, 2, 1, 0, 0, 0), g)
        pid = self.agent_pid("g-1")
        # Idle for idle_timeout (4 s): made releasing, then the program stops its agent.
        wait_until(lambda: self.calls("down") == ["g g-1"], 20, what="g-1 to be released")
        wait_until(lambda: not pid_alive(pid), 15, what="the agent of g-1 to stop")
        wait_until(lambda: self.group()["nodes"] == [], 15, what="g-1 to be forgotten")
        g = self.group()
        self.assertEqual((g["online"], g["nodes_released"], g["failures"], g["last_error"]),
                         (0, 1, 0, None), g)
        # Gone, its mode record dropped: offline and schedulable again.
        a = self.c.agents_view()["g-1"]
        self.assertEqual((a["status"], a["mode"]), ("offline", "schedulable"), a)
        log = self.scheduler_log()
        self.assertIn("autoscale: asking group g for 1 node(s) (1 task(s) wait for room there)", log)
        self.assertIn("autoscale: releasing idle node g-1 of group g", log)
        self.assertIn("autoscale: released node g-1 has gone", log)
        self.assertNotIn("configured with", log)  # g-1's GPUs are its group's.
        # New work brings a node up again, under a new name.
        again = self.c.submit("true", gpu_count=1)
        self.assertEqual(self.c.wait_finished(again, timeout=30)["node_id"], "g-2")
        self.assertEqual(self.calls("up"), ["g 1", "g 1"])

    def test_max_nodes_holds_and_every_task_runs(self):
        ids = [self.c.submit("sleep 3", gpu_count=2) for _ in range(3)]
        for tid in ids:
            self.assertEqual(self.c.wait_finished(tid, timeout=45)["status"], "success")
        # Three 2-GPU tasks asked for three nodes; max_nodes 2 gave two, in one program run.
        self.assertEqual(self.calls("up"), ["g 2"])
        nodes = sorted({self.c.task(t)["node_id"] for t in ids})
        self.assertEqual(nodes, ["g-1", "g-2"])

    def test_a_failing_program_is_retried_and_reported(self):
        open(os.path.join(self.dir, "fail-up"), "w").close()
        tid = self.c.submit("true", gpu_count=1)
        wait_until(lambda: len(self.calls("up")) >= 2, 20, what="the program to be retried")
        g = self.group()
        self.assertGreaterEqual(g["failures"], 1)
        self.assertEqual(g["last_error"],
                         "%s g 1 failed (exit code 3): no capacity in zone z1"
                         % self.programs["up"])
        self.assertIsNotNone(g["last_error_at"])
        self.assertEqual(self.c.task(tid)["status"], "pending")
        os.remove(os.path.join(self.dir, "fail-up"))
        self.assertEqual(self.c.wait_finished(tid, timeout=30)["status"], "success")
        g = self.group()
        self.assertEqual((g["last_error"], g["nodes_requested"]), (None, 1), g)
        log = self.scheduler_log()
        self.assertIn("autoscale: group g: scaling up failed: %s g 1 failed (exit code 3): no "
                      "capacity in zone z1" % self.programs["up"], log)

    def test_a_failed_release_puts_the_node_back(self):
        tid = self.c.submit("true", gpu_count=1)
        self.assertEqual(self.c.wait_finished(tid, timeout=30)["node_id"], "g-1")
        open(os.path.join(self.dir, "fail-down"), "w").close()
        wait_until(lambda: self.group()["failures"] >= 1, 20, what="a failed release")
        g = self.group()
        self.assertEqual(g["last_error"], "%s g g-1 failed (exit code 4): cannot stop g-1"
                         % self.programs["down"])
        # Schedulable again: it takes work.
        wait_until(lambda: self.c.agents_view()["g-1"]["mode"] == "schedulable", 10,
                   what="g-1 to be schedulable again")
        again = self.c.submit("true", gpu_count=1)
        self.assertEqual(self.c.wait_finished(again, timeout=20)["node_id"], "g-1")
        self.assertTrue(pid_alive(self.agent_pid("g-1")))

    def test_a_node_unlike_its_group_is_logged(self):
        self.c.start_agent("x1", gpus=4, extra={"agent": {"node_group": "g"}})
        self.c.start_agent("x2", gpus=2, extra={"agent": {"node_group": "nosuch"}})
        self.c.wait_agents_online(["x1", "x2"])
        wait_until(lambda: "configured with" in self.scheduler_log(), 10,
                   what="the warning about x1")
        log = self.scheduler_log()
        self.assertIn('autoscale: node x1 of group g has 4 GPU(s) of model "Tesla '
                      'V100-SXM2-32GB"; the group is configured with 2 x "V100"', log)
        self.assertIn('autoscale: agent x2 joins node group "nosuch", which '
                      'autoscale.node_groups does not list', log)
        self.assertEqual(log.count("configured with"), 1, "x1 only, once")

    def test_dgpuctl_get_autoscale(self):
        tid = self.c.submit("sleep 60", gpu_count=2)
        self.c.wait_status(tid, "running", timeout=30)
        # The view is the autoscaler's last look (every second).
        wait_until(lambda: self.group()["online"] == 1 and self.group()["booting"] == 0, 5,
                   what="the autoscaler to see g-1")
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)
        out = subprocess.run([CTL_BIN, "--server", self.c.base, "get", "autoscale"],
                             capture_output=True, text=True, timeout=30, env=env,
                             stdin=subprocess.DEVNULL)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["GROUP", "MODEL", "GPUS/NODE", "NODES", "ONLINE",
                                            "IDLE", "BOOTING", "RELEASING", "WAITING",
                                            "LAST", "ERROR"])
        self.assertEqual(lines[1].split(), ["g", "V100", "2", "0..2", "1", "0", "0", "0", "0",
                                            "-"], out.stdout)


class AutoscaleMinNodesTest(FleetTestCase):
    MIN_NODES = 1
    MAX_NODES = 1

    def test_min_nodes_come_up_without_work_and_stay(self):
        wait_until(lambda: self.c.agents_view().get("g-1", {}).get("status") == "online", 30,
                   what="the min_nodes node to come up")
        self.assertEqual(self.calls("up"), ["g 1"])
        time.sleep(6)  # Beyond idle_timeout (4 s): kept, as the group's minimum.
        self.assertEqual(self.calls("down"), [])
        g = self.group()
        self.assertEqual((g["online"], g["idle"]), (1, 1), g)
        self.assertEqual(g["nodes"][0]["state"], "idle")
        # Work runs there; nothing more is asked for.
        tid = self.c.submit("true", gpu_count=2)
        self.assertEqual(self.c.wait_finished(tid, timeout=20)["node_id"], "g-1")
        self.assertEqual(self.calls("up"), ["g 1"])


if __name__ == "__main__":
    unittest.main()
