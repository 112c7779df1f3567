#!/usr/bin/env bash
# Submission -> running latency on an idle cluster: 1 agent x 8 fake GPUs, N (default 200)
# tasks of `true` submitted one at a time. See bench/latency_bench.py for what is measured.
#   bench/run_latency_bench.sh [N]
# MAX_LOG_BYTES=0 runs tasks without their log writer (executor.max_log_bytes; default 1GiB).
# ISOLATION=cgroup|none sets executor.isolation (unset: the agent's default; an agent older than
# the key refuses it).
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
N=${1:-200}
make_work
start_scheduler "logging: { level: warn, format: text }"
start_agent "max_log_bytes: \"${MAX_LOG_BYTES:-1GiB}\"${ISOLATION:+, isolation: $ISOLATION}"
python3 "$REPO/bench/latency_bench.py" "$HTTP_PORT" "$WORK/a1.log" "$N"
