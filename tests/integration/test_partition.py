"""A partitioned agent (agent.stop_tasks_after_disconnect): an agent in its own network
namespace, cut off by taking its link down (the agent and its task keep running; no scheduler
is reachable), stops its task on its own before the scheduler starts it elsewhere, so the task
never runs twice at once; when the link comes back, the cut run counts as a lost attempt, never
as the task's failure.

  cd tests/integration && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_partition
"""

import os
import time
import unittest

from harness import ClusterTestCase, NetNs, read_text, wait_until

STOP_AFTER = 1.5   # agent.stop_tasks_after_disconnect
KILL_GRACE = 0.5   # executor.kill_grace_period
HB_INTERVAL = 0.3  # agent.heartbeat_interval


class PartitionTestCase(ClusterTestCase):
    HB_TIMEOUT = 4  # the scheduler's agent.heartbeat_timeout

    def setUp(self):
        self.net = NetNs("%dp" % (os.getpid() % 10000), "198.51.100.5", "198.51.100.6")
        self.net.create(self)
        super().setUp()

    def start_cluster(self):
        self.c.start_scheduler(heartbeat_timeout=self.HB_TIMEOUT, extra={
            "server": {"http_address": ":%d" % self.c.http_port,
                       "grpc_address": ":%d" % self.c.grpc_port},
            "auth": {"allow_insecure_remote": True}})
        # "far": in the namespace.
        doc = self.c.agent_config("far", gpus=2, heartbeat_interval=HB_INTERVAL,
                                  kill_grace=KILL_GRACE)
        doc["scheduler"]["master_address"] = "198.51.100.5:%d" % self.c.grpc_port
        doc["agent"]["stop_tasks_after_disconnect"] = STOP_AFTER
        self.far = self.c.start_agent_from("agent-far.1", doc, wrapper=self.net.wrapper(),
                                           track_as="far")
        self.c.wait_agents_online(["far"])
        self.marks_dir = os.path.join(self.c.tmp, "marks")
        os.makedirs(self.marks_dir)

    def submit_marked(self):
        """A task that records each start (with its agent) and its SIGTERM, with times.

        The trap ignores TERM before it forks `date`: the agent signals every process of a
        stopped task, those it finds later included, and a `date` killed before it prints leaves
        a "term" line without a time. An ignored signal stays ignored across fork and exec."""
        m = os.path.join(self.marks_dir, "$DGPU_TASK_ID")
        # Its working directory is <work_dir>/<task id>: the agent's work dir names the agent.
        cmd = ("echo start $(basename $(dirname $PWD)) $(date +%%s.%%N) >> %s; "
               "trap 'trap \"\" TERM; echo term $(date +%%s.%%N) >> %s; exit 143' TERM; "
               "while :; do sleep 0.05; done" % (m, m))
        return self.c.submit(cmd, gpu_count=1, priority="high")

    def marks(self, task):
        try:
            lines = read_text(os.path.join(self.marks_dir, task)).splitlines()
        except OSError:
            return []
        return [line.split() for line in lines if line]


class PartitionedAgentTest(PartitionTestCase):

    def test_the_cut_off_agent_stops_its_task_before_it_starts_elsewhere(self):
        task = self.submit_marked()
        wait_until(lambda: self.marks(task), 10, what="the task's first start")
        self.assertEqual(self.marks(task)[0][:2], ["start", "agent-far"])
        self.c.start_agent("near", gpus=2)
        self.c.wait_agents_online(["near"])

        cut = time.time()
        self.net.cut()
        self.addCleanup(self.net.heal)
        # Declared lost after HB_TIMEOUT, the task starts on "near".
        wait_until(lambda: len([m for m in self.marks(task) if m[0] == "start"]) == 2,
                   self.HB_TIMEOUT + 10, what="the task's start on near")
        marks = self.marks(task)
        starts = [m for m in marks if m[0] == "start"]
        terms = [m for m in marks if m[0] == "term"]
        self.assertTrue(terms, marks)
        term_at, second_start_at = float(terms[0][1]), float(starts[1][2])
        self.assertEqual(starts[1][1], "agent-near")
        self.assertGreaterEqual(term_at - cut, STOP_AFTER - 0.5, "stopped too early")
        self.assertLess(term_at, second_start_at, "the task ran twice at once")
        self.assertIn("(agent.stop_tasks_after_disconnect): stopping 1 task(s)",
                      read_text(self.far.stdout_path))

        # The link comes back: far registers again; its report of the cut run changes nothing.
        self.net.heal()
        wait_until(lambda: self.c.agents_view().get("far", {}).get("status") == "online", 15,
                   what="far back online")
        time.sleep(1.0)
        t = self.c.task(task)
        self.assertEqual((t["status"], t["node_id"], t["attempts"]), ("running", "near", 2), t)
        self.assertEqual(len([m for m in self.marks(task) if m[0] == "start"]), 2)
        self.c.cancel(task)


class ShortPartitionTest(PartitionTestCase):
    HB_TIMEOUT = 30  # far is never declared lost

    def test_a_cut_shorter_than_the_heartbeat_timeout_requeues_the_task(self):
        task = self.submit_marked()
        wait_until(lambda: self.marks(task), 10, what="the task's first start")
        self.net.cut()
        self.addCleanup(self.net.heal)
        wait_until(lambda: any(m[0] == "term" for m in self.marks(task)), STOP_AFTER + 10,
                   what="the task stopped by its cut-off agent")
        self.net.heal()
        # The finish ("disconnected") reaches the scheduler: a lost attempt, run again.
        wait_until(lambda: len([m for m in self.marks(task) if m[0] == "start"]) == 2, 20,
                   what="the task's second start")
        t = self.c.wait_status(task, "running")
        self.assertEqual((t["attempts"], t["node_id"]), (2, "far"), t)
        self.c.cancel(task)
        self.assertEqual(self.c.wait_finished(task)["status"], "cancelled")


if __name__ == "__main__":
    unittest.main()
