#!/usr/bin/env python3
"""High-availability figures with real processes on loopback (Python 3 stdlib + wrk).

  DGPU_BIN_DIR=build/bin bench/run_failover_bench.py            # everything (~4 minutes)
  DGPU_BIN_DIR=build/bin bench/run_failover_bench.py --runs 3 --skip-wrk

1. Failover time: primary A killed with SIGKILL -> first POST /api/v1/tasks answered 201 by the
   standby B (a client retries on B every 10 ms). Median / min / max of --runs runs, with
   replication.heartbeat_interval/heartbeat_timeout 0.5/2 s and the defaults 2/6 s.
2. Submission throughput on the primary with a standby attached, sync vs async mode:
   wrk -t2 -c64 -d10s -s bench/rest_submit.lua (fsync on, logging level warn).
3. Replication lag under that load: every 100 ms a sampler submits one task to A and polls B
   (GET /api/v1/tasks/{id} every 2 ms) until it is visible; lag = visible on B - 201 from A.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "ha"))

from ha_cluster import HaCluster, wait_until  # noqa: E402

QUIET = {"logging": {"level": "warn", "format": "text"}}


def replicating(c, timeout=15):
    """Waits until a write on A is readable on B (the standby is attached and applying)."""
    status, _, body = c.submit("a", "true # probe")
    assert status == 201, body
    wait_until(lambda: c.get_task("b", body["task_id"]) is not None, timeout,
               what="replication to B")


def one_failover(hb_interval, hb_timeout, mode="sync"):
    c = HaCluster("bench-failover", mode=mode, hb_interval=hb_interval, hb_timeout=hb_timeout,
                  extra_sched=QUIET)
    try:
        c.start_scheduler("a", wait_role="leader")
        c.start_scheduler("b", wait_role="standby")
        replicating(c)
        time.sleep(hb_interval * 2)  # a few pings exchanged: steady state
        first = {}
        stop = threading.Event()

        def prober():
            client = c.client("b", timeout=2)
            while not stop.is_set():
                try:
                    status, _, _ = client.request("POST", "/api/v1/tasks",
                                                  c.task_body("true # probe"))
                    if status == 201:
                        first["t"] = time.monotonic()
                        return
                except OSError:
                    pass
                time.sleep(0.01)

        t = threading.Thread(target=prober, daemon=True)
        t_kill = time.monotonic()
        c.schedulers["a"].kill9()
        t.start()
        t.join(timeout=hb_timeout * 3 + 10)
        stop.set()
        if "t" not in first:
            raise RuntimeError("no 201 from B:\n" + c.diagnostics())
        return first["t"] - t_kill
    finally:
        c.close()


def wrk(c, seconds, conns=64, threads=2):
    url = "http://%s" % c.http_address("a")
    out = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % seconds, "--latency",
                          "-s", os.path.join(REPO, "bench", "rest_submit.lua"), url],
                         capture_output=True, text=True, check=True).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    secs = float(re.search(r"requests in ([\d.]+)s", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    non2xx = int(non2xx.group(1)) if non2xx else 0
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)
    return {"rate": (reqs - non2xx) / secs, "non2xx": non2xx, "p50": p50, "p99": p99}


def load_run(mode, seconds):
    c = HaCluster("bench-load", mode=mode, extra_sched=QUIET)
    try:
        c.start_scheduler("a", wait_role="leader")
        c.start_scheduler("b", wait_role="standby")
        replicating(c)
        lags = []
        stop = threading.Event()

        def sampler():
            ca, cb = c.client("a", timeout=10), c.client("b", timeout=10)
            while not stop.is_set():
                try:
                    status, _, body = ca.request("POST", "/api/v1/tasks",
                                                 c.task_body("true # lag"))
                    if status != 201:
                        continue
                    t0 = time.monotonic()
                    path = "/api/v1/tasks/" + body["task_id"]
                    while not stop.is_set():
                        if cb.request("GET", path)[0] == 200:
                            lags.append(time.monotonic() - t0)
                            break
                        time.sleep(0.002)
                except OSError:
                    pass
                time.sleep(0.1)

        t = threading.Thread(target=sampler, daemon=True)
        t.start()
        res = wrk(c, seconds)
        stop.set()
        t.join(timeout=15)
        res["lags"] = lags
        # The standby kept up: the last write on A is on B soon after the load stops.
        t_end = time.monotonic()
        replicating(c, timeout=60)
        res["drain"] = time.monotonic() - t_end
        return res
    finally:
        c.close()


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=10, help="wrk duration")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--skip-wrk", action="store_true")
    args = ap.parse_args()
    print("dgpu HA bench: %d CPUs, binaries in %s" %
          (os.cpu_count(), os.environ.get("DGPU_BIN_DIR", "build/bin")), flush=True)

    if not args.skip_failover:
        for hb_interval, hb_timeout in ((0.5, 2.0), (2.0, 6.0)):
            times = []
            for _ in range(args.runs):
                times.append(one_failover(hb_interval, hb_timeout))
            print("failover (kill -9 primary -> first 201 on the standby), heartbeat_interval %.1f s"
                  " heartbeat_timeout %.0f s, %d runs: median %.2f s, min %.2f s, max %.2f s" %
                  (hb_interval, hb_timeout, len(times), statistics.median(times), min(times),
                   max(times)), flush=True)
            print("  runs: " + " ".join("%.2f" % t for t in times), flush=True)

    if not args.skip_wrk:
        for mode in ("sync", "async"):
            r = load_run(mode, args.seconds)
            lags = r["lags"]
            print("%-5s replication: %.0f accepted submissions/s on the primary (wrk -t2 -c64 "
                  "-d%ds, non-2xx %d), latency p50 %s p99 %s" %
                  (mode, r["rate"], args.seconds, r["non2xx"], r["p50"], r["p99"]), flush=True)
            if lags:
                print("      lag 201-on-primary -> visible-on-standby (%d samples): median %.1f ms,"
                      " p90 %.1f ms, max %.1f ms; standby caught up %.2f s after the load" %
                      (len(lags), statistics.median(lags) * 1e3, pct(lags, 90) * 1e3,
                       max(lags) * 1e3, r["drain"]), flush=True)


if __name__ == "__main__":
    main()
