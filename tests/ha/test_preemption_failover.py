"""Failover to the standby while a preemption is under way (sync replication): the new leader
completes it once. Borrowed batch tasks are being stopped for an online task when the primary
is killed; on the standby, the victims are requeued once, the preemptor starts once, and the
victims run again after it.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_preemption_failover
"""

import os
import unittest

from ha_cluster import HaCluster, HaTestCase, wait_until

HB_TIMEOUT = 2.0
GRACE = 3


class PreemptionFailoverTest(HaTestCase):

    def marks(self, task_id):
        try:
            with open(os.path.join(self.cluster.tmp, "marks", task_id)) as f:
                return [line.split()[0] for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []

    def test_the_standby_completes_a_preemption_once(self):
        c = self.cluster = HaCluster(
            "preempt", mode="sync", hb_timeout=HB_TIMEOUT, agent_hb_timeout=15,
            extra_sched={"quota": {"online_percent": 0.5, "borrowing": True},
                         "preemption": {"grace_period": GRACE}})
        c.start_pair()
        c.start_agent("ag1", gpus=4)
        c.wait_agents_online("a", ["ag1"])
        marks = os.path.join(c.tmp, "marks")
        os.makedirs(marks)
        m = os.path.join(marks, "$DGPU_TASK_ID")
        # Records its starts and SIGTERMs; ignores SIGTERM, so only SIGKILL ends it.
        victim = ("echo start >> %s; trap 'echo term >> %s' TERM; while :; do sleep 0.1; done"
                  % (m, m))

        # 4 batch tasks on 4 GPUs: 2 within the batch quota, 2 borrowed from the online one.
        victims = []
        for _ in range(4):
            status, _, body = c.submit("a", victim, 1, "low")
            self.assertEqual(status, 201, body)
            victims.append(body["task_id"])
        for v in victims:
            c.wait_task_status("a", v, "running", 10)
        wait_until(lambda: all(self.marks(v) for v in victims), 10, what="victims started")
        borrowed = sorted(v for v in victims if c.get_task("a", v)["borrowed"])
        self.assertEqual(len(borrowed), 2)

        status, _, body = c.submit("a", "sleep 2", 2, "high")
        self.assertEqual(status, 201, body)
        online = body["task_id"]
        wait_until(lambda: c.get_task("a", online)["pending_reason"] == "waiting_for_preemption",
                   5, what="the online task waiting for its victims")
        wait_until(lambda: all("term" in self.marks(v) for v in borrowed), 5,
                   what="the borrowed tasks got SIGTERM")

        # The primary dies while the victims are in their grace period.
        c.schedulers["a"].kill9()
        c.wait_role("b", "leader", HB_TIMEOUT + 10)
        c.wait_agents_online("b", ["ag1"])

        t = c.wait_task_status("b", online, "running", GRACE + 15)
        self.assertEqual(t["attempts"], 1, t)
        for v in victims:
            vt = c.get_task("b", v)
            want = ("pending", 1) if v in borrowed else ("running", 0)
            self.assertEqual((vt["status"], vt["preemptions"]), want, vt)
        # The preemptor got exactly the victims' node and two GPUs; nothing else was stopped.
        self.assertEqual(len(t["allocated_gpus"]), 2)
        for v in set(victims) - set(borrowed):
            self.assertEqual(self.marks(v), ["start"], v)

        # Started once on the agent: by the new leader (epoch 2), never by the old one. Read
        # after it succeeded: "running" can reach the scheduler before the agent's log line.
        c.wait_task_status("b", online, "success", 15)
        starts = [s for s in c.task_started("ag1") if s["task_id"] == online]
        self.assertEqual([s["epoch"] for s in starts], ["2"], starts)

        # The victims run again after the preemptor, once each.
        for v in borrowed:
            c.wait_task_status("b", v, "running", 10)
            wait_until(lambda v=v: self.marks(v)[:1] + self.marks(v)[-1:] == ["start", "start"]
                       and self.marks(v).count("start") == 2, 10, what="%s started again" % v)
            self.assertEqual(c.get_task("b", v)["preemptions"], 1)


if __name__ == "__main__":
    unittest.main()
