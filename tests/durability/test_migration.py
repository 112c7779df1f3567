"""Schema versions with the real dgpu-scheduler: a version 1 database made with the sqlite3 shell
is upgraded in place after a backup copy; a database newer than this build is refused with one line.

The sqlite3 shell is a declared dependency (scripts/install-deps.sh): when it is missing the
tests fail on CI (CI=true) and are skipped, with the reason, elsewhere.
"""

import hashlib
import os
import shutil
import subprocess
import time
import unittest

import dgpu_proc as dp
from dgpu_testlib import missing_dependency

APPLICATION_ID = 0x44475055

# The tables of schema version 1 exactly as that release created them.
V1_SCHEMA = """
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value NOT NULL
) WITHOUT ROWID;
CREATE TABLE tasks (
  id              INTEGER PRIMARY KEY NOT NULL,
  name            TEXT NOT NULL,
  priority        TEXT NOT NULL,
  gpu_count       INTEGER NOT NULL,
  gpu_model       TEXT NOT NULL,
  command         TEXT NOT NULL,
  env             TEXT NOT NULL,
  timeout_seconds INTEGER NOT NULL,
  image           TEXT NOT NULL,
  status          TEXT NOT NULL,
  queue_seq       INTEGER NOT NULL,
  allocation      TEXT NOT NULL,
  attempts        INTEGER NOT NULL,
  exit_code       INTEGER NOT NULL,
  error           TEXT NOT NULL,
  created_at      INTEGER NOT NULL,
  started_at      INTEGER NOT NULL,
  finished_at     INTEGER NOT NULL,
  stopping        INTEGER NOT NULL
);
CREATE INDEX tasks_by_status_priority ON tasks (status, priority, id DESC);
CREATE INDEX tasks_by_status ON tasks (status, id DESC);
CREATE INDEX tasks_by_priority ON tasks (priority, id DESC);
CREATE INDEX tasks_unfinished ON tasks (queue_seq, id)
  WHERE status IN ('pending', 'running') OR stopping = 1;
CREATE INDEX tasks_prunable ON tasks (finished_at)
  WHERE status IN ('success', 'failed', 'cancelled') AND stopping = 0;
INSERT INTO meta (key, value) VALUES
  ('schema_version', 1), ('epoch', 0), ('next_task_number', 1), ('last_applied_seq', 0);
"""

# Times in microseconds since the epoch, an hour ago (well within storage.retention).
T0_SECONDS = int(time.time()) - 3600
T0 = T0_SECONDS * 1000000
V1_ROWS = """
UPDATE meta SET value = 2 WHERE key = 'epoch';
UPDATE meta SET value = 5 WHERE key = 'next_task_number';
UPDATE meta SET value = 7 WHERE key = 'last_applied_seq';
INSERT INTO tasks VALUES
  (1, 'waiting', 'high', 2, '', 'sleep 1', '[]', 0, '', 'pending', 1, '[]', 0, 0, '',
   {t0}, 0, 0, 0),
  (2, 'training', 'low', 2, '', 'sleep 100', '[]', 0, '', 'running', 2,
   '[{{"node_id":"node-a","gpu_indices":[0,3]}}]', 1, 0, '', {t1}, {t2}, 0, 0),
  (3, 'stopped', 'low', 1, '', 'sleep 100', '[]', 0, '', 'cancelled', 3,
   '[{{"node_id":"node-b","gpu_indices":[1]}}]', 1, 0, 'cancelled', {t1}, {t2}, {t3}, 1),
  (4, 'done', 'high', 1, '', 'true', '[]', 0, '', 'success', 4,
   '[{{"node_id":"node-a","gpu_indices":[1]}}]', 1, 0, '', {t1}, {t2}, {t3}, 0);
""".format(t0=T0, t1=T0 + 1000000, t2=T0 + 2000000, t3=T0 + 3000000)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sqlite(path, sql):
    r = subprocess.run(["sqlite3", path], input=sql, capture_output=True, text=True, check=True)
    return r.stdout.strip()


def make_v1_database(state_dir, version=1):
    """A version 1 database as dgpu's first release wrote it, claiming `version`."""
    os.makedirs(state_dir)
    path = os.path.join(state_dir, "dgpu.db")
    sqlite(path, "BEGIN; PRAGMA application_id = %d; PRAGMA user_version = %d;" %
           (APPLICATION_ID, version) + V1_SCHEMA + V1_ROWS +
           "UPDATE meta SET value = %d WHERE key = 'schema_version'; COMMIT;" % version)
    return path


class MigrationTest(unittest.TestCase):
    def setUp(self):
        if shutil.which("sqlite3") is None:
            missing_dependency(self, "the sqlite3 shell is not installed: install the Debian "
                                     "package sqlite3 (make deps)")
        self.tmp = dp.TempDir("dgpu-migration-")
        self.state = os.path.join(self.tmp.path, "state")
        self.sched = dp.Scheduler(self.tmp.path, state_dir=self.state,
                                  agent={"heartbeat_timeout": 60})

    def tearDown(self):
        self.sched.stop()
        self.tmp.cleanup()

    def task(self, number):
        status, body = self.sched.http("GET", "/api/v1/tasks/task-%d" % number)
        self.assertEqual(status, 200, body)
        return body

    def test_v1_database_is_upgraded_and_keeps_every_task(self):
        db = make_v1_database(self.state)
        v1_rows = sqlite(db, "SELECT * FROM tasks ORDER BY id;")
        self.sched.start()
        self.sched.wait_ready()

        seen = {n: self.task(n) for n in (1, 2, 3, 4)}
        got = {n: (t["status"], t["node_id"], t["allocated_gpus"], t["attempts"])
               for n, t in seen.items()}
        self.assertEqual(got, {
            1: ("pending", None, [], 0),
            2: ("running", "node-a", ["node-a-gpu-0", "node-a-gpu-3"], 1),
            3: ("cancelled", "node-b", ["node-b-gpu-1"], 1),
            4: ("success", "node-a", ["node-a-gpu-1"], 1),
        })
        self.assertEqual(seen[1]["priority"], "high")
        self.assertEqual(seen[3]["error"], "cancelled")
        self.assertEqual(seen[4]["exit_code"], 0)
        self.assertEqual(seen[4]["finished_at"],
                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0_SECONDS + 3)))
        status, listing = self.sched.http("GET", "/api/v1/tasks")
        self.assertEqual(status, 200, listing)
        self.assertEqual(listing["total"], 4)
        # The task numbers go on from where the old database left them.
        status, body = self.sched.http("POST", "/api/v1/tasks", dp.submit_body())
        self.assertEqual((status, body["task_id"]), (201, "task-5"), body)
        self.assertIn("upgraded %s from schema version 1 to 14" % db, self.sched.log())
        # The kept counts start from the rows the old file held, and follow the new task.
        status, pending = self.sched.http("GET", "/api/v1/tasks?status=pending&limit=1")
        self.assertEqual((status, pending["total"], pending["next"]), (200, 2, "task-5"), pending)
        self.assertEqual(self.sched.stop(), 0)

        self.assertEqual(sqlite(db, "PRAGMA user_version;"), "14")
        self.assertEqual(sqlite(db, "SELECT id || ':' || stop_reason FROM tasks ORDER BY id;"),
                         "1:\n2:\n3:cancel\n4:\n5:")
        backup = db + ".v1.bak"
        self.assertEqual(sorted(f for f in os.listdir(self.state) if ".bak" in f),
                         ["dgpu.db.v1.bak"])
        self.assertEqual(sqlite(backup, "PRAGMA user_version;"), "1")
        self.assertEqual(sqlite(backup, "PRAGMA quick_check;"), "ok")
        self.assertEqual(sqlite(backup, "SELECT * FROM tasks ORDER BY id;"), v1_rows)

    def test_newer_database_is_refused_untouched(self):
        db = make_v1_database(self.state, version=15)
        before = sha256(db)
        rc, err = self.sched.run_to_exit()
        self.assertIsNotNone(rc, "the scheduler did not exit")
        self.assertNotEqual(rc, 0, "the scheduler exited 0; stderr: %r" % err)
        self.assertEqual(err.strip().splitlines(), [
            "dgpu-scheduler: %s has schema version 15; this dgpu-scheduler reads versions up "
            "to 14: use a newer binary" % db])
        self.assertEqual(sha256(db), before)
        self.assertEqual(sorted(f for f in os.listdir(self.state) if ".bak" in f), [])


if __name__ == "__main__":
    unittest.main()
