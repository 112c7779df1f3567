"""A paused primary (SIGSTOP for longer than heartbeat_timeout, then SIGCONT): the standby takes
over, and the old primary must not act as a second leader.

(a) with the lease arbiter (storage.shared_storage on both): at no moment two schedulers
    dispatch: no task is started with epoch 1 after the standby was elected with epoch 2; the
    resumed old primary refuses writes and ends as standby.
(b) without an arbiter: the older epoch is fenced off: the resumed primary steps down within a
    few seconds, and no agent starts a task from epoch 1 after having seen epoch 2.

  cd tests/ha && DGPU_BIN_DIR=<build>/bin python3 -m unittest -v test_split_brain
"""

import http.client
import time
import unittest

from ha_cluster import HaCluster, HaTestCase, Storm, wait_until

HB_TIMEOUT = 2.0
AGENTS = ("ag1", "ag2")


class SplitBrainTest(HaTestCase):
    def pause_primary(self, shared):
        c = self.cluster = HaCluster("sigstop-" + ("lease" if shared else "none"), mode="sync",
                                     shared=shared, hb_timeout=HB_TIMEOUT)
        c.start_pair()
        for a in AGENTS:
            c.start_agent(a, gpus=2)
        c.wait_agents_online("a", AGENTS)

        # A steady stream of short tasks keeps both schedulers dispatching whenever they lead.
        storm = Storm(c, threads=2, pause=0.05, timeout=1.0).start()
        out = {"storm": storm}
        try:
            wait_until(lambda: storm.count("a") >= 20, 15, what="20 tasks acknowledged by A")
            wait_until(lambda: any(c.task_started(a) for a in AGENTS), 10, what="a task start")
            # A task that finishes while A is paused: the agent's finish report waits on the
            # paused A; it must end up recorded by B, and the task must not run again.
            status, _, body = c.submit("a", "sleep 1", 1, "high")
            self.assertEqual(status, 201, body)
            out["short"] = body["task_id"]
            wait_until(lambda: any(s["task_id"] == out["short"] for ag in AGENTS
                                   for s in c.task_started(ag)), 5, what="the short task started")
            a = c.schedulers["a"]
            a.sigstop()
            t_stop = time.monotonic()
            c.wait_role("b", "leader", HB_TIMEOUT + 4)
            out["elected_after"] = time.monotonic() - t_stop
            # Stay paused well past heartbeat_timeout, then resume and write to it at once.
            time.sleep(max(0.0, t_stop + HB_TIMEOUT + 1.5 - time.monotonic()))
            a.sigcont()
            t_cont = time.monotonic()
            answers = []
            client = c.client("a", timeout=5)
            for i in range(5):
                try:
                    status, headers, body = client.request(
                        "POST", "/api/v1/tasks", c.task_body("true # after-cont-%d" % i))
                    answers.append((status, body.get("task_id") if status == 201 else
                                    body.get("error", {}).get("code")))
                except (OSError, http.client.HTTPException) as e:
                    answers.append(("error", repr(e)))
            client.close()
            out["answers"] = answers

            # The old primary steps down within a few seconds.
            wait_until(lambda: c.readyz("a")[0] == 503, 5, what="A to step down (readyz 503)")
            out["stepped_down_after"] = time.monotonic() - t_cont
            status, body = c.readyz("a")
            self.assertEqual(body["role"], "standby", body)
            self.assertEqual(body["epoch"], 2, body)
            wait_until(lambda: "event=leader_lost" in a.log_text(), 5, what="A logging leader_lost")
            # Agents end on B (epoch 2) and B keeps dispatching.
            c.wait_agents_online("b", AGENTS, 15)
            n = storm.count("b")
            wait_until(lambda: storm.count("b") >= n + 10, 10, what="B acknowledging writes")
            wait_until(lambda: any(s["epoch"] == "2" for ag in AGENTS for s in c.task_started(ag)),
                       10, what="an agent starting epoch-2 tasks")
        finally:
            storm.stop()

        elected = [e for e in c.schedulers["b"].events("leader_elected") if e["epoch"] == "2"]
        self.assertEqual(len(elected), 1)
        out["t_elected"] = elected[0]["t"]
        starts = {ag: c.task_started(ag) for ag in AGENTS}
        out["starts"] = starts
        # Per agent: epochs never go down (no task from epoch 1 after one from epoch 2).
        for ag, lines in starts.items():
            epochs = [int(s["epoch"]) for s in lines]
            self.assertEqual(epochs, sorted(epochs), "%s started an older epoch's task: %s" %
                             (ag, [s["line"] for s in lines if s["epoch"] == "1"][-3:]))
        out["late_epoch1"] = [s for lines in starts.values() for s in lines
                              if s["epoch"] == "1" and s["t"] > out["t_elected"]]
        twice = {}
        for lines in starts.values():
            for s in lines:
                twice.setdefault(s["task_id"], []).append(s["epoch"])
        out["started_twice"] = {k: v for k, v in twice.items() if len(v) > 1}

        out["short_on_b"] = c.wait_task_status("b", out["short"], ("success", "failed"), 10)

        # The old primary resynchronizes: B's newest write becomes readable on A.
        status, _, body = c.submit("b", "true # final")
        self.assertEqual(status, 201, body)
        final = body["task_id"]
        wait_until(lambda: c.get_task("a", final) is not None, 5, what=final + " on A")
        # Acknowledged writes that B does not know (lost).
        out["lost"] = [tid for tid, _, _, _ in storm.acked if c.get_task("b", tid) is None]
        out["lost_after_cont"] = [tid for status, tid in out["answers"]
                                  if status == 201 and c.get_task("b", tid) is None]
        print("\n[%s] elected %.2fs after SIGSTOP; A stepped down %.2fs after SIGCONT; "
              "writes to A after SIGCONT: %s; epoch-1 starts after the election: %d; "
              "tasks started twice: %d; acknowledged but lost: %d"
              % ("lease" if shared else "no arbiter", out["elected_after"],
                 out["stepped_down_after"], out["answers"], len(out["late_epoch1"]),
                 len(out["started_twice"]), len(out["lost"]) + len(out["lost_after_cont"])))
        return out

    def test_sigstop_primary_with_lease_arbiter(self):
        out = self.pause_primary(shared=True)
        self.assertEqual([s["line"] for s in out["late_epoch1"]], [],
                         "the paused primary dispatched after the standby was elected")
        self.assertEqual([a for a in out["answers"] if a[0] == 201], [],
                         "the deposed primary acknowledged writes")
        self.assertEqual(out["lost"], [])
        self.assertEqual(out["started_twice"], {})
        self.assertEqual(out["short_on_b"]["status"], "success", out["short_on_b"])
        self.assertEqual(sum(1 for ag in AGENTS for s in out["starts"][ag]
                             if s["task_id"] == out["short"]), 1, "the short task ran twice")
        self.assertIn("event=leader_lost", self.cluster.schedulers["a"].log_text())

    def test_sigstop_primary_without_arbiter(self):
        out = self.pause_primary(shared=False)
        # Fencing by epoch only: asserted per agent in pause_primary (epochs never go down);
        # the old primary stepped down. Writes it acknowledged in the window between SIGCONT and
        # seeing epoch 2 are lost (documented limitation without an arbiter): only reported.
        self.assertEqual(out["lost"], [], "writes acknowledged before the pause were lost")


if __name__ == "__main__":
    unittest.main()
