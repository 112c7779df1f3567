#!/usr/bin/env bash
# End-to-end throughput: TOTAL tasks of `true` on AGENTS agents x GPUS fake GPUs, submitted as
# fast as possible (exactly TOTAL POSTs over CONNS keep-alive connections, bench/submit_many.py),
# until all have finished.
#   bench/run_e2e_bench.sh                    # 10,000 tasks, 4 agents x 8 GPUs
#   TOTAL=10000 AGENTS=4 GPUS=8 CONNS=8 bench/run_e2e_bench.sh
# Reports tasks/s completed (first submission to last finish, as seen by polling
# GET /api/v1/tasks?status=success) and checks from the agents' logs that no GPU ran two tasks
# at once (bench/check_gpu_overlap.py).
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
TOTAL=${TOTAL:-10000}; AGENTS=${AGENTS:-4}; GPUS=${GPUS:-8}; CONNS=${CONNS:-8}
HEARTBEAT=${HEARTBEAT:-0.2}

make_work
start_scheduler "logging: { level: warn, format: text }" \
                "agent: { heartbeat_timeout: 5 }"
for i in $(seq 1 "$AGENTS"); do
  cat > "$WORK/a$i.yaml" <<YAML
agent: { id: "node-$i", heartbeat_interval: $HEARTBEAT }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT", retry_interval: 0.1, max_retry_interval: 1 }
gpu: { detection_method: fake, fake: { count: $GPUS } }
executor: { work_dir: "$WORK/a$i", kill_grace_period: 1 }
logging: { level: info, format: text }
YAML
  "$BIN/dgpu-agent" --config "$WORK/a$i.yaml" > "$WORK/a$i.log" 2>&1 &
  PIDS+=("$!")
done
for _ in $(seq 100); do
  n=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/gpus" | python3 -c 'import json,sys; print(json.load(sys.stdin)["idle"])')
  [[ "$n" == $((AGENTS * GPUS)) ]] && break
  sleep 0.1
done
echo "$AGENTS agents x $GPUS GPUs up ($n idle GPUs); submitting $TOTAL tasks of 'true'"

success_total() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/tasks?status=success&limit=1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])'
}

start=$(date +%s.%N)
python3 "$REPO/bench/submit_many.py" "$HTTP_PORT" "$TOTAL" "$CONNS" true > "$WORK/submit.out" &
SUBMITTER=$!
submitted_at=""
while :; do
  done_n=$(success_total)
  if [[ -z "$submitted_at" ]] && ! kill -0 "$SUBMITTER" 2>/dev/null; then
    submitted_at=$(date +%s.%N)
  fi
  # Once the submitter is done, wait for what the scheduler accepted (exactly TOTAL unless refused).
  target=$TOTAL
  [[ -n "$submitted_at" ]] && target=$(metric dgpu_tasks_submitted_total)
  [[ "$done_n" -ge "${target%.*}" ]] && break
  if (( $(echo "$(date +%s.%N) - $start > 600" | bc) )); then echo "timeout: $done_n done" >&2; exit 1; fi
  sleep 0.05
done
end=$(date +%s.%N)
wait "$SUBMITTER" || true
[[ -n "$submitted_at" ]] || submitted_at=$end
submitted=$(metric dgpu_tasks_submitted_total)
failed=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/tasks?status=failed&limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
cat "$WORK/submit.out"
echo
echo "== end-to-end =="
awk -v s="$start" -v e="$end" -v u="$submitted_at" -v n="$done_n" -v t="$TOTAL" 'BEGIN {
  printf "tasks finished (success): %d of %d in %.2fs: %.0f tasks/s completed\n", n, t, e - s, n / (e - s)
  printf "all submitted after %.2fs (%.0f submissions/s)\n", u - s, t / (u - s) }'
echo "scheduler counted $submitted submissions, $failed failed tasks"
python3 "$REPO/bench/check_gpu_overlap.py" "$WORK"/a*.log
