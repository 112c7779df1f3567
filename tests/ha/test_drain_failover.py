"""Node modes across a failover (sync replication): a node cordoned before the standby attached
reaches it in the snapshot, a node drained after it in the change log; the new leader keeps both
and places nothing on them until they are uncordoned.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_drain_failover
"""

import unittest

from ha_cluster import HaCluster, HaTestCase, wait_until

HB_TIMEOUT = 2.0


class DrainFailoverTest(HaTestCase):

    def test_the_new_leader_keeps_cordoned_and_draining_nodes(self):
        c = self.cluster = HaCluster("drain", mode="sync", hb_timeout=HB_TIMEOUT,
                                     agent_hb_timeout=15)
        c.start_scheduler("a", wait_role="leader")
        c.start_agent("ag1", gpus=2)
        c.start_agent("ag2", gpus=2)
        c.wait_agents_online("a", ["ag1", "ag2"])
        status, _, body = c.request("a", "POST", "/api/v1/agents/ag1/cordon")
        self.assertEqual((status, body["agent"]["status"]), (200, "cordoned"), body)

        # B attaches now: the cordon reaches it in the snapshot.
        c.start_scheduler("b", wait_role="standby")
        wait_until(lambda: "standby sched-b attached" in c.schedulers["a"].log_text(), 15,
                   what="B attached to A as standby")
        # Running on ag2 when ag2 is drained (through the change log), without eviction.
        status, _, body = c.submit("a", "sleep 300", 2, "high")
        self.assertEqual(status, 201, body)
        runs = body["task_id"]
        self.assertEqual(c.wait_task_status("a", runs, "running", 10)["node_id"], "ag2")
        status, _, body = c.request("a", "POST", "/api/v1/agents/ag2/drain", {})
        self.assertEqual((status, body["agent"]["status"], body["evicted"]), (200, "draining", 0))

        c.schedulers["a"].kill9()
        c.wait_role("b", "leader", HB_TIMEOUT + 10)

        def modes():
            status, _, body = c.request("b", "GET", "/api/v1/agents")
            if status != 200:
                return {}
            return {a["id"]: (a["status"], a["tasks"]) for a in body["agents"]}
        wait_until(lambda: modes() == {"ag1": ("cordoned", 0), "ag2": ("draining", 1)}, 15,
                   what="both agents back on B in their modes")
        self.assertEqual(c.get_task("b", runs)["status"], "running")
        # Its history came with the change log.
        status, _, body = c.request("b", "GET", "/api/v1/tasks/%s/events" % runs)
        self.assertEqual(status, 200, body)
        self.assertEqual([e["type"] for e in body["events"]][:2], ["submitted", "scheduled"], body)
        self.assertEqual(body["events"][1]["node_id"], "ag2", body)

        status, _, body = c.submit("b", "true", 1, "high")
        self.assertEqual(status, 201, body)
        waits = body["task_id"]
        wait_until(lambda: c.get_task("b", waits)["pending_reason"] not in (None, "queued"), 10,
                   what="a pass over the new task")
        self.assertEqual(c.get_task("b", waits)["status"], "pending")
        status, _, body = c.request("b", "POST", "/api/v1/agents/ag1/uncordon")
        self.assertEqual((status, body["agent"]["status"]), (200, "online"), body)
        t = c.wait_task_status("b", waits, "success", 15)
        self.assertEqual(t["node_id"], "ag1")


if __name__ == "__main__":
    unittest.main()
