#!/usr/bin/env python3
"""How fast the dashboard's overview appears for a large cluster (see run_ui_bench.sh).

Opens /ui/ in headless Chromium (Selenium) and reports:
  first view: navigation start -> the first render that shows every GPU (the page's own
              performance.now(): loading the page, listing the cluster, building the view);
  render:     what one render of the overview costs (median of the renders seen while the
              feed moves, each at most four a second);
  GPUs / busy: what the view shows, checked against GET /api/v1/gpus.
usage: ui_overview_bench.py BASE_URL EXPECTED_GPUS [ROUNDS]
"""
import json
import shutil
import statistics
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

base, expected, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 3
options = Options()
options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1366,900"):
    options.add_argument(arg)
driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                          options=options)
try:
    firsts = []
    for i in range(rounds):
        driver.get(base + "/ui/?round=%d" % i)
        deadline = time.monotonic() + 30
        while True:
            shown = driver.execute_script(
                "return document.querySelectorAll('#nodes .g').length")
            if shown >= expected:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the overview showed %d of %d GPUs after 30 s" % (shown, expected))
            time.sleep(0.01)
        first = driver.execute_script("return window.dgpuRender.at")
        firsts.append(first)
        print("round %d: first view with %d GPUs after %.0f ms" % (i + 1, shown, first))
    renders = []
    last = None
    end = time.monotonic() + 5
    while time.monotonic() < end:
        r = driver.execute_script("return window.dgpuRender")
        if r and r["at"] != last and r["page"] == "overview":
            renders.append(r["ms"])
            last = r["at"]
        time.sleep(0.05)
    busy = driver.execute_script("return document.querySelectorAll('#nodes .g.busy').length")
    with urllib.request.urlopen(base + "/api/v1/gpus") as resp:
        api = json.load(resp)
    print("first view: median %.0f ms, max %.0f ms (%d rounds)" %
          (statistics.median(firsts), max(firsts), rounds))
    if renders:
        print("render of the overview while the feed moves: median %.1f ms, max %.1f ms (%d renders)"
              % (statistics.median(renders), max(renders), len(renders)))
    print("view: %d GPUs, %d busy; API: %d GPUs, %d busy" % (
        driver.execute_script("return document.querySelectorAll('#nodes .g').length"), busy,
        api["total"], api["busy"]))
finally:
    driver.quit()
