"""Every bad request gets its exact status and error code, in the {"error": {"code", "message"}}
shape, names the offending field, and changes nothing. One cluster serves the whole module (bad
requests leave no trace, which is what is checked)."""

import json
import sys
import unittest

from harness import API, Cluster, ClusterTestCase

VALID = {"priority": "high", "gpu_count": 1, "command": "true"}


def with_fields(**fields):
    body = dict(VALID)
    for k, v in fields.items():
        if v is REMOVE:
            body.pop(k, None)
        else:
            body[k] = v
    return body


REMOVE = object()


class BadInputTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 4
    cluster = None
    any_failed = False

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster("bad_input")
        try:
            cls.cluster.start(agents=2, gpus=4)
        except BaseException:
            sys.stderr.write(cls.cluster.log_tails())
            cls.cluster.shutdown()
            cls.cluster.remove_files()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.shutdown()
        if cls.any_failed:
            sys.stderr.write("\n==== daemon logs (%s) ====\n%s\n"
                             % (cls.cluster.tmp, cls.cluster.log_tails()))
        cls.cluster.remove_files()

    def setUp(self):
        self.c = self.cluster
        self.addCleanup(self._note_failure)

    def _note_failure(self):
        if self._failed():
            type(self).any_failed = True

    # -- helpers ------------------------------------------------------------------------------

    def state(self):
        """What a bad request must not change."""
        tasks = self.c.tasks("?limit=1000")
        q = self.c.quota()
        return tasks["total"], [t["task_id"] for t in tasks["tasks"]], q

    def expect_rejected(self, method, path, status, code, mentions=None, **kw):
        before = self.state()
        r = self.c.request(method, path, **kw)
        self.assertApiError(r, status, code, mentions)
        self.assertEqual(self.state(), before, "a rejected request changed the state")
        return r

    def submit_rejected(self, body, code="invalid_field", mentions=None, status=400):
        return self.expect_rejected("POST", API + "/tasks", status, code, mentions,
                                    raw=json.dumps(body),
                                    headers={"Content-Type": "application/json"})

    # -- transport-level ----------------------------------------------------------------------

    def test_malformed_json(self):
        for raw in ['{"priority": "high", "gpu_count": 1,', "not json", "", "{}}", "[1, 2"]:
            with self.subTest(raw=raw):
                self.expect_rejected("POST", API + "/tasks", 400, "invalid_json", raw=raw,
                                     headers={"Content-Type": "application/json"})

    def test_body_not_an_object(self):
        for raw in ["[]", "42", '"task"', "null"]:
            with self.subTest(raw=raw):
                self.expect_rejected("POST", API + "/tasks", 400, "invalid_json", raw=raw,
                                     headers={"Content-Type": "application/json"})

    def test_wrong_content_type(self):
        for ctype in ["text/plain", "application/x-www-form-urlencoded", "text/json"]:
            with self.subTest(ctype=ctype):
                self.expect_rejected("POST", API + "/tasks", 415, "unsupported_media_type",
                                     raw=json.dumps(VALID), headers={"Content-Type": ctype})
        self.expect_rejected("PUT", API + "/quota", 415, "unsupported_media_type",
                             raw='{"online_percent": 0.5}', headers={"Content-Type": "text/plain"})

    def test_json_content_type_with_charset_is_accepted(self):
        r = self.c.request("POST", API + "/tasks", raw=json.dumps(with_fields(command="true")),
                           headers={"Content-Type": "application/json; charset=utf-8"})
        self.assertEqual(r.status, 201, r)
        self.c.wait_finished(r.json["task_id"])

    def test_body_over_1mib(self):
        big = json.dumps(with_fields(name="x" * (1024 * 1024)))
        self.assertGreater(len(big), 1024 * 1024)
        self.expect_rejected("POST", API + "/tasks", 413, "payload_too_large", raw=big,
                             headers={"Content-Type": "application/json"})
        self.expect_rejected("PUT", API + "/quota", 413, "payload_too_large",
                             raw='{"online_percent": 0.5, "pad": "%s"}' % ("y" * (1 << 20)),
                             headers={"Content-Type": "application/json"})

    def test_number_overflowing_a_double(self):
        # Regression: 1e400 made the JSON parser throw out_of_range, which was not caught: the
        # connection was closed without a response.
        raw = '{"priority": "high", "gpu_count": 1e400, "command": "true"}'
        self.expect_rejected("POST", API + "/tasks", 400, "invalid_json", raw=raw,
                             headers={"Content-Type": "application/json"})
        self.expect_rejected("PUT", API + "/quota", 400, "invalid_json",
                             raw='{"online_percent": 1e400}',
                             headers={"Content-Type": "application/json"})

    def test_huge_offset_is_past_the_end(self):
        # Regression: offsets were cast to int, so 2^32 wrapped around to 0 (the first page).
        tid = self.c.submit("true")
        self.c.wait_finished(tid)
        for offset in [2 ** 32, 2 ** 32 + 1, 10 ** 15]:
            with self.subTest(offset=offset):
                page = self.c.tasks("?offset=%d" % offset)
                self.assertEqual(page["tasks"], [])
                self.assertGreaterEqual(page["total"], 1)

    def test_malformed_listing_numbers(self):
        for query, field in [("limit=12x", "limit"), ("limit=", "limit"),
                             ("limit=99999999999999999999", "limit"), ("limit=1.5", "limit"),
                             ("offset=-1", "offset"), ("offset=7x", "offset"),
                             ("offset=99999999999999999999", "offset")]:
            with self.subTest(query=query):
                self.expect_rejected("GET", API + "/tasks?" + query, 400, "invalid_field",
                                     mentions=field)

    # -- fields -------------------------------------------------------------------------------

    def test_gpu_count(self):
        for value in [0, -1, 1.5, "2", 1025, None, True, [1], 2 ** 63]:
            with self.subTest(gpu_count=value):
                self.submit_rejected(with_fields(gpu_count=value), mentions="gpu_count")
        self.submit_rejected(with_fields(gpu_count=REMOVE), mentions="gpu_count")

    def test_gpu_count_beyond_biggest_node_is_queued(self):
        # Documented choice: a task larger than any node is accepted and waits (exceeds_cluster).
        before = self.c.tasks()["total"]
        r = self.c.request("POST", API + "/tasks", with_fields(gpu_count=5))
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        t = self.c.task(tid)
        self.assertEqual(t["status"], "pending")
        self.assertEqual(t["pending_reason"], "exceeds_cluster")
        self.assertEqual(self.c.tasks()["total"], before + 1)
        self.assertEqual(self.c.cancel(tid).status, 200)

    def test_priority(self):
        for value in ["urgent", "HIGH", "", 1, None]:
            with self.subTest(priority=value):
                self.submit_rejected(with_fields(priority=value), mentions="priority")
        self.submit_rejected(with_fields(priority=REMOVE), mentions="priority")

    def test_command(self):
        for value in ["", "   ", None, 42, ["echo", "hi"], "echo a\u0000b",
                      "x" * (64 * 1024 + 1)]:
            with self.subTest(command=repr(value)[:40]):
                self.submit_rejected(with_fields(command=value), mentions="command")
        self.submit_rejected(with_fields(command=REMOVE), mentions="command")

    def test_command_at_limit_is_accepted(self):
        cmd = "true #" + "x" * (64 * 1024 - 6)
        self.assertEqual(len(cmd), 64 * 1024)
        r = self.c.request("POST", API + "/tasks", with_fields(command=cmd))
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.c.wait_finished(r.json["task_id"])["status"], "success")

    def test_env(self):
        cases = [
            ("not-an-object", "env"),
            (["A=1"], "env"),
            ({"A": 1}, "env.A"),
            ({"A": None}, "env.A"),
            ({"A": {"x": "y"}}, "env.A"),
            ({"1BAD": "x"}, "1BAD"),
            ({"BAD-NAME": "x"}, "BAD-NAME"),
            ({"": "x"}, "env"),
            ({"CUDA_VISIBLE_DEVICES": "0,1"}, "CUDA_VISIBLE_DEVICES"),
            ({"NVIDIA_VISIBLE_DEVICES": "all"}, "NVIDIA_VISIBLE_DEVICES"),
            ({"DGPU_TASK_ID": "task-1"}, "DGPU_TASK_ID"),
            ({"A": "nul\u0000"}, "env.A"),
        ]
        for env, word in cases:
            with self.subTest(env=env):
                self.submit_rejected(with_fields(env=env), mentions=word)

    def test_other_fields(self):
        cases = [
            (with_fields(name=5), "name"),
            (with_fields(name="n" * 10000), "name"),
            (with_fields(gpu_model=["V100"]), "gpu_model"),
            (with_fields(timeout_seconds=-1), "timeout_seconds"),
            (with_fields(timeout_seconds=1.5), "timeout_seconds"),
            (with_fields(timeout_seconds="10"), "timeout_seconds"),
            (with_fields(image=7), "image"),
        ]
        for body, word in cases:
            with self.subTest(field=word, body=str(body)[:80]):
                self.submit_rejected(body, mentions=word)

    def test_unknown_field(self):
        self.submit_rejected(with_fields(gpus=2), code="unknown_field", mentions="gpus")
        self.submit_rejected(with_fields(Priority="high"), code="unknown_field",
                             mentions="Priority")
        self.expect_rejected("PUT", API + "/quota", 400, "unknown_field", mentions="online",
                             body={"online_percent": 0.5, "online": 1})

    # -- quota --------------------------------------------------------------------------------

    def test_put_quota_invalid(self):
        for value in [1.5, -0.1, "x", None, True, [0.5]]:
            with self.subTest(online_percent=value):
                self.expect_rejected("PUT", API + "/quota", 400, "invalid_field",
                                     mentions="online_percent", body={"online_percent": value})
        self.expect_rejected("PUT", API + "/quota", 400, "invalid_field",
                             mentions="online_percent", body={})
        self.expect_rejected("PUT", API + "/quota", 400, "invalid_json", raw="{online_percent: 1}",
                             headers={"Content-Type": "application/json"})
        self.expect_rejected("PUT", API + "/quota", 400, "invalid_field",
                             body={"online_percent": 0.5, "batch_percent": 0.6})
        q = self.c.quota()
        self.assertAlmostEqual(q["online_percent"], 0.7)
        self.assertEqual((q["online"]["quota"], q["batch"]["quota"]), (6, 2))

    # -- ids, methods, paths ------------------------------------------------------------------

    def test_unknown_and_malformed_task_ids(self):
        for tid in ["task-999999", "task-0", "task-01", "task-abc", "abc", "task-",
                    "task-99999999999999999999999", "%20"]:
            with self.subTest(task_id=tid):
                self.expect_rejected("GET", API + "/tasks/" + tid, 404, "not_found")
                self.expect_rejected("DELETE", API + "/tasks/" + tid, 404, "not_found")

    def test_cancel_finished_task_conflict(self):
        tid = self.c.submit("true")
        self.assertEqual(self.c.wait_finished(tid)["status"], "success")
        r = self.expect_rejected("DELETE", API + "/tasks/" + tid, 409, "conflict", mentions=tid)
        self.assertIn("success", r.json["error"]["message"])
        self.assertEqual(self.c.task(tid)["status"], "success")

    def test_wrong_methods(self):
        cases = [
            ("PATCH", API + "/tasks"), ("PUT", API + "/tasks"), ("DELETE", API + "/tasks"),
            ("POST", API + "/gpus"), ("DELETE", API + "/gpus"),
            ("POST", API + "/quota"), ("DELETE", API + "/quota"),
            ("POST", API + "/agents"),
            ("POST", API + "/tasks/task-1"), ("PUT", API + "/tasks/task-1"),
            # Every path answers 405 for the methods it lacks, the probes and aliases too.
            ("POST", "/healthz"), ("DELETE", API + "/healthz"), ("POST", "/readyz"),
            ("PUT", API + "/readyz"), ("POST", "/metrics"), ("POST", API + "/metrics"),
            ("GET", API + "/agents/a1/drain"), ("POST", "/ui/"), ("DELETE", "/ui/index.html"),
        ]
        for method, path in cases:
            with self.subTest(method=method, path=path):
                self.expect_rejected(method, path, 405, "method_not_allowed", mentions=method,
                                     raw=b"{}", headers={"Content-Type": "application/json"})

    def test_unknown_paths(self):
        for path in ["/api/v1/task", "/api/v2/tasks", "/", "/api/v1/tasks/task-1/log",
                     "/api/v1/gpus/x"]:
            with self.subTest(path=path):
                self.expect_rejected("GET", path, 404, "not_found")

    def test_nothing_changed_overall(self):
        # The daemons survived all of the above and still serve a normal request.
        self.assertTrue(self.c.scheduler.running())
        for a in self.c.agents.values():
            self.assertTrue(a.running())
        self.assertEqual(self.c.get("/healthz").status, 200)
        tid = self.c.submit("true")
        self.assertEqual(self.c.wait_finished(tid)["status"], "success")


if __name__ == "__main__":
    unittest.main()
