"""Crash test: SIGKILL the scheduler at random moments under continuous submissions.

Eight threads submit over keep-alive connections. The scheduler is killed (SIGKILL) at a seeded
random moment, restarted on the same state directory, and checked:
  - every task that got a 201 exists (GET /api/v1/tasks/{id} 200, status pending: there are no
    agents) and is listed as pending;
  - task ids are never reused: every id acknowledged by an incarnation is greater than every id
    acknowledged by any earlier incarnation, and no id is acknowledged twice;
  - queue order is preserved: the restored queues (state.json, written every second) hold the
    pending tasks in increasing id order, and ids follow real-time submission order (a task
    acknowledged before another was sent has the smaller id).

Environment: DGPU_CRASH_SEED (default 20261129), DGPU_CRASH_ROUNDS (default 20).
"""

import bisect
import json
import os
import random
import threading
import time
import unittest

import dgpu_proc as dp

SUBMITTERS = 8


class Load:
    """Submitter threads and what they observed."""

    def __init__(self, port, seed):
        self.port = port
        self.seed = seed
        self.lock = threading.Lock()
        self.incarnation = -1  # -1 while the scheduler is down.
        self.stop = False
        self.acks = []  # (incarnation or None, id number, priority, send_t, recv_t)
        self.bad = []  # (status, body, incarnation)
        self.errors = 0
        self.busy = [None] * SUBMITTERS  # Incarnation a thread is talking to, or None.
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(SUBMITTERS)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop = True
        for t in self.threads:
            t.join(15)

    def run(self, idx):
        rng = random.Random(self.seed * 100 + idx)
        conn = dp.Http(self.port, timeout=5.0)
        try:
            self.submit_loop(idx, rng, conn)
        finally:
            conn.close()

    def submit_loop(self, idx, rng, conn):
        conn_inc = None
        n = 0
        while not self.stop:
            inc = self.incarnation
            if inc < 0:
                conn.close()
                time.sleep(0.002)
                continue
            if conn_inc != inc:
                conn.close()
                conn_inc = inc
            self.busy[idx] = inc
            priority = "high" if rng.random() < 0.5 else "low"
            n += 1
            send_t = time.monotonic()
            try:
                status, body = conn.request(
                    "POST", "/api/v1/tasks",
                    dp.submit_body(command="true", priority=priority, name="s%d-%d" % (idx, n)))
            except Exception:
                self.busy[idx] = None
                with self.lock:
                    self.errors += 1
                time.sleep(0.002)
                continue
            recv_t = time.monotonic()
            # The incarnation is exact only if it did not change during the request.
            tag = inc if self.incarnation == inc else None
            with self.lock:
                if status == 201:
                    self.acks.append((tag, dp.task_number(body["task_id"]), priority, send_t,
                                      recv_t))
                else:
                    self.bad.append((status, body, tag))
            self.busy[idx] = None

    def wait_idle(self, inc, timeout=10.0):
        """Waits until no thread is inside a request to incarnation `inc`."""
        dp.wait_until(lambda: all(b != inc for b in self.busy), timeout,
                      interval=0.002, what="submitters to leave incarnation %d" % inc)

    def snapshot(self):
        with self.lock:
            return list(self.acks), list(self.bad)


def pending_ids(sched):
    """All pending task numbers, by paging GET /api/v1/tasks?status=pending (newest first;
    tasks added while paging shift pages, which repeats entries but never skips one)."""
    ids = set()
    offset = 0
    while True:
        status, body = sched.http("GET", "/api/v1/tasks?status=pending&limit=1000&offset=%d"
                                  % offset, timeout=30.0)
        if status != 200:
            raise AssertionError("listing pending tasks: %s %s" % (status, body))
        for t in body["tasks"]:
            if t["status"] != "pending":
                raise AssertionError("task listed as pending has status %s" % t["status"])
            ids.add(dp.task_number(t["task_id"]))
        offset += len(body["tasks"])
        if not body["tasks"] or offset >= body["total"]:
            return ids


class CrashTest(unittest.TestCase):
    def setUp(self):
        self.tmp = dp.TempDir("dgpu-crash-")
        self.sched = dp.Scheduler(self.tmp.path,
                                  scheduler={"snapshot_interval": 1},
                                  logging={"level": "warn"})
        self.load = None

    def tearDown(self):
        if self.load is not None:
            self.load.finish()
        self.sched.stop()
        if self._outcome_ok():
            self.tmp.cleanup()
        else:
            print("kept work directory for inspection: " + self.tmp.path)

    def _outcome_ok(self):
        outcome = getattr(self, "_outcome", None)
        if outcome is None:
            return True
        errors = getattr(outcome, "errors", None)
        if errors is None:  # Python >= 3.11
            result = getattr(outcome, "result", None)
            return result is None or (not result.failures and not result.errors)
        return not any(e for _, e in errors)

    def read_state_json(self, newer_than):
        path = os.path.join(self.sched.state_dir, "state.json")

        def fresh():
            try:
                if os.stat(path).st_mtime < newer_than:
                    return None
                with open(path) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None  # Absent or being replaced: try again.
        return dp.wait_until(fresh, 10.0, interval=0.05, what="a fresh state.json")

    def check_queues(self, state, acked_pending):
        """The restored queues hold every acknowledged pending task, in increasing id order."""
        for prio in ("high", "low"):
            order = [dp.task_number(t) for t in state["queues"][prio]]
            self.assertEqual(order, sorted(order),
                             "%s queue is not in submission (id) order" % prio)
            self.assertEqual(len(order), len(set(order)), "%s queue repeats a task" % prio)
            want = {i for i, p in acked_pending.items() if p == prio}
            missing = want - set(order)
            self.assertFalse(missing, "acknowledged %s tasks missing from the queue: %s"
                             % (prio, sorted(missing)[:10]))

    def test_sigkill_under_load(self):
        seed = int(os.environ.get("DGPU_CRASH_SEED", "20261129"))
        rounds = int(os.environ.get("DGPU_CRASH_ROUNDS", "20"))
        rng = random.Random(seed)
        print("seed %d, %d rounds" % (seed, rounds))
        self.load = load = Load(self.sched.http_port, seed)
        load.start()
        started = time.monotonic()
        restart_times = []
        for r in range(rounds + 1):
            t0 = time.monotonic()
            wall0 = time.time()
            self.sched.start()
            self.sched.wait_ready()
            restart_times.append(time.monotonic() - t0)
            acks, bad = load.snapshot()
            self.assertFalse(bad, "non-201 answers: %r" % bad[:5])
            load.incarnation = r  # Submissions resume against the new process.

            if r > 0:
                self.verify_after_restart(r, acks, wall0, check_queue=(r % 4 == 0 or r == rounds))
            if r == rounds:
                break
            time.sleep(rng.uniform(0.05, 0.6))
            load.incarnation = -1
            self.sched.kill()
            load.wait_idle(r)

        load.finish()
        acks, bad = load.snapshot()
        self.assertFalse(bad, "non-201 answers: %r" % bad[:5])
        self.verify_ids(acks)
        elapsed = time.monotonic() - started
        print("%d rounds in %.1fs: %d tasks acknowledged, %d connection errors; restart "
              "(exec to /healthz) mean %.0f ms, max %.0f ms"
              % (rounds, elapsed, len(acks), load.errors,
                 1000 * sum(restart_times) / len(restart_times), 1000 * max(restart_times)))
        self.assertGreater(len(acks), 100 * rounds // 10, "too few submissions went through")

    def verify_after_restart(self, r, acks, restart_wall, check_queue):
        acked = {a[1]: a[2] for a in acks}
        self.assertEqual(len(acked), len(acks), "an id was acknowledged twice")
        pending = pending_ids(self.sched)
        missing = set(acked) - pending
        self.assertFalse(missing, "round %d: acknowledged tasks lost by the crash: %s"
                         % (r, sorted(missing)[:10]))
        # Individual reads: the newest acknowledged tasks, and a random sample of the rest.
        newest = sorted(acked)[-8:]
        sample = random.Random(r).sample(sorted(acked), min(12, len(acked)))
        for n in set(newest + sample):
            status, body = self.sched.http("GET", "/api/v1/tasks/task-%d" % n)
            self.assertEqual(status, 200, "task-%d: %s %s" % (n, status, body))
            self.assertEqual(body["status"], "pending", body)
            self.assertEqual(body["priority"], acked[n], body)
            self.assertEqual(body["attempts"], 0, body)
        if check_queue:
            self.check_queues(self.read_state_json(restart_wall), acked)

    def verify_ids(self, acks):
        ids = [a[1] for a in acks]
        self.assertEqual(len(ids), len(set(ids)), "an id was acknowledged twice")
        # Never reused: each incarnation's ids are above all ids of earlier incarnations.
        by_inc = {}
        for inc, n, _, _, _ in acks:
            if inc is not None:
                by_inc.setdefault(inc, []).append(n)
        highest_before = 0
        for inc in sorted(by_inc):
            self.assertGreater(min(by_inc[inc]), highest_before,
                               "incarnation %d reused an id at or below %d"
                               % (inc, highest_before))
            highest_before = max(highest_before, max(by_inc[inc]))
        # Real-time order: a task acknowledged before another was sent has a smaller id.
        by_recv = sorted(acks, key=lambda a: a[4])
        recv_times = [a[4] for a in by_recv]
        prefix_max = []
        m = 0
        for a in by_recv:
            m = max(m, a[1])
            prefix_max.append(m)
        for a in acks:
            k = bisect.bisect_left(recv_times, a[3])  # Acks received strictly before sending.
            if k > 0:
                self.assertGreater(a[1], prefix_max[k - 1],
                                   "task-%d was submitted after task-%d was acknowledged but "
                                   "got a smaller id" % (a[1], prefix_max[k - 1]))


if __name__ == "__main__":
    unittest.main()
