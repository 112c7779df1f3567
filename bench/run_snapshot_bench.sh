#!/usr/bin/env bash
# The owner thread while state.json is written: a scheduler with no agents is filled with N
# pending tasks (durable submissions through wrk), then GET /api/v1/quota (answered by the owner
# thread) is asked back to back on one keep-alive connection while snapshots are written every
# INTERVAL. Reports the worst and p99 quota latency, the scheduler's RSS (before the fill, after
# it, and the peak while snapshots run) and how long each state.json took to write (from its
# written_at to its modification time).
#   bench/run_snapshot_bench.sh                      # N=300000 INTERVAL=5s WINDOW=30
#   DGPU_BIN_DIR=/path/to/other/build/bin bench/run_snapshot_bench.sh   # another binary
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
N=${N:-300000}; INTERVAL=${INTERVAL:-5s}; WINDOW=${WINDOW:-30}

make_work
start_scheduler "logging: { level: warn, format: text }" "scheduler: { snapshot_interval: $INTERVAL }"
echo "scheduler $BIN/dgpu-scheduler pid $SCHED_PID, $(nproc) CPUs, N=$N, snapshot_interval $INTERVAL"
rss() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$SCHED_PID/status"; }
rss_empty=$(rss)

# wrk sleeps its full -d: it is interrupted once all N submissions are answered.
TOTAL=$N THREADS=2 wrk -t2 -c64 -d3600s -s "$REPO/bench/rest_submit.lua" \
  "http://127.0.0.1:$HTTP_PORT" > "$WORK/fill.out" 2>&1 &
FILLER=$!
fill_start=$(date +%s.%N)
until [[ $(metric dgpu_tasks_pending) -ge $N ]]; do
  kill -0 "$FILLER" 2>/dev/null || { cat "$WORK/fill.out"; echo "wrk exited" >&2; exit 1; }
  sleep 0.2
done
kill -INT "$FILLER"; wait "$FILLER" || true
awk -v s="$fill_start" -v e="$(date +%s.%N)" -v n="$N" 'BEGIN { printf "filled %d tasks in %.1f s\n", n, e - s }'
grep "submissions:" "$WORK/fill.out" || true

python3 - "$HTTP_PORT" "$SCHED_PID" "$WORK/state/state.json" "$WINDOW" "$rss_empty" <<'PY'
import datetime, http.client, os, re, sys, threading, time

port, pid, state, window, rss_empty = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]

def rss_mb():
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024.0

rss_filled = rss_mb()
peak = [rss_filled]
stop = False

def sample_rss():
    while not stop:
        peak[0] = max(peak[0], rss_mb())
        time.sleep(0.05)

writes = {}  # mtime_ns -> seconds from written_at to the rename

def watch_files():
    seen = 0
    while not stop:
        try:
            st = os.stat(state)
            if st.st_mtime_ns != seen:
                seen = st.st_mtime_ns
                # written_at is the last key; parsing the whole file would hold the GIL for
                # seconds and show up as request latency.
                with open(state, "rb") as f:
                    f.seek(max(0, st.st_size - 200))
                    written_at = re.search(rb'"written_at": "([^"]+)"', f.read()).group(1).decode()
                t = datetime.datetime.fromisoformat(written_at.replace("Z", "+00:00")).timestamp()
                writes[seen] = seen / 1e9 - t
        except (OSError, ValueError, AttributeError):
            pass
        time.sleep(0.05)

threads = [threading.Thread(target=f, daemon=True) for f in (sample_rss, watch_files)]
for t in threads:
    t.start()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
lat = []
unanswered = []  # Seconds until the server closed the connection without an answer.
end = time.monotonic() + window
while time.monotonic() < end:
    t0 = time.monotonic()
    try:
        conn.request("GET", "/api/v1/quota")
        r = conn.getresponse()
        r.read()
    except (OSError, http.client.HTTPException):
        unanswered.append(time.monotonic() - t0)
        conn.close()
        continue
    lat.append(time.monotonic() - t0)
    assert r.status == 200, r.status
stop = True
for t in threads:
    t.join()
lat.sort()
durations = sorted(writes.values())
print("== GET /api/v1/quota while state.json is written (%.0f s window) ==" % window)
print("requests:             %d answered, %d closed unanswered after %s s"
      % (len(lat), len(unanswered), " ".join("%.1f" % u for u in unanswered) or "-"))
print("latency worst / p99 / p50: %.1f / %.1f / %.2f ms"
      % (1e3 * lat[-1], 1e3 * lat[int(0.99 * (len(lat) - 1))], 1e3 * lat[len(lat) // 2]))
print("state.json writes:    %d, %s s each" % (len(durations), " ".join("%.2f" % d for d in durations)))
print("scheduler RSS:        %s MB empty, %.0f MB filled, %.0f MB peak during snapshots"
      % (rss_empty, rss_filled, peak[0]))
PY
