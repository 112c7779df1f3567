"""deploy/grafana/dgpu-dashboard.json: valid JSON in Grafana's dashboard model, the panels the
operators asked for, every query valid PromQL (checked by promtool as recording rules) and
referring only to metrics that a real scheduler with an agent exports."""

import os
import re
import subprocess
import tempfile
import unittest

from ops_util import (LiveCluster, dashboard_exprs, load_dashboard, promql_metric_names,
                      require_tool)

REQUIRED_PANELS = {
    "GPUs by status": {"dgpu_gpus"},
    "Quota use per class": {"dgpu_quota_used_gpus", "dgpu_quota_gpus"},
    "Tasks pending / running by priority": {"dgpu_tasks_pending", "dgpu_tasks_running"},
    "Schedule pass duration p99": {"dgpu_schedule_pass_duration_seconds_bucket"},
    "Task start latency p50 / p99": {"dgpu_task_start_latency_seconds_bucket"},
    "HTTP requests by code": {"dgpu_http_requests_total"},
    "GPU utilization": {"dgpu_gpu_utilization_ratio"},
    "Leader": {"dgpu_is_leader"},
    "GPUs used by team and class": {"dgpu_team_used_gpus"},
    "Guaranteed GPUs": {"dgpu_team_guaranteed_gpus"},
    "Borrowed GPUs per team": {"dgpu_team_borrowed_gpus"},
    "Borrowed GPUs per class": {"dgpu_borrowed_gpus"},
    "Preemptions per team": {"dgpu_tasks_preempted_total"},
}

live = None


def setUpModule():
    global live
    live = LiveCluster()


def tearDownModule():
    if live is not None:
        live.stop()


def as_plain_promql(expr):
    """Grafana variables replaced by what Prometheus would see."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    return re.sub(r"\$\{?job\}?", ".*", expr)


class DashboardTest(unittest.TestCase):
    def setUp(self):
        self.dash = load_dashboard()
        self.exprs = dashboard_exprs(self.dash)

    def test_model(self):
        self.assertEqual(self.dash["uid"], "dgpu-overview")
        self.assertIsInstance(self.dash["schemaVersion"], int)
        ids = [p["id"] for p in self.dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "duplicate panel ids")
        for p in self.dash["panels"]:
            with self.subTest(panel=p["title"]):
                pos = p["gridPos"]
                self.assertLessEqual(pos["x"] + pos["w"], 24)
                if p["type"] == "row":  # A heading: it queries nothing.
                    self.assertNotIn("targets", p)
                    continue
                self.assertTrue(p["targets"])
                refs = [t["refId"] for t in p["targets"]]
                self.assertEqual(len(refs), len(set(refs)))

    def test_required_panels(self):
        by_title = {}
        for title, expr in self.exprs:
            by_title.setdefault(title, set()).update(promql_metric_names(expr))
        for title, names in REQUIRED_PANELS.items():
            with self.subTest(panel=title):
                self.assertIn(title, by_title)
                self.assertLessEqual(names, by_title[title])
        quantiles = {title: re.findall(r"histogram_quantile\((0\.\d+)", expr)
                     for title, expr in self.exprs}
        self.assertEqual(quantiles["Schedule pass duration p99"], ["0.99"])
        starts = [q for t, e in self.exprs if t == "Task start latency p50 / p99"
                  for q in re.findall(r"histogram_quantile\((0\.\d+)", e)]
        self.assertEqual(sorted(starts), ["0.5", "0.99"])

    def test_queries_use_only_exported_metrics(self):
        exported = live.scrape().series_names()
        for title, expr in self.exprs:
            with self.subTest(panel=title, expr=expr):
                names = promql_metric_names(expr)
                self.assertTrue(names)
                self.assertLessEqual(names, exported)

    def test_queries_are_valid_promql(self):
        promtool = require_tool(self, "promtool", "prometheus")
        lines = ["groups:", "  - name: dashboard", "    rules:"]
        for i, (_, expr) in enumerate(self.exprs):
            lines.append("      - record: dashboard:query_%d" % i)
            lines.append("        expr: '%s'" % as_plain_promql(expr).replace("'", "''"))
        with tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="dgpu-dash-") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            p = subprocess.run([promtool, "check", "rules", f.name], capture_output=True,
                               text=True, timeout=60)
        self.assertEqual(p.returncode, 0, "promtool check rules (dashboard queries):\n%s%s"
                         % (p.stdout, p.stderr))


if __name__ == "__main__":
    unittest.main()
