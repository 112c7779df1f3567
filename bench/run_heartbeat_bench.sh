#!/usr/bin/env bash
# The scheduler's cost of agent heartbeats: AGENTS real dgpu-agent processes (4 fake GPUs each)
# heartbeat every INTERVAL seconds for DURATION seconds; prints the scheduler's CPU per
# heartbeat. TLS=1: gRPC over TLS with client certificates (each agent its own certificate),
# to compare with plain text in one run.
#   bench/run_heartbeat_bench.sh                 # 50 agents, every 0.1 s, 10 s
#   AGENTS=100 INTERVAL=0.2 TLS=1 bench/run_heartbeat_bench.sh
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
AGENTS=${AGENTS:-50}; INTERVAL=${INTERVAL:-0.1}; DURATION=${DURATION:-10}

make_work
ids=()
for i in $(seq "$AGENTS"); do ids+=("hb-$i"); done
[[ -n "${TLS:-}" ]] && use_tls "${ids[@]}"
start_scheduler "logging: { level: warn, format: text }" "agent: { heartbeat_timeout: 30 }"
for id in "${ids[@]}"; do
  tls=""
  if [[ -n "${TLS:-}" ]]; then
    tls="tls: { ca_file: \"$WORK/certs/ca.crt\", cert_file: \"$WORK/certs/agent-$id.crt\", key_file: \"$WORK/certs/agent-$id.key\" }"
  fi
  cat > "$WORK/$id.yaml" <<EOF
agent: { id: $id, heartbeat_interval: $INTERVAL }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT"${tls:+, $tls} }
gpu: { detection_method: fake, fake: { count: 4 } }
executor: { work_dir: "$WORK/$id" }
logging: { level: warn, format: text }
EOF
  "$BIN/dgpu-agent" --config "$WORK/$id.yaml" > "$WORK/$id.log" 2>&1 &
  PIDS+=($!)
done
online() {
  curl -fsS "${CURL_TLS[@]}" "$SCHEME://127.0.0.1:$HTTP_PORT/api/v1/agents" |
    python3 -c 'import json,sys; print(sum(a["status"] == "online" for a in json.load(sys.stdin)["agents"]))'
}
for _ in $(seq 200); do [[ "$(online)" == "$AGENTS" ]] && break; sleep 0.1; done
[[ "$(online)" == "$AGENTS" ]] || { echo "only $(online) of $AGENTS agents online" >&2; exit 1; }
sleep 1
mode="in plain text"
[[ -n "${TLS:-}" ]] && mode="over TLS with client certificates"
echo "$AGENTS agents online, gRPC $mode; heartbeat every ${INTERVAL}s"

cpu_before=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
sleep "$DURATION"
cpu_after=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
[[ "$(online)" == "$AGENTS" ]] || { echo "agents went offline during the run" >&2; exit 1; }
awk -v c=$((cpu_after - cpu_before)) -v hz="$(getconf CLK_TCK)" -v a="$AGENTS" -v i="$INTERVAL" \
  -v d="$DURATION" 'BEGIN { n = a * d / i; printf "heartbeats:             %.0f/s (%d agents every %ss)\nscheduler CPU:          %.2f s in %ss = %.3f cores; %.1f us per heartbeat\n", n / d, a, i, c / hz, d, c / hz / d, 1e6 * c / hz / n }'
