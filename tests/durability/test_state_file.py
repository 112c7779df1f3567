"""state.json is written off the owner thread, from one consistent view of the database.

A scheduler starts on a database holding DGPU_STATE_TASKS pending tasks (rows written straight
into its SQLite file), with snapshot_interval 100ms, and no agents. While files are written one
after the other, a client keeps asking GET /api/v1/quota (answered by the owner thread) and
another keeps submitting. Checked:
  - the API keeps answering while a file is being written: every quota request sent while a
    file was being written (from its written_at to its modification time) took less than half
    that write's duration (a write on the owner thread would hold them for all of it);
  - every file is complete and consistent: pretty-printed as before, every task once, in id
    order, every preloaded task and every task acknowledged before written_at is there, the
    queues hold exactly the pending tasks, each in submission order, and the tasks read back
    through the API equal their entries in the file;
  - SIGTERM writes a final file that holds every task.
"""

import datetime
import json
import os
import time
import unittest

import dgpu_proc as dp

TASKS = int(os.environ.get("DGPU_STATE_TASKS", "150000"))
FILES = 3  # File versions checked.
MIN_WRITE_SECONDS = 0.5  # Shorter writes leave nothing to measure.
SHUTDOWN_SECONDS = 60

def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class StateFileTest(unittest.TestCase):
    def setUp(self):
        self.tmp = dp.TempDir("dgpu-state-")
        # The final file is written only when the last periodic write says it fits in
        # shutdown_timeout; a write here takes seconds on a slow machine, so the time is ample.
        self.sched = dp.Scheduler(self.tmp.path,
                                  scheduler={"snapshot_interval": "100ms",
                                             "shutdown_timeout": "%ds" % SHUTDOWN_SECONDS},
                                  logging={"level": "warn"})
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.stop = True
        for c in self.clients:
            c.join(60)
        self.sched.stop()
        self.tmp.cleanup()

    def start_with_preloaded_tasks(self):
        self.sched.start()
        self.sched.wait_ready()
        self.assertEqual(self.sched.stop(), 0)
        dp.preload_pending(os.path.join(self.sched.state_dir, "dgpu.db"), TASKS)
        os.unlink(self.state_path())
        self.sched.start()
        self.sched.wait_ready(timeout=120)

    def state_path(self):
        return os.path.join(self.sched.state_dir, "state.json")

    def next_file(self, newer_than_ns):
        """The next version of state.json: (text, modification time in seconds)."""
        def fresh():
            try:
                st = os.stat(self.state_path())
                if st.st_mtime_ns <= newer_than_ns:
                    return None
                with open(self.state_path()) as f:
                    return f.read(), st.st_mtime_ns
            except OSError:
                return None
        return dp.wait_until(fresh, 120.0, interval=0.02, what="a new state.json")

    def check_file(self, text, acked):
        state = json.loads(text)
        self.assertEqual(text, json.dumps(state, indent=2, sort_keys=True, ensure_ascii=False)
                         + "\n", "not pretty-printed with 2-space indents and sorted keys")
        self.assertEqual(sorted(state), ["epoch", "next_task_number", "nodes", "online_percent",
                                         "queues", "quota", "tasks", "written_at"])
        ids = [dp.task_number(t["task_id"]) for t in state["tasks"]]
        self.assertEqual(ids, sorted(set(ids)), "tasks repeated or out of id order")
        present = set(ids)
        self.assertEqual(set(range(1, TASKS + 1)) - present, set(), "preloaded tasks missing")
        written_at = parse_time(state["written_at"])
        missing = {n for n, t in acked if t < written_at} - present
        self.assertEqual(missing, set(), "tasks acknowledged before written_at missing")
        self.assertEqual({t["status"] for t in state["tasks"]}, {"pending"})
        by_id = {dp.task_number(t["task_id"]): t for t in state["tasks"]}
        queued = []
        for prio in ("high", "low"):
            order = [dp.task_number(t) for t in state["queues"][prio]]
            self.assertEqual(order, sorted(order), "%s queue out of submission order" % prio)
            self.assertEqual({by_id[n]["priority"] for n in order} - {prio}, set())
            queued += order
        self.assertEqual(len(queued), len(ids), "queues and tasks differ in size")
        self.assertEqual(set(queued), present, "queues and tasks hold different tasks")
        self.assertGreater(state["next_task_number"], max(ids))
        heads = [t for t in state["tasks"] if t["pending_reason"] != "queued"]
        self.assertLessEqual(len(heads), 4, "more heads than shapes: %r" % heads[:5])
        for n in [1, 2, 3, 4, TASKS // 2, TASKS] + [h for h in ids[-3:]]:
            status, body = self.sched.http("GET", "/api/v1/tasks/task-%d" % n)
            self.assertEqual(status, 200, body)
            # Only a look at one task explains why it waits (every node looked at); the file,
            # as lists, has null there.
            self.assertEqual(body.pop("pending_detail"), "no node is registered")
            self.assertIsNone(by_id[n].pop("pending_detail"))
            self.assertEqual(body, by_id[n], "task-%d differs from the API's view" % n)
        return written_at, len(ids)

    def test_files_are_written_while_the_api_keeps_answering(self):
        self.start_with_preloaded_tasks()
        quota = dp.RepeatingClient(self.sched.http_port, "GET", "/api/v1/quota")
        submit = dp.RepeatingClient(self.sched.http_port, "POST", "/api/v1/tasks",
                        dp.submit_body(gpu_count=1, priority="high"))
        self.clients = [quota, submit]
        for c in self.clients:
            c.start()
        seen_ns = 0
        windows = []  # (written_at, renamed at)
        for _ in range(FILES):
            text, seen_ns = self.next_file(seen_ns)
            written_at, count = self.check_file(text, list(submit.acked))
            windows.append((written_at, seen_ns / 1e9))
            print("state.json with %d tasks written in %.2fs"
                  % (count, windows[-1][1] - written_at))
        for c in self.clients:
            c.stop = True
        for c in self.clients:
            c.join(60)
        self.assertEqual({s for _, _, s in quota.samples}, {200})
        self.assertGreater(len(submit.acked), 0)

        measured = [(a, b) for a, b in windows if b - a >= MIN_WRITE_SECONDS]
        if not measured:
            self.skipTest("every state.json was written in under %.1fs: raise DGPU_STATE_TASKS"
                          % MIN_WRITE_SECONDS)
        for begin, end in measured:
            during = [lat for sent, lat, _ in quota.samples if begin <= sent < end]
            self.assertGreater(len(during), 0, "no quota request while a file was written")
            self.assertLess(max(during), (end - begin) / 2,
                            "GET /api/v1/quota took %.3fs while a %.2fs write ran"
                            % (max(during), end - begin))

        self.assertEqual(self.sched.stop(timeout=SHUTDOWN_SECONDS + 15), 0)
        self.assertEqual([line for line in self.sched.log().splitlines()
                          if "final state snapshot" in line], [])
        with open(self.state_path()) as f:
            final = json.load(f)
        self.assertEqual(len(final["tasks"]), TASKS + len(submit.acked))


if __name__ == "__main__":
    unittest.main()
