#!/usr/bin/env bash
# An agent at rest and a task's shim at rest: wakeups (context switches, voluntary and not, of
# every thread) and CPU time over DURATION seconds (default 60), then the same with one running
# task that prints nothing, and that task's shim's own wakeups and unique memory (USS).
# The agent heartbeats every HEARTBEAT seconds (default 5, the default of agent.heartbeat_interval).
#   bench/run_agent_idle_bench.sh
set -euo pipefail
source "$(dirname "$0")/bench_lib.sh"
DURATION=${DURATION:-60}
HEARTBEAT=${HEARTBEAT:-5}
make_work
start_scheduler "logging: { level: warn, format: text }"
cat > "$WORK/a1.yaml" <<YAML
agent: { id: "node-1", heartbeat_interval: $HEARTBEAT }
scheduler: { master_address: "127.0.0.1:$GRPC_PORT", retry_interval: 0.1, max_retry_interval: 1 }
gpu: { detection_method: fake, fake: { count: 8 } }
executor: { work_dir: "$WORK/a1" }
logging: { level: info, format: text }
YAML
"$BIN/dgpu-agent" --config "$WORK/a1.yaml" > "$WORK/a1.log" 2>&1 &
AGENT_PID=$!; PIDS+=("$AGENT_PID")
for _ in $(seq 100); do grep -q agent_connected "$WORK/a1.log" && break; sleep 0.05; done
python3 - "$AGENT_PID" "$HTTP_PORT" "$DURATION" "$HEARTBEAT" <<'PY'
import glob, http.client, json, os, sys, time
agent, port, duration, heartbeat = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

def sample(pid):
    """{thread name: context switches}, and CPU seconds of the whole process (schedstat: ns,
    not the 10 ms ticks of /proc/PID/stat)."""
    switches, cpu = {}, 0
    for task in glob.glob("/proc/%d/task/*" % pid):
        try:
            fields = dict(line.split(":\t", 1) for line in open(task + "/status").read().splitlines()
                          if ":\t" in line)
            cpu += int(open(task + "/schedstat").read().split()[0])
        except OSError:
            continue
        name = fields["Name"].strip()
        n = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
        switches[name] = switches.get(name, 0) + n
    return switches, cpu / 1e9

def measure(pids, label):
    before = {p: sample(p) for p in pids}
    time.sleep(duration)
    for p in pids:
        (s0, c0), (s1, c1) = before[p], sample(p)
        threads = {k: max(s1.get(k, 0) - s0.get(k, 0), 0) for k in s1}
        total = sum(threads.values())
        busy = ", ".join("%s %d" % kv for kv in sorted(threads.items(), key=lambda kv: -kv[1]) if kv[1])
        print("%s, pid %d: %.2f wakeups/s (%d in %.0f s; %s), CPU %.3f millicores"
              % (label(p), p, total / duration, total, duration, busy or "none",
                 (c1 - c0) * 1000 / duration))

time.sleep(3)  # Past the start-up.
print("heartbeat every %.0f s: %.2f heartbeats/s" % (heartbeat, 1 / heartbeat))
measure([agent], lambda p: "idle agent")

conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
conn.request("POST", "/api/v1/tasks", json.dumps({"command": "exec sleep 100000", "gpu_count": 1,
                                                  "priority": "high"}),
             {"Content-Type": "application/json"})
answer = json.loads(conn.getresponse().read())
tid = answer.get("task_id") or sys.exit("submit failed: %s" % answer)
for _ in range(100):
    conn.request("GET", "/api/v1/tasks/" + tid)
    if json.loads(conn.getresponse().read())["status"] == "running":
        break
    time.sleep(0.05)
time.sleep(2)
def shim_of(pid):
    """Whether pid is a task shim of this agent: one of its own, or a kept one (a server)."""
    try:
        args = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        ppid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return False
    return ppid == agent and args[1:2] in ([b"--task-shim"], [b"--task-shim-server"])
# The task's shim: the parent of its leader (`sleep`), a shim of this agent.
leaders = [int(p.split("/")[2]) for p in glob.glob("/proc/[0-9]*/comm")
           if open(p).read().strip() == "sleep"]
shim = [pp for pp in (int(open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[1])
                      for p in leaders if os.path.exists("/proc/%d" % p)) if shim_of(pp)][0]
measure([agent, shim], lambda p: "agent with 1 task" if p == agent else "the task's shim")
rollup = dict(line.split(":", 1) for line in open("/proc/%d/smaps_rollup" % shim).read().splitlines()[1:])
kb = lambda k: int(rollup[k].split()[0])
print("the task's shim: USS %.2f MiB (private clean %d kB + private dirty %d kB), RSS %.2f MiB"
      % ((kb("Private_Clean") + kb("Private_Dirty")) / 1024, kb("Private_Clean"),
         kb("Private_Dirty"), kb("Rss") / 1024))
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # The idle one was closed.
conn.request("DELETE", "/api/v1/tasks/" + tid)
conn.getresponse().read()
PY
