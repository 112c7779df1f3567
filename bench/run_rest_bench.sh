#!/usr/bin/env bash
# REST submission throughput with durable acknowledgements (fsync on, storage on the real disk).
#   bench/run_rest_bench.sh            # wrk -t2 -c64 -d10s
#   THREADS=2 CONNS=64 DURATION=10s bench/run_rest_bench.sh
#   AUTH=token bench/run_rest_bench.sh   # every request carries a bearer token (auth.mode token)
#   AUTH=jwt bench/run_rest_bench.sh     # an HS256 JWT (auth.mode jwt, verified once, then cached)
#   TLS=1 bench/run_rest_bench.sh        # HTTPS (server.tls; wrk keeps its connections, so this
#                                        # measures encryption, not handshakes)
#   WATCHERS=100 bench/run_rest_bench.sh # while 100 clients follow GET /api/v1/watch (WATCH_DEFLATE=1:
#                                        # compressed, as browsers take it; plain HTTP;
#                                        # bench/watch_clients.py, one process, on this machine too)
# Prints accepted submissions/s (every answer must be a 201: wrk's Non-2xx count must be 0),
# latency p50/p99 and the journal's group-commit factor (appends per fsync'ed transaction).
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
THREADS=${THREADS:-2}; CONNS=${CONNS:-64}; DURATION=${DURATION:-10s}

make_work
AUTH_YAML=""
case "${AUTH:-none}" in
  none) ;;
  token)
    TOKEN=bench-token-0123456789abcdef
    printf 'users:\n  - {name: bench, token_sha256: %s, role: user}\n' \
      "$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)" > "$WORK/tokens.yaml"
    AUTH_YAML="auth: { mode: token, tokens_file: \"$WORK/tokens.yaml\" }"
    export TOKEN ;;
  jwt)
    printf 'bench-jwt-secret-0123456789abcdef-0123' > "$WORK/jwt.secret"
    TOKEN=$(python3 -c '
import base64, hashlib, hmac, json, sys, time
b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
s = b(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b(json.dumps(
    {"iss": "bench", "aud": "dgpu", "sub": "bench", "exp": int(time.time()) + 3600}).encode())
print(s + "." + b(hmac.new(open(sys.argv[1], "rb").read(), s.encode(), hashlib.sha256).digest()))
' "$WORK/jwt.secret")
    AUTH_YAML="auth: { mode: jwt, jwt: { issuer: bench, audience: dgpu, hs256_secret_file: \"$WORK/jwt.secret\" } }"
    export TOKEN ;;
  *) echo "AUTH must be none, token or jwt" >&2; exit 2 ;;
esac
[[ -n "${TLS:-}" ]] && use_tls
# No agents: every submission stays pending, so the per-user limit is lifted.
start_scheduler "logging: { level: warn, format: text }" "$AUTH_YAML" \
  "limits: { max_pending_per_user: 100000000 }"
echo "auth.mode: ${AUTH:-none}, $SCHEME"
echo "scheduler pid $SCHED_PID, state in $WORK/state (fsync on), $(nproc) CPUs"

if [[ "${WATCHERS:-0}" -gt 0 ]]; then
  python3 "$REPO/bench/watch_clients.py" --port "$HTTP_PORT" --watchers "$WATCHERS" \
    ${TOKEN:+--token "$TOKEN"} ${WATCH_DEFLATE:+--deflate} > "$WORK/watchers.out" &
  WATCH_PID=$!
  for _ in $(seq 100); do grep -q connected "$WORK/watchers.out" 2>/dev/null && break; sleep 0.1; done
  head -1 "$WORK/watchers.out"
fi
cpu_before=$(awk '{ print $14 + $15 }' /proc/$SCHED_PID/stat)
if [[ -n "${PERF:-}" ]]; then  # PERF=1: profile the scheduler during the run (perf.data kept).
  perf record -g -o "${PERF_OUT:-/var/tmp/dgpu-rest.perf.data}" -p "$SCHED_PID" -- sleep "${DURATION%s}" 2>/dev/null &
  PERF_PID=$!
fi
wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$REPO/bench/rest_submit.lua" \
  "$SCHEME://127.0.0.1:$HTTP_PORT" | tee "$WORK/wrk.out"

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
if [[ -n "${WATCH_PID:-}" ]]; then
  sleep 1  # The last events reach the watchers.
  kill -TERM "$WATCH_PID"; wait "$WATCH_PID" || true
  echo "watch streams:          $(tail -1 "$WORK/watchers.out")"
fi
if [[ -n "${PERF_PID:-}" ]]; then wait "$PERF_PID" || true; fi
if [[ "$non2xx" != 0 ]]; then echo "FAIL: non-2xx responses" >&2; exit 1; fi
