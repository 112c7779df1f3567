#!/usr/bin/env python3
"""Autoscaling on a trace: GPU-hours provisioned against queueing delay.

Replays the trace with dgpu-sim on a fixed cluster of --max-nodes x --gpus-per-node, then with
one autoscaled group of the same peak size (min_nodes --min-nodes) for each --idle-timeout, and
prints one row per run: GPU-hours provisioned, mean nodes, peak nodes, mean and p99 queueing
delay of each class, and the busy share of the provisioned GPU time.

  bench/run_autoscale_sim.py --sim build/bin/dgpu-sim --trace ../shared/traces/philly.csv \\
      --idle-timeout 300 1800 7200 --boot-time 300 --borrowing
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(sim, args):
    out = subprocess.run([sim] + args + ["--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def row(name, r, gpus_fixed=None):
    d = r["queueing_delay_seconds"]
    a = r.get("autoscale")
    if a is None:
        hours = gpus_fixed * r["makespan_seconds"] / 3600.0
        mean_nodes = peak = r["cluster"]["nodes"] if "cluster" in r else "-"
        busy = r["busy_gpu_seconds"] / 3600.0 / hours if hours else 0
    else:
        hours = a["provisioned_gpu_hours"]
        mean_nodes = "%.1f" % a["mean_nodes"]
        peak = a["peak_nodes"]
        busy = a["provisioned_utilization"]
    return ("| %s | %.0f | %s | %s | %.0f | %.0f | %.0f | %.0f | %.3f |"
            % (name, hours, mean_nodes, peak, d["high"]["mean"], d["high"]["p99"],
               d["low"]["mean"], d["low"]["p99"], busy))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--max-nodes", type=int, default=100)
    p.add_argument("--min-nodes", type=int, default=0)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--idle-timeout", type=float, nargs="+", default=[300, 1800, 7200])
    p.add_argument("--scale-up-delay", type=float, default=60)
    p.add_argument("--boot-time", type=float, default=300)
    p.add_argument("--borrowing", action="store_true")
    p.add_argument("--online-percent", type=float, default=0.7)
    a = p.parse_args()

    common = ["--trace", a.trace, "--online-percent", str(a.online_percent)]
    if a.borrowing:
        common.append("--borrowing")
    print("| cluster | GPU-hours provisioned | mean nodes | peak nodes | online delay mean (s) "
          "| online p99 (s) | batch delay mean (s) | batch p99 (s) | busy share |")
    print("|---|---|---|---|---|---|---|---|---|")
    fixed = run(a.sim, common + ["--nodes", str(a.max_nodes), "--gpus-per-node",
                                 str(a.gpus_per_node)])
    fixed.setdefault("cluster", {})["nodes"] = a.max_nodes
    print(row("fixed %d x %d" % (a.max_nodes, a.gpus_per_node), fixed,
              gpus_fixed=a.max_nodes * a.gpus_per_node))
    sys.stdout.flush()
    with tempfile.TemporaryDirectory() as tmp:
        for idle in a.idle_timeout:
            path = os.path.join(tmp, "autoscale.yaml")
            with open(path, "w") as f:
                json.dump({"scale_up_delay": a.scale_up_delay, "idle_timeout": idle,
                           "node_groups": [{"name": "gpu", "model": "gpu",
                                            "gpus_per_node": a.gpus_per_node,
                                            "min_nodes": a.min_nodes,
                                            "max_nodes": a.max_nodes}]}, f)
            r = run(a.sim, common + ["--autoscale", path, "--boot-time", str(a.boot_time)])
            print(row("autoscaled, idle_timeout %g s" % idle, r))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
