#!/usr/bin/env bash
# The dashboard's overview of a large cluster: AGENTS (default 1000) fake agents of GPUS (8) GPUs
# from bench/agent_loadgen, about half of the GPUs busy with tasks of RUN_TIME seconds while new
# ones keep coming, then bench/ui_overview_bench.py in headless Chromium.
#   bench/run_ui_bench.sh
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
AGENTS=${AGENTS:-1000}; GPUS=${GPUS:-8}; RUN_TIME=${RUN_TIME:-20}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
make_work
start_scheduler "logging: { level: warn, format: text }" "agent: { heartbeat_timeout: 15 }" \
  "quota: { online_percent: 0.5, batch_percent: 0.5 }" \
  "limits: { max_pending_per_user: 100000000 }"
SETTLE=$(( AGENTS / 300 + 10 ))
"$BIN/agent_loadgen" --scheduler "127.0.0.1:$GRPC_PORT" --agents "$AGENTS" --gpus "$GPUS" \
  --heartbeat 5 --run-time "$RUN_TIME" --duration 600 > "$WORK/loadgen.out" 2>&1 &
PIDS+=("$!")
for _ in $(seq $((SETTLE * 10))); do
  grep -q "registered $AGENTS " "$WORK/loadgen.out" 2>/dev/null && break
  sleep 0.1
done
grep -q "registered $AGENTS " "$WORK/loadgen.out" || { echo "the fleet did not register" >&2; exit 1; }
TOTAL=$((AGENTS * GPUS))
# Half the GPUs busy: tasks of 1 to 4 GPUs, both classes, and a stream of new ones meanwhile.
python3 - "$HTTP_PORT" "$((TOTAL / 2))" "$RUN_TIME" <<'PY' &
import http.client, json, sys, time, itertools
port, gpus, run_time = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
def submit(n, prio):
    conn.request("POST", "/api/v1/tasks", json.dumps({"command": "true", "gpu_count": n,
                 "priority": prio}), {"Content-Type": "application/json"})
    conn.getresponse().read()
used = 0
for n, prio in zip(itertools.cycle([1, 2, 4, 1]), itertools.cycle(["high", "low"])):
    if used >= gpus:
        break
    submit(n, prio)
    used += n
end = time.monotonic() + 120
while time.monotonic() < end:  # ~40 new tasks a second while the page is measured
    submit(1, "low")
    time.sleep(0.025)
PY
PIDS+=("$!")
sleep 3
echo "$AGENTS agents x $GPUS GPUs, $(nproc) CPUs"
/usr/bin/python3 "$REPO/bench/ui_overview_bench.py" "http://127.0.0.1:$HTTP_PORT" "$TOTAL" 3
