#!/usr/bin/env python3
"""Waits for an end-to-end run to end, polling the scheduler's /metrics every 50 ms over one
kept-alive connection: one process for the whole run, so that the poller takes almost none of the
CPU the scheduler, the agents and their tasks need on a small machine (a curl and an awk every
50 ms took about a twentieth of two cores).

  e2e_progress.py PORT TOTAL TIMEOUT_SECONDS

Prints "<unix time all TOTAL were submitted> <unix time all TOTAL had ended>" (seconds, as
`date +%s.%N`) once dgpu_tasks_finished_total, summed over its statuses, reaches TOTAL; exits 1
with what it saw after TIMEOUT_SECONDS.
"""
import http.client
import sys
import time


def counts(conn):
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    submitted = ended = succeeded = 0
    for line in body.splitlines():
        if line.startswith("dgpu_tasks_submitted_total{"):
            submitted += float(line.rsplit(" ", 1)[1])
        elif line.startswith("dgpu_tasks_finished_total{"):
            value = float(line.rsplit(" ", 1)[1])
            ended += value
            if 'status="success"' in line:
                succeeded += value
    return int(submitted), int(ended), int(succeeded)


def main():
    port, total, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    start = time.time()
    submitted_at = None
    while True:
        submitted, ended, succeeded = counts(conn)
        now = time.time()
        if submitted_at is None and submitted >= total:
            submitted_at = now
        if ended >= total:  # Every task ended; one that did not succeed fails the run later.
            print(f"{submitted_at or now:.6f} {now:.6f}")
            return 0
        if now - start > timeout:
            print(f"timeout: {submitted} submitted, {succeeded} succeeded", file=sys.stderr)
            return 1
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
