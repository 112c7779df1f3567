"""Log files and logrotate: with logging.output a file, SIGHUP makes the scheduler and the agent
reopen it, so that after logrotate moved the file away the next lines go to a new file at the
configured path and none is lost; a file that cannot be reopened keeps the old one in use.

  cd tests/integration && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_logfile
"""

import os
import signal
import unittest

from harness import ClusterTestCase, wait_until


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class LogFileTest(ClusterTestCase):
    AGENTS = 1

    def start_cluster(self):
        self.sched_log = os.path.join(self.c.tmp, "scheduler.log")
        self.agent_log = os.path.join(self.c.tmp, "agent.log")
        self.c.start(agents=1, extra={"logging": {"output": self.sched_log}},
                     agent_kwargs={"extra": {"logging": {"output": self.agent_log}}})

    def test_sighup_after_rotation_writes_to_a_new_file(self):
        first = self.c.submit("true")
        self.c.wait_finished(first)
        wait_until(lambda: "event=task_finished task_id=%s" % first in read(self.agent_log), 10,
                   what="the agent's line for " + first)

        # What logrotate does: move the files, then signal the daemons.
        os.rename(self.sched_log, self.sched_log + ".1")
        os.rename(self.agent_log, self.agent_log + ".1")
        os.kill(self.c.scheduler.pid, signal.SIGHUP)
        os.kill(self.c.agents["a1"].pid, signal.SIGHUP)
        for path in (self.sched_log, self.agent_log):
            wait_until(lambda p=path: os.path.exists(p) and
                       "SIGHUP: log file reopened" in read(p), 10, what="a new " + path)

        second = self.c.submit("true")
        self.c.wait_finished(second)
        wait_until(lambda: "event=task_finished task_id=%s" % second in read(self.agent_log), 10,
                   what="the agent's line for " + second)
        new_sched, old_sched = read(self.sched_log), read(self.sched_log + ".1")
        self.assertIn("event=task_submitted task_id=%s" % second, new_sched)
        self.assertNotIn("task_id=%s " % first, new_sched)
        self.assertIn("event=task_submitted task_id=%s" % first, old_sched)
        self.assertNotIn("task_id=%s " % second, old_sched)
        self.assertIn("event=task_started task_id=%s" % second, read(self.agent_log))
        self.assertNotIn("task_id=%s " % second, read(self.agent_log + ".1"))
        self.assertTrue(self.c.scheduler.running() and self.c.agents["a1"].running())

    def test_sighup_that_cannot_reopen_keeps_logging_to_the_old_file(self):
        os.rename(self.sched_log, self.sched_log + ".1")
        os.mkdir(self.sched_log)  # Nothing can open it as a file.
        os.kill(self.c.scheduler.pid, signal.SIGHUP)
        wait_until(lambda: "SIGHUP: cannot reopen the log file" in read(self.sched_log + ".1"),
                   10, what="the error in the old file")
        task = self.c.submit("true")
        self.c.wait_finished(task)
        self.assertIn("event=task_submitted task_id=%s" % task, read(self.sched_log + ".1"))
        self.assertTrue(self.c.scheduler.running())


if __name__ == "__main__":
    unittest.main()
