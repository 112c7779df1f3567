#!/usr/bin/env bash
# End-to-end throughput: TOTAL tasks of `true` on AGENTS agents x GPUS fake GPUs, submitted as
# fast as possible (exactly TOTAL POSTs by wrk with bench/rest_submit.lua over CONNS keep-alive
# connections), until all have finished. HIGH_FRACTION of them are high priority (default 0.7,
# the default quota's share, so that both classes together can fill the cluster; 0.5 alternates).
#   bench/run_e2e_bench.sh                    # 10,000 tasks, 4 agents x 8 GPUs
#   TOTAL=10000 AGENTS=4 GPUS=8 CONNS=64 HIGH_FRACTION=0.7 bench/run_e2e_bench.sh
#   RUN_DIR=work bench/run_e2e_bench.sh       # run records on the disk (default: a tmpfs)
#   ISOLATION=none bench/run_e2e_bench.sh     # executor.isolation (unset: the agents' default)
# Reports tasks/s completed (first submission to last finish, as counted by the scheduler's
# dgpu_tasks_finished_total{status="success"}, then checked with GET /api/v1/tasks?status=success)
# and checks from the agents' logs that no GPU ran two tasks at once (bench/check_gpu_overlap.py).
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
TOTAL=${TOTAL:-10000}; AGENTS=${AGENTS:-4}; GPUS=${GPUS:-8}; CONNS=${CONNS:-64}
HIGH_FRACTION=${HIGH_FRACTION:-0.7}
HEARTBEAT=${HEARTBEAT:-0.2}

make_work
AGENT_PIDS=()
start_scheduler "logging: { level: warn, format: text }" \
                "agent: { heartbeat_timeout: 5 }"
for i in $(seq 1 "$AGENTS"); do
  cat > "$WORK/a$i.yaml" <<YAML
agent: { id: "node-$i", heartbeat_interval: $HEARTBEAT }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT", retry_interval: 0.1, max_retry_interval: 1 }
gpu: { detection_method: fake, fake: { count: $GPUS } }
executor: { work_dir: "$WORK/a$i", kill_grace_period: 1$(run_dir_yaml "a$i")${ISOLATION:+, isolation: $ISOLATION} }
logging: { level: info, format: text }
YAML
  "$BIN/dgpu-agent" --config "$WORK/a$i.yaml" > "$WORK/a$i.log" 2>&1 &
  PIDS+=("$!"); AGENT_PIDS+=("$!")
done
for _ in $(seq 100); do
  n=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/gpus" | python3 -c 'import json,sys; print(json.load(sys.stdin)["idle"])')
  [[ "$n" == $((AGENTS * GPUS)) ]] && break
  sleep 0.1
done
echo "$AGENTS agents x $GPUS GPUs up ($n idle GPUs; run records in ${RUNS:-the work directories});" \
  "submitting $TOTAL tasks of 'true'" \
  "(high priority: $HIGH_FRACTION) over $CONNS connections"

success_total() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/tasks?status=success&limit=1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])'
}

# wrk runs until interrupted (it always sleeps its full -d); its threads stop sending once their
# share of TOTAL is answered.
start=$(date +%s.%N)
TOTAL=$TOTAL THREADS=2 HIGH_FRACTION=$HIGH_FRACTION wrk -t2 -c"$CONNS" -d3600s -s "$REPO/bench/rest_submit.lua" \
  "http://127.0.0.1:$HTTP_PORT" > "$WORK/submit.out" 2>&1 &
SUBMITTER=$!
# One poller process for the whole run (bench/e2e_progress.py): it prints when all were
# submitted and when all had ended.
read -r submitted_at end < <(python3 "$REPO/bench/e2e_progress.py" "$HTTP_PORT" "$TOTAL" "${TIMEOUT:-300}") ||
  { kill -INT "$SUBMITTER"; exit 1; }
kill -INT "$SUBMITTER"
wait "$SUBMITTER" || true
done_n=$(success_total)
submitted=$(metric dgpu_tasks_submitted_total)
failed=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/tasks?status=failed&limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
grep "^submissions:" "$WORK/submit.out" || cat "$WORK/submit.out"
echo
echo "== end-to-end =="
awk -v s="$start" -v e="$end" -v u="$submitted_at" -v n="$done_n" -v t="$TOTAL" 'BEGIN {
  printf "tasks finished (success): %d of %d in %.2fs: %.0f tasks/s completed\n", n, t, e - s, n / (e - s)
  printf "all submitted after %.2fs (%.0f submissions/s)\n", u - s, t / (u - s) }'
echo "scheduler counted $submitted submissions, $failed failed tasks"
# CPU used (user+system seconds; an agent's includes its reaped tasks), read before shutdown.
# "Tasks": the CPU of the processes the agent reaped (shims, and what they reaped) plus that of its
# live children (the shims it keeps for the next task, with what they reaped).
cpu_of() {
  local kids
  kids=$(awk -v p="$1" '{ sub(/^.*\) /, ""); if ($2 == p) print FILENAME }' /proc/[0-9]*/stat 2>/dev/null | tr '\n' ' ')
  # shellcheck disable=SC2086
  awk -v hz="$(getconf CLK_TCK)" -v self="/proc/$1/stat" '
    { sub(/^.*\) /, "") }  # Fields from the state on: $12..$15 are utime, stime, cutime, cstime.
    FILENAME == self { own = $12 + $13; tasks += $14 + $15; next }
    { tasks += $12 + $13 + $14 + $15 }
    END { printf "%.2f/%.2f", own / hz, tasks / hz }' "/proc/$1/stat" $kids
}
line="CPU seconds (own/tasks): scheduler $(cpu_of "$SCHED_PID" | cut -d/ -f1)"
for i in "${!AGENT_PIDS[@]}"; do line+=", agent $((i + 1)) $(cpu_of "${AGENT_PIDS[$i]}")"; done
echo "$line"
python3 "$REPO/bench/check_gpu_overlap.py" "$WORK"/a*.log
if [[ "$failed" -ne 0 ]]; then
  echo "FAILED: $failed task(s) of 'true' did not succeed:" >&2
  curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/tasks?status=failed&limit=5" |
    python3 -c 'import json,sys; [print(" ", t["task_id"], t["error"], file=sys.stderr) for t in json.load(sys.stdin)["tasks"]]'
  exit 1
fi
