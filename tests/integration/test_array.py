"""Job arrays with real agents and real task processes: one POST creates N tasks in one durable
write; each runs with DGPU_ARRAY_INDEX and DGPU_ARRAY_SIZE; dgpuctl submit --array prints every
id; bad sizes get precise errors and create nothing."""

import os
import subprocess
import unittest

from harness import API, CTL_BIN, ClusterTestCase, read_text, wait_until


class ArrayTest(ClusterTestCase):
    AGENTS = 2
    GPUS = 2
    SCHEDULER = {"online_percent": 1.0}

    def test_each_member_sees_its_index(self):
        out = os.path.join(self.c.tmp, "out")
        os.makedirs(out)
        r = self.c.request("POST", API + "/tasks", {
            "priority": "high", "gpu_count": 1, "name": "shard",
            "command": "echo $DGPU_ARRAY_INDEX/$DGPU_ARRAY_SIZE > %s/$DGPU_TASK_ID" % out,
            "array": 6})
        self.assertEqual(r.status, 201, r)
        ids = r.json["task_ids"]
        self.assertEqual(len(ids), 6)
        self.assertEqual(r.json["task_id"], ids[0])
        first = int(ids[0].split("-")[1])
        self.assertEqual(ids, ["task-%d" % (first + i) for i in range(6)])
        for i, tid in enumerate(ids):
            t = self.c.wait_finished(tid)
            self.assertEqual((t["status"], t["array_index"], t["array_size"], t["name"]),
                             ("success", i, 6, "shard"), t)
            self.assertEqual(read_text(os.path.join(out, tid)), "%d/6\n" % i)
        # A task of no array says so.
        single = self.c.submit("true")
        t = self.c.wait_finished(single)
        self.assertEqual((t["array_index"], t["array_size"]), (None, None))
        r = self.c.request("POST", API + "/tasks", {"priority": "high", "gpu_count": 1,
                                                     "command": "true"})
        self.assertNotIn("task_ids", r.json)

    def test_bad_sizes_create_nothing(self):
        before = self.c.tasks()["total"]
        for bad, mentions in ((0, "array"), (100001, "array"), ("3", "array"), (-1, "array")):
            r = self.c.request("POST", API + "/tasks", {"priority": "low", "gpu_count": 1,
                                                         "command": "true", "array": bad})
            self.assertApiError(r, 400, "invalid_field", mentions)
        # Reserved names stay reserved for arrays too.
        r = self.c.request("POST", API + "/tasks", {"priority": "low", "gpu_count": 1,
                                                     "command": "true", "array": 2,
                                                     "env": {"DGPU_ARRAY_INDEX": "7"}})
        self.assertApiError(r, 400, "invalid_field", "DGPU_ARRAY_INDEX")
        self.assertEqual(self.c.tasks()["total"], before)

    @unittest.skipUnless(os.access(CTL_BIN, os.X_OK), "dgpuctl not built")
    def test_dgpuctl_prints_every_id(self):
        env = dict(os.environ)
        env.pop("DGPU_SERVER", None)
        p = subprocess.run([CTL_BIN, "--server", self.c.base, "submit", "--gpus", "1",
                            "--priority", "high", "--array", "3", "--", "true"],
                           capture_output=True, text=True, timeout=30, env=env)
        self.assertEqual(p.returncode, 0, p)
        ids = p.stdout.split()
        self.assertEqual(len(ids), 3, p)
        for tid in ids:
            self.assertEqual(self.c.wait_finished(tid)["status"], "success")
        self.assertEqual(sorted(self.c.task(t)["array_index"] for t in ids), [0, 1, 2])


class ArrayLimitTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 1
    SCHEDULER = {"extra": {"limits": {"max_pending_per_user": 5}}}

    def test_an_array_counts_as_its_size_against_the_pending_limit(self):
        body = {"priority": "low", "gpu_count": 8, "command": "true", "user": "ann", "array": 6}
        r = self.c.request("POST", API + "/tasks", body)
        self.assertApiError(r, 429, "too_many_pending", "6 more")
        body["array"] = 5
        self.assertEqual(self.c.request("POST", API + "/tasks", body).status, 201)
        self.assertEqual(self.c.tasks("?status=pending")["total"], 5)


if __name__ == "__main__":
    unittest.main()
