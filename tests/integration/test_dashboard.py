"""The web dashboard at /ui/ in a real browser: headless Chromium (Debian `chromium` and
`chromium-driver`) driven by Selenium, against a real scheduler and real agents. The overview
shows every GPU, a task submitted through the API appears without a reload, its page shows its
events and its log as it is written, the queue shows pending reasons, the task list filters, the
agents page lists the nodes, and with authentication on the page asks for a token.

Screenshots of each page go to $DGPU_UI_SCREENSHOTS (a directory) when it is set, else to the
test's temporary directory."""

import hashlib
import http.client
import json
import os
import shutil
import unittest

import harness
from harness import API, ClusterTestCase
from dgpu_testlib import missing_dependency

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:  # python3-selenium
    webdriver = None

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def new_browser(width=1366, height=900):
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=%d,%d" % (width, height), "--disable-extensions",
                "--no-first-run", "--disable-background-networking"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class BrowserCase(ClusterTestCase):
    def setUp(self):
        if webdriver is None or not os.access(CHROMEDRIVER, os.X_OK) or \
                not os.access(CHROMIUM, os.X_OK):
            missing_dependency(self, "a browser test needs python3-selenium, chromium and "
                               "chromium-driver (Debian)")
        super().setUp()
        self.browser = new_browser()
        self.addCleanup(self.browser.quit)
        self.shots = os.environ.get("DGPU_UI_SCREENSHOTS") or self.c.tmp
        os.makedirs(self.shots, exist_ok=True)

    def open(self, fragment=""):
        self.browser.get(self.c.base + "/ui/" + fragment)

    def until(self, predicate, timeout=5, what="the page"):
        return harness.wait_until(lambda: predicate(self.browser), timeout, interval=0.05,
                                  what=what)

    def js(self, script):
        return self.browser.execute_script(script)

    def shot(self, name):
        self.browser.save_screenshot(os.path.join(self.shots, name + ".png"))

    def count(self, selector):
        return len(self.browser.find_elements(By.CSS_SELECTOR, selector))

    def text(self, selector):
        # Read in the page in one step: the page re-renders as the feed moves, and an element
        # found first and read after could be gone in between.
        return self.browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            selector) or ""


class DashboardTest(BrowserCase):
    AGENTS = 2
    GPUS = 4
    SCHEDULER = {"online_percent": 0.5}
    AGENT_KWARGS = {"extra": {"agent": {"labels": {"rack": "r1"}}}}

    def test_the_overview_shows_every_gpu_and_a_new_task_without_a_reload(self):
        self.open()
        self.until(lambda b: self.count("#nodes .g") == 8, what="8 GPUs on the overview")
        self.assertEqual(self.count("#nodes .node"), 2)
        self.assertEqual(self.count("#nodes .g.idle"), 8)
        self.until(lambda b: self.text("#live") == "live", what="the live feed")
        # The browser takes the feed compressed (one compressor shared by all watchers).
        self.assertEqual(self.js("return window.dgpuFeed.encoding"), "deflate")
        self.assertIn("8\nGPUs", self.text(".cards"))
        self.js("window.dgpuMarker = 1")  # Gone if the page reloads.

        tid = self.c.submit("echo hello from the task; sleep 30", gpu_count=2, priority="high",
                            name="hello", node_selector={"rack": "r1"})
        self.until(lambda b: self.count('#nodes .g.busy[data-task="%s"]' % tid) == 2,
                   what="the task's two GPUs busy")
        self.assertEqual(self.js("return window.dgpuMarker"), 1, "the page was reloaded")
        node = self.c.task(tid)["node_id"]
        titles = self.browser.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.title);",
            '#nodes .g[data-task="%s"]' % tid)
        self.assertEqual(len(titles), 2)
        self.assertTrue(all(t.startswith(node + "/") and tid in t for t in titles), titles)
        self.until(lambda b: "2 of 4 GPUs" in self.text("#quota"), what="the online quota's use")
        self.shot("overview")

        # Its page: fields, events, and the log as it is written.
        # Clicked in the page (the overview re-renders as the feed moves: a found element can go
        # stale between finding and clicking it).
        self.js('document.querySelector(\'#nodes .g[data-task="%s"]\').click()' % tid)
        self.until(lambda b: b.current_url.endswith("#/tasks/" + tid), what="the task page")
        self.until(lambda b: "hello from the task" in self.text("#log"), timeout=5,
                   what="the task's log")
        self.until(lambda b: "started" in self.text("#events"), what="the started event")
        self.assertIn("running", self.text(".kv"))
        # What it was given beside its GPUs (its GPUs' share of the node).
        t = self.c.task(tid)
        self.assertIsNotNone(t["cpus"], t)
        self.until(lambda b: "%g / %d MiB" % (t["cpus"], t["memory_mb"]) in self.text(".kv"),
                   what="the task's CPUs and memory")
        self.assertIn("CPUs / memory", self.text(".kv"))
        self.assertRegex(self.text(".kv"), r"node selector\s+rack=r1")
        self.shot("task")

        # Cancelled from outside: the page follows.
        self.c.request("DELETE", API + "/tasks/%s?grace_seconds=0" % tid)
        self.until(lambda b: "cancelled" in self.text(".kv"), timeout=5, what="cancelled")
        self.until(lambda b: "cancelled" in self.text("#events"), timeout=5,
                   what="the cancelled event")

    def test_queue_tasks_and_agents_pages(self):
        hold = self.c.submit("sleep 30", gpu_count=4, priority="low", name="holder")
        self.c.wait_status(hold, "running")
        waiting = self.c.submit("true", gpu_count=4, priority="low", name="waiter")
        self.open("#/queue")
        self.until(lambda b: self.count("table tr") == 2, what="one pending row")
        row = self.text("table tr:nth-child(2)")
        self.assertIn(waiting, row)
        reason = self.c.task(waiting)["pending_reason"]
        self.assertTrue(reason)
        self.assertIn(reason, row)
        self.shot("queue")
        # Its page says which nodes could take it and why the others cannot.
        detail = self.c.task(waiting)["pending_detail"]
        self.assertRegex(detail, r"^\d+ of 2 nodes can take it")
        self.open("#/tasks/" + waiting)
        self.until(lambda b: "placement\n" + detail in self.text(".kv"),
                   what="the task's placement detail")

        done = self.c.submit("true", gpu_count=1, priority="high", name="quick")
        self.c.wait_status(done, "success")
        self.open("#/tasks")
        self.until(lambda b: self.count("table tr") == 4, what="three task rows")
        # Chosen in the page in one step (the list re-renders as tasks change).
        self.js("const s = document.querySelector('select[data-filter=\"status\"]');"
                "s.value = 'success'; s.dispatchEvent(new Event('change', {bubbles: true}));")
        self.until(lambda b: self.count("table tr") == 2 and done in self.text("table"),
                   what="the success filter")
        self.assertIn("status=success", self.browser.current_url)
        self.shot("tasks")

        self.open("#/agents")
        self.until(lambda b: self.count("table tr") == 3, what="two agents")
        self.assertIn("online", self.text("table"))
        # Each node's CPUs and memory given to tasks of what it offers, and its isolation.
        for agent in self.c.agents_view().values():
            selector = "table tr:nth-child(%d)" % (2 if agent["id"] == "a1" else 3)
            want = ["%g/%g" % (agent["allocated_cpus"], agent["cpus"]),
                    "%d/%d MiB" % (agent["allocated_memory_mb"], agent["memory_mb"]),
                    agent["isolation"], "rack=r1"]
            # The page follows the feed: it may show the node a moment after the API does.
            self.until(lambda b, s=selector, w=want: all(x in self.text(s) for x in w),
                       what="%s's CPUs, memory, isolation and labels" % agent["id"])
        self.shot("agents")

    def test_a_tasks_page_shows_its_dependencies_as_links(self):
        parent = self.c.submit("sleep 30", gpu_count=1, priority="low", name="train")
        child = self.c.submit("true", gpu_count=1, priority="low", name="evaluate",
                              depends_on=[{"task_id": parent, "condition": "afterok"}])
        self.open("#/tasks/" + child)
        self.until(lambda b: "depends on\n%s afterok waiting" % parent in self.text(".kv"),
                   what="the dependency and its state")
        self.assertIn("pending dependency", self.text(".kv"))
        self.js("document.querySelector('.kv a[href=\"#/tasks/%s\"]').click()" % parent)
        self.until(lambda b: b.current_url.endswith("#/tasks/" + parent), what="the parent's page")
        self.until(lambda b: "train" in self.text("h1"), what="the parent's name")
        self.c.request("DELETE", API + "/tasks/%s?grace_seconds=0" % parent)
        self.open("#/tasks/" + child)
        self.until(lambda b: "%s afterok never_satisfied" % parent in self.text(".kv"),
                   what="the dependency never satisfied")
        self.assertIn("dependency_never_satisfied", self.text(".kv"))

    def test_static_files_and_unknown_ones(self):
        conn = http.client.HTTPConnection("127.0.0.1", int(self.c.base.rsplit(":", 1)[1]))
        conn.request("GET", "/ui")
        r = conn.getresponse()
        self.assertEqual((r.status, r.getheader("Location")), (301, "/ui/"))
        conn.close()
        for path, media in (("/ui/", "text/html"), ("/ui/app.js", "text/javascript"),
                            ("/ui/style.css", "text/css")):
            r = harness.http(self.c.base, "GET", path)
            self.assertEqual(r.status, 200, path)
            self.assertTrue(r.headers["Content-Type"].startswith(media), r.headers)
        self.assertIn(b"dgpu", harness.http(self.c.base, "GET", "/ui/").body)
        r = harness.http(self.c.base, "GET", "/ui/nope.js")
        self.assertApiError(r, 404, "not_found")
        # Nothing the page loads comes from elsewhere.
        html = harness.http(self.c.base, "GET", "/ui/").body.decode()
        self.assertNotIn("http://", html.replace("http://www.w3.org/2000/svg", ""))
        self.assertNotIn("https://", html)


class DashboardAuthTest(BrowserCase):
    AGENTS = 1
    GPUS = 2

    def start_cluster(self):
        token = "tok-viewer-0123456789abcdef"
        self.token = token
        tokens = os.path.join(self.c.tmp, "tokens.yaml")
        with open(tokens, "w") as f:
            json.dump({"users": [{"name": "vera", "role": "admin", "teams": [],
                                  "token_sha256": hashlib.sha256(token.encode()).hexdigest()}]},
                      f)
        self.c.token = token
        self.c.start(agents=self.AGENTS, gpus=self.GPUS,
                     extra={"auth": {"mode": "token", "tokens_file": tokens}})

    def test_the_page_asks_for_a_token_and_then_works(self):
        self.open()
        self.until(lambda b: b.find_element(By.ID, "login").is_displayed(), what="the login form")
        self.assertEqual(self.count("#nodes .g"), 0)
        self.shot("login")
        self.browser.find_element(By.ID, "token").send_keys(self.token)
        self.browser.find_element(By.CSS_SELECTOR, "#login button").click()
        self.until(lambda b: self.count("#nodes .g") == 2, what="the GPUs once authenticated")
        self.until(lambda b: self.text("#live") == "live", what="the live feed")
        tid = self.c.submit("sleep 20", gpu_count=1)
        self.until(lambda b: self.count('#nodes .g[data-task="%s"]' % tid) == 1,
                   what="the task through the authenticated feed")


if __name__ == "__main__":
    unittest.main()
