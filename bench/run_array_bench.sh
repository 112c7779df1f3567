#!/usr/bin/env bash
# Job arrays: how long one POST /api/v1/tasks with "array": N takes to be answered (201, all N
# tasks durable: one write), against a real scheduler with fsync on, and how fast the scheduler
# then lists the array's last page.
#   bench/run_array_bench.sh            # N=100000, 3 runs
#   SIZE=10000 RUNS=5 bench/run_array_bench.sh
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
SIZE=${SIZE:-100000}
RUNS=${RUNS:-3}
make_work
start_scheduler
body="{\"priority\":\"low\",\"gpu_count\":1,\"command\":\"echo \$DGPU_ARRAY_INDEX\",\"array\":$SIZE}"
for run in $(seq "$RUNS"); do
  out=$(curl -sS -o "$WORK/answer.json" -w '%{http_code} %{time_total}' \
    -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$HTTP_PORT/api/v1/tasks")
  read -r code seconds <<<"$out"
  ids=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["task_ids"]))' \
    "$WORK/answer.json")
  printf 'run %d: HTTP %s, %d task ids, answered in %.3f s (%.0f tasks/s)\n' \
    "$run" "$code" "$ids" "$seconds" "$(awk -v n="$SIZE" -v s="$seconds" 'BEGIN { print n / s }')"
done
echo "pending now: $(metric dgpu_tasks_pending)"
printf 'scheduler RSS: %d MiB\n' $(( $(awk '/VmRSS/ {print $2}' "/proc/$SCHED_PID/status") / 1024 ))
