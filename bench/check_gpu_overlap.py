#!/usr/bin/env python3
"""Checks agent logs (text format) for a GPU given to two running tasks at once.

Each agent's log is written in order by one process: a GPU is busy from its task's
`event=task_started ... gpus=I,J` line to that task's `event=task_finished` line. A second
task_started on a busy GPU of the same node is an overlap. Also checks that every task started
exactly once and finished exactly once, with success.
usage: check_gpu_overlap.py AGENT_LOG...   (exit 1 on a violation)
"""
import re
import sys

started_re = re.compile(r"event=task_started task_id=(\S+) node=(\S+) gpus=(\S+)")
finished_re = re.compile(r"event=task_finished task_id=(\S+) node=(\S+) success=(\S+)")
problems = []
starts, finishes, failures = {}, {}, 0
for path in sys.argv[1:]:
    busy = {}  # (node, gpu) -> task id
    held = {}  # task id -> [(node, gpu)]
    for line in open(path, errors="replace"):
        m = started_re.search(line)
        if m:
            tid, node, gpus = m.groups()
            starts[tid] = starts.get(tid, 0) + 1
            keys = [(node, g) for g in gpus.split(",")]
            for k in keys:
                if k in busy:
                    problems.append("%s gpu %s given to %s while %s runs" % (k[0], k[1], tid, busy[k]))
                busy[k] = tid
            held[tid] = keys
            continue
        m = finished_re.search(line)
        if m:
            tid, node, ok = m.groups()
            finishes[tid] = finishes.get(tid, 0) + 1
            if ok != "true":
                failures += 1
            for k in held.pop(tid, []):
                if busy.get(k) == tid:
                    del busy[k]
twice = [t for t, n in starts.items() if n != 1] + [t for t, n in finishes.items() if n != 1]
unfinished = set(starts) - set(finishes)
print("tasks started: %d, finished: %d (failed %d), started/finished more than once: %d, "
      "GPU overlaps: %d" % (len(starts), len(finishes), failures, len(twice), len(problems)))
for p in problems[:10]:
    print("  " + p)
sys.exit(1 if problems or twice or unfinished or failures else 0)
