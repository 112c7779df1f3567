#!/usr/bin/env bash
# How soon a followed log (GET /api/v1/tasks/{id}/logs?follow=true) delivers a task's output:
# a task on a real agent writes a line with its wall-clock time every 100 ms for DURATION
# seconds (default 20); the reader notes when each line arrives through the scheduler.
#   bench/run_log_follow_bench.sh
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
DURATION=${DURATION:-20}
make_work
start_scheduler "logging: { level: warn, format: text }"
start_agent
python3 - "$HTTP_PORT" "$DURATION" <<'PY'
import http.client, json, statistics, sys, time
port, duration = int(sys.argv[1]), float(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
n = int(duration * 10)
command = ("python3 -c 'import time\nfor i in range(%d):\n    print(time.time(), flush=True)\n"
           "    time.sleep(0.1)'" % n)
conn.request("POST", "/api/v1/tasks", json.dumps({"command": command, "gpu_count": 1,
             "priority": "high"}), {"Content-Type": "application/json"})
tid = json.loads(conn.getresponse().read())["task_id"]
time.sleep(0.5)
follow = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
follow.request("GET", "/api/v1/tasks/%s/logs?follow=true&tail=0" % tid)
r = follow.getresponse()
delays, text = [], b""
while True:
    piece = r.read1(65536)
    if not piece:
        break
    now = time.time()
    text += piece
    *lines, text = text.split(b"\n")
    delays += [(now - float(line)) * 1000 for line in lines if line]
delays.sort()
q = lambda p: delays[min(len(delays) - 1, int(p * len(delays)))]
print("%d lines followed; delay write -> received: p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, "
      "max %.0f ms" % (len(delays), q(0.5), q(0.9), q(0.99), delays[-1]))
PY
