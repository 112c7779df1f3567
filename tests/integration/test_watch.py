"""GET /api/v1/watch: the live feed of task, node and quota changes as Server-Sent Events, with a
real scheduler and agents: latency of a submission's event, resuming with `since` (and
Last-Event-ID), resets, bad input, and a hundred watchers at once."""

import os
import select
import subprocess
import time
import unittest

from harness import API, CTL_BIN, ClusterTestCase


def task_event(tid, status=None):
    def match(frame):
        return (frame["event"] == "task" and frame["data"]["task_id"] == tid and
                (status is None or frame["data"]["status"] == status))
    return match


class WatchTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0}

    def open_watch(self, query="", headers=None):
        stream = self.c.watch(query, headers=headers)
        self.addCleanup(stream.close)
        return stream

    def test_a_submission_is_seen_within_a_second_and_then_its_whole_life(self):
        w = self.open_watch()
        self.assertEqual(w.status, 200)
        self.assertEqual(w.headers.get("Content-Type"), "text/event-stream")
        self.assertEqual(w.headers.get("Cache-Control"), "no-cache")
        sync = w.next()
        self.assertEqual(sync["event"], "sync")
        self.assertEqual(sync["id"], sync["data"]["seq"])

        started = time.monotonic()
        tid = self.c.submit("sleep 0.3", gpu_count=2)
        first, before = w.until(task_event(tid), timeout=1, what="the submitted task")
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertEqual(before, [])
        self.assertGreater(first["id"], sync["id"])
        self.assertIn(first["data"]["status"], ("pending", "running"))
        self.assertEqual(first["data"]["gpu_count"], 2)

        done, between = w.until(task_event(tid, "success"), timeout=10, what="its success")
        frames = [first] + between + [done]
        ids = [f["id"] for f in frames]
        self.assertEqual(ids, sorted(set(ids)), "ids must rise strictly")
        running = [f for f in between if task_event(tid, "running")(f)]
        self.assertTrue(running, between)
        self.assertEqual(running[0]["data"]["node_id"], "a1")
        self.assertEqual(running[0]["data"]["allocation"],
                         [{"node_id": "a1", "gpu_indices": [0, 1], "cpu_set": None}])
        # The node, as /agents shows it, while the task held both GPUs.
        nodes = [f["data"] for f in between if f["event"] == "node"]
        self.assertIn(("a1", 0, 1), [(n["id"], n["free_gpus"], n["tasks"]) for n in nodes])
        self.assertEqual(done["data"]["exit_code"], 0)

    def test_a_deflate_watcher_gets_the_same_frames_in_fewer_bytes(self):
        plain = self.open_watch()
        packed = self.c.watch(deflate=True)
        self.addCleanup(packed.close)
        self.assertEqual(packed.headers.get("Content-Encoding"), "deflate")
        self.assertEqual(packed.headers.get("Vary"), "Accept-Encoding")
        self.assertIsNone(plain.headers.get("Content-Encoding"))
        self.assertEqual(plain.next()["event"], "sync")
        self.assertEqual(packed.next()["event"], "sync")
        tids = [self.c.submit("true", name="deflate-%d" % i) for i in range(20)]
        for tid in tids:
            self.c.wait_finished(tid)
        last = tids[-1]
        _, a = plain.until(task_event(last, "success"), timeout=10, what="the last success")
        _, b = packed.until(task_event(last, "success"), timeout=10, what="the last success")
        self.assertEqual([(f["id"], f["event"], f["data"]) for f in a],
                         [(f["id"], f["event"], f["data"]) for f in b])
        self.assertLess(packed.wire_bytes * 3, plain.wire_bytes,
                        (packed.wire_bytes, plain.wire_bytes))
        # Resuming compressed: the replay, then live events, through one zlib stream.
        again = self.c.watch("?since=%d" % a[0]["id"], deflate=True)
        self.addCleanup(again.close)
        sync, replayed = again.until(lambda f: f["event"] == "sync", what="the sync")
        self.assertEqual([f["id"] for f in replayed], [f["id"] for f in a[1:]] +
                         [f["id"] for f in replayed[len(a) - 1:]])
        tid = self.c.submit("true")
        again.until(task_event(tid, "success"), timeout=10, what="a live event after the replay")

    def test_a_watcher_resumes_after_the_last_event_it_saw(self):
        w = self.open_watch()
        start = w.next()["id"]
        t1 = self.c.submit("true")
        seen, _ = w.until(task_event(t1), what=t1)
        w.close()
        t2 = self.c.submit("true")
        self.c.wait_finished(t1)
        self.c.wait_finished(t2)

        # Resumed from the first event seen: everything after it, then a sync.
        r = self.open_watch("?since=%d" % seen["id"])
        sync, replayed = r.until(lambda f: f["event"] == "sync", what="the sync after the replay")
        self.assertTrue(replayed)
        self.assertEqual([f["id"] for f in replayed],
                         sorted(set(f["id"] for f in replayed)))
        self.assertGreater(replayed[0]["id"], seen["id"])
        self.assertEqual(sync["data"]["seq"], replayed[-1]["id"])
        last = {}
        for f in replayed:
            if f["event"] == "task":
                last[f["data"]["task_id"]] = f["data"]["status"]
        self.assertEqual(last, {t1: "success", t2: "success"})

        # A browser's EventSource sends Last-Event-ID; the same replay comes back.
        h = self.open_watch(headers={"Last-Event-ID": str(seen["id"])})
        _, again = h.until(lambda f: f["event"] == "sync")
        self.assertEqual([f["id"] for f in again], [f["id"] for f in replayed])

        # From the start of the first stream: the first task's events too; live events follow.
        s = self.open_watch("?since=%d" % start)
        _, everything = s.until(lambda f: f["event"] == "sync")
        self.assertEqual(everything[0]["id"], start + 1)
        self.assertTrue(task_event(t1)(everything[0]), everything[0])
        t3 = self.c.submit("true")
        s.until(task_event(t3), timeout=1, what="a live event after the replay")

    def test_a_sequence_that_cannot_be_resumed_is_answered_with_a_reset(self):
        for since in ("0", "99999999999999999"):
            w = self.open_watch("?since=" + since)
            self.assertEqual(w.status, 200)
            first = w.next()
            self.assertEqual(first["event"], "reset", first)
            self.assertIn("reason", first["data"])
            self.assertEqual(first["id"], first["data"]["seq"])
            # Live events follow the reset.
            tid = self.c.submit("true")
            w.until(task_event(tid), timeout=1, what="a live event after the reset")

    def test_bad_requests_get_a_clear_error(self):
        r = self.open_watch("?since=abc")
        self.assertEqual(r.status, 400)
        self.assertIn(b"since must be a sequence number", r.body)
        r = self.open_watch("?from=1")
        self.assertEqual(r.status, 400)
        self.assertIn(b'unknown query parameter \\"from\\"', r.body)
        r = self.open_watch(headers={"Last-Event-ID": "x1"})
        self.assertEqual(r.status, 400)
        self.assertIn(b"Last-Event-ID must be a sequence number", r.body)
        r = self.c.request("POST", API + "/watch", {})
        self.assertEqual(r.status, 405)

    def test_quota_and_node_changes_are_events(self):
        w = self.open_watch()
        w.next()
        self.assertEqual(self.c.set_quota(0.6).status, 200)
        q, _ = w.until(lambda f: f["event"] == "quota", what="the quota event")
        self.assertAlmostEqual(q["data"]["online_percent"], 0.6)
        self.assertEqual((q["data"]["total_gpus"], q["data"]["online"]["quota"]), (2, 1))
        r = self.c.request("POST", API + "/agents/a1/cordon", {})
        self.assertEqual(r.status, 200, r)
        n, _ = w.until(lambda f: f["event"] == "node", what="the node event")
        self.assertEqual((n["data"]["id"], n["data"]["mode"], n["data"]["status"]),
                         ("a1", "cordoned", "cordoned"))

    def test_a_hundred_watchers_see_every_event(self):
        streams = [self.open_watch() for _ in range(100)]
        for s in streams:
            self.assertEqual(s.next()["event"], "sync")
        started = time.monotonic()
        tid = self.c.submit("true")
        for s in streams:
            s.until(task_event(tid), timeout=2, what="the task on every stream")
        self.assertLess(time.monotonic() - started, 2.0)
        for s in streams:
            s.until(task_event(tid, "success"), timeout=10, what="its success on every stream")


    def ctl(self, *args):
        """dgpuctl with these arguments, running; stopped at the end of the test."""
        proc = subprocess.Popen([CTL_BIN, "--server", self.c.base] + list(args),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def stop():
            proc.kill()
            proc.wait()
            proc.stdout.close()
        self.addCleanup(stop)
        return proc

    def read_lines(self, proc, until, timeout=10):
        """Lines of proc's stdout (read unbuffered) until one contains `until`."""
        lines = []
        pending = getattr(proc, "pending", b"")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                lines.append(line.decode())
                if until in lines[-1]:
                    proc.pending = pending
                    return lines
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                pending += chunk
        self.fail("no line with %r within %.0f s: %r" % (until, timeout, lines))

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl_get_tasks_watch_prints_each_change(self):
        first = self.c.submit("true")
        self.c.wait_finished(first)
        proc = self.ctl("get", "tasks", "--watch")
        header = self.read_lines(proc, first)
        self.assertTrue(header[0].startswith("ID "), header)
        tid = self.c.submit("sleep 0.2", name="watched")
        lines = self.read_lines(proc, "success")
        rows = [l.split() for l in lines]
        self.assertTrue(all(r[0] == tid and r[1] == "watched" for r in rows), lines)
        self.assertEqual(rows[-1][5], "success")
        self.assertIn("running", [r[5] for r in rows])
        # The rows line up with the list's columns.
        self.assertEqual(lines[0].index("watched"), header[0].index("NAME"))

        # Filters apply to the changes too; -o json prints one object per line.
        proc2 = self.ctl("-o", "json", "get", "tasks", "--watch", "--status", "failed")
        self.read_lines(proc2, '"tasks"')
        self.c.submit("true")
        bad = self.c.submit("exit 3")
        line = self.read_lines(proc2, bad)[-1]
        self.assertIn('"status":"failed"', line)
        self.assertIn('"exit_code":3', line)


if __name__ == "__main__":
    unittest.main()
