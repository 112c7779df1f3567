"""GET /api/v1/tasks/{id}/logs: a task's output read through the scheduler from the agent that
holds it, with a real scheduler, real agents and real processes: content, tail and offset, reads
larger than one piece, follow (a line written after the request arrives within a second, the
stream ends with the task), a finished task after its agent restarted, 404 log_unavailable, bad
input, and dgpuctl logs."""

import http.client
import os
import subprocess
import time
import urllib.parse

import harness
from harness import API, CTL_BIN, ClusterTestCase


class LogFollow:
    """A GET .../logs?follow=true response, read as it arrives."""

    def __init__(self, base, path, timeout=10):
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.conn.request("GET", path)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.headers = self.response.headers
        self.text = b""

    def until(self, needle, timeout=5):
        """Reads until `needle` (bytes) has arrived; returns the seconds it took."""
        start = time.monotonic()
        while needle not in self.text:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                raise AssertionError("no %r within %.1f s; got %r" % (needle, timeout, self.text))
            self.conn.sock.settimeout(left)
            chunk = self.response.read1(65536)
            if not chunk:
                raise AssertionError("the log ended before %r; got %r" % (needle, self.text))
            self.text += chunk
        return time.monotonic() - start

    def rest(self, timeout=10):
        """Everything until the response ends."""
        self.conn.sock.settimeout(timeout)
        self.text += self.response.read()
        return self.text

    def close(self):
        self.conn.close()


class LogsTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0}

    def log(self, tid, query="", status=200):
        r = self.c.get(API + "/tasks/%s/logs%s" % (tid, query))
        self.assertEqual(r.status, status, r)
        return r

    def run_to_end(self, command, **fields):
        tid = self.c.submit(command, **fields)
        self.c.wait_status(tid, ("success", "failed"))
        return tid

    def test_content_tail_and_offset(self):
        tid = self.run_to_end("printf 'one\\ntwo\\nthree\\n'; echo err >&2")
        r = self.log(tid)
        self.assertEqual(r.headers.get("Content-Type"), "text/plain; charset=utf-8")
        self.assertEqual(r.headers.get("X-Dgpu-Node"), "a1")
        self.assertEqual(r.body, b"one\ntwo\nthree\nerr\n")
        self.assertEqual(self.log(tid, "?tail=2").body, b"three\nerr\n")
        self.assertEqual(self.log(tid, "?tail=1000").body, b"one\ntwo\nthree\nerr\n")
        self.assertEqual(self.log(tid, "?tail=0").body, b"")
        self.assertEqual(self.log(tid, "?offset=4").body, b"two\nthree\nerr\n")
        self.assertEqual(self.log(tid, "?offset=999").body, b"")
        # A finished task's follow is its log, then the end.
        self.assertEqual(self.log(tid, "?follow=true&tail=1").body, b"err\n")

    def test_a_log_larger_than_one_piece_arrives_whole(self):
        # 3 MiB of numbered lines: six reads of 512 KiB from the agent.
        tid = self.run_to_end("seq 1 400000")
        with open(self.c.task_log("a1", tid), "rb") as f:
            expected = f.read()
        self.assertGreater(len(expected), 2 << 20)
        self.assertEqual(self.log(tid).body, expected)
        self.assertEqual(self.log(tid, "?tail=3").body, b"399998\n399999\n400000\n")

    def test_follow_gets_a_line_written_after_the_request_within_a_second(self):
        flag = os.path.join(self.c.tmp, "go")
        tid = self.c.submit("echo begun; while [ ! -e %s ]; do sleep 0.02; done; echo later; "
                            "sleep 0.3; echo last" % flag)
        self.c.wait_status(tid, "running")
        f = LogFollow(self.c.base, API + "/tasks/%s/logs?follow=true" % tid)
        self.addCleanup(f.close)
        self.assertEqual(f.status, 200, f.response.read() if f.status != 200 else "")
        f.until(b"begun\n")
        time.sleep(0.5)  # Nothing new: the follow waits.
        self.assertEqual(f.text, b"begun\n")
        with open(flag, "w"):
            pass
        took = f.until(b"later\n", timeout=2)
        self.assertLess(took, 1.0)
        # The stream ends once the task has, with everything it wrote.
        self.assertEqual(f.rest(), b"begun\nlater\nlast\n")
        self.assertEqual(self.c.task(tid)["status"], "success")

    def test_follow_with_tail_zero_gets_only_new_output(self):
        flag = os.path.join(self.c.tmp, "go")
        tid = self.c.submit("echo old; while [ ! -e %s ]; do sleep 0.02; done; echo new" % flag)
        self.c.wait_status(tid, "running")
        harness.wait_until(lambda: os.path.getsize(self.c.task_log("a1", tid)) > 0, 5,
                           what="the first line")
        f = LogFollow(self.c.base, API + "/tasks/%s/logs?follow=true&tail=0" % tid)
        self.addCleanup(f.close)
        time.sleep(0.3)
        with open(flag, "w"):
            pass
        self.assertEqual(f.rest(), b"new\n")

    def test_a_finished_task_is_read_after_its_agent_restarted(self):
        tid = self.run_to_end("echo kept")
        self.c.agents["a1"].kill9()
        harness.wait_until(lambda: self.c.agents_view()["a1"]["status"] == "offline", 15,
                           what="a1 to go offline")
        r = self.c.get(API + "/tasks/%s/logs" % tid)
        self.assertApiError(r, 404, "log_unavailable", mentions="a1")
        self.c.start_agent("a1")
        self.c.wait_agents_online(["a1"])
        harness.wait_until(lambda: self.c.get(API + "/tasks/%s/logs" % tid).status == 200, 10,
                           what="the log to be readable again")
        self.assertEqual(self.log(tid).body, b"kept\n")

    def test_a_task_queued_again_is_read_from_the_node_of_its_latest_run(self):
        tid = self.c.submit("echo try; exit 3", max_retries=1, retry_backoff_seconds=600)
        harness.wait_until(lambda: self.c.task(tid)["retries"] == 1, 15, what="the retry")
        t = self.c.task(tid)
        self.assertEqual((t["status"], t["node_id"]), ("pending", None))
        r = self.log(tid)
        self.assertEqual((r.body, r.headers.get("X-Dgpu-Node")), (b"try\n", "a1"))

    def test_log_unavailable_and_not_found(self):
        hold = self.c.submit("sleep 30", gpu_count=2)
        self.c.wait_status(hold, "running")
        queued = self.c.submit("echo never", gpu_count=2)
        r = self.c.get(API + "/tasks/%s/logs" % queued)
        self.assertApiError(r, 404, "log_unavailable", mentions="not run")
        self.assertApiError(self.c.get(API + "/tasks/task-999999/logs"), 404, "not_found")
        self.assertApiError(self.c.get(API + "/tasks/nope/logs"), 404, "not_found")
        # A running task with no log (yet: one dispatched a moment ago) reads as an empty log.
        harness.wait_until(lambda: os.path.exists(self.c.task_log("a1", hold)), 10,
                           what="the running task's log")
        os.unlink(self.c.task_log("a1", hold))
        self.assertEqual(self.log(hold).body, b"")
        # The node no longer has the file (removed by hand, or by retention).
        self.c.request("DELETE", API + "/tasks/" + queued)
        self.c.request("DELETE", API + "/tasks/%s?grace_seconds=0" % hold)
        done = self.run_to_end("echo gone")
        os.unlink(self.c.task_log("a1", done))
        self.assertApiError(self.c.get(API + "/tasks/%s/logs" % done), 404, "log_unavailable",
                            mentions="a1")

    def test_bad_queries_name_the_parameter(self):
        tid = self.run_to_end("echo x")
        for query, code, word in (("?tail=-1", "invalid_field", "tail"),
                                  ("?tail=abc", "invalid_field", "tail"),
                                  ("?follow=maybe", "invalid_field", "follow"),
                                  ("?rank=-2", "invalid_field", "rank"),
                                  ("?rank=1", "invalid_field", "rank"),
                                  ("?offset=-1", "invalid_field", "offset"),
                                  ("?tail=1&offset=2", "invalid_field", "offset"),
                                  ("?colour=red", "unknown_field", "colour")):
            r = self.c.get(API + "/tasks/%s/logs%s" % (tid, query))
            self.assertApiError(r, 400, code, mentions=word)
        r = self.c.request("DELETE", API + "/tasks/%s/logs" % tid)
        self.assertApiError(r, 405, "method_not_allowed")

    def test_dgpuctl_logs(self):
        if not CTL_BIN:
            self.skipTest("dgpuctl not built")
        tid = self.run_to_end("printf 'a\\nb\\nc\\n'")
        ctl = [CTL_BIN, "--server", self.c.base]
        out = subprocess.run(ctl + ["logs", tid], capture_output=True, text=True, timeout=20)
        self.assertEqual((out.returncode, out.stdout), (0, "a\nb\nc\n"), out.stderr)
        out = subprocess.run(ctl + ["logs", "--tail", "1", tid], capture_output=True, text=True,
                             timeout=20)
        self.assertEqual((out.returncode, out.stdout), (0, "c\n"), out.stderr)
        # -f on a running task: its output as it comes, then the end with the task.
        flag = os.path.join(self.c.tmp, "go")
        running = self.c.submit("echo first; while [ ! -e %s ]; do sleep 0.02; done; echo second"
                                % flag)
        self.c.wait_status(running, "running")
        p = subprocess.Popen(ctl + ["logs", "-f", running], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.kill)
        self.assertEqual(p.stdout.readline(), "first\n")
        with open(flag, "w"):
            pass
        out, err = p.communicate(timeout=10)
        self.assertEqual((p.returncode, out), (0, "second\n"), err)
        out = subprocess.run(ctl + ["logs", "task-999999"], capture_output=True, text=True,
                             timeout=20)
        self.assertEqual(out.returncode, 3)
        self.assertIn("not found", out.stderr)


class LogLimitsTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0}
    AGENT_KWARGS = {"extra": {"executor": {"max_log_bytes": "1000", "retention": "3s"}}}

    def test_a_log_is_cut_at_max_log_bytes_and_the_task_is_not_held_back(self):
        tid = self.c.submit("seq 1 10000; echo done >&2")
        self.c.wait_status(tid, "success")
        full = "".join("%d\n" % i for i in range(1, 10001)).encode()
        # The 1000th byte ends a line ("277\n"): the marker follows with no blank line.
        self.assertEqual(full[996:1000], b"277\n")
        expected = (full[:1000] + b"dgpu: log cut at 1000 bytes (executor.max_log_bytes); "
                    b"further output is discarded\n")
        r = self.c.get(API + "/tasks/%s/logs" % tid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body, expected)
        # 200 MiB of output: discarded as fast as it comes, the task is never blocked.
        started = time.monotonic()
        big = self.c.submit("head -c 200000000 /dev/zero")
        self.c.wait_status(big, "success", timeout=30)
        self.assertLess(time.monotonic() - started, 20)
        self.assertLess(os.path.getsize(self.c.task_log("a1", big)), 1200)

    def test_retention_removes_a_finished_tasks_directory_and_log(self):
        tid = self.c.submit("echo data > out.txt; echo hi")
        self.c.wait_status(tid, "success")
        work = os.path.join(self.c.work_dir("a1"), tid)
        log = self.c.task_log("a1", tid)
        self.assertTrue(os.path.exists(os.path.join(work, "out.txt")))
        # Kept while it runs, however old.
        running = self.c.submit("sleep 30")
        self.c.wait_status(running, "running")
        harness.wait_until(lambda: not os.path.exists(work) and not os.path.exists(log), 10,
                           what="retention to remove %s" % tid)
        self.assertTrue(os.path.isdir(os.path.join(self.c.work_dir("a1"), running)))
        self.assertTrue(os.path.exists(os.path.join(self.c.work_dir("a1"), ".dgpu-instance")))
        r = self.c.get(API + "/tasks/%s/logs" % tid)
        self.assertApiError(r, 404, "log_unavailable")


if __name__ == "__main__":
    import unittest
    unittest.main()
