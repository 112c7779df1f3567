#!/usr/bin/env bash
# Starts a local dgpu cluster in the foreground: one scheduler (state under ./var/) and two
# agents with 4 fake GPUs each. Ctrl-C (or SIGTERM) stops all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DGPU_BIN_DIR:-build/bin}
HTTP_PORT=${DGPU_HTTP_PORT:-8080}
GRPC_PORT=${DGPU_GRPC_PORT:-9090}
VAR=${DGPU_VAR_DIR:-var}
mkdir -p "$VAR/local"
cat > "$VAR/local/scheduler.yaml" <<YAML
server: { grpc_address: "127.0.0.1:$GRPC_PORT", http_address: "127.0.0.1:$HTTP_PORT" }
storage: { snapshot_dir: "$VAR/local/scheduler" }
logging: { level: info, format: text, output: "$VAR/local/scheduler.log" }
YAML
for i in 1 2; do
  cat > "$VAR/local/agent-$i.yaml" <<YAML
agent: { id: "agent-$i", heartbeat_interval: 2 }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT", retry_interval: 0.5, max_retry_interval: 5 }
gpu: { detection_method: fake, fake: { count: 4, model: "Tesla V100-SXM2-32GB", memory_mb: 32768 } }
executor: { work_dir: "$VAR/local/agent-$i", kill_grace_period: 5 }
logging: { level: info, format: text, output: "$VAR/local/agent-$i.log" }
YAML
done

pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping the local cluster..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  echo "stopped."
}
trap stop INT TERM EXIT

"$BIN/dgpu-scheduler" --config "$VAR/local/scheduler.yaml" & pids+=($!)
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$HTTP_PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
"$BIN/dgpu-agent" --config "$VAR/local/agent-1.yaml" & pids+=($!)
"$BIN/dgpu-agent" --config "$VAR/local/agent-2.yaml" & pids+=($!)

cat <<MSG
dgpu local cluster is up: scheduler REST at http://127.0.0.1:$HTTP_PORT (gRPC :$GRPC_PORT),
agents agent-1 and agent-2 with 4 fake GPUs each. Logs and state: $VAR/local/

Dashboard: http://127.0.0.1:$HTTP_PORT/ui/

Try:
  $BIN/dgpuctl submit --gpus 2 --priority high -- 'echo \$CUDA_VISIBLE_DEVICES'
  $BIN/dgpuctl get tasks
  $BIN/dgpuctl logs task-1
  curl -s http://127.0.0.1:$HTTP_PORT/api/v1/gpus

Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}" || true
