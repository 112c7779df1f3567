# Shared by the bench/run_*.sh scripts (sourced). Starts real daemons in a work directory.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${DGPU_BIN_DIR:-$REPO/build/bin}
PIDS=()

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n "${WORK:-}" && -z "${KEEP:-}" ]]; then rm -rf "$WORK"; fi
  if [[ -n "${RUNS:-}" ]]; then rm -rf "$RUNS"; fi
}

# run_dir_yaml NAME: ", run_dir: <tmpfs dir>/NAME" for an agent's `executor:` line: the run
# records on a tmpfs (made by make_work), as docs recommend (they must outlive the agent process,
# not the machine). Empty with RUN_DIR=work (the key's default: <work_dir>/.run, on the disk),
# without /dev/shm, or for a build that predates the key.
RUNS=""
run_dir_yaml() {
  if [[ -n "$RUNS" ]]; then echo ", run_dir: \"$RUNS/$1\""; fi
}

# make_work: a work directory on the real disk (NOT tmpfs: fsync must cost what it costs).
make_work() {
  WORK=$(mktemp -d "${BENCH_TMP:-/var/tmp}/dgpu-bench.XXXXXX")
  if [[ "${RUN_DIR:-tmpfs}" == tmpfs && -d /dev/shm ]] && grep -q "executor.run_dir" "$BIN/dgpu-agent"; then
    RUNS=$(mktemp -d /dev/shm/dgpu-bench-run.XXXXXX)
  fi
  trap cleanup EXIT
}

# use_tls: the next start_scheduler serves HTTPS and gRPC over TLS with client certificates
# (certificates from scripts/make-dev-certs.sh in $WORK/certs, an agent certificate per id given);
# curl and metric follow.
use_tls() {
  local args=() id
  for id in "$@"; do args+=(--agent "$id"); done
  "$REPO/scripts/make-dev-certs.sh" -o "$WORK/certs" "${args[@]}" >/dev/null
  local c="$WORK/certs"
  SERVER_TLS="tls: { cert_file: \"$c/scheduler.crt\", key_file: \"$c/scheduler.key\", client_ca_file: \"$c/ca.crt\" }"
  SCHEME=https
  CURL_TLS=(--cacert "$c/ca.crt")
}
SCHEME=http
SERVER_TLS=""
CURL_TLS=()

# start_scheduler [extra yaml lines...]: sets HTTP_PORT, GRPC_PORT, SCHED_PID.
start_scheduler() {
  HTTP_PORT=$(free_port); GRPC_PORT=$(free_port)
  {
    echo "server: { grpc_address: \"127.0.0.1:$GRPC_PORT\", http_address: \"127.0.0.1:$HTTP_PORT\"${SERVER_TLS:+, $SERVER_TLS} }"
    echo "storage: { snapshot_dir: \"$WORK/state\", fsync: true }"
    for line in "$@"; do echo "$line"; done
  } > "$WORK/sched.yaml"
  "$BIN/dgpu-scheduler" --config "$WORK/sched.yaml" > "$WORK/sched.log" 2>&1 &
  SCHED_PID=$!; PIDS+=("$SCHED_PID")
  for _ in $(seq 200); do
    curl -fsS "${CURL_TLS[@]}" "$SCHEME://127.0.0.1:$HTTP_PORT/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$SCHED_PID" 2>/dev/null || { cat "$WORK/sched.log"; echo "scheduler exited" >&2; exit 1; }
    sleep 0.05
  done
  echo "scheduler did not come up" >&2; exit 1
}

# metric NAME: sum of the samples of a metric (all label sets).
metric() {
  curl -fsS "${CURL_TLS[@]}" "$SCHEME://127.0.0.1:$HTTP_PORT/metrics" |
    awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%.15g\n", s + 0 }'
}

# start_agent [executor yaml]: one real agent, node-1, with 8 fake GPUs and its work directory in
# $WORK/a1 (extra `executor:` keys as "key: value, ..."); logs to $WORK/a1.log. Returns once it
# is connected.
start_agent() {
  cat > "$WORK/a1.yaml" <<YAML
agent: { id: "node-1", heartbeat_interval: 1 }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT", retry_interval: 0.1, max_retry_interval: 1 }
gpu: { detection_method: fake, fake: { count: 8 } }
executor: { work_dir: "$WORK/a1", kill_grace_period: 1${1:+, $1}$(run_dir_yaml a1) }
logging: { level: info, format: text }
YAML
  "$BIN/dgpu-agent" --config "$WORK/a1.yaml" > "$WORK/a1.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 100); do
    grep -q agent_connected "$WORK/a1.log" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "the agent did not connect" >&2; exit 1
}
