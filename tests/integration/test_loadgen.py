"""bench/agent_loadgen, the fleet the scale benchmarks use, against a real scheduler: its agents
register with their GPUs, stay online, run the tasks they are given and report them finished.

  cd tests/integration && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_loadgen
"""

import os
import subprocess
import unittest

from harness import API, BIN_DIR, ClusterTestCase, wait_until

LOADGEN = os.path.join(BIN_DIR, "agent_loadgen")


class LoadgenTest(ClusterTestCase):
    AGENTS = 0

    def setUp(self):
        if not os.access(LOADGEN, os.X_OK):
            self.skipTest("agent_loadgen not built (benchmarks off in this build)")
        super().setUp()

    def test_fifty_agents_run_tasks(self):
        proc = subprocess.Popen(
            [LOADGEN, "--scheduler", "127.0.0.1:%d" % self.c.grpc_port, "--agents", "50",
             "--gpus", "2", "--heartbeat", "0.5", "--run-time", "0.2", "--duration", "6",
             "--prefix", "lg"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(proc.kill)
        wait_until(lambda: len([a for a in self.c.agents_view().values()
                                if a["status"] == "online"]) == 50, 10, what="50 agents online")
        agents = self.c.agents_view()
        self.assertEqual(sorted(agents), sorted("lg-%d" % i for i in range(1, 51)))
        self.assertEqual({a["gpus"] for a in agents.values()}, {2})
        tasks = [self.c.submit("true", gpu_count=2, priority="high") for _ in range(10)]
        for t in tasks:
            task = self.c.wait_finished(t, timeout=10)
            self.assertEqual(task["status"], "success", task)
            self.assertTrue(task["node_id"].startswith("lg-"), task)
        out, _ = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, out)
        summary = [line for line in out.splitlines() if line.startswith("summary:")][0]
        self.assertIn("registered 50 register_failures 0", summary)
        self.assertIn("started 10 finished 10 finish_failures 0 streams_lost 0 "
                      "reregister_requests 0", summary)
        self.assertEqual(self.c.get(API + "/tasks?status=success").json["total"], 10)


if __name__ == "__main__":
    unittest.main()
