"""Node labels and selectors with real agents: three agents of 2 fake GPUs labelled by their
configuration (agent key `agent.labels`): a1 rack r1, a2 rack r1 with ib yes, a3 rack r2. /agents
and dgpuctl get agents show the labels; a task with a node_selector runs on a matching node only;
a gang selecting rack r1 takes a1 and a2; a selector no node matches waits no_node_matches until
an agent registers with the label, and GET /tasks/{id} and dgpuctl get task say which nodes
could take a pending task and why the others cannot; dgpuctl submits --selector; bad selectors
and bad labels get a clear error and create nothing.

NVLink groups with real agents: agents of 4 fake GPUs in the groups [[0, 2], [1, 3]]
(gpu.fake.nvlink_groups); /agents shows them; single-GPU tasks fill one group before the other;
with one GPU busy in each group of n1, a 2-GPU task goes to n2, into one whole group, and once
no node has a whole group free one goes across groups; an agent with bad groups does not start
and says why."""

import os
import subprocess
import unittest

from harness import API, CTL_BIN, GPU_MODEL, ClusterTestCase, wait_until

LABELS = {"a1": {"rack": "r1"}, "a2": {"rack": "r1", "ib": "yes"}, "a3": {"rack": "r2"}}


class LabelsTest(ClusterTestCase):
    def start_cluster(self):
        self.c.start_scheduler(online_percent=1.0)
        for agent, labels in LABELS.items():
            self.c.start_agent(agent, gpus=2, extra={"agent": {"labels": labels}})
        self.c.wait_agents_online(list(LABELS))

    def submit(self, selector, gpus=1, command="sleep 60", **fields):
        body = {"priority": "high", "gpu_count": gpus, "command": command,
                "node_selector": selector}
        body.update(fields)
        r = self.c.request("POST", API + "/tasks", body)
        self.assertEqual(r.status, 201, r)
        return r.json["task_id"]

    def pending_reason(self, tid, reason):
        return wait_until(lambda: (lambda t: t if t["pending_reason"] == reason else None)(
            self.c.task(tid)), 10, what="%s to wait %s" % (tid, reason))

    def test_a_selector_places_on_matching_nodes_and_waits_while_none_matches(self):
        view = self.c.agents_view()
        self.assertEqual({a: view[a]["labels"] for a in LABELS}, LABELS)
        ib = self.submit({"ib": "yes"})
        t = self.c.wait_status(ib, "running")
        self.assertEqual((t["node_id"], t["node_selector"]), ("a2", {"ib": "yes"}))
        # Rack r1 has a1 (2 free) and a2 (1 free): a gang of two members of 1 GPU takes both.
        gang = self.submit({"rack": "r1"}, gpus=2, nodes=2, gpus_per_node=1)
        t = self.c.wait_status(gang, "running")
        self.assertEqual(sorted(m["node_id"] for m in t["allocation"]), ["a1", "a2"])
        # No node is in rack r9: it waits, and the tasks behind it start.
        nowhere = self.submit({"rack": "r9"})
        t = self.pending_reason(nowhere, "no_node_matches")
        self.assertEqual((t["status"], t["allocation"]), ("pending", []))
        # Which nodes could take it and why not, on GET /tasks/{id} only.
        self.assertEqual(t["pending_detail"],
                         "0 of 3 nodes can take it; 3 without label rack=r9")
        listed = self.c.request("GET", API + "/tasks?status=pending").json["tasks"]
        self.assertEqual([(x["task_id"], x["pending_detail"]) for x in listed], [(nowhere, None)])
        r2 = self.submit({"rack": "r2"}, gpus=2)
        self.assertEqual(self.c.wait_status(r2, "running")["node_id"], "a3")
        # Rack r2's one node is full (a1's GPU is free, in rack r1).
        full = self.submit({"rack": "r2"})
        t = self.pending_reason(full, "no_node_fits")
        self.assertEqual(t["pending_detail"],
                         "0 of 3 nodes can take it; 2 without label rack=r2, 1 with no free GPU")
        # An agent that registers with the label takes the waiting task.
        self.c.agents["a1"].stop()
        self.c.start_agent("a4", gpus=1, extra={"agent": {"labels": {"rack": "r9"}}})
        t = self.c.wait_status(nowhere, "running", timeout=20)
        self.assertEqual(t["node_id"], "a4")
        self.assertEqual(self.c.agents_view()["a4"]["labels"], {"rack": "r9"})

    def test_bad_selectors_name_the_field_and_create_nothing(self):
        before = self.c.tasks()["total"]
        for selector, mentions in (("rack=r1", "node_selector must be an object"),
                                   ({"rack": 1}, "node_selector.rack must be a string"),
                                   ({"rack": "r 1"}, 'node_selector.rack "r 1" is not valid'),
                                   ({"-rack": "r1"}, 'node_selector key "-rack" is not valid')):
            r = self.c.request("POST", API + "/tasks", {"priority": "high", "gpu_count": 1,
                                                        "command": "true",
                                                        "node_selector": selector})
            self.assertApiError(r, 400, "invalid_field", mentions)
        self.assertEqual(self.c.tasks()["total"], before)

    def test_an_agent_with_a_bad_label_says_so_and_does_not_start(self):
        self.c.agents["a3"].stop()
        d = self.c.start_agent("a3", gpus=2, extra={"agent": {"labels": {"rack": "r 2"}}})
        wait_until(lambda: not d.running(), 10, what="the agent to refuse its configuration")
        self.assertNotEqual(d.proc.returncode, 0)
        self.assertIn('agent.labels.rack: "r 2" is not valid', d.log_tails())

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl_submits_a_selector_and_shows_the_labels(self):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)

        def ctl(*args):
            return subprocess.run([CTL_BIN, "--server", self.c.base] + list(args),
                                  capture_output=True, text=True, timeout=30, env=env)
        p = ctl("submit", "--gpus", "1", "--priority", "high", "--selector", "rack=r1",
                "--selector", "ib=yes", "--", "sleep", "30")
        self.assertEqual(p.returncode, 0, p)
        tid = p.stdout.strip()
        t = self.c.wait_status(tid, "running")
        self.assertEqual((t["node_id"], t["node_selector"]), ("a2", {"ib": "yes", "rack": "r1"}))
        # A task of rack r2 that no node of it can hold: `get task` says which nodes turned it away.
        p = ctl("submit", "--gpus", "2", "--priority", "high", "--selector", "rack=r2",
                "--selector", "ib=yes", "--", "true")
        self.assertEqual(p.returncode, 0, p)
        waiting = p.stdout.strip()
        self.pending_reason(waiting, "no_node_matches")
        p = ctl("get", "task", waiting)
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stdout, r"(?m)^Pending Reason: +no_node_matches\nPlacement: +0 of 3 "
                                   r"nodes can take it; 2 without label ib=yes, 1 without label "
                                   r"rack=r2$")
        p = ctl("get", "agents")
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stdout, r"(?m)^ID .* LAST HEARTBEAT +LABELS$")
        self.assertRegex(p.stdout, r"(?m)^a2 .* ib=yes,rack=r1$")
        self.assertRegex(p.stdout, r"(?m)^a3 .* rack=r2$")
        p = ctl("submit", "--gpus", "1", "--priority", "high", "--selector", "rack", "--", "true")
        self.assertEqual(p.returncode, 2, p)
        self.assertEqual(p.stderr, "error: --selector expects KEY=VALUE (a node label), got "
                                   "'rack'\n")


class TopologyTest(ClusterTestCase):
    """scheduler.topology_key: rack r1 has a1 and a2 (2 GPUs each), rack r2 has a3 (1 GPU). A gang
    of two 1-GPU members would take a3 (the best fit) and a1; with the key it takes rack r1."""

    def start_cluster(self):
        self.c.start_scheduler(online_percent=1.0, extra={"scheduler": {"topology_key": "rack"}})
        for agent, gpus, rack in (("a1", 2, "r1"), ("a2", 2, "r1"), ("a3", 1, "r2")):
            self.c.start_agent(agent, gpus=gpus, extra={"agent": {"labels": {"rack": rack}}})
        self.c.wait_agents_online(["a1", "a2", "a3"])

    def test_a_gang_is_packed_into_one_rack_when_one_holds_it(self):
        body = {"priority": "high", "nodes": 2, "gpus_per_node": 1, "command": "sleep 30"}
        r = self.c.request("POST", API + "/tasks", body)
        self.assertEqual(r.status, 201, r)
        t = self.c.wait_status(r.json["task_id"], "running")
        self.assertEqual(sorted(m["node_id"] for m in t["allocation"]), ["a1", "a2"])
        # A second one: rack r1 still holds it (a GPU left on a1 and on a2).
        r = self.c.request("POST", API + "/tasks", body)
        t = self.c.wait_status(r.json["task_id"], "running")
        self.assertEqual(sorted(m["node_id"] for m in t["allocation"]), ["a1", "a2"])


GROUPS = [[0, 2], [1, 3]]  # Interleaved: the lowest free GPUs would split both groups.


class NvlinkTest(ClusterTestCase):
    def gpu_section(self, groups):
        return {"gpu": {"detection_method": "fake", "health_check_interval": 30,
                        "fake": {"count": 4, "model": GPU_MODEL, "memory_mb": 32768,
                                 "nvlink_groups": groups}}}

    def start_cluster(self):
        self.c.start_scheduler(online_percent=0.0)
        self.c.start_agent("n1", gpus=4, extra=self.gpu_section(GROUPS))
        self.c.wait_agents_online(["n1"])

    def start(self, gpus):
        r = self.c.request("POST", API + "/tasks", {"priority": "low", "gpu_count": gpus,
                                                    "command": "sleep 60"})
        self.assertEqual(r.status, 201, r)
        t = self.c.wait_status(r.json["task_id"], "running")
        return t["task_id"], t["node_id"], t["allocation"][0]["gpu_indices"]

    def test_a_pair_gets_a_whole_group_on_the_node_that_has_one(self):
        self.assertEqual(self.c.agents_view()["n1"]["nvlink_groups"], GROUPS)
        if os.access(CTL_BIN, os.X_OK):
            env = dict(os.environ)
            env.pop("DGPU_SERVER", None)
            p = subprocess.run([CTL_BIN, "--server", self.c.base, "get", "agents"],
                               capture_output=True, text=True, timeout=30, env=env)
            self.assertEqual(p.returncode, 0, p)
            self.assertRegex(p.stdout, r"(?m)^ID .* TASKS +NVLINK +LAST HEARTBEAT +LABELS$")
            self.assertRegex(p.stdout, r"(?m)^n1 .* 0,2\|1,3 +\S+ ago +-$")
        # Single GPUs fill group [0, 2] before touching group [1, 3].
        placed = [self.start(1) for _ in range(4)]
        self.assertEqual([(node, gpus) for _, node, gpus in placed],
                         [("n1", [0]), ("n1", [2]), ("n1", [1]), ("n1", [3])])
        # Free GPUs 2 and 3: one of each group.
        for tid, _, _ in (placed[1], placed[3]):
            self.assertEqual(self.c.cancel(tid).status, 200)
            self.c.wait_status(tid, "cancelled")
        wait_until(lambda: self.c.agents_view()["n1"]["free_gpus"] == 2, 10,
                   what="n1 to have 2 free GPUs")
        self.c.start_agent("n2", gpus=4, extra=self.gpu_section(GROUPS))
        self.c.wait_agents_online(["n1", "n2"])
        self.assertEqual(self.c.agents_view()["n2"]["nvlink_groups"], GROUPS)
        # n1 is the best fit (2 free against 4), but its free GPUs are in two groups.
        _, node, gpus = self.start(2)
        self.assertEqual((node, gpus), ("n2", [0, 2]))
        _, node, gpus = self.start(2)
        self.assertEqual((node, gpus), ("n2", [1, 3]))
        # No node has a whole group free: the pair goes across groups.
        _, node, gpus = self.start(2)
        self.assertEqual((node, gpus), ("n1", [2, 3]))

    def test_an_agent_with_bad_groups_says_so_and_does_not_start(self):
        d = self.c.start_agent("n3", gpus=4, extra=self.gpu_section([[0, 4]]))
        wait_until(lambda: not d.running(), 10, what="the agent to refuse its configuration")
        self.assertNotEqual(d.proc.returncode, 0)
        self.assertIn("gpu.fake.nvlink_groups: group 0: GPU 4 is not one of the node's GPUs "
                      "(0 to 3)", d.log_tails())


if __name__ == "__main__":
    unittest.main()
