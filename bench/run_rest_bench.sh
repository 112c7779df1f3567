#!/usr/bin/env bash
# REST submission throughput with durable acknowledgements (fsync on, storage on the real disk).
#   bench/run_rest_bench.sh            # wrk -t2 -c64 -d10s
#   THREADS=2 CONNS=64 DURATION=10s bench/run_rest_bench.sh
# Prints accepted submissions/s (every answer must be a 201: wrk's Non-2xx count must be 0),
# latency p50/p99 and the journal's group-commit factor (appends per fsync'ed transaction).
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
THREADS=${THREADS:-2}; CONNS=${CONNS:-64}; DURATION=${DURATION:-10s}

make_work
start_scheduler "logging: { level: warn, format: text }"
echo "scheduler pid $SCHED_PID, state in $WORK/state (fsync on), $(nproc) CPUs"

cpu_before=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
if [[ -n "${PERF:-}" ]]; then  # PERF=1: profile the scheduler during the run (perf.data kept).
  perf record -g -o "${PERF_OUT:-/var/tmp/dgpu-rest.perf.data}" -p "$SCHED_PID" -- sleep "${DURATION%s}" 2>/dev/null &
  PERF_PID=$!
fi
wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$REPO/bench/rest_submit.lua" \
  "http://127.0.0.1:$HTTP_PORT" | tee "$WORK/wrk.out"

requests=$(awk '/requests in/ { print $1 }' "$WORK/wrk.out")
seconds=$(awk '/requests in/ { sub(/s,$/, "", $4); print $4 }' "$WORK/wrk.out")
non2xx=$(awk '/Non-2xx/ { print $NF }' "$WORK/wrk.out"); non2xx=${non2xx:-0}
sockerr=$(grep -c "Socket errors" "$WORK/wrk.out" || true)
p50=$(awk '$1 == "50%" { print $2 }' "$WORK/wrk.out")
p99=$(awk '$1 == "99%" { print $2 }' "$WORK/wrk.out")
cpu_after=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
batches=$(metric dgpu_journal_batches_total)
mean_batch=$(metric dgpu_journal_mean_batch_size)
submitted=$(metric dgpu_tasks_submitted_total)

echo
echo "== REST submissions (durable) =="
awk -v r="$requests" -v n="$non2xx" -v s="$seconds" \
  'BEGIN { printf "accepted submissions/s: %.0f  (%d accepted of %d requests in %ss)\n", (r - n) / s, r - n, r, s }'
echo "non-2xx responses:      $non2xx"
[[ "$sockerr" == 0 ]] || grep "Socket errors" "$WORK/wrk.out"
echo "latency p50 / p99:      $p50 / $p99"
echo "scheduler counted:      $submitted submissions"
echo "journal:                $batches fsync'ed batches, mean batch size $mean_batch appends (core-loop batches) per fsync"
awk -v n="$submitted" -v b="$batches" -v s="$seconds" 'BEGIN { printf "submissions per fsync:  %.1f  (%.0f fsync'"'"'ed commits/s)\n", n / b, b / s }'
awk -v c=$((cpu_after - cpu_before)) -v hz="$(getconf CLK_TCK)" -v r="$requests" -v s="$seconds" \
  'BEGIN { printf "scheduler CPU:          %.2f s in %ss = %.2f cores; %.0f us per submission\n", c / hz, s, c / hz / s, 1e6 * c / hz / r }'
if [[ -n "${PERF_PID:-}" ]]; then wait "$PERF_PID" || true; fi
if [[ "$non2xx" != 0 ]]; then echo "FAIL: non-2xx responses" >&2; exit 1; fi
