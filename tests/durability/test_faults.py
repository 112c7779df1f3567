"""Storage faults: full disk, read-only state directory, corrupted database file.

The full-disk and read-only tests mount a tmpfs (root needed); they are skipped with the reason
when mounting is not permitted.
"""

import errno
import hashlib
import os
import subprocess
import time
import unittest

import dgpu_proc as dp


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fill(path, chunk=64 * 1024):
    """Writes `path` until the file system is full; returns the bytes written."""
    written = 0
    block = b"\xa5" * chunk
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n = f.write(block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if chunk > 512:
                    chunk //= 2
                    block = block[:chunk]
                    continue
                return written
            written += n


class FaultTest(unittest.TestCase):
    def setUp(self):
        self.tmp = dp.TempDir("dgpu-faults-")
        self.mnt = os.path.join(self.tmp.path, "mnt")
        os.mkdir(self.mnt)
        self.mounted = False
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        if self.mounted:
            dp.umount(self.mnt)
        self.tmp.cleanup()

    def need_mount(self):
        ok, reason = dp.can_mount(self.mnt)
        if not ok:
            self.skipTest(reason)

    def scheduler(self, state_dir, **sections):
        s = dp.Scheduler(self.tmp.path, state_dir=state_dir, tag="sched%d" % len(self.daemons),
                         **sections)
        self.daemons.append(s)
        return s

    def assert_one_line_error(self, rc, err, *needles):
        self.assertIsNotNone(rc, "the scheduler did not exit")
        self.assertNotEqual(rc, 0, "the scheduler exited 0; stderr: %r" % err)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "expected a one-line error on stderr, got %r" % err)
        for n in needles:
            self.assertIn(n, lines[0])
        print("error line: " + lines[0])

    # --- (a) full disk -----------------------------------------------------------------------

    def test_full_disk_refuses_then_recovers(self):
        self.need_mount()
        dp.mount_tmpfs(self.mnt, "size=16m")
        self.mounted = True
        state = os.path.join(self.mnt, "state")
        sched = self.scheduler(state, logging={"level": "warn"})
        sched.start()
        sched.wait_ready()
        accepted = []
        for _ in range(20):
            status, body = sched.http("POST", "/api/v1/tasks", dp.submit_body())
            self.assertEqual(status, 201, body)
            accepted.append(body["task_id"])

        filler = os.path.join(self.mnt, "filler")
        fill(filler)
        # Submit until one is refused: it must be a 503 naming the full disk, never a 201 that
        # was not stored.
        refused = None
        for _ in range(5000):
            status, body = sched.http("POST", "/api/v1/tasks",
                                      dp.submit_body(command="x" * 2000))
            if status == 201:
                accepted.append(body["task_id"])
                continue
            refused = (status, body)
            break
        self.assertIsNotNone(refused, "no submission was refused on a full disk")
        status, body = refused
        self.assertEqual(status, 503, body)
        self.assertEqual(body["error"]["code"], "storage_unavailable", body)
        self.assertRegex(body["error"]["message"], r"disk full|storage", body)
        print("refused with: %s" % body)

        # Later writes are refused at once while storage is failing.
        status, body = sched.http("POST", "/api/v1/tasks", dp.submit_body())
        self.assertEqual(status, 503, body)
        self.assertIn("disk full", body["error"]["message"])
        status, body = sched.http("GET", "/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn("disk full", body["storage"], body)
        print("readyz: %s" % body)
        # Reads keep working.
        status, body = sched.http("GET", "/api/v1/tasks/" + accepted[0])
        self.assertEqual(status, 200, body)

        os.unlink(filler)
        t0 = time.monotonic()
        task_id = None
        while time.monotonic() - t0 < 10:
            status, body = sched.http("POST", "/api/v1/tasks", dp.submit_body())
            if status == 201:
                task_id = body["task_id"]
                break
            self.assertEqual(status, 503, body)
            time.sleep(0.05)
        self.assertIsNotNone(task_id, "submissions still refused 10 s after space was freed")
        print("first 201 after freeing space: %.2fs" % (time.monotonic() - t0))
        accepted.append(task_id)
        self.assertEqual(sched.http("GET", "/readyz")[0], 200)

        # Everything acknowledged survives a crash.
        sched.kill()
        sched.start()
        sched.wait_ready()
        for t in accepted:
            status, body = sched.http("GET", "/api/v1/tasks/" + t)
            self.assertEqual(status, 200, (t, body))
            self.assertEqual(body["status"], "pending", body)

    # --- (b) read-only state directory -------------------------------------------------------

    def test_read_only_empty_directory(self):
        self.need_mount()
        dp.mount_tmpfs(self.mnt, "ro,size=1m")
        self.mounted = True
        rc, err = self.scheduler(self.mnt).run_to_exit()
        self.assert_one_line_error(rc, err, self.mnt)
        self.assertRegex(err, r"(?i)read-only|not writable")

    def test_read_only_existing_database(self):
        self.need_mount()
        dp.mount_tmpfs(self.mnt, "size=8m")
        self.mounted = True
        sched = self.scheduler(self.mnt)
        sched.start()
        sched.wait_ready()
        status, body = sched.http("POST", "/api/v1/tasks", dp.submit_body())
        self.assertEqual(status, 201, body)
        self.assertEqual(sched.stop(), 0)
        db = os.path.join(self.mnt, "dgpu.db")
        before = sha256(db)
        subprocess.run(["mount", "-o", "remount,ro", self.mnt], check=True)
        rc, err = self.scheduler(self.mnt).run_to_exit()
        self.assert_one_line_error(rc, err, self.mnt)
        self.assertRegex(err, r"(?i)read-only|not writable")
        self.assertEqual(sha256(db), before)

    # --- (c) corrupted database --------------------------------------------------------------

    def make_database(self, state):
        sched = self.scheduler(state)
        sched.start()
        sched.wait_ready()
        for _ in range(50):
            status, body = sched.http("POST", "/api/v1/tasks", dp.submit_body())
            self.assertEqual(status, 201, body)
        self.assertEqual(sched.stop(), 0)
        return os.path.join(state, "dgpu.db")

    def check_refused(self, state, db):
        before = sha256(db)
        listing = sorted(os.listdir(state))
        rc, err = self.scheduler(state).run_to_exit()
        self.assert_one_line_error(rc, err, db)
        self.assertEqual(sha256(db), before, "the scheduler modified the corrupted file")
        extra = sorted(set(os.listdir(state)) - set(listing))
        print("files created beside it: %s" % extra)
        return err

    def test_garbage_database_file(self):
        state = os.path.join(self.tmp.path, "state")
        db = self.make_database(state)
        size = os.path.getsize(db)
        with open(db, "wb") as f:
            f.write(os.urandom(size))
        self.check_refused(state, db)

    def test_corrupted_pages_behind_valid_header(self):
        state = os.path.join(self.tmp.path, "state")
        db = self.make_database(state)
        size = os.path.getsize(db)
        self.assertGreater(size, 4096)
        with open(db, "r+b") as f:
            f.seek(4096)  # Keep page 1 (header and schema), trash the rest.
            f.write(os.urandom(size - 4096))
        err = self.check_refused(state, db)
        self.assertRegex(err, r"(?i)integrity|malformed|corrupt")


if __name__ == "__main__":
    unittest.main()
