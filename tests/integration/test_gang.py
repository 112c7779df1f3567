"""Gangs with real agents and real processes: a task of several nodes whose members meet at
MASTER_ADDR:MASTER_PORT and exchange their ranks; a gang that waits, holding nothing, until every
member has room; the first failing member stops the others; cancel stops every member; dgpuctl
submits a gang and shows its members; bad gang fields get 400 naming the field."""

import importlib.util
import json
import os
import subprocess
import sys
import time
import unittest

from harness import (API, CTL_BIN, ClusterTestCase, free_port, pid_alive, read_pid, read_text,
                     wait_until)

# The rendezvous ports: a free one on this machine (the default range, 29500-29999, may be in
# use by something else here).
PORT = free_port()

# Rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects and says its rank; rank 0
# answers with the ranks it saw. Each member exits 0 only if all NNODES ranks were seen, and
# writes what it saw (and its environment) to $OUT/<rank>.
RENDEZVOUS = r"""
import json, os, socket, sys, time
rank, n = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
env = {k: os.environ[k] for k in ("DGPU_NODE_RANK", "DGPU_NNODES", "DGPU_MASTER_ADDR",
       "DGPU_MASTER_PORT", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
env["hostfile"] = open(os.environ["DGPU_HOSTFILE"]).read()
if rank == 0:
    s = socket.create_server((addr, port))
    s.settimeout(20)
    peers, seen = [], {0}
    while len(seen) < n:
        c, _ = s.accept()
        seen.add(int(c.makefile().readline()))
        peers.append(c)
    for c in peers:
        c.sendall((json.dumps(sorted(seen)) + "\n").encode())
        c.close()
else:
    deadline = time.time() + 20
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)
    c.sendall(b"%d\n" % rank)
    seen = set(json.loads(c.makefile().readline()))
env["seen"] = sorted(seen)
open(os.path.join(os.environ["OUT"], str(rank)), "w").write(json.dumps(env))
print("member %d saw %s" % (rank, sorted(seen)), flush=True)
sys.exit(0 if seen == set(range(n)) else 1)
"""


# The README's example on CPU: each member runs torchrun with one gloo process; the processes
# all_reduce their rank + 1 and check the sum. (On GPUs the same launch uses backend "nccl".)
TRAIN = r"""
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t
print("rank %d of %d: sum %d" % (rank, world, t.item()), flush=True)
dist.destroy_process_group()
"""

# torchrun of Debian 12's python3-torch on Python 3.11 needs --redirects and --tee set (their
# default 0 fails at start there); 1 keeps the output in the member's log.
TORCHRUN = (sys.executable + " -m torch.distributed.run --redirects 1 --tee 1 --nnodes $NNODES "
            "--nproc_per_node 1 --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
            "--master_port $MASTER_PORT %s")


class GangCluster(ClusterTestCase):
    """Three agents whose gangs rendezvous on loopback; the tests are in the classes below."""
    AGENTS = 3
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0,
                 "extra": {"scheduler": {"gang_port_range": "%d-%d" % (PORT, PORT + 9)}}}
    AGENT_KWARGS = {"extra": {"agent": {"advertise_address": "127.0.0.1"}}}

    def out_dir(self):
        out = os.path.join(self.c.tmp, "out")
        os.makedirs(out, exist_ok=True)
        return out

    def rendezvous(self, out):
        script = os.path.join(self.c.tmp, "rendezvous.py")
        with open(script, "w") as f:
            f.write(RENDEZVOUS)
        return "OUT=%s %s %s" % (out, sys.executable, script)


class GangTest(GangCluster):

    def test_members_meet_at_the_master_and_see_every_rank(self):
        out = self.out_dir()
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 3, "gpus_per_node": 2, "name": "rendezvous",
            "command": self.rendezvous(out)})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        t = self.c.wait_finished(tid, timeout=30)
        self.assertEqual(t["status"], "success", t)
        self.assertEqual((t["nodes"], t["gpus_per_node"], t["gpu_count"]), (3, 2, 6))
        nodes = [m["node_id"] for m in t["allocation"]]
        self.assertEqual(sorted(nodes), ["a1", "a2", "a3"])
        self.assertEqual(t["node_id"], nodes[0])
        self.assertEqual(t["master_port"], PORT)
        self.assertEqual(len(t["allocated_gpus"]), 6)
        hostfile = "127.0.0.1 slots=2\n" * 3
        for rank in range(3):
            env = json.loads(read_text(os.path.join(out, str(rank))))
            self.assertEqual(env["seen"], [0, 1, 2])
            self.assertEqual(env, {
                "DGPU_NODE_RANK": str(rank), "DGPU_NNODES": "3", "DGPU_MASTER_ADDR": "127.0.0.1",
                "DGPU_MASTER_PORT": str(PORT), "WORLD_SIZE": "6", "CUDA_VISIBLE_DEVICES": "0,1",
                "hostfile": hostfile, "seen": [0, 1, 2]})
        # Each member's output is read by its rank (rank 0 without one).
        for rank in range(3):
            query = "" if rank == 0 else "?rank=%d" % rank
            r = self.c.get(API + "/tasks/%s/logs%s" % (tid, query))
            self.assertEqual(r.status, 200, r)
            self.assertIn("member %d saw [0, 1, 2]" % rank, r.body.decode())
        r = self.c.get(API + "/tasks/%s/logs?rank=3" % tid)
        self.assertApiError(r, 400, "invalid_field", "rank")
        # Each member's start and end is in the history, on its node.
        events = self.c.get(API + "/tasks/%s/events" % tid).json["events"]
        scheduled = sorted(e["node_id"] for e in events if e["type"] == "scheduled")
        self.assertEqual(scheduled, ["a1", "a2", "a3"])

    @unittest.skipUnless(importlib.util.find_spec("torch"), "python3-torch is not installed")
    def test_torchrun_members_all_reduce_across_nodes(self):
        script = os.path.join(self.c.tmp, "train.py")
        with open(script, "w") as f:
            f.write(TRAIN)
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 2, "gpus_per_node": 1, "name": "torchrun",
            "command": TORCHRUN % script})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        t = self.c.wait_finished(tid, timeout=90)
        logs = [self.c.get(API + "/tasks/%s/logs?rank=%d" % (tid, rank)).body.decode()
                for rank in range(2)]
        self.assertEqual(t["status"], "success", (t, logs))
        for rank in range(2):
            self.assertIn("rank %d of 2: sum 3" % rank, logs[rank])

    def test_the_first_failing_member_stops_the_others(self):
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 2, "gpus_per_node": 1,
            "command": 'if [ "$NODE_RANK" = 1 ]; then exit 3; fi; sleep 30'})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        t = self.c.wait_finished(tid, timeout=20)
        failed_on = t["allocation"][1]["node_id"] if t["allocation"] else None
        self.assertEqual(t["status"], "failed", t)
        self.assertEqual(t["exit_code"], 3)
        self.assertTrue(t["error"].startswith("member_failed:"), t)
        if failed_on is not None:
            self.assertEqual(t["error"], "member_failed:" + failed_on)
        wait_until(lambda: not self.c.task_processes(), 10, what="every member's process to end")

    def test_a_gang_past_its_time_limit_fails_as_timeout(self):
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 2, "gpus_per_node": 1, "timeout_seconds": 1,
            "command": "sleep 30"})
        self.assertEqual(r.status, 201, r)
        t = self.c.wait_finished(r.json["task_id"], timeout=20)
        self.assertEqual((t["status"], t["error"]), ("failed", "timeout"), t)
        wait_until(lambda: not self.c.task_processes(), 10, what="every member's process to end")

    def test_cancel_stops_every_member(self):
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 3, "gpus_per_node": 1, "command": "sleep 60"})
        tid = r.json["task_id"]
        t = wait_until(lambda: (lambda t: t if t["status"] == "running" and len(
            self.c.task_processes()) >= 3 else None)(self.c.task(tid)), 15,
            what="three members running")
        self.assertEqual(len(t["allocation"]), 3)
        self.assertEqual(self.c.cancel(tid).status, 200)
        t = self.c.wait_finished(tid)
        self.assertEqual(t["status"], "cancelled")
        wait_until(lambda: not self.c.task_processes(), 10, what="every member's process to end")
        # Each member's GPUs are free once its agent has reported its end.
        wait_until(lambda: len([g for g in self.c.gpus()["gpus"] if g["status"] == "idle"]) == 6,
                   10, what="every GPU idle")

    def test_bad_gang_fields_name_the_field_and_create_nothing(self):
        before = self.c.tasks()["total"]
        cases = (
            ({"nodes": 0, "gpus_per_node": 1}, "nodes"),
            ({"nodes": 2, "gpus_per_node": 0}, "gpus_per_node"),
            ({"nodes": "2", "gpus_per_node": 1}, "nodes"),
            ({"nodes": 2, "gpus_per_node": 2, "gpu_count": 3}, "gpu_count 3 is not nodes x gpus_per_node (2 x 2)"),
            ({"nodes": 2, "gpu_count": 3}, "gpu_count 3 is not split evenly over 2 nodes"),
            ({"nodes": 1025, "gpus_per_node": 1}, "nodes"),
            ({"nodes": 512, "gpus_per_node": 4}, "nodes x gpus_per_node must be at most 1024"),
        )
        for fields, mentions in cases:
            body = {"priority": "low", "command": "true"}
            body.update(fields)
            r = self.c.request("POST", API + "/tasks", body)
            self.assertApiError(r, 400, "invalid_field", mentions)
        self.assertEqual(self.c.tasks()["total"], before)
        # More members than nodes: accepted, and waits as exceeds_cluster.
        r = self.c.request("POST", API + "/tasks", {"priority": "high", "nodes": 4,
                                                     "gpus_per_node": 1, "command": "true"})
        self.assertEqual(r.status, 201, r)
        wait_until(lambda: self.c.task(r.json["task_id"])["pending_reason"] == "exceeds_cluster",
                   10, what="exceeds_cluster")

    def start_sleepers(self, nodes, seconds):
        """A gang whose members write their pid to $OUT/<rank>.pid and sleep."""
        out = self.out_dir()
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": nodes, "gpus_per_node": 1,
            "command": "echo $$ > %s/$NODE_RANK.pid; exec sleep %d" % (out, seconds)})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        self.c.wait_status(tid, "running")
        pids = [read_pid(os.path.join(out, "%d.pid" % rank)) for rank in range(nodes)]
        return tid, pids

    def test_a_scheduler_killed_under_a_gang_adopts_every_member_on_restart(self):
        tid, pids = self.start_sleepers(3, 4)
        before = self.c.task(tid)
        self.c.scheduler.kill9()
        time.sleep(0.5)
        self.assertTrue(all(pid_alive(p) for p in pids), "a member died with the scheduler")
        self.c.start_scheduler()
        self.c.wait_agents_online(["a1", "a2", "a3"])
        t = self.c.task(tid)
        self.assertIn(t["status"], ("running", "success"), t)
        self.assertEqual((t["allocation"], t["master_port"], t["attempts"]),
                         (before["allocation"], before["master_port"], 1))
        t = self.c.wait_finished(tid, timeout=15)
        self.assertEqual((t["status"], t["attempts"]), ("success", 1), t)

    def test_a_lost_member_puts_the_whole_gang_back_and_it_runs_again_whole(self):
        tid, pids = self.start_sleepers(2, 60)
        t = self.c.task(tid)
        lost_node = t["allocation"][1]["node_id"]
        self.c.agents[lost_node].kill9()
        # Rank 0 is stopped (member_lost) and the gang goes back to its queue; then it starts
        # again, whole, on the two nodes that are left.
        def again():
            t = self.c.task(tid)
            return t if t["attempts"] == 2 and t["status"] == "running" else None
        t = wait_until(again, 20, what="the gang to run again")
        self.assertNotIn(lost_node, [m["node_id"] for m in t["allocation"]])
        self.assertEqual(len(t["allocation"]), 2)
        wait_until(lambda: not pid_alive(pids[0]), 10, what="rank 0's first run to be stopped")
        events = [e["type"] for e in self.c.get(API + "/tasks/%s/events" % tid).json["events"]]
        self.assertEqual(events.count("scheduled"), 4, events)
        self.assertLess(events.index("node_lost"), len(events) - 2, events)
        self.assertEqual(self.c.cancel(tid).status, 200)
        self.c.wait_finished(tid)
        # The lost agent's member ran on without its agent (its shim keeps it): the cluster's
        # teardown ends it with every process the agents started.

    def test_a_failed_gang_is_retried_whole(self):
        out = self.out_dir()
        # Rank 1 fails its first run only; the retry runs both members again.
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 2, "gpus_per_node": 1, "max_retries": 1,
            "retry_backoff_seconds": 1,
            "command": "echo run >> %s/$NODE_RANK.runs; if [ $NODE_RANK = 1 ] && "
                       "[ ! -e %s/failed ]; then touch %s/failed; exit 4; fi; sleep 0.5"
                       % (out, out, out)})
        self.assertEqual(r.status, 201, r)
        tid = r.json["task_id"]
        t = self.c.wait_finished(tid, timeout=30)
        self.assertEqual((t["status"], t["retries"], t["attempts"], t["exit_code"]),
                         ("success", 1, 2, 0), t)
        for rank in range(2):
            self.assertEqual(read_text(os.path.join(out, "%d.runs" % rank)), "run\nrun\n")
        requeued = [e for e in self.c.get(API + "/tasks/%s/events" % tid).json["events"]
                    if e["type"] == "requeued"]
        self.assertEqual(len(requeued), 1, requeued)
        self.assertRegex(requeued[0]["message"],
                         r"^queued again: retry 1 of 1 after member_failed:a\d, exit code 4$")

    def test_draining_a_members_node_runs_the_gang_again_on_other_nodes(self):
        tid, pids = self.start_sleepers(2, 60)
        drained = self.c.task(tid)["allocation"][1]["node_id"]
        r = self.c.request("POST", API + "/agents/%s/drain" % drained,
                           {"evict": True, "grace_seconds": 1})
        self.assertEqual((r.status, r.json["evicted"]), (200, 1), r)
        def again():
            t = self.c.task(tid)
            return t if t["status"] == "running" and t["preemptions"] == 1 else None
        t = wait_until(again, 20, what="the gang to run again")
        self.assertNotIn(drained, [m["node_id"] for m in t["allocation"]])
        self.assertEqual((len(t["allocation"]), t["attempts"]), (2, 1), t)
        wait_until(lambda: not any(pid_alive(p) for p in pids), 10,
                   what="both members of the first run to end")
        self.assertEqual(self.c.cancel(tid).status, 200)
        self.c.wait_finished(tid)
        self.assertEqual(self.c.request("POST", API + "/agents/%s/uncordon" % drained).status,
                         200)

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl_submits_a_gang_and_shows_its_members(self):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)
        p = subprocess.run([CTL_BIN, "--server", self.c.base, "submit", "--priority", "high",
                            "--nodes", "2", "--gpus-per-node", "1", "--", "sleep", "30"],
                           capture_output=True, text=True, env=env, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        tid = p.stdout.strip()
        self.c.wait_status(tid, "running")
        t = self.c.task(tid)
        p = subprocess.run([CTL_BIN, "--server", self.c.base, "get", "task", tid],
                           capture_output=True, text=True, env=env, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("2 nodes x 1 GPUs, rendezvous port %d" % t["master_port"], p.stdout)
        members = "; ".join("%d: %s [%s]" % (rank, m["node_id"], ",".join(
            str(i) for i in m["gpu_indices"])) for rank, m in enumerate(t["allocation"]))
        self.assertIn(members, p.stdout)
        p = subprocess.run([CTL_BIN, "--server", self.c.base, "submit", "--priority", "high",
                            "--", "true"], capture_output=True, text=True, env=env, timeout=20)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--gpus is required (or --nodes with --gpus-per-node)", p.stderr)


class GangWaitTest(GangCluster):
    GPUS = 4

    def test_a_gang_waits_holding_nothing_until_every_member_has_room(self):
        out = self.out_dir()
        # Three GPUs busy on a1 and on a2: a gang of 2 x 2 has room on a3 alone.
        one = self.c.submit("sleep 60", gpu_count=3, priority="high")
        self.c.wait_status(one, "running")
        two = self.c.submit("sleep 60", gpu_count=3, priority="high")
        self.c.wait_status(two, "running")
        self.assertEqual((self.c.task(one)["node_id"], self.c.task(two)["node_id"]), ("a1", "a2"))
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "nodes": 2, "gpus_per_node": 2,
            "command": self.rendezvous(out)})
        self.assertEqual(r.status, 201, r)
        gang = r.json["task_id"]
        t = wait_until(lambda: (lambda t: t if t["pending_reason"] == "no_node_fits" else None)(
            self.c.task(gang)), 10, what="the gang to wait for room")
        self.assertEqual((t["status"], t["allocation"]), ("pending", []))
        idle = sorted(g["id"] for g in self.c.gpus()["gpus"] if g["status"] == "idle")
        self.assertEqual(idle, ["a1-gpu-3", "a2-gpu-3", "a3-gpu-0", "a3-gpu-1", "a3-gpu-2",
                                "a3-gpu-3"], "nothing held for it")
        # a2 frees up: the gang starts there and on a3, whole.
        self.assertEqual(self.c.cancel(two).status, 200)
        t = self.c.wait_finished(gang, timeout=30)
        self.assertEqual(t["status"], "success", t)
        self.assertEqual([m["node_id"] for m in t["allocation"]], ["a2", "a3"])


if __name__ == "__main__":
    unittest.main()
