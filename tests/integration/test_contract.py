"""The REST API against its description, api/openapi.yaml.

  * the routes the scheduler registers (dgpu-scheduler --print-routes, printed from the router
    itself) are exactly the operations the description has;
  * the scheduler serves the description, byte for byte, at GET /api/v1/openapi.yaml;
  * the description's schemas are valid JSON Schema and its examples match them;
  * every error code the REST layer can produce is in the description;
  * every operation, asked on a live cluster, answers as described: harness.http checks each
    response through tests/pylib/api_contract.py, and the tests here check the checker.
"""

import glob
import http.client
import json
import os
import re
import subprocess
import unittest

import api_contract
import harness
from dgpu_testlib import missing_dependency
from harness import API, ClusterTestCase

REPO = api_contract.REPO


def served_routes(test):
    if not os.access(harness.SCHEDULER_BIN, os.X_OK):
        test.skipTest("dgpu-scheduler not built: %s" % harness.SCHEDULER_BIN)
    out = subprocess.run([harness.SCHEDULER_BIN, "--print-routes"], capture_output=True,
                         text=True, timeout=30)
    test.assertEqual(out.returncode, 0, out.stderr)
    test.assertEqual(out.stderr, "")
    lines = out.stdout.splitlines()
    routes = [tuple(line.split(" ")) for line in lines]
    test.assertTrue(all(len(r) == 2 for r in routes), lines)
    test.assertEqual(len(routes), len(set(routes)), "a route is registered twice: %s" % lines)
    return set(routes)


class NeedsModules:
    def setUp(self):
        missing = api_contract.missing_modules()
        if missing:
            missing_dependency(self, "python modules missing: %s (Debian: python3-yaml, "
                               "python3-jsonschema)" % ", ".join(missing))
        self.doc = api_contract.load_description()
        super().setUp()


class DescriptionTest(NeedsModules, unittest.TestCase):
    def test_routes_are_exactly_the_described_operations(self):
        served = served_routes(self)
        described = api_contract.described_routes(self.doc)
        self.assertEqual(sorted(served - described), [],
                         "served by dgpu-scheduler but missing from api/openapi.yaml")
        self.assertEqual(sorted(described - served), [],
                         "described in api/openapi.yaml but not served by dgpu-scheduler")
        self.assertIn(("GET", "/api/v1/tasks/{id}"), served)
        self.assertIn(("GET", "/api/v1/openapi.yaml"), served)

    def test_schemas_are_valid_and_examples_match_them(self):
        import jsonschema
        contract = api_contract.Contract(self.doc)
        for name, schema in self.doc["components"]["schemas"].items():
            root = dict(schema, components=self.doc["components"])
            jsonschema.Draft202012Validator.check_schema(root)
        checked = 0
        for path, item in self.doc["paths"].items():
            for method, op in item.items():
                if method not in api_contract.METHODS:
                    continue
                self.assertIn("operationId", op, (method, path))
                bodies = [("request", op.get("requestBody", {}))]
                bodies += [(s, r) for s, r in op["responses"].items()]
                for what, part in bodies:
                    part = contract._resolve(part)
                    for media, content in part.get("content", {}).items():
                        if media != "application/json":
                            continue
                        self.assertTrue(content.get("examples"),
                                        "%s %s %s: no example" % (method, path, what))
                        v = contract._validator(("example", method, path, what),
                                                content["schema"])
                        for ex_name, ex in content["examples"].items():
                            ex = contract._resolve(ex)
                            errors = [e.message for e in v.iter_errors(ex["value"])]
                            self.assertEqual(errors, [], "%s %s %s example %s"
                                             % (method, path, what, ex_name))
                            checked += 1
        self.assertGreater(checked, 25)

    def test_every_error_code_of_the_rest_layer_is_described(self):
        codes = set()
        for path in glob.glob(os.path.join(REPO, "src", "scheduler", "*.cc")):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            # ApiError{413, "payload_too_large", ...} and ToApiError's {404, "not_found", ...}.
            codes.update(re.findall(r'\{\s*[1-5][0-9][0-9],\s*"([a-z_]+)"', text))
        self.assertIn("invalid_field", codes)
        self.assertIn("method_not_allowed", codes)
        described = set(self.doc["components"]["schemas"]["ErrorCode"]["enum"])
        self.assertEqual(sorted(codes - described), [])
        self.assertEqual(sorted(described - codes), [])

    def test_the_checker_rejects_what_is_not_described(self):
        c = api_contract.Contract(self.doc)
        ok = json.dumps({"message": "Task cancelled"}).encode()
        c.check("DELETE", "/api/v1/tasks/task-1", 200, "application/json", ok)
        bad = [
            # A field the schema does not have.
            ("DELETE", "/api/v1/tasks/task-1", 200, "application/json",
             json.dumps({"message": "Task cancelled", "extra": 1}).encode()),
            # A status the operation does not describe.
            ("DELETE", "/api/v1/tasks/task-1", 201, "application/json", ok),
            # An error code the status does not describe.
            ("GET", "/api/v1/tasks/task-1", 404, "application/json",
             json.dumps({"error": {"code": "conflict", "message": "x"}}).encode()),
            # A method the path does not describe must be a 405.
            ("PATCH", "/api/v1/tasks", 200, "application/json", ok),
            # An unknown path must be a 404 error object.
            ("GET", "/api/v2/tasks", 200, "application/json", ok),
            # The wrong content type.
            ("GET", "/metrics", 200, "application/json", b"{}"),
            # Not JSON.
            ("GET", "/api/v1/gpus", 200, "application/json", b"<html>"),
        ]
        for case in bad:
            with self.assertRaises(api_contract.ContractViolation, msg=repr(case)):
                c.check(*case)


class LiveTest(NeedsModules, ClusterTestCase):
    AGENTS = 1
    GPUS = 2

    def test_served_description_is_the_file(self):
        r = self.c.get(API + "/openapi.yaml")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers.get("Content-Type"), "application/yaml")
        with open(api_contract.DESCRIPTION, "rb") as f:
            self.assertEqual(r.body, f.read())
        r = self.c.request("POST", API + "/openapi.yaml", {})
        self.assertApiError(r, 405, "method_not_allowed")

    def test_every_operation_answers_as_described(self):
        # harness.http raises ContractViolation on any answer the description does not allow;
        # the statuses are asserted here too, so that each described response is exercised.
        seen = set()
        contract = api_contract.contract()

        def call(method, path, status, body=None, **kw):
            r = self.c.request(method, path, body, **kw)
            self.assertEqual(r.status, status, r)
            template = contract.template_of(path.split("?")[0])
            seen.add((method, template))
            return r

        tid = call("POST", API + "/tasks", 201,
                   {"priority": "high", "gpu_count": 1, "command": "exit 0", "name": "ok",
                    "env": {"A": "1"}, "gpu_model": harness.GPU_MODEL, "timeout_seconds": 60,
                    "image": ""}).json["task_id"]
        self.c.wait_status(tid, "success")
        call("GET", API + "/tasks/" + tid, 200)
        call("GET", API + "/tasks/" + tid + "/events", 200)
        call("GET", API + "/tasks/task-999999/events", 404)
        call("GET", API + "/tasks/" + tid + "/logs?tail=5", 200)
        call("GET", API + "/tasks/" + tid + "/logs?tail=-5", 400)
        call("GET", API + "/tasks/task-999999/logs", 404)
        call("GET", API + "/usage?group_by=user", 200)
        call("GET", API + "/usage?group_by=node", 400)
        call("GET", API + "/watch?since=soon", 400)
        stream = self.c.watch()
        try:
            self.assertEqual(stream.status, 200)
            self.assertTrue(stream.headers["Content-Type"].startswith("text/event-stream"))
            self.assertEqual(stream.next()["event"], "sync")
        finally:
            stream.close()
        seen.add(("GET", API + "/watch"))
        call("GET", API + "/tasks?status=success&priority=high&limit=1&offset=0", 200)
        call("DELETE", API + "/tasks/" + tid, 409)
        long_id = self.c.submit("sleep 30", priority="low")
        self.c.wait_status(long_id, "running")
        call("DELETE", API + "/tasks/" + long_id + "?grace_seconds=0", 200)
        call("GET", API + "/tasks/task-999999", 404)
        call("DELETE", API + "/tasks/task-999999", 404)
        call("GET", API + "/tasks?limit=0", 400)
        call("GET", API + "/tasks?colour=red", 400)
        call("DELETE", API + "/tasks/" + tid + "?grace_seconds=-1", 400)
        call("POST", API + "/tasks", 400, raw="{", headers={"Content-Type": "application/json"})
        call("POST", API + "/tasks", 400, {"priority": "urgent", "gpu_count": 1, "command": "x"})
        call("POST", API + "/tasks", 400, {"gpus": 1})
        call("POST", API + "/tasks", 413, raw="x" * (2 << 20),
             headers={"Content-Type": "application/json"})
        call("POST", API + "/tasks", 415, raw="{}", headers={"Content-Type": "text/plain"})
        call("GET", API + "/gpus", 200)
        call("GET", API + "/quota", 200)
        call("PUT", API + "/quota", 200, {"online_percent": 0.5})
        call("PUT", API + "/quota", 400, {"online_percent": 2})
        call("PUT", API + "/quota", 413, raw="x" * (2 << 20),
             headers={"Content-Type": "application/json"})
        call("PUT", API + "/quota", 415, raw="{}", headers={"Content-Type": "text/plain"})
        call("GET", API + "/teams", 200)
        call("PUT", API + "/teams/vision", 200, {"online": 0, "batch": 0, "max_gpus": 2})
        call("PUT", API + "/teams/vision", 400, {"max_gpus": -5})
        call("PUT", API + "/teams/vision", 413, raw="x" * (2 << 20),
             headers={"Content-Type": "application/json"})
        call("PUT", API + "/teams/vision", 415, raw="{}", headers={"Content-Type": "text/plain"})
        call("GET", API + "/teams/vision", 200)
        call("GET", API + "/teams/nobody", 404)
        busy = self.c.submit("sleep 30", priority="low", team="vision")
        self.c.wait_status(busy, "running")
        call("DELETE", API + "/teams/vision", 409)
        self.c.request("DELETE", API + "/tasks/" + busy + "?grace_seconds=0")
        harness.wait_until(lambda: self.c.get(API + "/teams/vision").json["batch"]["used"] == 0,
                           15, what="team vision's GPUs to be freed")
        call("DELETE", API + "/teams/vision", 200)
        call("DELETE", API + "/teams/vision", 404)
        call("GET", API + "/agents", 200)
        call("GET", API + "/autoscale", 200)
        call("POST", API + "/autoscale", 405)
        call("POST", API + "/agents/a1/cordon", 200)
        call("POST", API + "/agents/nope/cordon", 404)
        call("POST", API + "/agents/a1/drain", 200, {"evict": True, "grace_seconds": 0})
        call("POST", API + "/agents/a1/drain", 400, {"evict": 1})
        call("POST", API + "/agents/nope/drain", 404)
        call("POST", API + "/agents/a1/drain", 413, raw="x" * (2 << 20),
             headers={"Content-Type": "application/json"})
        call("POST", API + "/agents/a1/drain", 415, raw="{}", headers={"Content-Type": "text/plain"})
        call("POST", API + "/agents/a1/uncordon", 200)
        call("POST", API + "/agents/nope/uncordon", 404)
        call("GET", API + "/openapi.yaml", 200)
        call("GET", "/ui/", 200)
        call("GET", "/ui/app.js", 200)
        call("GET", "/ui/nope.js", 404)
        # A redirect (urllib would follow it).
        conn = http.client.HTTPConnection("127.0.0.1", int(self.c.base.rsplit(":", 1)[1]))
        conn.request("GET", "/ui")
        r = conn.getresponse()
        api_contract.check_response("GET", "/ui", r.status, r.getheader("Content-Type"), r.read())
        self.assertEqual((r.status, r.getheader("Location")), (301, "/ui/"))
        conn.close()
        seen.add(("GET", "/ui"))
        snap = call("GET", API + "/snapshot", 200)
        self.assertEqual(snap.body[:16], b"SQLite format 3\x00")
        self.assertEqual(snap.headers["Content-Type"], "application/vnd.sqlite3")
        for p in ("/healthz", API + "/healthz", "/readyz", API + "/readyz", "/metrics",
                  API + "/metrics"):
            call("GET", p, 200)
        for method, path in (("PATCH", API + "/tasks"), ("PUT", API + "/tasks/" + tid),
                             ("POST", API + "/gpus"), ("DELETE", API + "/quota"),
                             ("POST", API + "/teams"), ("POST", API + "/teams/vision"),
                             ("POST", API + "/agents"), ("GET", API + "/agents/a1/drain"),
                             ("POST", API + "/tasks/" + tid + "/logs"),
                             ("POST", API + "/snapshot"), ("POST", "/ui/"),
                             ("PUT", "/ui/app.js"), ("DELETE", "/ui")):
            r = self.c.request(method, path, {})
            self.assertApiError(r, 405, "method_not_allowed")
        r = self.c.get("/api/v2/tasks")
        self.assertApiError(r, 404, "not_found")
        described = api_contract.described_routes(self.doc)
        self.assertEqual(sorted(described - seen), [], "operations not exercised")


if __name__ == "__main__":
    unittest.main()
