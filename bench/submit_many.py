#!/usr/bin/env python3
"""Submits exactly TOTAL tasks of COMMAND as fast as it can over CONNS keep-alive connections
(alternating priority high/low) and prints how many were accepted (201) and refused.
usage: submit_many.py HTTP_PORT TOTAL [CONNS] [COMMAND]"""
import http.client
import itertools
import json
import sys
import threading
import time

port, total = int(sys.argv[1]), int(sys.argv[2])
conns = int(sys.argv[3]) if len(sys.argv) > 3 else 8
command = sys.argv[4] if len(sys.argv) > 4 else "true"
counter = itertools.count()
lock = threading.Lock()
result = {"accepted": 0, "refused": 0, "errors": 0}
bodies = [json.dumps({"priority": p, "gpu_count": 1, "command": command}) for p in ("high", "low")]


def worker():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while True:
        i = next(counter)
        if i >= total:
            break
        try:
            c.request("POST", "/api/v1/tasks", body=bodies[i % 2],
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            key = "accepted" if r.status == 201 else "refused"
        except Exception:
            c.close()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            key = "errors"
        with lock:
            result[key] += 1
    c.close()


t0 = time.time()
threads = [threading.Thread(target=worker) for _ in range(conns)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("submitted %d: accepted %d, refused %d, errors %d in %.2fs"
      % (total, result["accepted"], result["refused"], result["errors"], time.time() - t0))
