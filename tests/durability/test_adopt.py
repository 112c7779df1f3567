"""Restart with running tasks: the scheduler is SIGKILLed while tasks run on a real agent.

After the restart the agent reconnects and reports what runs and what finished meanwhile. The
running tasks must be adopted, not started again (the agent logs exactly one task_started per
task, attempts stays 1), and their finishes recorded (status success).
"""

import time
import unittest

import dgpu_proc as dp


class AdoptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = dp.TempDir("dgpu-adopt-")
        self.sched = dp.Scheduler(self.tmp.path, agent={"heartbeat_timeout": 5},
                                  scheduler={"schedule_interval": 1})
        self.agent = dp.Agent(self.tmp.path, self.sched, "node-a", gpus=4, heartbeat=0.5)

    def tearDown(self):
        self.agent.stop()
        self.sched.stop()
        if not self._failed():
            self.tmp.cleanup()
        else:
            print("kept work directory for inspection: " + self.tmp.path)

    def _failed(self):
        result = getattr(self._outcome, "result", None)
        if result is not None and hasattr(result, "failures"):
            return bool(result.failures or result.errors)
        return any(e for _, e in getattr(self._outcome, "errors", []))

    def task(self, task_id):
        status, body = self.sched.http("GET", "/api/v1/tasks/" + task_id)
        self.assertEqual(status, 200, body)
        return body

    def statuses(self, ids):
        return {i: self.task(i)["status"] for i in ids}

    def test_running_tasks_are_adopted_after_sigkill(self):
        self.sched.start()
        self.sched.wait_ready()
        self.agent.start()
        dp.wait_until(lambda: self.sched.http("GET", "/api/v1/agents")[1]["agents"], 10,
                      what="the agent to register")

        # Three long tasks, plus one that finishes while the scheduler is down. With 4 GPUs the
        # default quota gives high 3 GPUs and low 1.
        commands = [("sleep 5", "high"), ("sleep 5", "high"), ("sleep 5", "low"),
                    ("sleep 1", "high")]
        ids = []
        for cmd, prio in commands:
            status, body = self.sched.http("POST", "/api/v1/tasks",
                                           dp.submit_body(command=cmd, priority=prio))
            self.assertEqual(status, 201, body)
            ids.append(body["task_id"])
        dp.wait_until(lambda: all(s == "running" for s in self.statuses(ids).values()), 10,
                      what="all tasks running")
        dp.wait_until(lambda: len(self.agent.events("task_started")) == len(ids), 5,
                      what="the agent to log every start")

        self.sched.kill()
        time.sleep(2.0)  # "sleep 1" finishes while no scheduler is there.
        self.assertTrue(self.agent.alive(), "the agent exited while the scheduler was down")
        self.sched.start()
        self.sched.wait_ready()
        after = self.statuses(ids)
        self.assertEqual([after[i] for i in ids[:3]], ["running"] * 3,
                         "long tasks are not running right after the restart: %r" % after)

        # Right after the restart the tasks are still running (adopted), not pending again.
        dp.wait_until(lambda: self.sched.http("GET", "/api/v1/agents")[1]["agents"], 10,
                      what="the agent to reconnect")
        final = dp.wait_until(
            lambda: (lambda s: s if all(v in ("success", "failed", "cancelled")
                                        for v in s.values()) else None)(self.statuses(ids)),
            20, interval=0.2, what="all tasks to finish")
        self.assertEqual(final, {i: "success" for i in ids})

        for i in ids:
            t = self.task(i)
            self.assertEqual(t["attempts"], 1, t)
            self.assertEqual(t["exit_code"], 0, t)
            self.assertEqual(t["node_id"], "node-a", t)
            self.assertIsNotNone(t["finished_at"], t)

        started = [tid for tid, _ in self.agent.events("task_started")]
        for i in ids:
            self.assertEqual(started.count(i), 1,
                             "%s started %d times on the agent" % (i, started.count(i)))
        finished = [tid for tid, _ in self.agent.events("task_finished")]
        for i in ids:
            self.assertEqual(finished.count(i), 1,
                             "%s finished %d times on the agent" % (i, finished.count(i)))
        # The restarted scheduler logged each finish once and never scheduled a task again.
        log = self.sched.log()
        for i in ids:
            self.assertEqual(log.count("event=task_scheduled task_id=%s " % i), 1,
                             "%s was scheduled again after the restart" % i)


if __name__ == "__main__":
    unittest.main()
