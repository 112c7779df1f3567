#!/usr/bin/env python3
"""A hyper-parameter sweep on dgpu: submits one task per parameter value, waits for all of them
and prints the best.

The scheduler does not serve task output, so each task reports its result through its exit code:
a score from 0 to 255 (higher is better). The parameter reaches the task as $SWEEP_X and is also
in the task's name (sweep-x<value>). Without --command, each task runs a toy objective in sh,
100 - (x - 13)^2 (at least 0), whose best value is x = 13.

    python3 examples/sweep.py --server http://127.0.0.1:8080 --count 20
    python3 examples/sweep.py --command 'python train.py --lr-index "$SWEEP_X"'

Exit code: 0 when every task finished with a score, 1 when one failed without one (killed,
cancelled, timed out), 3 when the scheduler answered an error or could not be reached.
"""

import argparse
import os
import sys

try:
    import dgpu
except ImportError:  # Run from a checkout without installing the client.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                    "python"))
    import dgpu

TOY_OBJECTIVE = ('s=$((100 - (SWEEP_X - 13) * (SWEEP_X - 13))); '
                 '[ "$s" -lt 0 ] && s=0; exit "$s"')


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", help="scheduler URL (default: $DGPU_SERVER, else "
                   "http://127.0.0.1:8080)")
    p.add_argument("--count", type=int, default=20, help="parameter values 0..COUNT-1")
    p.add_argument("--command", default=TOY_OBJECTIVE,
                   help="the task's command; it reads $SWEEP_X and exits with its score")
    p.add_argument("--gpu-count", type=int, default=1)
    p.add_argument("--priority", choices=dgpu.PRIORITIES, default="low")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all tasks")
    args = p.parse_args(argv)

    client = dgpu.Client(args.server)
    try:
        ids = {}
        for x in range(args.count):
            t = client.submit(args.command, gpu_count=args.gpu_count, priority=args.priority,
                              name="sweep-x%d" % x, env={"SWEEP_X": str(x)})
            ids[t.task_id] = x
        print("submitted %d tasks" % len(ids))
        results = {}
        for task_id, x in ids.items():
            task = client.wait(task_id, timeout=args.timeout)
            results[x] = task
    except dgpu.WaitTimeout as e:
        print("sweep: %s" % e, file=sys.stderr)
        return 1
    except dgpu.DgpuError as e:
        print("sweep: %s" % e, file=sys.stderr)
        return 3

    # A task that ran to its end reports its score as its exit code, whatever its status.
    scored = {x: t.exit_code for x, t in results.items()
              if t.status in ("success", "failed") and t.exit_code is not None}
    for x in sorted(results):
        t = results[x]
        print("%-12s %-10s x=%-3d score=%s" % (t.task_id, t.status, x, scored.get(x, "-")))
    if not scored:
        print("sweep: no task reported a score", file=sys.stderr)
        return 1
    best = max(sorted(scored), key=lambda x: scored[x])
    print("best: sweep-x%d score %d (%s)" % (best, scored[best],
                                             results[best].task_id))
    return 0 if len(scored) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
