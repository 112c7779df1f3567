"""deploy/prometheus: the alert rules load in Prometheus (promtool check rules), the example
scrape config is valid (promtool check config), and the alerts fire when, and only when, they
should (promtool test rules on synthetic series in alerts_test.yml)."""

import os
import subprocess
import unittest

from ops_util import DEPLOY, require_tool, require_yaml

PROM = os.path.join(DEPLOY, "prometheus")
EXPECTED_ALERTS = {"DgpuQuotaHighUsage", "DgpuAgentsOffline", "DgpuTaskFailureRateHigh"}


class AlertRulesTest(unittest.TestCase):
    def setUp(self):
        self.promtool = require_tool(self, "promtool", "prometheus")

    def promtool_run(self, *args):
        p = subprocess.run([self.promtool] + list(args), cwd=PROM, capture_output=True,
                           text=True, timeout=60)
        return p, "promtool %s: rc %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr)

    def test_check_rules(self):
        p, out = self.promtool_run("check", "rules", "alerts.yml")
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("SUCCESS: 3 rules found", p.stdout, out)

    def test_alert_names(self):
        yaml = require_yaml(self)
        with open(os.path.join(PROM, "alerts.yml")) as f:
            doc = yaml.safe_load(f)
        names = {r["alert"] for g in doc["groups"] for r in g["rules"]}
        self.assertEqual(names, EXPECTED_ALERTS)
        fors = {r["alert"]: r.get("for") for g in doc["groups"] for r in g["rules"]}
        self.assertEqual(fors["DgpuQuotaHighUsage"], "5m")
        self.assertEqual(fors["DgpuAgentsOffline"], "2m")

    def test_check_config(self):
        p, out = self.promtool_run("check", "config", "prometheus.yml")
        self.assertEqual(p.returncode, 0, out)

    def test_alerts_fire_as_specified(self):
        p, out = self.promtool_run("test", "rules", "alerts_test.yml")
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("SUCCESS", p.stdout, out)


if __name__ == "__main__":
    unittest.main()
