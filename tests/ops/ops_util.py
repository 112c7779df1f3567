"""Shared helpers of the operator-experience tests (tests/ops): the paths of the deployment
files, the external tools they need, a Prometheus text-format parser, and a live scheduler with
one fake-GPU agent to scrape (started through the integration tests' harness).

Python 3 standard library only (plus PyYAML for the YAML checks, a declared dependency). A
missing declared dependency fails its test on CI (CI=true) and skips it elsewhere.
"""

import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEPLOY = os.path.join(REPO, "deploy")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import harness  # noqa: E402  (the integration tests' cluster harness)
from dgpu_testlib import missing_dependency  # noqa: E402  (on the path through harness)


def require_tool(test, name, package):
    """Path of the executable `name`, a declared dependency (scripts/install-deps.sh): when it is
    missing the test fails on CI and is skipped elsewhere (dgpu_testlib.missing_dependency)."""
    path = shutil.which(name)
    if path is None:
        missing_dependency(test, "%s not found in PATH: install the Debian package %s (make deps)"
                           % (name, package))
    return path


def require_yaml(test):
    """The yaml module (PyYAML, a declared dependency), as require_tool."""
    try:
        import yaml
    except ImportError:
        missing_dependency(test, "PyYAML is missing: install the Debian package python3-yaml "
                                 "(make deps)")
    return yaml


# ----------------------------------------------------------------------------------------------
# Prometheus text format 0.0.4

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def _unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse_labels(text):
    labels = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError("bad label set: {%s}" % text)
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return labels


class Exposition:
    """A parsed /metrics page: families (name -> type) and samples
    [(name, {label: value}, float)]."""

    def __init__(self, text):
        self.text = text
        self.types = {}
        self.samples = []
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                self.types[name] = kind.strip()
                continue
            if line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if m is None:
                raise ValueError("unparsable sample line: %r" % line)
            self.samples.append((m.group(1), parse_labels(m.group(3) or ""), float(m.group(4))))

    def series_names(self):
        """Every name a PromQL query may use: sample names (histograms give _bucket, _sum and
        _count) and family names."""
        return {s[0] for s in self.samples} | set(self.types)

    def find(self, name, **labels):
        """Samples of `name` whose labels include `labels`."""
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == want for k, want in labels.items())]

    def value(self, name, **labels):
        """The one sample of `name` with exactly these labels (AssertionError otherwise)."""
        hits = [(l, v) for l, v in self.find(name, **labels) if l == labels]
        if len(hits) != 1:
            raise AssertionError("expected one sample %s%s, found %r"
                                 % (name, labels, self.find(name)))
        return hits[0][1]


# ----------------------------------------------------------------------------------------------
# PromQL: metric names an expression refers to

_PROMQL_WORDS = {
    # functions, aggregations, keywords that look like identifiers
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "rate", "irate", "increase", "delta", "idelta",
    "histogram_quantile", "sum_over_time", "avg_over_time", "max_over_time", "min_over_time",
    "abs", "clamp_min", "clamp_max", "label_replace", "label_join", "vector", "scalar", "time",
    "absent", "changes", "resets", "deriv", "predict_linear", "sort", "sort_desc", "round",
    "ceil", "floor", "le", "inf", "nan",
}


def promql_metric_names(expr):
    """Metric names used by a PromQL expression (identifiers not followed by '(' that are not
    keywords, label names inside {...}/by(...), strings, durations or Grafana variables)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # strings
    text = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", " ", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", " ", text)                  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)                 # range selectors
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        rest = text[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


# ----------------------------------------------------------------------------------------------
# A live cluster to scrape


class LiveCluster:
    """One real dgpu-scheduler and one agent with four fake GPUs, after one high-priority task
    ran to success. Started once per process (setUpModule), stopped by stop()."""

    def __init__(self):
        self.c = harness.Cluster("ops-metrics")
        try:
            self.c.start(agents=1, gpus=4)
            self.task_id = self.c.submit("true", gpu_count=1, priority="high")
            t = self.c.wait_finished(self.task_id, timeout=30)
            if t["status"] != "success":
                raise AssertionError("task ended %r" % t)
            # GPU utilisation arrives with the heartbeats that follow registration.
            harness.wait_until(
                lambda: len(self.scrape().find("dgpu_gpu_utilization_ratio")) == 4,
                15, what="utilisation of the 4 fake GPUs in /metrics")
        except BaseException:
            sys.stderr.write(self.c.log_tails())
            self.stop()
            raise

    def scrape_raw(self):
        r = self.c.get("/metrics")
        if r.status != 200:
            raise AssertionError("GET /metrics: %r" % r)
        return r

    def scrape(self):
        return Exposition(self.scrape_raw().body.decode("utf-8"))

    def stop(self):
        self.c.shutdown()
        self.c.remove_files()


def load_dashboard():
    with open(os.path.join(DEPLOY, "grafana", "dgpu-dashboard.json")) as f:
        return json.load(f)


def dashboard_exprs(dashboard):
    """(panel title, expr) of every query of every panel, rows' nested panels included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if "expr" in t:
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))
    walk(dashboard.get("panels", []))
    return out
