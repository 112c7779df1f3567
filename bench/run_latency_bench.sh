#!/usr/bin/env bash
# Submission -> running latency on an idle cluster: 1 agent x 8 fake GPUs, N (default 200)
# tasks of `true` submitted one at a time. See bench/latency_bench.py for what is measured.
#   bench/run_latency_bench.sh [N]
# MAX_LOG_BYTES=0 runs tasks without their log writer (executor.max_log_bytes; default 1GiB).
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
N=${1:-200}
make_work
start_scheduler "logging: { level: warn, format: text }"
cat > "$WORK/a1.yaml" <<YAML
agent: { id: "node-1", heartbeat_interval: 1 }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT", retry_interval: 0.1, max_retry_interval: 1 }
gpu: { detection_method: fake, fake: { count: 8 } }
executor: { work_dir: "$WORK/a1", kill_grace_period: 1, max_log_bytes: "${MAX_LOG_BYTES:-1GiB}" }
logging: { level: info, format: text }
YAML
"$BIN/dgpu-agent" --config "$WORK/a1.yaml" > "$WORK/a1.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do
  grep -q agent_connected "$WORK/a1.log" 2>/dev/null && break
  sleep 0.05
done
python3 "$REPO/bench/latency_bench.py" "$HTTP_PORT" "$WORK/a1.log" "$N"
