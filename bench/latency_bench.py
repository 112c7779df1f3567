#!/usr/bin/env python3
"""Submission-to-running latency on an idle cluster (see run_latency_bench.sh).

Submits N tasks of `true` one at a time (each after the previous one finished, so the cluster
is idle) and reports, per task:
  A. POST sent -> the agent's `task_started` log line (the agent's wall-clock timestamp, ms
     resolution; the process has been spawned at that point);
  B. 201 received -> the same line (negative when the agent started the task before the client
     had its 201: dispatch does not wait for the durable commit, the 201 does);
  C. the API's started_at - created_at (both set by the scheduler: created_at at submission,
     started_at when it dispatches the task to the agent; ms resolution).
usage: latency_bench.py HTTP_PORT AGENT_LOG N
"""
import datetime
import http.client
import json
import re
import sys
import time

port, agent_log, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)


def call(method, path, body=None):
    conn.request(method, path, body=json.dumps(body) if body else None,
                 headers={"Content-Type": "application/json"} if body else {})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null")


def ts(text):
    return datetime.datetime.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


sent, acked, ids = {}, {}, []
for i in range(n):
    t0 = time.time()
    status, body = call("POST", "/api/v1/tasks",
                        {"priority": "high", "gpu_count": 1, "command": "true"})
    t1 = time.time()
    assert status == 201, (status, body)
    tid = body["task_id"]
    sent[tid], acked[tid] = t0, t1
    ids.append(tid)
    while call("GET", "/api/v1/tasks/" + tid)[1]["status"] in ("pending", "running"):
        time.sleep(0.005)
    time.sleep(0.02)

started = {}
pat = re.compile(r"^(\S+) .*event=task_started task_id=(\S+)")
for line in open(agent_log, errors="replace"):
    m = pat.search(line)
    if m:
        started[m.group(2)] = ts(m.group(1))
api = []
for tid in ids:
    t = call("GET", "/api/v1/tasks/" + tid)[1]
    api.append((ts(t["started_at"]) - ts(t["created_at"])) * 1000)
a = sorted((started[t] - sent[t]) * 1000 for t in ids)
b = sorted((started[t] - acked[t]) * 1000 for t in ids)
c = sorted(api)
rt = sorted((acked[t] - sent[t]) * 1000 for t in ids)


def pct(v, p):
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


for name, v in [("A  POST sent -> agent task_started", a),
                ("B  201 received -> agent task_started", b),
                ("C  API started_at - created_at", c),
                ("   POST round trip (201)", rt)]:
    print("%-40s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms"
          % (name, pct(v, 50), pct(v, 90), pct(v, 99), v[-1]))
