"""CPUs and memory beside GPUs with real agents: two agents of 2 fake GPUs that offer 2 CPUs and
4096 MiB each (agent key `resources`). /agents shows what each offers and has given; tasks of
1.5 CPUs run one per node and a third waits insufficient_cpu until one ends; a task that asks for
nothing gets its GPUs' share; a request no node could hold waits exceeds_cluster; dgpuctl submits
--cpus --memory and shows the agents' columns; bad values get 400 naming the field."""

import os
import subprocess
import unittest

from harness import API, CTL_BIN, ClusterTestCase, wait_until


class ResourcesTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0}
    AGENT_KWARGS = {"extra": {"resources": {"cpus": 2.5, "reserved_cpus": 0.5,
                                            "memory_mb": 4096}}}

    def submit(self, cpus=None, memory_mb=None, command="sleep 60", gpus=1):
        body = {"priority": "high", "gpu_count": gpus, "command": command}
        if cpus is not None:
            body["cpus"] = cpus
        if memory_mb is not None:
            body["memory_mb"] = memory_mb
        r = self.c.request("POST", API + "/tasks", body)
        self.assertEqual(r.status, 201, r)
        return r.json["task_id"]

    def test_agents_show_what_they_offer_and_what_they_gave(self):
        view = self.c.agents_view()
        for agent in ("a1", "a2"):
            a = view[agent]
            self.assertEqual((a["cpus"], a["memory_mb"], a["allocated_cpus"],
                              a["allocated_memory_mb"], a["isolation"]),
                             (2.0, 4096, 0.0, 0, "none"), a)
        tid = self.submit(cpus=1.5, memory_mb=1000)
        t = self.c.wait_status(tid, "running")
        self.assertEqual((t["cpus"], t["memory_mb"]), (1.5, 1000), t)
        a = self.c.agents_view()[t["node_id"]]
        self.assertEqual((a["allocated_cpus"], a["allocated_memory_mb"]), (1.5, 1000), a)
        # A task that asks for nothing is given its GPUs' share: 1 of 2 GPUs, 1 CPU, 2048 MiB.
        share = self.submit()
        t = self.c.wait_status(share, "running")
        self.assertEqual((t["cpus"], t["memory_mb"]), (1.0, 2048), t)
        self.assertNotEqual(t["node_id"], self.c.task(tid)["node_id"], "0.5 CPUs left there")

    def test_a_third_task_of_one_and_a_half_cpus_waits_for_cpus(self):
        first, second, third = (self.submit(cpus=1.5) for _ in range(3))
        nodes = {self.c.wait_status(t, "running")["node_id"] for t in (first, second)}
        self.assertEqual(nodes, {"a1", "a2"})
        t = wait_until(lambda: (lambda t: t if t["pending_reason"] == "insufficient_cpu" else None)(
            self.c.task(third)), 10, what="the third task to wait for CPUs")
        self.assertEqual((t["status"], t["allocation"]), ("pending", []))
        # Its GPU was free all along; once a task ends, its CPUs are.
        freed = self.c.task(first)["node_id"]
        self.assertEqual(self.c.cancel(first).status, 200)
        t = self.c.wait_status(third, "running", timeout=15)
        self.assertEqual(t["node_id"], freed)

    def test_a_request_no_node_could_hold_exceeds_the_cluster(self):
        for cpus, memory in ((3, None), (None, 4097)):
            tid = self.submit(cpus=cpus, memory_mb=memory)
            wait_until(lambda: self.c.task(tid)["pending_reason"] == "exceeds_cluster", 10,
                       what="exceeds_cluster for cpus %s memory %s" % (cpus, memory))

    def test_bad_values_name_the_field_and_create_nothing(self):
        before = self.c.tasks()["total"]
        for fields, mentions in (({"cpus": 0}, "cpus must be more than 0"),
                                 ({"cpus": "1"}, "cpus must be a number"),
                                 ({"cpus": 1.2345}, "cpus must have at most 3 decimals"),
                                 ({"memory_mb": 0}, "memory_mb must be between 1 and"),
                                 ({"memory_mb": 2.5}, "memory_mb must be an integer")):
            body = {"priority": "high", "gpu_count": 1, "command": "true"}
            body.update(fields)
            r = self.c.request("POST", API + "/tasks", body)
            self.assertApiError(r, 400, "invalid_field", mentions)
        self.assertEqual(self.c.tasks()["total"], before)

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl_submits_cpus_and_memory_and_shows_the_agents(self):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)

        def ctl(*args):
            return subprocess.run([CTL_BIN, "--server", self.c.base] + list(args),
                                  capture_output=True, text=True, timeout=30, env=env)
        p = ctl("submit", "--gpus", "1", "--priority", "high", "--cpus", "0.5", "--memory", "1G",
                "--", "sleep", "30")
        self.assertEqual(p.returncode, 0, p)
        tid = p.stdout.strip()
        t = self.c.wait_status(tid, "running")
        self.assertEqual((t["cpus"], t["memory_mb"]), (0.5, 1024), t)
        p = ctl("get", "task", tid)
        self.assertRegex(p.stdout, r"(?m)^CPUs / Memory: +0\.5 / 1024 MiB$")
        p = ctl("get", "agents")
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stdout,
                         r"(?m)^ID +ADDRESS +STATUS +GPUS +FREE +CPUS +MEMORY +ISOLATION +TASKS")
        isolation = self.c.agents_view()[t["node_id"]]["isolation"]
        self.assertIn(isolation, ("cgroup_v1", "cgroup_v2", "none"))
        self.assertRegex(p.stdout, r"(?m)^%s +\S+ +online +2 +1 +0\.5/2\.0 +1024/4096MB +%s +1 "
                         % (t["node_id"], isolation))


if __name__ == "__main__":
    unittest.main()
