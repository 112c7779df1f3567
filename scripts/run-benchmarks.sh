#!/usr/bin/env bash
# Runs dgpu's benchmarks and prints their figures (see docs/benchmarks.md for recorded ones).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DGPU_BIN_DIR:-build/bin}
echo "== scheduling core (Google Benchmark) =="
"$BIN/core_bench" --benchmark_min_time=0.5
echo "== dgpu-sim: full Philly replay, 100 nodes x 8 GPUs =="
TRACE=${DGPU_TRACE:-../shared/traces/philly.csv}
if [ -f "$TRACE" ]; then
  "$BIN/dgpu-sim" --trace "$TRACE" --nodes 100 --gpus-per-node 8
  echo "== dgpu-sim: scale run, 10,000 nodes x 8 GPUs, Philly x10 (decisions/s) =="
  python3 bench/run_sim_bench.py --sim "$BIN/dgpu-sim" --trace "$TRACE" --scale 400 1000 --runs 3
else
  echo "trace $TRACE not found: skipped"
fi
for b in bench/run_rest_bench.sh bench/run_latency_bench.sh bench/run_e2e_bench.sh; do
  if [ -x "$b" ]; then echo "== $b =="; "$b"; fi
done
