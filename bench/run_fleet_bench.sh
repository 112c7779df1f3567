#!/usr/bin/env bash
# A fleet on one machine: AGENTS agents with GPUS GPUs each, played by bench/agent_loadgen over
# real gRPC (one connection each), heartbeating every HEARTBEAT seconds, while RATE short tasks a
# second (RUN_TIME seconds each) are submitted over REST for DURATION seconds. Prints the
# scheduler's CPU and peak RSS, the submission-to-assignment latency seen by the agents, the
# scheduler's own part of it (dgpu_task_dispatch_latency_seconds: submission to the start order
# written to the agent's connection), and whether any agent timed out.
#   bench/run_fleet_bench.sh                      # 1,000 agents x 8 GPUs, 100 tasks/s, 30 s
#   AGENTS=10000 RATE=1000 DURATION=60 bench/run_fleet_bench.sh
#   SCHEDULER_YAML='scheduler: { snapshot_interval: 1h }' bench/run_fleet_bench.sh
#   CHANNELS=100 bench/run_fleet_bench.sh    # the agents share 100 connections (default: one each)
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
AGENTS=${AGENTS:-1000}; GPUS=${GPUS:-8}; HEARTBEAT=${HEARTBEAT:-5}; RATE=${RATE:-100}
RUN_TIME=${RUN_TIME:-1}; DURATION=${DURATION:-30}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

make_work
# SCHEDULER_YAML: more top-level sections for the scheduler's config (one line each).
start_scheduler "logging: { level: warn, format: text }" "agent: { heartbeat_timeout: 15 }" \
  "limits: { max_pending_per_user: 100000000 }" ${SCHEDULER_YAML:+"$SCHEDULER_YAML"}
echo "scheduler pid $SCHED_PID; $AGENTS agents x $GPUS GPUs, heartbeat ${HEARTBEAT}s; $RATE tasks/s of ${RUN_TIME}s for ${DURATION}s; $(nproc) CPUs"

# The fleet registers first (its time is not measured), then runs for the measured DURATION.
SETTLE=$(( AGENTS / 300 + 10 ))  # registration of 10,000 took 3-17 s here
"$BIN/agent_loadgen" --scheduler "127.0.0.1:$GRPC_PORT" --agents "$AGENTS" --gpus "$GPUS" \
  --heartbeat "$HEARTBEAT" --run-time "$RUN_TIME" --duration $((DURATION + SETTLE + 3)) \
  --channels "${CHANNELS:-0}" > "$WORK/loadgen.out" 2>&1 &
LOADGEN_PID=$!; PIDS+=("$LOADGEN_PID")
for _ in $(seq $((SETTLE * 10))); do
  grep -q "registered $AGENTS " "$WORK/loadgen.out" 2>/dev/null && break
  sleep 0.1
done
grep -q "registered $AGENTS " "$WORK/loadgen.out" || { tail -5 "$WORK/loadgen.out"; echo "the fleet did not register in ${SETTLE}s" >&2; exit 1; }
echo "fleet registered: $(grep -c . "$WORK/loadgen.out") s after start"

cpu_before=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
loadgen_before=$(awk '{ print $14 + $15 }' /proc/$LOADGEN_PID/stat)
python3 - "$HTTP_PORT" "$RATE" "$DURATION" <<'EOF'
import http.client, json, sys, threading, time
port, rate, duration = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
threads = 8
sent, errors = [0], [0]
lock = threading.Lock()
def run(k):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    start = time.monotonic()
    i = 0
    while True:
        due = start + (i * threads + k) / rate
        if due - start >= duration:
            return
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        body = json.dumps({"command": "true", "gpu_count": 1, "priority": "low",
                           "env": {"LOADGEN_SUBMITTED_US": str(time.time_ns() // 1000)}})
        conn.request("POST", "/api/v1/tasks", body, {"Content-Type": "application/json"})
        r = conn.getresponse(); r.read()
        with lock:
            sent[0] += 1
            errors[0] += r.status != 201
        i += 1
ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
print("submitted %d tasks in %.1f s (%d not 201)" % (sent[0], time.monotonic() - t0, errors[0]))
EOF
cpu_after=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
loadgen_after=$(awk '{ print $14 + $15 }' /proc/$LOADGEN_PID/stat)
wait "$LOADGEN_PID" || true
tail -2 "$WORK/loadgen.out"
# Agents the scheduler holds offline at the end: one that timed out is never registered again by
# the load generator (it counts the scheduler's requests to register again).
metrics=$(curl -fsS "$SCHEME://127.0.0.1:$HTTP_PORT/metrics")
offline=$(awk '$1 == "dgpu_agents{status=\"offline\"}" { print $2 }' <<< "$metrics")
# The scheduler's own part: submission to the start order written to the agent's connection.
dispatch=$(awk -F'[{}" ]+' 'BEGIN { n = 0 }
  /^dgpu_task_dispatch_latency_seconds_bucket/ {
    le[n] = $3 == "+Inf" ? $3 : sprintf("%g", $3); c[n++] = $NF }
  END { total = c[n - 1]; p50 = p99 = "?"
    for (i = 0; i < n; i++) {
      if (p50 == "?" && c[i] >= 0.5 * total) p50 = le[i]
      if (p99 == "?" && c[i] >= 0.99 * total) p99 = le[i]
      if (le[i] == "0.05") under = c[i] }
    printf "p50 <= %s s, p99 <= %s s, %.2f%% within 50 ms (%d tasks)", p50, p99,
      total ? 100 * under / total : 0, total }' <<< "$metrics")
rss=$(awk '/VmHWM/ { printf "%.0f MiB", $2 / 1024 }' /proc/$SCHED_PID/status)
awk -v c=$((cpu_after - cpu_before)) -v hz="$(getconf CLK_TCK)" -v d="$DURATION" \
  'BEGIN { printf "scheduler CPU:          %.2f cores over the %ss of submissions\n", c / hz / d, d }'
awk -v c=$((loadgen_after - loadgen_before)) -v hz="$(getconf CLK_TCK)" -v d="$DURATION" \
  'BEGIN { printf "load generator CPU:     %.2f cores (the agents, on the same machine)\n", c / hz / d }'
echo "scheduler peak RSS:     $rss"
echo "agents offline at end:  $offline"
echo "scheduler dispatch:     $dispatch"
