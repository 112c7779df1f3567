"""A job array across a failover (sync replication): an array submitted to the leader reaches the
standby as one change; after the leader's SIGKILL the new leader holds every member, pending in
index order, with its index and size, and runs them with the agent.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_array_failover
"""

import unittest

from ha_cluster import HaCluster, HaTestCase, wait_until

HB_TIMEOUT = 2.0
SIZE = 500


class ArrayFailoverTest(HaTestCase):

    def test_the_new_leader_holds_every_member(self):
        c = self.cluster = HaCluster("array", mode="sync", hb_timeout=HB_TIMEOUT,
                                     agent_hb_timeout=15)
        c.start_scheduler("a", wait_role="leader")
        c.start_scheduler("b", wait_role="standby")
        wait_until(lambda: "standby sched-b attached" in c.schedulers["a"].log_text(), 15,
                   what="B attached to A as standby")
        body = c.task_body("true", 1, "low", "shard")
        body["array"] = SIZE
        status, _, answer = c.request("a", "POST", "/api/v1/tasks", body, timeout=30)
        self.assertEqual(status, 201, answer)
        ids = answer["task_ids"]
        self.assertEqual(len(ids), SIZE)

        c.schedulers["a"].kill9()
        c.wait_role("b", "leader", HB_TIMEOUT + 10)
        status, _, page = c.request("b", "GET", "/api/v1/tasks?status=pending&limit=1")
        self.assertEqual((status, page["total"]), (200, SIZE), page)
        for i in (0, 1, SIZE // 2, SIZE - 1):
            t = c.get_task("b", ids[i])
            self.assertEqual((t["status"], t["array_index"], t["array_size"], t["name"]),
                             ("pending", i, SIZE, "shard"), t)
        self.assertIsNone(c.get_task("b", "task-%d" % (int(ids[-1].split("-")[1]) + 1)))

        # The members run on the new leader's agent, the first ones first.
        c.start_agent("ag1", gpus=2)
        c.wait_agents_online("b", ["ag1"])
        first = c.wait_task_status("b", ids[0], "success", 20)
        self.assertEqual(first["array_index"], 0)
        # The next task submitted is numbered past the array.
        status, _, body = c.submit("b", "true", 1, "low")
        self.assertEqual(status, 201, body)
        self.assertGreater(int(body["task_id"].split("-")[1]), int(ids[-1].split("-")[1]))


if __name__ == "__main__":
    unittest.main()
