"""A gang across a failover (sync replication): a two-node gang running on the leader reaches the
standby with its members, rank order and rendezvous port; after the leader's SIGKILL the new
leader adopts both members where they run (same processes, attempt 1) and the gang succeeds
once the test lets its members end.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_gang_failover
"""

import os
import unittest

from ha_cluster import HaCluster, HaTestCase, wait_until

HB_TIMEOUT = 2.0


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


class GangFailoverTest(HaTestCase):

    def test_the_new_leader_adopts_every_member_of_a_running_gang(self):
        c = self.cluster = HaCluster("gang", mode="sync", hb_timeout=HB_TIMEOUT,
                                     agent_hb_timeout=15,
                                     extra_sched={"quota": {"online_percent": 1.0}})
        c.start_scheduler("a", wait_role="leader")
        c.start_scheduler("b", wait_role="standby")
        wait_until(lambda: "standby sched-b attached" in c.schedulers["a"].log_text(), 15,
                   what="B attached to A as standby")
        for agent in ("ag1", "ag2", "ag3"):
            c.start_agent(agent, gpus=1)
        c.wait_agents_online("a", ["ag1", "ag2", "ag3"])

        out = os.path.join(c.tmp, "out")
        os.makedirs(out)
        # Each member runs until the test lets it end (a file `go`), however slow the machine.
        go = os.path.join(out, "go")
        body = c.task_body("echo $$ > %s/$NODE_RANK.pid; while [ ! -e %s ]; do sleep 0.1; done"
                           % (out, go), 2, "high")
        body.update({"nodes": 2, "gpus_per_node": 1})
        status, _, answer = c.request("a", "POST", "/api/v1/tasks", body)
        self.assertEqual(status, 201, answer)
        tid = answer["task_id"]
        before = c.wait_task_status("a", tid, "running", 10)
        pid_files = [os.path.join(out, "%d.pid" % rank) for rank in range(2)]
        wait_until(lambda: all(os.path.getsize(p) > 0 for p in pid_files if os.path.exists(p))
                   and all(os.path.exists(p) for p in pid_files),
                   10, what="both members to start")
        pids = []
        for path in pid_files:
            with open(path) as f:
                pids.append(int(f.read()))
        self.assertEqual(len(before["allocation"]), 2, before)
        self.assertEqual(before["master_port"], 29500, before)

        c.schedulers["a"].kill9()
        c.wait_role("b", "leader", HB_TIMEOUT + 10)
        c.wait_agents_online("b", ["ag1", "ag2", "ag3"])
        t = c.get_task("b", tid)
        self.assertEqual(t["status"], "running", t)
        self.assertEqual((t["allocation"], t["node_id"], t["master_port"], t["attempts"],
                          t["nodes"], t["gpus_per_node"]),
                         (before["allocation"], before["node_id"], 29500, 1, 2, 1))
        self.assertTrue(all(pid_alive(p) for p in pids), "a member was restarted")
        # Nothing else starts on the members' GPUs: the third node is the only free one.
        free = {"ag1", "ag2", "ag3"} - {m["node_id"] for m in t["allocation"]}
        self.assertEqual(len(free), 1, t)
        status, _, small = c.submit("b", "true", 1, "high")
        self.assertEqual(status, 201, small)
        self.assertEqual(c.wait_task_status("b", small["task_id"], "success", 15)["node_id"],
                         free.pop())

        with open(go, "w"):
            pass
        t = c.wait_task_status("b", tid, ("success", "failed"), 20)
        self.assertEqual((t["status"], t["attempts"], t["exit_code"]), ("success", 1, 0), t)
        status, _, events = c.request("b", "GET", "/api/v1/tasks/%s/events" % tid)
        self.assertEqual(status, 200, events)
        kinds = [e["type"] for e in events["events"]]
        self.assertEqual(kinds.count("scheduled"), 2, kinds)
        self.assertEqual(kinds.count("requeued"), 0, kinds)


if __name__ == "__main__":
    unittest.main()
