#!/usr/bin/env python3
"""Simulator scale run: decisions per second of dgpu-sim on 10,000 nodes x 8 GPUs.

Replays the Philly trace repeated --repeat times, all batch, with arrivals multiplied by each
--scale, and prints per scale the replay wall time and decisions per second (median and range
over --runs). With --baseline BIN, every run of the binary under test is paired with a run of
BIN (alternating which goes first), and the median ratio of the pairs is printed too: this
machine's memory speed swings by up to 2x within minutes, so only paired figures compare.

  bench/run_sim_bench.py --sim build-rel/bin/dgpu-sim --baseline /tmp/old/dgpu-sim \\
      --scale 300 400 1000 --runs 5

The outputs of both binaries must be identical except for the speed section and for fields one
of them does not have (a newer binary may report more); a difference is reported and makes the
exit status 1, the fields only one has are listed once.
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def replay(binary, args):
    out = subprocess.run([binary] + args, check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    speed = result.pop("speed")
    return speed["replay_wall_seconds"], result


def compare(a, b, path=""):
    """(differences, fields only one side has) between two JSON values."""
    if isinstance(a, dict) and isinstance(b, dict):
        diffs, only = [], []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                only.append(path + k)
                continue
            d, o = compare(a[k], b[k], path + k + ".")
            diffs += d
            only += o
        return diffs, only
    return ([] if a == b else [path.rstrip(".")]), []


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default=str(REPO / "build/bin/dgpu-sim"), help="dgpu-sim under test")
    p.add_argument("--baseline", help="another dgpu-sim to pair every run with")
    p.add_argument("--trace", default="/work/shared/traces/philly.csv")
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--repeat", type=int, default=10, help="trace repetitions")
    p.add_argument("--scale", type=float, nargs="+", default=[400, 1000],
                   help="arrival-rate multipliers")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()

    status = 0
    reported_only = False
    for scale in a.scale:
        args = ["--trace", a.trace, "--nodes", str(a.nodes), "--gpus-per-node",
                str(a.gpus_per_node), "--online-fraction", "0", "--online-percent", "0",
                "--arrival-scale", f"{scale:g}", "--repeat", str(a.repeat), "--json"]
        times, base_times, ratios = [], [], []
        decisions = delay = None
        for i in range(a.runs):
            order = [a.sim, a.baseline] if a.baseline and i % 2 == 0 else [a.baseline, a.sim]
            results = {}
            for binary in order:
                if binary:
                    results[binary] = replay(binary, args)
            t, result = results[a.sim]
            times.append(t)
            decisions = result["decisions"]
            delay = result["queueing_delay_seconds"]["all"]
            if a.baseline:
                bt, base_result = results[a.baseline]
                base_times.append(bt)
                ratios.append(bt / t)
                diffs, only = compare(base_result, result)
                if diffs:
                    print(f"scale {scale:g}: outputs differ in {', '.join(diffs)}",
                          file=sys.stderr)
                    status = 1
                if only and not reported_only:
                    print("fields of one binary only (not compared): " + ", ".join(only),
                          file=sys.stderr)
                    reported_only = True
        med = statistics.median(times)
        line = (f"scale {scale:g}: delay mean {delay['mean']:.0f} s p99 {delay['p99']:.0f} s, "
                f"{decisions} decisions; replay {min(times):.3f}-{max(times):.3f} s, "
                f"median {med:.3f} s = {decisions / med:,.0f} decisions/s")
        if a.baseline:
            line += (f"; baseline median {statistics.median(base_times):.3f} s, "
                     f"speed-up (median of pairs) {statistics.median(ratios):.2f}x")
        print(line, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
