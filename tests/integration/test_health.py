"""GPU health with real agents and real task processes: 2 agents x 2 GPUs checking their GPUs
every 0.2 s. A GPU the agent finds faulty (the fake's fault file, a failing health-check
program, the test's fake libnvidia-ml.so reporting an XID or ECC errors) turns `unhealthy` with
its reason, leaves placement and the quota totals, and its task is stopped and requeued with
`gpu_unhealthy`; it comes back when the fault clears."""

import os
import unittest

from harness import API, ClusterTestCase, read_text, wait_until

CHECK = 0.2


class HealthTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 2

    def start_cluster(self):
        self.faults = {a: os.path.join(self.c.tmp, "faults-" + a) for a in ("a1", "a2")}
        self.sick = os.path.join(self.c.tmp, "sick")
        self.program = os.path.join(self.c.tmp, "check.sh")
        with open(self.program, "w") as f:
            f.write("#!/bin/sh\nif [ -e %s ]; then echo 'PSU 2 failed'; exit 1; fi\n" % self.sick)
        os.chmod(self.program, 0o755)
        self.c.start_scheduler(online_percent=1.0, heartbeat_timeout=10)
        for a in ("a1", "a2"):
            gpu = {"health_check_interval": CHECK,
                   "fake": {"count": 2, "fault_file": self.faults[a]}}
            if a == "a2":
                gpu["health_check_program"] = self.program
            self.c.start_agent(a, gpus=2, extra={"gpu": gpu})
        self.c.wait_agents_online(["a1", "a2"])

    def gpu(self, gpu_id):
        return {g["id"]: g for g in self.c.gpus()["gpus"]}[gpu_id]

    def write(self, path, text):
        with open(path, "w") as f:
            f.write(text)

    def test_a_faulty_gpu_is_left_out_and_its_task_runs_elsewhere(self):
        tid = self.c.submit("exec sleep 300")
        t = self.c.wait_status(tid, "running")
        bad = t["allocated_gpus"][0]
        node, index = t["node_id"], int(bad.rsplit("-", 1)[1])
        self.write(self.faults[node], "%d xid 79\n" % index)
        wait_until(lambda: self.gpu(bad)["status"] == "unhealthy", 10, what=bad + " unhealthy")
        g = self.gpu(bad)
        self.assertEqual(g["health_reason"], "xid 79")
        gpus = self.c.gpus()
        self.assertEqual((gpus["unhealthy"], gpus["total"]), (1, 4), gpus)
        self.assertEqual(self.c.quota()["total_gpus"], 3)
        # Stopped (gpu_failure) and requeued: it runs again, never on the faulty GPU.
        wait_until(lambda: self.c.task(tid)["status"] == "running"
                   and self.c.task(tid)["allocated_gpus"] != [bad], 15,
                   what="the task running again on another GPU")
        t = self.c.task(tid)
        self.assertNotEqual(t["allocated_gpus"], [bad])
        self.assertIn("reason: gpu_failure", read_text(self.c.task_log(node, tid)))
        # Fill every healthy GPU: nothing lands on the faulty one.
        others = [self.c.submit("exec sleep 300") for _ in range(3)]
        wait_until(lambda: [self.c.task(o)["status"] for o in others].count("running") == 2, 10,
                   what="two more tasks running")
        self.assertEqual([self.c.task(o)["status"] for o in others].count("pending"), 1)
        self.assertEqual(self.gpu(bad)["current_task"], None)

        self.write(self.faults[node], "")
        wait_until(lambda: self.gpu(bad)["status"] != "unhealthy", 10, what=bad + " healthy")
        self.assertEqual(self.gpu(bad)["health_reason"], None)
        self.assertEqual(self.c.quota()["total_gpus"], 4)
        wait_until(lambda: all(self.c.task(o)["status"] == "running" for o in others), 10,
                   what="the last task on the recovered GPU")

    def test_a_failing_health_check_program_takes_the_whole_node_out(self):
        self.write(self.sick, "")
        wait_until(lambda: all(self.gpu("a2-gpu-%d" % i)["status"] == "unhealthy"
                               for i in range(2)), 10, what="a2's GPUs unhealthy")
        reason = self.gpu("a2-gpu-0")["health_reason"]
        self.assertEqual(reason, "health check %s failed (exit code 1): PSU 2 failed"
                         % self.program)
        self.assertEqual(self.c.quota()["total_gpus"], 2)
        holder = self.c.submit("exec sleep 300", gpu_count=2)
        self.assertEqual(self.c.wait_status(holder, "running")["node_id"], "a1")
        big = self.c.submit("true", gpu_count=2)
        wait_until(lambda: self.c.task(big)["pending_reason"] not in (None, "queued"), 10,
                   what="a pass over the second task")
        self.assertEqual(self.c.task(big)["status"], "pending")
        os.remove(self.sick)
        wait_until(lambda: self.gpu("a2-gpu-1")["status"] != "unhealthy", 10, what="a2 back")
        done = self.c.wait_finished(big)
        self.assertEqual((done["status"], done["node_id"]), ("success", "a2"))

    @unittest.skipUnless(os.path.exists(os.environ.get("DGPU_FAKE_NVML", "")),
                         "the fake libnvidia-ml.so is not built")
    def test_nvml_xid_and_ecc_errors(self):
        fault_dir = os.path.join(self.c.tmp, "nvml-faults")
        os.makedirs(fault_dir)
        os.environ["FAKE_NVML_FAULT_DIR"] = fault_dir
        try:
            self.c.start_agent("n1", extra={"gpu": {
                "detection_method": "nvml", "nvml_library": os.environ["DGPU_FAKE_NVML"],
                "health_check_interval": CHECK}})
        finally:
            del os.environ["FAKE_NVML_FAULT_DIR"]
        self.c.wait_agents_online(["n1"])
        self.assertEqual(self.gpu("n1-gpu-1")["model"], "NVIDIA A100-SXM4-80GB")
        tid = self.c.submit("exec sleep 300", gpu_model="A100")
        self.assertEqual(self.c.wait_status(tid, "running")["node_id"], "n1")
        first = self.c.task(tid)["allocated_gpus"][0]
        index = int(first.rsplit("-", 1)[1])
        self.write(os.path.join(fault_dir, "xid"), "%d 79\n" % index)
        wait_until(lambda: self.gpu(first)["health_reason"] == "xid 79", 10,
                   what="the XID reported")
        # Requeued onto the other A100 of n1.
        other = "n1-gpu-%d" % (1 - index)
        wait_until(lambda: self.c.task(tid)["allocated_gpus"] == [other], 15,
                   what="the task on " + other)
        self.assertEqual(self.c.task(tid)["status"], "running")
        self.write(os.path.join(fault_dir, "ecc-%d" % (1 - index)), "2\n")
        wait_until(lambda: self.gpu(other)["health_reason"] == "uncorrectable ECC errors: 2", 10,
                   what="the ECC errors reported")
        wait_until(lambda: self.c.task(tid)["status"] == "pending", 15, what="the task waiting")
        self.assertEqual(self.c.task(tid)["error"], "gpu_unhealthy")
        # A reset clears the ECC count: the GPU returns and takes the task; the XID stays.
        os.remove(os.path.join(fault_dir, "ecc-%d" % (1 - index)))
        wait_until(lambda: self.c.task(tid)["status"] == "running", 15, what="the task back")
        self.assertEqual(self.c.task(tid)["allocated_gpus"], [other])
        self.assertEqual(self.gpu(first)["status"], "unhealthy")


if __name__ == "__main__":
    unittest.main()
