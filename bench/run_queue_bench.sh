#!/usr/bin/env bash
# A million-task queue: a scheduler with no agents (every task stays pending) is filled with N
# durable submissions through wrk (64 connections), with state.json written every INTERVAL.
# Reports:
#   - the submission rate (wrk, RATE_SECONDS) at 10,000 pending and again at N pending;
#   - over WINDOW seconds at N pending, while state.json is written: the worst, p99 and median
#     latency of GET /api/v1/quota, GET /api/v1/tasks/{id} (random ids), the first page of
#     `status=pending&limit=50`, the last page by keyset (`after=task-51`) and the last page by
#     offset; each probe on its own keep-alive connection, one request every 20 ms;
#   - the scheduler's RSS (empty, filled, peak during the window) and bytes per pending task;
#   - the time of GET /api/v1/snapshot (a copy of the whole database) at N pending;
#   - SIGTERM to exit, and restart to serving (GET /readyz 200 and GET /api/v1/quota answered).
#   bench/run_queue_bench.sh                       # N=1000000 INTERVAL=5s WINDOW=60
#   DGPU_BIN_DIR=/path/to/other/build/bin bench/run_queue_bench.sh    # another binary
# A binary without keyset pages answers the keyset probe 400; it is then reported as such.
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
N=${N:-1000000}; INTERVAL=${INTERVAL:-5s}; WINDOW=${WINDOW:-60}; RATE_SECONDS=${RATE_SECONDS:-5}
SMALL=10000
URL=""
# dgpu_tasks_pending as an integer.
pending_now() { metric dgpu_tasks_pending | awk '{ printf "%d", $1 }'; }

make_work
CONFIG=("logging: { level: warn, format: text }" "scheduler: { snapshot_interval: $INTERVAL }")
start_scheduler "${CONFIG[@]}"
URL="http://127.0.0.1:$HTTP_PORT"
echo "scheduler $BIN/dgpu-scheduler pid $SCHED_PID, $(nproc) CPUs, N=$N, snapshot_interval $INTERVAL"
rss() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$SCHED_PID/status"; }
rss_empty=$(rss)

# fill_to COUNT: durable submissions until COUNT tasks are pending (wrk sleeps its full -d: it
# is interrupted once they are answered).
fill_to() {
  local want=$1 have
  have=$(pending_now)
  (( want > have )) || return 0
  TOTAL=$((want - have)) THREADS=2 wrk -t2 -c64 -d3600s -s "$REPO/bench/rest_submit.lua" "$URL" \
    > "$WORK/fill.out" 2>&1 &
  local filler=$! start
  start=$(date +%s.%N)
  until [[ $(pending_now) -ge $want ]]; do
    kill -0 "$filler" 2>/dev/null || { cat "$WORK/fill.out"; echo "wrk exited" >&2; exit 1; }
    sleep 0.2
  done
  kill -INT "$filler"; wait "$filler" || true
  awk -v s="$start" -v e="$(date +%s.%N)" -v n="$((want - have))" -v w="$want" \
    'BEGIN { printf "filled to %d pending: %d submissions in %.1f s (%.0f/s)\n", w, n, e - s, n / (e - s) }'
}

# rate: durable submissions per second over RATE_SECONDS (wrk's Requests/sec, all 201).
rate() {
  wrk -t2 -c64 -d"${RATE_SECONDS}s" -s "$REPO/bench/rest_submit.lua" "$URL" > "$WORK/rate.out" 2>&1
  if grep -q "Non-2xx" "$WORK/rate.out"; then cat "$WORK/rate.out" >&2; echo "refused submissions" >&2; exit 1; fi
  awk '/Requests\/sec/ { printf "%.0f", $2 }' "$WORK/rate.out"
}

fill_to "$SMALL"
rate_small=$(rate)
echo "submission rate at $SMALL pending: $rate_small/s"
fill_to "$N"
rss_filled=$(rss)
pending=$(pending_now)

python3 - "$HTTP_PORT" "$SCHED_PID" "$WINDOW" "$pending" <<'PY'
# Each probe runs in a process of its own, so that one probe's client never waits for another's
# (threads would share the interpreter lock); the parent samples the RSS.
import http.client, multiprocessing, random, sys, time

port, pid, window, pending = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])

def rss_mb():
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024.0

PROBES = [
    ("GET /api/v1/quota", lambda rng: "/api/v1/quota"),
    ("GET /api/v1/tasks/{id}", lambda rng: "/api/v1/tasks/task-%d" % rng.randint(1, pending)),
    ("first page, status=pending&limit=50", lambda rng: "/api/v1/tasks?status=pending&limit=50"),
    ("last page by keyset (after=task-51)",
     lambda rng: "/api/v1/tasks?status=pending&limit=50&after=task-51"),
    ("last page by offset",
     lambda rng: "/api/v1/tasks?status=pending&limit=50&offset=%d" % (pending - 50)),
]

def probe(index):
    _, path = PROBES[index]
    rng = random.Random(7 + index)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies, codes = [], {}
    end = time.monotonic() + window
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            conn.request("GET", path(rng))
            r = conn.getresponse()
            r.read()
        except (OSError, http.client.HTTPException):
            codes["closed"] = codes.get("closed", 0) + 1
            conn.close()
            continue
        latencies.append(time.monotonic() - t0)
        codes[r.status] = codes.get(r.status, 0) + 1
        time.sleep(0.02)
    return latencies, codes

peak = rss_mb()
with multiprocessing.Pool(len(PROBES)) as pool:
    pending_results = pool.map_async(probe, range(len(PROBES)))
    while not pending_results.ready():
        peak = max(peak, rss_mb())
        pending_results.wait(0.05)
    results = pending_results.get()
print("== %.0f s at %d pending, state.json written meanwhile ==" % (window, pending))
print("%-40s %8s %8s %8s %8s  %s" % ("request", "answers", "worst", "p99", "p50", "status codes"))
for (name, _), (lat, codes) in zip(PROBES, results):
    lat = sorted(lat)
    if not lat:
        print("%-40s %8d %8s %8s %8s  %s" % (name, 0, "-", "-", "-", codes))
        continue
    print("%-40s %8d %6.1fms %6.1fms %6.2fms  %s" % (
        name, len(lat), 1e3 * lat[-1], 1e3 * lat[int(0.99 * (len(lat) - 1))],
        1e3 * lat[len(lat) // 2], codes))
print("RSS peak during the window: %.0f MB" % peak)
PY

# A copy of the whole database (dgpuctl snapshot's request), timed; 404 on a binary without it.
t0=$(date +%s.%N)
code=$(curl -s -o "$WORK/snapshot.db" -w '%{http_code}' "$URL/api/v1/snapshot")
t1=$(date +%s.%N)
awk -v s="$t0" -v e="$t1" -v c="$code" -v b="$(stat -c %s "$WORK/snapshot.db")" -v r="$(rss)" \
  'BEGIN { printf "GET /api/v1/snapshot: HTTP %s, %.0f MB in %.2f s; RSS after it %d MB\n", c, b / 1048576, e - s, r }'
rm -f "$WORK/snapshot.db"

rate_large=$(rate)
echo "submission rate at $pending pending: $rate_large/s ($(awk -v a="$rate_large" -v b="$rate_small" 'BEGIN { printf "%.2f", a / b }')x the rate at $SMALL)"
awk -v e="$rss_empty" -v f="$rss_filled" -v n="$pending" \
  'BEGIN { printf "scheduler RSS: %d MB empty, %d MB at %d pending: %.0f bytes per pending task\n", e, f, n, (f - e) * 1048576 / n }'

pending=$(pending_now)
ls -l "$WORK/state/"
t0=$(date +%s.%N)
kill -TERM "$SCHED_PID"
wait "$SCHED_PID" && rc=0 || rc=$?
t1=$(date +%s.%N)
awk -v s="$t0" -v e="$t1" -v n="$pending" -v rc="$rc" \
  'BEGIN { printf "SIGTERM at %d pending: exit %d after %.2f s\n", n, rc, e - s }'
PIDS=()

t0=$(date +%s.%N)
"$BIN/dgpu-scheduler" --config "$WORK/sched.yaml" >> "$WORK/sched.log" 2>&1 &
SCHED_PID=$!; PIDS+=("$SCHED_PID")
until curl -fsS "$URL/readyz" > /dev/null 2>&1 && curl -fsS "$URL/api/v1/quota" > /dev/null 2>&1; do
  kill -0 "$SCHED_PID" 2>/dev/null || { tail "$WORK/sched.log"; echo "scheduler exited" >&2; exit 1; }
  sleep 0.01
done
t1=$(date +%s.%N)
after=$(pending_now)
awk -v s="$t0" -v e="$t1" -v n="$after" -v r="$(rss)" \
  'BEGIN { printf "restart to serving: %.2f s, %d pending, RSS %d MB\n", e - s, n, r }'
[[ "$after" == "$pending" ]] || { echo "pending after the restart: $after, before: $pending" >&2; exit 1; }
