"""Borrowing and preemption with real agents and real task processes: 2 agents x 4 GPUs,
online_percent 0.5 (online quota 4, batch quota 4), quota.borrowing on.

A victim's command appends "start <time>" to a file of its own when it starts and
"term <time>" when it gets SIGTERM, which it then ignores: only SIGKILL, after the preemption
grace period, ends it. So a preemptor that starts at least the grace period after the "term"
line shows that SIGTERM came first and SIGKILL after the grace."""

import datetime
import os
import time
import unittest

from harness import API, ClusterTestCase, wait_until

GRACE = 2


def parse_time(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


class PreemptionTestCase(ClusterTestCase):
    AGENTS = 2
    GPUS = 4
    TEAMS = None
    MIN_RUNTIME = 0
    HEARTBEAT_TIMEOUT = 5

    def start_cluster(self):
        quota = {"borrowing": True}
        if self.TEAMS:
            quota["teams"] = self.TEAMS
        extra = {"quota": quota,
                 "preemption": {"grace_period": GRACE, "min_runtime": self.MIN_RUNTIME}}
        self.c.start(agents=self.AGENTS, gpus=self.GPUS, online_percent=0.5,
                     heartbeat_timeout=self.HEARTBEAT_TIMEOUT, extra=extra)
        self.marks = os.path.join(self.c.tmp, "marks")
        os.makedirs(self.marks)

    # A task that records its starts and SIGTERMs, ignores SIGTERM and runs until killed.
    def victim_command(self):
        # bash's $EPOCHREALTIME: the trap forks nothing (a process started while the task
        # stops gets SIGTERM too, and a $(date) child of the trap could die before writing).
        m = os.path.join(self.marks, "$DGPU_TASK_ID")
        return ("exec bash -c \"echo start \\$EPOCHREALTIME >> %s; "
                "trap 'echo term \\$EPOCHREALTIME >> %s' TERM; while :; do sleep 0.1; done\""
                % (m, m))

    def marks_of(self, task_id):
        """[(kind, time)] of the complete lines. A process started while the task stops may
        run the trap too: a task can have more than one "term" line."""
        try:
            with open(os.path.join(self.marks, task_id)) as f:
                lines = [line.split() for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []
        return [(fields[0], float(fields[1])) for fields in lines if len(fields) == 2]

    def kinds(self, task_id):
        """The kinds of marks, with repeated "term" lines counted once."""
        out = []
        for kind, _ in self.marks_of(task_id):
            if not (kind == "term" and out and out[-1] == "term"):
                out.append(kind)
        return out

    def first_term(self, task_id):
        return next(t for kind, t in self.marks_of(task_id) if kind == "term")

    def submit_victims(self, n, team=None):
        fields = {"team": team} if team else {}
        ids = [self.c.submit(self.victim_command(), priority="low", **fields) for _ in range(n)]
        for tid in ids:
            self.c.wait_status(tid, "running", timeout=15)
        # Running means the agent started them; wait for the start marks as well.
        wait_until(lambda: all(self.marks_of(t) for t in ids), 10, what="victims' start marks")
        return ids

    def all_tasks(self):
        return {t["task_id"]: t for t in self.c.tasks("?limit=1000")["tasks"]}

    def preempted(self, ids):
        return sorted((t for t in ids if self.c.task(t)["preemptions"] > 0),
                      key=lambda t: int(t.split("-")[1]))

    def metric(self, line_prefix):
        text = self.c.get("/metrics").body.decode()
        for line in text.splitlines():
            if line.startswith(line_prefix + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def wait_reason(self, task_id, reason, timeout=5):
        return wait_until(lambda: self.c.task(task_id)["pending_reason"] == reason, timeout,
                          interval=0.02, what="%s pending with %s" % (task_id, reason))


class BorrowAndReclaimTest(PreemptionTestCase):

    def test_batch_borrows_idle_online_gpus_and_an_online_task_takes_back_exactly_what_it_needs(
            self):
        victims = self.submit_victims(8)
        # 4 within the batch quota, 4 borrowed from the idle online quota.
        q = self.c.quota()
        self.assertEqual((q["batch"]["used"], q["batch"]["borrowed"], q["online"]["lent"]),
                         (8, 4, 4), q)
        before = self.all_tasks()
        borrowed = sorted(t for t in victims if before[t]["borrowed"])
        self.assertEqual(len(borrowed), 4, before)
        teams = {t["name"]: t for t in self.c.get(API + "/teams").json["teams"]}
        self.assertEqual((teams["default"]["batch"]["used"], teams["default"]["batch"]["borrowed"]),
                         (8, 4))

        online = self.c.submit("sleep 3", gpu_count=2, priority="high")
        self.wait_reason(online, "waiting_for_preemption")
        t = self.c.wait_status(online, "running", timeout=GRACE + 10)

        # Exactly two victims, both borrowed, on the preemptor's node, whose GPUs it now holds.
        chosen = self.preempted(victims)
        self.assertEqual(len(chosen), 2, chosen)
        self.assertTrue(set(chosen) <= set(borrowed), (chosen, borrowed))
        self.assertEqual({before[v]["node_id"] for v in chosen}, {t["node_id"]})
        self.assertEqual(sorted(g for v in chosen for g in before[v]["allocated_gpus"]),
                         sorted(t["allocated_gpus"]))
        for v in chosen:
            vt = self.c.task(v)
            # A preempted run is not counted as an attempt.
            self.assertEqual((vt["status"], vt["preemptions"], vt["attempts"]), ("pending", 1, 0),
                             vt)
            # SIGTERM first; SIGKILL only after the grace period (the task ignored SIGTERM).
            self.assertEqual(self.kinds(v), ["start", "term"], self.marks_of(v))
            self.assertGreaterEqual(parse_time(t["started_at"]), self.first_term(v) + GRACE - 0.3,
                                    (self.marks_of(v), t["started_at"]))
            with open(self.c.task_log(before[v]["node_id"], v)) as f:
                self.assertIn("dgpu: stopping task (reason: preempt, grace %d s, for %s)"
                              % (GRACE, online), f.read())
        # The others ran on, untouched.
        for v in set(victims) - set(chosen):
            self.assertEqual(self.c.task(v)["status"], "running")
            self.assertEqual(self.kinds(v), ["start"])
        self.assertEqual(self.metric('dgpu_tasks_preempted_total{priority="low",team="default"}'),
                         2)
        self.assertGpusConsistent()

        # The victims keep their place and their ids, and run again once the online task ends.
        self.assertEqual(self.c.wait_finished(online, timeout=15)["status"], "success")
        for v in chosen:
            vt = self.c.wait_status(v, "running", timeout=10)
            self.assertEqual((vt["attempts"], vt["preemptions"]), (1, 1), vt)
            wait_until(lambda v=v: self.kinds(v) == ["start", "term", "start"], 10,
                       what="%s started again" % v)
        self.assertEqual(self.c.tasks("?status=failed")["total"], 0)
        self.assertGpusConsistent()

    def test_a_task_that_may_not_be_preempted_never_borrows(self):
        within = self.submit_victims(4)  # The batch quota.
        self.assertFalse(any(self.c.task(t)["borrowed"] for t in within))
        fixed = self.c.submit("sleep 30", priority="low", preemptible=False)
        free = self.c.submit("sleep 30", priority="low")
        self.c.wait_status(free, "running", timeout=10)
        self.assertTrue(self.c.task(free)["borrowed"])
        time.sleep(1.5)  # Passes go by; 3 online GPUs stay idle, and it still waits.
        t = self.c.task(fixed)
        self.assertEqual((t["status"], t["pending_reason"], t["preemptible"]),
                         ("pending", "quota_exhausted", False), t)
        self.assertEqual(self.c.quota()["online"]["lent"], 1)


class TeamsReclaimTest(PreemptionTestCase):
    TEAMS = {"vision": {"batch": 2}, "nlp": {"batch": 2}, "capped": {"max_gpus": 2}}

    def test_a_team_reclaims_its_guarantee_from_another_team(self):
        nlp = self.submit_victims(8, team="nlp")
        teams = {t["name"]: t for t in self.c.get(API + "/teams").json["teams"]}
        self.assertEqual((teams["nlp"]["batch"]["guaranteed"], teams["nlp"]["batch"]["used"],
                          teams["nlp"]["batch"]["borrowed"]), (2, 8, 6), teams["nlp"])
        vision = [self.c.submit("sleep 30", priority="low", team="vision") for _ in range(2)]
        for v in vision:
            self.c.wait_status(v, "running", timeout=GRACE + 10)
        chosen = self.preempted(nlp)
        self.assertEqual(len(chosen), 2, chosen)
        teams = {t["name"]: t for t in self.c.get(API + "/teams").json["teams"]}
        self.assertEqual((teams["vision"]["batch"]["used"], teams["vision"]["batch"]["borrowed"]),
                         (2, 0), teams["vision"])
        self.assertEqual((teams["nlp"]["batch"]["used"], teams["nlp"]["batch"]["borrowed"],
                          teams["nlp"]["pending"]), (6, 4, 2), teams["nlp"])
        for v in vision:
            self.assertFalse(self.c.task(v)["borrowed"])
        # GET /quota shows each class's teams that hold a guarantee or GPUs there.
        q = self.c.quota()
        self.assertEqual(q["batch"]["teams"],
                         {"vision": {"guaranteed": 2, "used": 2, "borrowed": 0},
                          "nlp": {"guaranteed": 2, "used": 6, "borrowed": 4}}, q)
        self.assertEqual(q["online"]["teams"], {}, q)
        self.assertEqual(
            self.metric('dgpu_team_used_gpus{team="vision",class="batch"}'), 2)
        self.assertEqual(
            self.metric('dgpu_tasks_preempted_total{priority="low",team="nlp"}'), 2)
        self.assertGpusConsistent()

    def test_max_gpus_caps_a_team_and_the_api_changes_it_durably(self):
        ids = [self.c.submit("sleep 30", priority="low", team="capped") for _ in range(3)]
        for t in ids[:2]:
            self.c.wait_status(t, "running", timeout=10)
        self.wait_reason(ids[2], "team_limit")
        r = self.c.request("PUT", API + "/teams/capped", {"max_gpus": 3})
        self.assertEqual((r.status, r.json["max_gpus"]), (200, 3), r)
        self.c.wait_status(ids[2], "running", timeout=10)
        # Durable: a restarted scheduler keeps the API's limits over the configuration's.
        self.c.scheduler.stop()
        self.c.start_scheduler()
        self.c.wait_agents_online(["a1", "a2"])
        self.assertEqual(self.c.get(API + "/teams/capped").json["max_gpus"], 3)


class MinRuntimeTest(PreemptionTestCase):
    MIN_RUNTIME = 4

    def test_no_task_younger_than_min_runtime_is_preempted(self):
        victims = self.submit_victims(8)
        before = self.all_tasks()
        online = self.c.submit("sleep 30", gpu_count=1, priority="high")
        t = self.c.wait_status(online, "running", timeout=self.MIN_RUNTIME + GRACE + 10)
        chosen = self.preempted(victims)
        self.assertEqual(len(chosen), 1, chosen)
        v = chosen[0]
        self.assertEqual(self.kinds(v), ["start", "term"], self.marks_of(v))
        # Not stopped before it had run min_runtime.
        term = self.first_term(v)
        self.assertGreaterEqual(term, parse_time(before[v]["started_at"]) + self.MIN_RUNTIME - 0.3,
                                (self.marks_of(v), before[v]))
        self.assertGreaterEqual(parse_time(t["started_at"]), term + GRACE - 0.3)


class SchedulerKilledDuringPreemptionTest(PreemptionTestCase):
    HEARTBEAT_TIMEOUT = 15  # No agent is declared lost while the scheduler is down.

    def test_a_new_scheduler_completes_the_preemption_once(self):
        victims = self.submit_victims(8)
        online = self.c.submit("sleep 3", gpu_count=2, priority="high")
        self.wait_reason(online, "waiting_for_preemption")
        wait_until(lambda: len([v for v in victims if "term" in self.kinds(v)]) == 2, 5,
                   what="two victims got SIGTERM")
        stopping = [v for v in victims if "term" in self.kinds(v)]
        self.c.scheduler.kill9()
        self.c.start_scheduler()
        self.c.wait_agents_online(["a1", "a2"])
        t = self.c.wait_status(online, "running", timeout=GRACE + 15)
        self.assertEqual(t["attempts"], 1, t)
        chosen = self.preempted(victims)
        self.assertEqual(len(chosen), 2, chosen)
        self.assertEqual(stopping, chosen)
        for v in chosen:
            vt = self.c.task(v)
            self.assertEqual((vt["status"], vt["preemptions"]), ("pending", 1), vt)
        self.assertEqual(self.c.tasks("?status=running")["total"], 7)
        self.assertGpusConsistent()
        # Each victim runs again once, after the preemptor.
        self.assertEqual(self.c.wait_finished(online, timeout=15)["status"], "success")
        for v in chosen:
            self.c.wait_status(v, "running", timeout=10)
            wait_until(lambda v=v: self.kinds(v) == ["start", "term", "start"], 10,
                       what="%s started again" % v)
            self.assertEqual(self.c.task(v)["preemptions"], 1)
        time.sleep(1)
        for v in victims:
            self.assertLessEqual(self.kinds(v).count("start"), 2, v)
        self.assertGpusConsistent()


if __name__ == "__main__":
    unittest.main()
