#!/usr/bin/env python3
"""CPU per task start, piece by piece: what the processes a task start creates cost on this
machine, without the scheduler and the agent around them.

  python3 bench/task_start_cost.py [--shim build/bin/dgpu-task-shim] [--runs 500]

Each row starts RUNS processes one after another with posix_spawn, as the agent does, waits for
each, and reports the CPU (user + system) its children used per start, from getrusage
(RUSAGE_CHILDREN: the shim's own children are counted once the shim has reaped them):
  static no-op   a statically linked `int main() { return 0; }` (compiled here with cc)
  dynamic no-op  the same, dynamically linked
  sh -c true     the command of the end-to-end benchmark, started directly (what a task cost
                 before it had a shim)
  shim           dgpu-task-shim running `sh -c true` as the agent starts it for a task too large
                 for a kept shim: handshake pipe on fd 0, the log on fds 1 and 2, its records in
                 a scratch directory (on /dev/shm when it exists, so that the file system's cost
                 is not measured)
  kept shim      the usual start: one dgpu-task-shim --task-shim-server kept for every task,
                 each sent as one request (task_shim.h); CPU read from the shim's /proc stat
The first two rows are the floor of any exec on this machine (the C library's start-up);
`shim` minus `sh -c true` is what the shim adds per task. "started after" is the median wall time
from the start call until the program is known to run: posix_spawn's return (after the exec)
for the plain rows, the shim's answer (after its command's exec) for the shim: what a task start
adds to the submission-to-running latency.
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import statistics
import tempfile
import time


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def measure(runs, start_one):
    """CPU ms per start (user, system) and the median wall ms until the program is known to run
    (posix_spawn returned, which is after the exec; for the shim, its answer, which comes after
    its command's exec)."""
    u0, s0 = children_cpu()
    started = []
    for i in range(runs):
        t0 = time.perf_counter()
        pid = start_one(i)
        started.append(time.perf_counter() - t0)
        os.waitpid(pid, 0)
    u1, s1 = children_cpu()
    return (u1 - u0) / runs * 1000, (s1 - s0) / runs * 1000, statistics.median(started) * 1000


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shim", default=os.path.join(repo, "build", "bin", "dgpu-task-shim"))
    ap.add_argument("--runs", type=int, default=500)
    args = ap.parse_args()
    if not os.access(args.shim, os.X_OK):
        sys.exit(f"no shim at {args.shim}: build first (make build)")
    sh = shutil.which("sh")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="dgpu-start-cost-", dir=base) as work:
        src = os.path.join(work, "nop.c")
        with open(src, "w") as f:
            f.write("int main(void) { return 0; }\n")
        nop_static, nop_dynamic = os.path.join(work, "nop-static"), os.path.join(work, "nop")
        subprocess.run(["cc", "-O2", "-static", "-o", nop_static, src], check=True)
        subprocess.run(["cc", "-O2", "-o", nop_dynamic, src], check=True)
        run_dir = os.path.join(work, ".run")
        os.mkdir(run_dir)
        log = os.open(os.path.join(work, "task.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        out = [(os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2)]

        def plain(argv):
            stdin = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
            return lambda i: os.posix_spawn(argv[0], argv, env, file_actions=stdin + out,
                                            setsid=True)

        def shim(i):
            hello_read, hello_write = os.pipe()
            prefix = os.path.join(run_dir, f"task-{i}")
            argv = [args.shim, "--task-shim", "1", prefix, "10485760", "--", sh, "-c", "true"]
            pid = os.posix_spawn(args.shim, argv, env,
                                 file_actions=[(os.POSIX_SPAWN_DUP2, hello_write, 0)] + out,
                                 setsid=True)
            os.close(hello_write)
            line = os.read(hello_read, 512).decode()
            os.close(hello_read)
            if not line.startswith("1 ok "):
                sys.exit(f"the shim answered {line!r}")
            return pid

        rows = [("static no-op", plain([nop_static])), ("dynamic no-op", plain([nop_dynamic])),
                ("sh -c true", plain([sh, "-c", "true"])), ("shim + sh -c true", shim)]
        print(f"{'start':<22} {'CPU ms':>7} {'user':>7} {'system':>7} {'started after ms (p50)':>23}"
              f"   ({args.runs} runs each)")
        for name, start in rows:
            measure(20, start)  # Warm the page cache.
            user, system, started = measure(args.runs, start)
            print(f"{name:<22} {user + system:7.3f} {user:7.3f} {system:7.3f} {started:23.3f}")
        user, system, started = measure_kept(args.shim, args.runs, run_dir, log, work,
                                             [sh, "-c", "true"], env)
        print(f"{'kept shim + sh -c true':<22} {user + system:7.3f} {user:7.3f} {system:7.3f} "
              f"{started:23.3f}")
        os.close(log)


def measure_kept(shim, runs, run_dir, log, cwd, argv, env):
    """The agent's usual start: one shim kept for every task (--task-shim-server), each task sent
    as one request with its log, answered with the handshake and then "1 done". CPU: the shim's
    own and its reaped children's, from its /proc/<pid>/stat, over the runs (the shim's own start
    is before the first)."""
    import socket
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.posix_spawn(shim, [shim, "--task-shim-server", "1"], {},
                         file_actions=[(os.POSIX_SPAWN_DUP2, child.fileno(), 0)], setsid=True)
    child.close()
    hz = os.sysconf("SC_CLK_TCK")

    def cpu():
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # Fields 14-17 of stat (utime, stime, cutime, cstime), 12-15 after "pid (comm)".
        return (int(fields[11]) + int(fields[13])) / hz, (int(fields[12]) + int(fields[14])) / hz

    def run_one(i):
        fields = ["1", os.path.join(run_dir, f"kept-{i}"), "10485760", cwd, str(len(argv))]
        request = "\0".join(fields + argv + [f"{k}={v}" for k, v in env.items()]) + "\0"
        t0 = time.perf_counter()
        socket.send_fds(parent, [request.encode()], [log])
        hello = parent.recv(4096).decode()
        started = time.perf_counter() - t0
        if not hello.startswith("1 ok "):
            sys.exit(f"the kept shim answered {hello!r}")
        done = parent.recv(4096).decode()
        if done != "1 done\n":
            sys.exit(f"the kept shim said {done!r}")
        return started

    for i in range(20):  # Warm the page cache.
        run_one(-1 - i)
    u0, s0 = cpu()
    started = [run_one(i) for i in range(runs)]
    u1, s1 = cpu()
    parent.close()  # Its end: the shim exits.
    os.waitpid(pid, 0)
    return (u1 - u0) / runs * 1000, (s1 - s0) / runs * 1000, statistics.median(started) * 1000


if __name__ == "__main__":
    main()
