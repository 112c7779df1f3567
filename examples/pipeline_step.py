#!/usr/bin/env python3
"""A pipeline step on dgpu: submits one task, waits for it and exits with its exit code, so that
a CI job or a workflow engine sees the task's outcome as the step's.

    python3 examples/pipeline_step.py --gpu-count 1 --priority high -- python train.py

Exit code: the task's exit code when it ran to its end (0 on success); 1 when it ended without
one (cancelled, or lost with its node); 3 when the scheduler answered an error or could not be
reached; 4 when --timeout passed (the task is cancelled then). Task output stays on the agent
(<work_dir>/<task id>.log): the scheduler does not serve it.
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

EXIT_NO_CODE, EXIT_API, EXIT_TIMEOUT = 1, 3, 4


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", help="scheduler URL (default: $DGPU_SERVER, else "
                   "http://127.0.0.1:8080)")
    p.add_argument("--gpu-count", type=int, default=1)
    p.add_argument("--priority", choices=dgpu.PRIORITIES, default="high")
    p.add_argument("--name")
    p.add_argument("--gpu-model")
    p.add_argument("--timeout", type=float, help="seconds to wait; the task is cancelled after")
    p.add_argument("command", nargs="+", help="the command (after --), run with /bin/sh -c")
    args = p.parse_args(argv)

    client = dgpu.Client(args.server)
    try:
        t = client.submit(" ".join(args.command), gpu_count=args.gpu_count,
                          priority=args.priority, name=args.name, gpu_model=args.gpu_model)
        print("submitted %s" % t.task_id, flush=True)
        try:
            task = client.wait(t.task_id, timeout=args.timeout)
        except dgpu.WaitTimeout:
            client.cancel(t.task_id)
            print("%s did not finish within %gs: cancelled" % (t.task_id, args.timeout),
                  file=sys.stderr)
            return EXIT_TIMEOUT
    except dgpu.DgpuError as e:
        print("pipeline_step: %s" % e, file=sys.stderr)
        return EXIT_API
    print("%s %s exit_code=%s%s" % (task.task_id, task.status, task.exit_code,
                                    " error=%s" % task.error if task.error else ""))
    if task.exit_code is None or not 0 <= task.exit_code <= 255:
        return EXIT_NO_CODE
    return task.exit_code


if __name__ == "__main__":
    sys.exit(main())
