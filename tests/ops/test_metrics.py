"""/metrics of a real dgpu-scheduler with one fake-GPU agent: the page passes
`promtool check metrics`, every metric of the contract (design/architecture.md, "Metrics") is
there with its type and labels, and the values are exact where they are deterministic: after
one high-priority task ran to success, while a low-priority task runs, and after it is
cancelled. The alert rules refer only to metrics the scheduler exports."""

import os
import subprocess
import unittest

from ops_util import DEPLOY, LiveCluster, harness, promql_metric_names, require_tool, require_yaml

MODEL = harness.GPU_MODEL

# name -> (type, label names of every sample). Histograms: label names besides "le".
CONTRACT = {
    "dgpu_tasks_submitted_total": ("counter", {"priority"}),
    "dgpu_tasks_scheduled_total": ("counter", {"priority"}),
    "dgpu_tasks_finished_total": ("counter", {"priority", "status"}),
    "dgpu_tasks_pending": ("gauge", {"priority"}),
    "dgpu_tasks_running": ("gauge", {"priority"}),
    "dgpu_gpus": ("gauge", {"status", "model"}),
    "dgpu_quota_gpus": ("gauge", {"class"}),
    "dgpu_quota_used_gpus": ("gauge", {"class"}),
    "dgpu_agents": ("gauge", {"status"}),
    "dgpu_is_leader": ("gauge", set()),
    "dgpu_gpu_utilization_ratio": ("gauge", {"gpu_id", "model"}),
    "dgpu_schedule_pass_duration_seconds": ("histogram", set()),
    "dgpu_task_start_latency_seconds": ("histogram", set()),
    "dgpu_task_dispatch_latency_seconds": ("histogram", set()),
    "dgpu_task_max_memory_bytes": ("histogram", set()),
    "dgpu_http_requests_total": ("counter", {"route", "code"}),
}

live = None
snap = {}  # phase -> Exposition


def setUpModule():
    global live
    live = LiveCluster()  # one high task ran to success
    try:
        snap["after_success"] = live.scrape()
        c = live.c
        tid = c.submit("sleep 60", gpu_count=1, priority="low")
        c.wait_status(tid, "running", timeout=15)
        snap["running"] = live.scrape()
        r = c.cancel(tid)
        if r.status != 200:
            raise AssertionError("cancel: %r" % r)
        c.wait_status(tid, "cancelled", timeout=15)
        # The cancelled task's GPU is released once the agent reports the kill.
        harness.wait_until(lambda: c.gpus()["idle"] == 4, 15, what="all 4 GPUs idle again")
        snap["after_cancel"] = live.scrape()
    except BaseException:
        live.stop()
        raise


def tearDownModule():
    if live is not None:
        live.stop()


class MetricsPageTest(unittest.TestCase):
    def test_promtool_check_metrics(self):
        promtool = require_tool(self, "promtool", "prometheus")
        r = live.scrape_raw()
        self.assertEqual(r.headers.get("Content-Type"), "text/plain; version=0.0.4")
        p = subprocess.run([promtool, "check", "metrics"], input=r.body, capture_output=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0,
                         "promtool check metrics: rc %d\n%s%s"
                         % (p.returncode, p.stdout.decode(), p.stderr.decode()))

    def test_contract_names_types_and_labels(self):
        for phase, m in snap.items():
            for name, (kind, labels) in CONTRACT.items():
                with self.subTest(phase=phase, metric=name):
                    self.assertEqual(m.types.get(name), kind)
                    if kind == "histogram":
                        buckets = m.find(name + "_bucket")
                        self.assertTrue(buckets)
                        self.assertTrue(all(set(l) == labels | {"le"} for l, _ in buckets))
                        self.assertEqual(buckets[-1][0]["le"], "+Inf")
                        self.assertEqual(len(m.find(name + "_sum")), 1)
                        self.assertEqual(m.value(name + "_count"), buckets[-1][1])
                    else:
                        samples = m.find(name)
                        self.assertTrue(samples, "no sample of %s" % name)
                        for l, _ in samples:
                            self.assertEqual(set(l), labels, "%s%s" % (name, l))

    def test_values_after_one_successful_task(self):
        m = snap["after_success"]
        self.assertEqual(m.value("dgpu_tasks_submitted_total", priority="high"), 1)
        self.assertEqual(m.value("dgpu_tasks_submitted_total", priority="low"), 0)
        self.assertEqual(m.value("dgpu_tasks_scheduled_total", priority="high"), 1)
        self.assertEqual(m.value("dgpu_tasks_scheduled_total", priority="low"), 0)
        for prio in ("high", "low"):
            for status in ("success", "failed", "cancelled"):
                want = 1 if (prio, status) == ("high", "success") else 0
                self.assertEqual(
                    m.value("dgpu_tasks_finished_total", priority=prio, status=status), want)
            self.assertEqual(m.value("dgpu_tasks_pending", priority=prio), 0)
            self.assertEqual(m.value("dgpu_tasks_running", priority=prio), 0)
        self.assertEqual(m.find("dgpu_gpus"), [({"status": "idle", "model": MODEL}, 4)])
        # online = round(4 x 0.7) = 3, batch = the rest.
        self.assertEqual(m.value("dgpu_quota_gpus", **{"class": "online"}), 3)
        self.assertEqual(m.value("dgpu_quota_gpus", **{"class": "batch"}), 1)
        self.assertEqual(m.value("dgpu_quota_used_gpus", **{"class": "online"}), 0)
        self.assertEqual(m.value("dgpu_quota_used_gpus", **{"class": "batch"}), 0)
        self.assertEqual(m.value("dgpu_agents", status="online"), 1)
        self.assertEqual(m.value("dgpu_agents", status="offline"), 0)
        self.assertEqual(m.value("dgpu_is_leader"), 1)
        self.assertEqual(m.value("dgpu_task_start_latency_seconds_count"), 1)
        # The start order was written to the agent's open stream.
        self.assertEqual(m.value("dgpu_task_dispatch_latency_seconds_count"), 1)
        self.assertEqual(
            sorted(m.find("dgpu_gpu_utilization_ratio"), key=repr),
            [({"gpu_id": "a1-gpu-%d" % i, "model": MODEL}, 0.0) for i in range(4)])
        self.assertEqual(
            m.value("dgpu_http_requests_total", route="POST /api/v1/tasks", code="201"), 1)

    def test_values_while_a_batch_task_runs(self):
        m = snap["running"]
        self.assertEqual(m.value("dgpu_tasks_submitted_total", priority="low"), 1)
        self.assertEqual(m.value("dgpu_tasks_scheduled_total", priority="low"), 1)
        self.assertEqual(m.value("dgpu_tasks_running", priority="low"), 1)
        self.assertEqual(m.value("dgpu_tasks_running", priority="high"), 0)
        self.assertEqual(m.value("dgpu_tasks_pending", priority="low"), 0)
        self.assertEqual(m.value("dgpu_quota_used_gpus", **{"class": "batch"}), 1)
        self.assertEqual(m.value("dgpu_quota_used_gpus", **{"class": "online"}), 0)
        self.assertEqual(sorted(m.find("dgpu_gpus"), key=repr),
                         [({"status": "busy", "model": MODEL}, 1),
                          ({"status": "idle", "model": MODEL}, 3)])
        self.assertEqual(m.value("dgpu_task_start_latency_seconds_count"), 2)
        self.assertEqual(m.value("dgpu_task_dispatch_latency_seconds_count"), 2)

    def test_values_after_cancel(self):
        m = snap["after_cancel"]
        self.assertGreaterEqual(
            m.value("dgpu_tasks_finished_total", priority="low", status="cancelled"), 1)
        self.assertEqual(m.value("dgpu_tasks_finished_total", priority="low", status="failed"), 0)
        self.assertEqual(m.value("dgpu_tasks_running", priority="low"), 0)
        self.assertEqual(m.value("dgpu_quota_used_gpus", **{"class": "batch"}), 0)
        self.assertEqual(m.find("dgpu_gpus"), [({"status": "idle", "model": MODEL}, 4)])
        self.assertEqual(
            m.value("dgpu_http_requests_total", route="DELETE /api/v1/tasks/{id}", code="200"), 1)

    def test_scrape_counts_itself_on_the_next_scrape(self):
        def scrapes(m):
            hits = m.find("dgpu_http_requests_total", route="GET /metrics", code="200")
            return hits[0][1] if hits else 0
        first = scrapes(live.scrape())
        self.assertEqual(scrapes(live.scrape()), first + 1)

    def test_route_labels_come_from_the_route_table(self):
        # Every label is a served route's "METHOD path" (aliases count under their route), a
        # path (its 405 answers) or "unmatched": what --print-routes lists, nothing retyped.
        c = live.c
        counted = [("GET /metrics", "200"), ("/healthz", "405"),
                   ("GET /api/v1/tasks/{id}", "200"), ("unmatched", "404")]

        def counts():
            m = live.scrape()
            return m, [sum(v for _, v in m.find("dgpu_http_requests_total", route=r, code=code))
                       for r, code in counted]
        _, before = counts()
        c.get("/api/v1/metrics")
        c.request("POST", "/healthz", {})
        c.request("POST", "/api/v1/healthz", {})  # An alias's 405 counts under its route's path.
        c.get("/api/v1/tasks/" + live.task_id)
        c.get("/api/v1/nowhere")
        m, after = counts()
        # The scrape in counts() is counted too: two for GET /metrics.
        self.assertEqual([a - b for a, b in zip(after, before)], [2, 2, 1, 1])
        routes = subprocess.run([harness.SCHEDULER_BIN, "--print-routes"], capture_output=True,
                                text=True, check=True, timeout=30).stdout.split("\n")
        routes = {r for r in routes if r}
        paths = {r.split(" ", 1)[1] for r in routes}
        labels = {l["route"] for l, _ in m.find("dgpu_http_requests_total")}
        self.assertEqual(labels - routes - paths - {"unmatched"}, set())
        self.assertNotIn("GET /api/v1/metrics", labels)
        self.assertNotIn("/api/v1/healthz", labels)

    def test_counters_never_decrease(self):
        order = ["after_success", "running", "after_cancel"]
        for name, (kind, _) in CONTRACT.items():
            if kind != "counter":
                continue
            for a, b in zip(order, order[1:]):
                before = {tuple(sorted(l.items())): v for l, v in snap[a].find(name)}
                after = {tuple(sorted(l.items())): v for l, v in snap[b].find(name)}
                for key, v in before.items():
                    with self.subTest(metric=name, labels=key, phases=(a, b)):
                        self.assertIn(key, after)
                        self.assertGreaterEqual(after[key], v)

    # A cancelled running task is counted once, when it is cancelled; the agent's report of the
    # killed process only confirms the stop.
    def test_cancelled_running_task_counted_once(self):
        m = snap["after_cancel"]
        self.assertEqual(
            m.value("dgpu_tasks_finished_total", priority="low", status="cancelled"), 1)

    # Every scheduling pass is observed in the histogram.
    def test_schedule_passes_are_observed(self):
        m = snap["after_cancel"]
        self.assertGreater(m.value("dgpu_schedule_pass_duration_seconds_count"), 0)


class AlertRulesUseExportedMetricsTest(unittest.TestCase):
    def test_alert_expressions_refer_to_exported_metrics(self):
        yaml = require_yaml(self)
        with open(os.path.join(DEPLOY, "prometheus", "alerts.yml")) as f:
            doc = yaml.safe_load(f)
        exported = snap["after_cancel"].series_names()
        for group in doc["groups"]:
            for rule in group["rules"]:
                names = promql_metric_names(rule["expr"])
                self.assertTrue(names, rule["alert"])
                self.assertLessEqual(names, exported, rule["alert"])


if __name__ == "__main__":
    unittest.main()
