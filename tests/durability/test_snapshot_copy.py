"""`dgpuctl snapshot` with the real dgpu-scheduler: a consistent copy of a live database.

A scheduler holding DGPU_SNAPSHOT_TASKS pending tasks (written straight into its SQLite file) and
no agents keeps accepting submissions while `dgpuctl snapshot` saves its database. Checked:
  - the file is a whole SQLite database (integrity check ok, rollback journal, no WAL needed)
    holding exactly the tasks and the journal position dgpuctl reports, as of one moment: the
    tasks are task-1 .. task-N with nothing missing, and every submission acknowledged before
    the snapshot was asked for is in it;
  - nothing is left in the scheduler's state directory;
  - a second scheduler started on the copy as its dgpu.db serves the same tasks;
  - an existing file is not replaced without --force.
"""

import json
import os
import sqlite3
import subprocess
import time
import unittest

import dgpu_proc as dp

TASKS = int(os.environ.get("DGPU_SNAPSHOT_TASKS", "50000"))


class SnapshotCopyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = dp.TempDir("dgpu-snapcopy-")
        self.sched = dp.Scheduler(self.tmp.path, logging={"level": "warn"})
        self.copy = None
        self.submitter = None

    def tearDown(self):
        if self.submitter is not None:
            self.submitter.stop = True
            self.submitter.join(60)
        self.sched.stop()
        if self.copy is not None:
            self.copy.stop()
        self.tmp.cleanup()

    def ctl(self, *args):
        return subprocess.run([dp.bin_path("dgpuctl"), "--server",
                               "http://127.0.0.1:%d" % self.sched.http_port] + list(args),
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    def test_a_copy_taken_while_submissions_continue_is_one_consistent_state(self):
        dp.start_preloaded(self.sched, TASKS)
        self.submitter = dp.start_submitter(self.sched, at_least=20)

        path = os.path.join(self.tmp.path, "backup.db")
        asked = time.time()
        acked_before = [n for n, t in list(self.submitter.acked) if t < asked]
        p = self.ctl("-o", "json", "snapshot", path)
        self.assertEqual(p.returncode, 0, p)
        report = json.loads(p.stdout)
        acked_during = len(self.submitter.acked) - len(acked_before)
        self.submitter.stop = True
        self.submitter.join(60)
        print("snapshot of %d tasks (%d bytes) while %d submissions were acknowledged"
              % (report["tasks"], report["bytes"], acked_during))

        self.assertEqual(report["path"], path)
        self.assertEqual(report["bytes"], os.path.getsize(path))
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        try:
            self.assertEqual(con.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            self.assertEqual(con.execute("PRAGMA journal_mode").fetchone()[0], "delete")
            count, low, high = con.execute("SELECT count(*), min(id), max(id) FROM tasks").fetchone()
            seq = con.execute("SELECT value FROM meta WHERE key = 'last_applied_seq'").fetchone()[0]
            kept = con.execute("SELECT sum(n) FROM task_counts").fetchone()[0]
        finally:
            con.close()
        self.assertEqual(count, report["tasks"])
        self.assertEqual(kept, count)
        self.assertEqual(int(seq), report["last_applied_seq"])
        self.assertEqual((low, high), (1, count), "a task is missing from the copy")
        self.assertGreaterEqual(high, max(acked_before), "an acknowledged task is missing")
        self.assertGreater(count, TASKS)
        self.assertEqual([n for n in os.listdir(self.sched.state_dir) if "snapshot" in n], [])

        # The copy starts a scheduler with the same tasks.
        restored = os.path.join(self.tmp.path, "restored")
        os.makedirs(restored)
        os.rename(path, os.path.join(restored, "dgpu.db"))
        self.copy = dp.Scheduler(self.tmp.path, state_dir=restored, tag="copy",
                                 logging={"level": "warn"})
        self.copy.start()
        self.copy.wait_ready(timeout=60)
        status, body = self.copy.http("GET", "/api/v1/tasks?status=pending&limit=1")
        self.assertEqual((status, body["total"], body["tasks"][0]["task_id"]),
                         (200, count, "task-%d" % count), body)
        status, body = self.copy.http("GET", "/api/v1/tasks/task-%d" % TASKS)
        self.assertEqual((status, body["status"]), (200, "pending"), body)

        # An existing file is kept unless --force.
        with open(path, "w") as f:
            f.write("precious")
        p = self.ctl("snapshot", path)
        self.assertEqual(p.returncode, 2, p)
        self.assertEqual(p.stderr, "error: %s exists; give --force to replace it\n" % path)
        with open(path) as f:
            self.assertEqual(f.read(), "precious")
        p = self.ctl("snapshot", "--force", path)
        self.assertEqual(p.returncode, 0, p)
        self.assertRegex(p.stdout, r"^saved a snapshot of \d+ tasks \(journal seq \d+, epoch \d+\) "
                         r"to %s, [0-9.]+ MiB\n$" % path)


if __name__ == "__main__":
    unittest.main()
