"""The Python client (clients/python, package dgpu) against a real scheduler and real agents:
every method, every field of the task object, and the error classes for bad input, unknown
tasks, conflicts, unreachable servers and the retry rules. The requests the team methods send
are also checked exactly against a scripted transport."""

import dataclasses
import datetime
import email.message
import json
import os
import subprocess
import sys
import time
import typing

import pytest

import dgpu
import dgpu.errors
import harness
from conftest import checked_client_class, missing_dependency
from dgpu_testlib import free_port

UTC = datetime.timezone.utc
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_the_task_model_reads_every_property_of_the_described_task_object():
    """The task object is derived from the scheduler's task table, which a C++ test checks
    against api/openapi.yaml; here the model is checked against the same description: one
    attribute per property, each read from its key."""
    import yaml
    with open(os.path.join(REPO, "api", "openapi.yaml"), encoding="utf-8") as f:
        schema = yaml.safe_load(f)["components"]["schemas"]["Task"]
    properties = set(schema["properties"])
    assert {f.name for f in dataclasses.fields(dgpu.Task)} == properties
    # A document whose every value is its own: each attribute must come from its key.
    hints = typing.get_type_hints(dgpu.Task)
    doc, want = {}, {}
    for i, name in enumerate(sorted(properties)):
        hint = str(hints[name])
        if "datetime" in hint:
            doc[name] = "2026-01-01T00:00:%02dZ" % i
            want[name] = datetime.datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC)
        elif name in ("env", "node_selector"):
            doc[name] = {"K": str(i)}
        elif name == "allocation":
            doc[name] = [{"node_id": "n%d" % i, "gpu_indices": [i], "cpu_set": [i, i + 1]}]
            want[name] = [dgpu.models.NodeAllocation("n%d" % i, [i], [i, i + 1])]
        elif name == "cpu_set":
            doc[name] = [i, i + 2]
        elif name == "allocated_gpus":
            doc[name] = ["n%d-gpu-%d" % (i, i)]
        elif name == "usage":
            doc[name] = {"cpu_seconds": i + 0.5, "max_memory_mb": 100 + i}
            want[name] = dgpu.models.Usage(i + 0.5, 100 + i)
        elif name == "depends_on":
            doc[name] = [{"task_id": "task-%d" % i, "condition": "afterany", "state": "waiting"}]
            want[name] = [dgpu.Dependency("task-%d" % i, "afterany", "waiting")]
        elif hints[name] is bool:
            doc[name] = not getattr(dgpu.Task, name)  # Away from the model's default.
        elif "int" in hint:
            doc[name] = 100 + i
        else:
            doc[name] = "v%d" % i
        want.setdefault(name, doc[name])
    task = dgpu.Task.from_json(doc)
    for name in sorted(properties):
        assert getattr(task, name) == want[name], name


def test_server_is_resolved_as_dgpuctl_does(monkeypatch):
    monkeypatch.delenv("DGPU_SERVER", raising=False)
    monkeypatch.delenv("DGPU_TOKEN", raising=False)
    assert dgpu.Client().server == "http://127.0.0.1:8080"
    monkeypatch.setenv("DGPU_SERVER", "")
    assert dgpu.Client().server == "http://127.0.0.1:8080"
    monkeypatch.setenv("DGPU_SERVER", "sched-1:9000/")
    assert dgpu.Client().server == "http://sched-1:9000"
    assert dgpu.Client("https://other:443//").server == "https://other:443"
    assert dgpu.Client().token is None
    monkeypatch.setenv("DGPU_TOKEN", "s3cret")
    assert dgpu.Client().token == "s3cret"
    assert dgpu.Client(token="mine").token == "mine"
    with pytest.raises(ValueError):
        dgpu.Client("http://x:1", ca_file="/etc/ssl/certs/ca-certificates.crt")


def test_submit_with_every_field_get_and_wait(client, cluster):
    before = datetime.datetime.now(UTC) - datetime.timedelta(seconds=5)
    s = client.submit("echo hello", gpu_count=2, priority="high", gpu_model=harness.GPU_MODEL,
                      env={"ALPHA": "1", "BETA": "two"}, name="every-field",
                      timeout_seconds=120, image="")
    assert isinstance(s, dgpu.Submitted)
    assert s.task_id.startswith("task-")
    assert s.status == "pending"
    assert s.created_at >= before
    t = client.wait(s.task_id, timeout=30, poll_interval=0.05)
    assert isinstance(t, dgpu.Task)
    assert (t.task_id, t.name, t.priority, t.gpu_count, t.gpu_model, t.command) == (
        s.task_id, "every-field", "high", 2, harness.GPU_MODEL, "echo hello")
    assert t.env == {"ALPHA": "1", "BETA": "two"}
    assert (t.timeout_seconds, t.image, t.status, t.exit_code, t.error) == (
        120, "", "success", 0, "")
    assert t.finished
    assert t.pending_reason is None
    assert t.attempts == 1
    assert t.node_id in ("a1", "a2")
    assert len(t.allocation) == 1
    assert t.allocation[0].node_id == t.node_id
    assert sorted(t.allocated_gpus) == sorted("%s-gpu-%d" % (t.node_id, i)
                                              for i in t.allocation[0].gpu_indices)
    assert len(t.allocated_gpus) == 2
    assert t.created_at == s.created_at
    assert t.created_at <= t.started_at <= t.finished_at
    assert client.get(s.task_id) == t


def test_wait_returns_failed_task_with_its_exit_code(client):
    t = client.wait(client.submit("exit 7", gpu_count=1, priority="low").task_id, timeout=30,
                    poll_interval=0.05)
    assert (t.status, t.exit_code, t.priority, t.name, t.env) == ("failed", 7, "low", "", {})


def test_wait_times_out_then_cancel(client):
    tid = client.submit("sleep 60", gpu_count=1, priority="high").task_id
    start = time.monotonic()
    with pytest.raises(dgpu.WaitTimeout) as e:
        client.wait(tid, timeout=0.5, poll_interval=0.05)
    assert 0.5 <= time.monotonic() - start < 5
    assert isinstance(e.value, TimeoutError)
    assert e.value.task_id == tid
    assert e.value.task.status in ("pending", "running")
    harness.wait_until(lambda: client.get(tid).status == "running", 15, what="running")
    assert client.cancel(tid, grace_seconds=0) is None
    t = client.wait(tid, timeout=15, poll_interval=0.05)
    assert t.status == "cancelled"
    assert t.started_at is not None and t.finished_at is not None
    with pytest.raises(dgpu.Conflict) as c:
        harness.wait_until(lambda: _cancel_again(client, tid), 15, what="cancel refused")
    assert (c.value.status, c.value.code, c.value.field) == (409, "conflict", None)
    assert c.value.retried is False


def _cancel_again(client, tid):
    client.cancel(tid)  # Succeeds while the agent has not yet confirmed the stop.
    return False


def test_cancel_pending_task(client, cluster):
    tid = client.submit("true", gpu_count=64, priority="low").task_id
    t = client.get(tid)
    assert t.status == "pending"
    assert t.pending_reason in dgpu.PENDING_REASONS
    assert (t.node_id, t.allocated_gpus, t.allocation, t.started_at) == (None, [], [], None)
    client.cancel(tid)
    t = client.get(tid)
    assert (t.status, t.exit_code, t.pending_reason) == ("cancelled", None, None)


def test_page_and_list_iterate_over_every_page(client):
    names = {client.submit("true", gpu_count=1, priority="low", name="page-%d" % i).task_id
             for i in range(5)}
    for tid in names:
        client.wait(tid, timeout=30, poll_interval=0.05)
    total = client.page(limit=1).total
    all_tasks = list(client.list(page_size=2))
    assert len(all_tasks) == total
    assert len({t.task_id for t in all_tasks}) == total
    assert names <= {t.task_id for t in all_tasks}
    numbers = [int(t.task_id.split("-")[1]) for t in all_tasks]
    assert numbers == sorted(numbers, reverse=True)  # Newest first.
    p = client.page(status="success", priority="low", limit=3, offset=1)
    assert isinstance(p, dgpu.TaskPage)
    assert len(p.tasks) == 3
    assert all(t.status == "success" and t.priority == "low" for t in p.tasks)
    assert p.total == len(list(client.list(status="success", priority="low")))
    assert list(client.list(status="running", priority="high")) == []
    # Keyset: the page after a page's `next` starts right behind it; the last has no next.
    first = client.page(limit=2)
    assert first.next == first.tasks[-1].task_id
    second = client.page(limit=2, after=first.next)
    assert [t.task_id for t in first.tasks + second.tasks] == \
        [t.task_id for t in client.page(limit=4).tasks]
    last = client.page(limit=2, after=all_tasks[-2].task_id)
    assert ([t.task_id for t in last.tasks], last.next) == ([all_tasks[-1].task_id], None)


def test_snapshot_saves_the_database_whole(client, tmp_path):
    import sqlite3
    tid = client.submit("true", gpu_count=1, priority="low", name="in-the-copy").task_id
    client.wait(tid, timeout=30, poll_interval=0.05)
    path = str(tmp_path / "backup.db")
    snap = client.snapshot(path)
    assert isinstance(snap, dgpu.Snapshot)
    assert (snap.path, snap.bytes) == (path, os.path.getsize(path))
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        count = con.execute("SELECT count(*) FROM tasks").fetchone()[0]
        name = con.execute("SELECT name FROM tasks WHERE id = ?",
                           (int(tid.split("-")[1]),)).fetchone()[0]
        seq = int(con.execute("SELECT value FROM meta WHERE key = 'last_applied_seq'")
                  .fetchone()[0])
    finally:
        con.close()
    assert (snap.tasks, snap.last_applied_seq, name) == (count, seq, "in-the-copy")
    assert snap.epoch is not None and snap.epoch >= 1
    assert os.listdir(str(tmp_path)) == ["backup.db"]
    with pytest.raises(FileExistsError):
        client.snapshot(path)
    assert client.snapshot(path, overwrite=True).tasks >= count


def test_autoscale_off(client):
    a = client.autoscale()
    assert (a["enabled"], a["groups"]) == (False, [])
    assert a["idle_timeout_seconds"] == 600


def test_cordon_drain_uncordon(client):
    a = client.cordon("a1")
    assert (a.id, a.status, a.mode) == ("a1", "cordoned", "cordoned")
    try:
        agent, evicted = client.drain("a1", evict=True, grace_seconds=0)
        assert (agent.status, evicted) == ("draining", 0)
        assert {x.id: x.status for x in client.agents()}["a1"] == "draining"
        with pytest.raises(dgpu.NotFound):
            client.cordon("nope")
        with pytest.raises(dgpu.InvalidField) as e:
            client.drain("a1", grace_seconds=-1)
        assert e.value.field == "grace_seconds"
    finally:
        assert client.uncordon("a1").status == "online"


def test_gpus_agents_and_quota(client):
    g = client.gpus()
    assert isinstance(g, dgpu.GpuList)
    assert g.total == 8 and len(g.gpus) == 8
    assert g.idle + g.busy + g.offline + g.unhealthy == 8 and g.unhealthy == 0
    assert {x.id for x in g.gpus} == {"a%d-gpu-%d" % (n, i) for n in (1, 2) for i in range(4)}
    assert all(x.model == harness.GPU_MODEL and x.memory_mb == 32768 for x in g.gpus)
    agents = client.agents()
    assert sorted(a.id for a in agents) == ["a1", "a2"]
    assert all(a.status == "online" and a.mode == "schedulable" and a.gpus == 4 for a in agents)
    assert all(isinstance(a.last_heartbeat, datetime.datetime) for a in agents)
    assert all(a.nvlink_groups == () for a in agents)  # Fake GPUs without gpu.fake.nvlink_groups.
    q = client.quota()
    assert q.total_gpus == 8
    assert q.online_percent == pytest.approx(0.7)
    assert q.batch_percent == pytest.approx(0.3)
    try:
        assert client.set_quota(online_percent=0.5) is None
        q = client.quota()
        assert (q.online.quota, q.batch.quota) == (4, 4)
        assert q.online_percent == pytest.approx(0.5)
        client.set_quota(batch_percent=0.25)
        q = client.quota()
        assert (q.online.quota, q.batch.quota) == (6, 2)
        assert q.online_percent == pytest.approx(0.75)
    finally:
        client.set_quota(online_percent=0.7)


@pytest.mark.parametrize("kwargs, field, mentions", [
    ({"priority": "urgent"}, "priority", "priority must be"),
    ({"gpu_count": 0}, "gpu_count", "gpu_count must be between 1 and 1024"),
    ({"command": "   "}, "command", "command must not be empty"),
    ({"env": {"1BAD": "x"}}, "env.1BAD", "is not a valid variable name"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env.CUDA_VISIBLE_DEVICES", "is set by dgpu"),
    ({"timeout_seconds": -1}, "timeout_seconds", "timeout_seconds must be between"),
    ({"name": "x" * 300}, "name", "the limit is 256"),
    ({"team": "Vision"}, "team", "team must be 1 to 63 characters"),
    ({"preemptible": "yes"}, "preemptible", "preemptible must be true or false"),
    ({"preemption_grace_seconds": -1}, "preemption_grace_seconds",
     "preemption_grace_seconds must be between 0 and 86400"),
])
def test_submit_bad_input_raises_invalid_field(client, kwargs, field, mentions):
    args = {"command": "true", "gpu_count": 1, "priority": "high"}
    args.update(kwargs)
    command = args.pop("command")
    with pytest.raises(dgpu.InvalidField) as e:
        client.submit(command, **args)
    assert (e.value.status, e.value.code, e.value.field) == (400, "invalid_field", field)
    assert mentions in e.value.message
    assert isinstance(e.value, dgpu.ApiError) and isinstance(e.value, dgpu.DgpuError)


def test_other_bad_input_errors(client):
    with pytest.raises(dgpu.InvalidField) as e:
        client.page(limit=0)
    assert (e.value.status, e.value.field) == (400, "limit")
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_quota(online_percent=2)
    assert (e.value.status, e.value.field) == (400, "online_percent")
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_quota()
    assert (e.value.field, e.value.message) == ("online_percent", "online_percent is required")
    with pytest.raises(dgpu.InvalidField) as e:
        client.cancel("task-1", grace_seconds=-1)
    assert (e.value.status, e.value.field) == (400, "grace_seconds")
    # NaN is not JSON: the scheduler refuses the body as a whole.
    with pytest.raises(dgpu.InvalidJson) as e:
        client.submit("true", gpu_count=float("nan"), priority="high")
    assert (e.value.status, e.value.code, e.value.field) == (400, "invalid_json", None)
    with pytest.raises(dgpu.PayloadTooLarge) as e:
        client.submit("x" * (1 << 20), gpu_count=1, priority="high")
    assert (e.value.status, e.value.code) == (413, "payload_too_large")
    # What the client's methods cannot send, through its transport.
    with pytest.raises(dgpu.UnknownField) as e:
        client._call("POST", "/api/v1/tasks", body={"priority": "high", "gpus": 1},
                     idempotent=False, fields=dgpu.client.SUBMIT_FIELDS)
    assert (e.value.status, e.value.code, e.value.field) == (400, "unknown_field", "gpus")
    with pytest.raises(dgpu.UnknownField) as e:
        client._call("GET", "/api/v1/tasks", query=[("colour", "red")])
    assert (e.value.status, e.value.field) == (400, "colour")
    with pytest.raises(dgpu.MethodNotAllowed) as e:
        client._call("PATCH", "/api/v1/tasks", body={})
    assert (e.value.status, e.value.code) == (405, "method_not_allowed")
    status, _, raw = client._send("POST", client.server + "/api/v1/tasks", b"{}",
                                  {"Content-Type": "text/plain"})
    err = dgpu.errors.error_from_response(status, json.loads(raw))
    assert isinstance(err, dgpu.UnsupportedMediaType)
    assert (err.status, err.code) == (415, "unsupported_media_type")


def test_events_and_usage(client):
    t = client.wait(client.submit("sleep 0.3", gpu_count=2, priority="high",
                                  user="usage-probe").task_id, timeout=30, poll_interval=0.05)
    events = client.events(t.task_id)
    assert [e["type"] for e in events] == ["submitted", "scheduled", "started", "finished"]
    assert events[-1]["message"] == "succeeded"
    assert events[1]["node_id"] == t.node_id

    def when(e):
        return datetime.datetime.fromisoformat(e["time"])
    spent = (when(events[-1]) - when(events[1])) / datetime.timedelta(seconds=1) * 2
    u = client.usage(start=when(events[1]), end=when(events[-1]), group_by="user")
    mine = [g for g in u["groups"] if g["name"] == "usage-probe"]
    assert (u["group_by"], [g["tasks"] for g in mine]) == ("user", [1])
    assert mine[0]["gpu_seconds"] == pytest.approx(spent, abs=1e-6)
    # A range before anything ran; times without a zone are UTC.
    early = datetime.datetime(2020, 1, 1)
    assert client.usage(start=early, end=early + datetime.timedelta(hours=1))["groups"] == []
    with pytest.raises(dgpu.InvalidField) as e:
        client.usage(group_by="node")
    assert "group_by" in e.value.message
    with pytest.raises(dgpu.NotFound):
        client.events("task-999999")


def test_logs_follow_logs_and_watch(client, cluster):
    feed = client.watch()
    first = next(feed)
    assert first["event"] == "sync" and first["id"] == first["data"]["seq"]
    t = client.submit("printf 'a\\nb\\nc\\n'; sleep 0.5; echo d", gpu_count=1,
                      priority="high")
    seen = next(f for f in feed if f["event"] == "task" and f["data"]["task_id"] == t.task_id)
    assert seen["id"] > first["id"]
    feed.close()
    assert "".join(client.follow_logs(t.task_id)) == "a\nb\nc\nd\n"
    client.wait(t.task_id, timeout=30, poll_interval=0.05)
    assert client.logs(t.task_id) == "a\nb\nc\nd\n"
    assert client.logs(t.task_id, tail=2) == "c\nd\n"
    # Resumed after the first event: the events since come first.
    resumed = client.watch(since=first["id"])
    assert next(resumed)["id"] > first["id"]
    resumed.close()
    with pytest.raises(dgpu.InvalidField) as e:
        client.logs(t.task_id, tail=-1)
    assert e.value.field == "tail"
    with pytest.raises(dgpu.NotFound):
        client.logs("task-999999")
    queued = client.submit("true", gpu_count=1, priority="high", gpu_model="no-such-gpu")
    with pytest.raises(dgpu.LogUnavailable) as e:
        client.logs(queued.task_id)
    assert (e.value.status, e.value.code) == (404, "log_unavailable")
    client.cancel(queued.task_id)


def test_unknown_tasks_raise_not_found(client):
    for tid in ("task-999999", "bogus", "task-01"):
        with pytest.raises(dgpu.NotFound) as e:
            client.get(tid)
        assert (e.value.status, e.value.code, e.value.field) == (404, "not_found", None)
        assert tid in e.value.message
    with pytest.raises(dgpu.NotFound):
        client.cancel("task-999999")
    with pytest.raises(dgpu.NotFound):
        client.wait("task-999999", timeout=1)


def test_every_error_code_has_its_class():
    codes = {"invalid_json": dgpu.InvalidJson, "invalid_field": dgpu.InvalidField,
             "unknown_field": dgpu.UnknownField, "not_found": dgpu.NotFound,
             "method_not_allowed": dgpu.MethodNotAllowed, "conflict": dgpu.Conflict,
             "payload_too_large": dgpu.PayloadTooLarge,
             "unsupported_media_type": dgpu.UnsupportedMediaType, "not_leader": dgpu.NotLeader,
             "unavailable": dgpu.Unavailable, "storage_unavailable": dgpu.StorageUnavailable,
             "internal": dgpu.Internal, "forbidden": dgpu.Forbidden,
             "already_exists": dgpu.AlreadyExists, "unauthenticated": dgpu.Unauthenticated,
             "insecure_remote_access": dgpu.InsecureRemoteAccess,
             "too_many_pending": dgpu.TooManyPending, "log_unavailable": dgpu.LogUnavailable}
    sys.path.insert(0, os.path.join(harness.HERE, "..", "pylib"))
    import api_contract
    if not api_contract.missing_modules():
        described = api_contract.load_description()["components"]["schemas"]["ErrorCode"]
        assert sorted(described["enum"]) == sorted(codes)
    for code, cls in codes.items():
        e = dgpu.errors.error_from_response(418, {"error": {"code": code, "message": "m"}},
                                            leader="h:1")
        assert type(e) is cls
        assert (e.code, e.message, e.status, e.leader, e.field) == (code, "m", 418, "h:1", None)
    e = dgpu.errors.error_from_response(502, None)
    assert type(e) is dgpu.ApiError
    assert (e.code, e.status) == ("", 502)


def test_unreachable_server_retries_reads_but_never_a_submit():
    port = free_port()  # Nothing listens there.
    c = checked_client_class()("127.0.0.1:%d" % port, retries=3, backoff=0.2, max_backoff=0.2)
    start = time.monotonic()
    with pytest.raises(dgpu.ConnectionFailed) as e:
        c.gpus()
    # Three sleeps of 0.1 to 0.2 s between the four tries.
    assert time.monotonic() - start >= 0.3
    assert e.value.server == "http://127.0.0.1:%d" % port
    assert "cannot reach the scheduler at http://127.0.0.1:%d" % port in str(e.value)
    start = time.monotonic()
    with pytest.raises(dgpu.ConnectionFailed):
        c.submit("true", gpu_count=1, priority="high")
    assert time.monotonic() - start < 0.1


def test_package_installs_offline_in_a_fresh_venv(tmp_path):
    """What clients/python/README.md says for a machine without a registry: the wheel the build
    made, installed with --no-index into a fresh virtual environment of Debian's python3."""
    wheel = os.environ.get("DGPU_PYTHON_WHEEL", "")
    if not os.path.isfile(wheel):
        missing_dependency("the client's wheel was not built: %r (cmake target dgpu-python-wheel)"
                           % wheel)
    if subprocess.run(["/usr/bin/python3", "-c", "import ensurepip"],
                      capture_output=True).returncode != 0:
        missing_dependency("venv cannot install pip (Debian: python3-venv)")
    venv = tmp_path / "venv"
    made = subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["PIP_CONFIG_FILE"] = os.devnull  # Nothing but the command line: no index, no links.
    out = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", wheel],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import dgpu, os; print(dgpu.__version__, os.path.dirname(dgpu.__file__))"],
                           capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert check.returncode == 0, check.stderr
    version, where = check.stdout.split()
    assert version == "0.1.0"
    assert where.startswith(str(venv)) and os.path.isfile(os.path.join(where, "py.typed"))


# -- teams and preemption -------------------------------------------------------------------


class ScriptedClient(dgpu.Client):
    """A client whose transport answers from a script of (status, JSON body) and records every
    request as (method, URL, body text or None, Content-Type)."""

    def __init__(self, answers, **kwargs):
        super().__init__("http://sched:8080", **kwargs)
        self.answers = list(answers)
        self.requests = []

    def _send(self, method, url, data, headers):
        self.requests.append((method, url, None if data is None else data.decode("utf-8"),
                              headers.get("Content-Type")))
        status, doc = self.answers.pop(0)
        answer_headers = email.message.Message()
        answer_headers["Content-Type"] = "application/json"
        return status, answer_headers, json.dumps(doc).encode("utf-8")

    def _sleep(self, tries):
        pass


TEAM_JSON = {"name": "vision", "configured": True,
             "online": {"guaranteed": 16, "used": 4, "borrowed": 0},
             "batch": {"guaranteed": 8, "used": 10, "borrowed": 2},
             "max_gpus": 64, "weight": 2.5, "default_time_limit": 86400, "pending": 3,
             "usage_gpu_seconds": 1234.5}
TEAM = dgpu.Team(name="vision", configured=True, online=dgpu.TeamClass(16, 4, 0),
                 batch=dgpu.TeamClass(8, 10, 2), max_gpus=64, weight=2.5,
                 default_time_limit=86400, pending=3, usage_gpu_seconds=1234.5)
URL = "http://sched:8080/api/v1"


def test_set_team_sends_only_what_is_given():
    c = ScriptedClient([(200, TEAM_JSON)] * 8)
    assert c.set_team("vision", online=16, batch=8) == TEAM
    c.set_team("vision", max_gpus=None)
    c.set_team("vision", max_gpus=64, weight=2.5)
    c.set_team("vision", online=0, batch=0, max_gpus=0)
    c.set_team("vision", max_gpus=dgpu.UNCHANGED, weight=1)
    c.set_team("vision")
    c.set_team("vision", default_time_limit=7200)
    c.set_team("vision", default_time_limit=None)
    assert c.requests[6:] == [
        ("PUT", URL + "/teams/vision", '{"default_time_limit": 7200}', "application/json"),
        ("PUT", URL + "/teams/vision", '{"default_time_limit": null}', "application/json"),
    ]
    assert c.requests[:6] == [
        ("PUT", URL + "/teams/vision", '{"online": 16, "batch": 8}', "application/json"),
        ("PUT", URL + "/teams/vision", '{"max_gpus": null}', "application/json"),
        ("PUT", URL + "/teams/vision", '{"max_gpus": 64, "weight": 2.5}', "application/json"),
        ("PUT", URL + "/teams/vision", '{"online": 0, "batch": 0, "max_gpus": 0}',
         "application/json"),
        ("PUT", URL + "/teams/vision", '{"weight": 1}', "application/json"),
        ("PUT", URL + "/teams/vision", "{}", "application/json"),
    ]
    assert repr(dgpu.UNCHANGED) == "dgpu.UNCHANGED"


def test_teams_team_and_delete_team_requests():
    uncapped = dict(TEAM_JSON, name="a", configured=False, max_gpus=None, weight=1.0,
                    usage_gpu_seconds=0)
    c = ScriptedClient([(200, {"teams": [uncapped, TEAM_JSON]}), (200, TEAM_JSON),
                        (200, {"name": "a/b", "deleted": True})])
    teams = c.teams()
    assert teams == [dgpu.Team(name="a", configured=False, online=dgpu.TeamClass(16, 4, 0),
                               batch=dgpu.TeamClass(8, 10, 2), max_gpus=None, weight=1.0,
                               default_time_limit=86400, pending=3, usage_gpu_seconds=0.0),
                     TEAM]
    assert isinstance(teams[0].usage_gpu_seconds, float)
    assert c.team("vision") == TEAM
    assert c.delete_team("a/b") is None
    assert c.requests == [("GET", URL + "/teams", None, None),
                          ("GET", URL + "/teams/vision", None, None),
                          ("DELETE", URL + "/teams/a%2Fb", None, None)]


def test_team_errors_name_their_field():
    def refused(message, code="invalid_field", status=400):
        return status, {"error": {"code": code, "message": message}}

    c = ScriptedClient([
        refused("online: the online guarantees would add up to 20 GPUs, more than the online "
                "quota of 16"),
        refused("weight must be a number above 0"),
        refused("max_gpus (1) is below the team's guarantees (online 2 + batch 0)"),
        refused("team names are 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a "
                "letter or digit, got 'Bad'"),
        refused("team nope not found", "not_found", 404),
        refused("team busy has 1 pending task(s) and holds 0 GPU(s); delete it once they have "
                "ended", "conflict", 409),
    ], retries=0)
    for call, field in ((lambda: c.set_team("vision", online=20), "online"),
                        (lambda: c.set_team("vision", weight=0), "weight"),
                        (lambda: c.set_team("vision", online=2, max_gpus=1), "max_gpus"),
                        (lambda: c.set_team("Bad", online=1), None)):
        with pytest.raises(dgpu.InvalidField) as e:
            call()
        assert (e.value.status, e.value.field) == (400, field)
    with pytest.raises(dgpu.NotFound) as nf:
        c.team("nope")
    assert (nf.value.status, nf.value.message) == (404, "team nope not found")
    with pytest.raises(dgpu.Conflict) as cf:
        c.delete_team("busy")
    assert cf.value.status == 409
    assert c.answers == []


def test_delete_team_retried_after_a_lost_answer():
    # The first try took effect but its answer was lost (503): the repeat finds no limits left.
    c = ScriptedClient([(503, {"error": {"code": "unavailable", "message": "no leader yet"}}),
                        (404, {"error": {"code": "not_found",
                                         "message": "team vision has no limits to delete"}})],
                       retries=1)
    assert c.delete_team("vision") is None
    assert [r[:2] for r in c.requests] == [("DELETE", URL + "/teams/vision")] * 2
    # A first answer of 404 is the caller's mistake.
    c = ScriptedClient([(404, {"error": {"code": "not_found",
                                         "message": "team vision has no limits to delete"}})],
                       retries=1)
    with pytest.raises(dgpu.NotFound):
        c.delete_team("vision")


def test_submit_and_page_send_the_team_fields():
    page = {"tasks": [], "total": 0, "next": None}
    c = ScriptedClient([(201, {"task_id": "task-1", "status": "pending",
                               "created_at": "2026-01-05T10:00:00Z"})] * 2 + [(200, page)] * 2)
    c.submit("python sweep.py", gpu_count=2, priority="low", team="vision", preemptible=False,
             preemption_grace_seconds=30, user="alice")
    c.submit("true", gpu_count=1, priority="high", preemptible=True, preemption_grace_seconds=0)
    c.page(team="vision", status="pending", limit=10)
    assert list(c.list(team="vision", page_size=5)) == []
    assert c.requests == [
        ("POST", URL + "/tasks",
         '{"priority": "low", "gpu_count": 2, "command": "python sweep.py", "team": "vision", '
         '"user": "alice", "preemptible": false, "preemption_grace_seconds": 30}',
         "application/json"),
        ("POST", URL + "/tasks",
         '{"priority": "high", "gpu_count": 1, "command": "true", "preemptible": true, '
         '"preemption_grace_seconds": 0}', "application/json"),
        ("GET", URL + "/tasks?status=pending&team=vision&limit=10&offset=0", None, None),
        ("GET", URL + "/tasks?team=vision&limit=5&offset=0", None, None),
    ]


def test_submit_sends_a_gang_and_the_model_reads_it():
    c = ScriptedClient([(201, {"task_id": "task-1", "status": "pending",
                               "created_at": "2026-01-05T10:00:00Z"})])
    c.submit("torchrun train.py", priority="high", nodes=2, gpus_per_node=4)
    assert c.requests == [
        ("POST", URL + "/tasks",
         '{"priority": "high", "command": "torchrun train.py", "nodes": 2, "gpus_per_node": 4}',
         "application/json")]
    task = dgpu.Task.from_json({
        "task_id": "task-1", "name": "", "priority": "high", "gpu_count": 8, "gpu_model": "",
        "command": "x", "env": {}, "timeout_seconds": 0, "image": "", "status": "running",
        "node_id": "a", "allocated_gpus": [], "pending_reason": None, "attempts": 1,
        "allocation": [{"node_id": "a", "gpu_indices": [0, 1, 2, 3]},
                       {"node_id": "b", "gpu_indices": [4, 5, 6, 7]}],
        "exit_code": None, "error": "", "created_at": "2026-01-05T10:00:00Z",
        "started_at": None, "finished_at": None, "nodes": 2, "gpus_per_node": 4,
        "master_port": 29500})
    assert (task.nodes, task.gpus_per_node, task.master_port) == (2, 4, 29500)
    assert [m.node_id for m in task.allocation] == ["a", "b"]


def test_models_read_the_team_fields_and_their_absence():
    base = {"task_id": "task-3", "name": "", "priority": "low", "gpu_count": 1, "gpu_model": "",
            "command": "true", "env": {}, "timeout_seconds": 0, "image": "", "status": "pending",
            "node_id": None, "allocated_gpus": [], "allocation": [],
            "pending_reason": "waiting_for_preemption", "attempts": 1, "exit_code": None,
            "error": "preempted", "created_at": "2026-01-05T10:00:00Z", "started_at": None,
            "finished_at": None}
    t = dgpu.Task.from_json(dict(base, team="vision", user="alice", preemptible=True,
                                 preemption_grace_seconds=60, borrowed=False, preemptions=2))
    assert (t.team, t.user, t.preemptible, t.preemption_grace_seconds, t.borrowed,
            t.preemptions, t.error, t.pending_reason) == (
        "vision", "alice", True, 60, False, 2, "preempted", "waiting_for_preemption")
    assert "team_limit" in dgpu.PENDING_REASONS
    assert "waiting_for_preemption" in dgpu.PENDING_REASONS
    # A scheduler without teams: what its tasks are, in the new terms.
    old = dgpu.Task.from_json(base)
    assert (old.team, old.user, old.preemptible, old.preemption_grace_seconds, old.borrowed,
            old.preemptions) == (dgpu.DEFAULT_TEAM, "", True, -1, False, 0)
    q = dgpu.QuotaClass.from_json({"quota": 6, "used": 7, "available": 0, "borrowed": 1,
                                   "lent": 0})
    assert q == dgpu.QuotaClass(quota=6, used=7, available=0, borrowed=1, lent=0)
    assert dgpu.QuotaClass.from_json({"quota": 2, "used": 1, "available": 1}) == \
        dgpu.QuotaClass(quota=2, used=1, available=1, borrowed=0, lent=0)
    q = dgpu.QuotaClass.from_json({"quota": 6, "used": 3, "available": 3, "borrowed": 0,
                                   "lent": 0, "teams": {"vision": {"guaranteed": 4, "used": 3,
                                                                   "borrowed": 0}}})
    assert q.teams == {"vision": dgpu.TeamClass(guaranteed=4, used=3, borrowed=0)}


def test_teams_set_read_list_and_delete(client):
    name = "client-vision"
    t = client.set_team(name, online=2, batch=1)
    assert t == dgpu.Team(name=name, configured=True, online=dgpu.TeamClass(2, 0, 0),
                          batch=dgpu.TeamClass(1, 0, 0), max_gpus=None, weight=1.0,
                          default_time_limit=None, pending=0, usage_gpu_seconds=0.0)
    # What is left out keeps its value.
    t = client.set_team(name, max_gpus=5, weight=2.5)
    assert (t.online.guaranteed, t.batch.guaranteed, t.max_gpus, t.weight) == (2, 1, 5, 2.5)
    assert client.team(name) == t
    listed = client.teams()
    assert [x.name for x in listed] == sorted(x.name for x in listed)
    assert [x for x in listed if x.name == name] == [t]
    # None removes the cap; the rest stays.
    t = client.set_team(name, max_gpus=None)
    assert (t.online.guaranteed, t.batch.guaranteed, t.max_gpus, t.weight) == (2, 1, None, 2.5)
    assert client.delete_team(name) is None
    # Without limits, tasks or usage, the team is no longer listed.
    assert name not in [x.name for x in client.teams()]
    with pytest.raises(dgpu.NotFound) as e:
        client.delete_team(name)
    assert (e.value.status, e.value.message) == (404, "team %s has no limits to delete" % name)
    with pytest.raises(dgpu.NotFound) as e:
        client.team("client-never-seen")
    assert (e.value.status, e.value.message) == (404, "team client-never-seen not found")


def test_a_teams_default_time_limit_goes_to_its_tasks_submitted_without_one(client):
    name = "client-limits"
    t = client.set_team(name, default_time_limit=1800)
    assert (t.default_time_limit, t.configured) == (1800, True)
    given = client.submit("sleep 600", gpu_count=1, priority="low", team=name)
    asked = client.submit("sleep 600", gpu_count=1, priority="low", team=name,
                          timeout_seconds=60)
    assert client.get(given.task_id).timeout_seconds == 1800
    assert client.get(asked.task_id).timeout_seconds == 60
    assert client.set_team(name, default_time_limit=None).default_time_limit is None
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_team(name, default_time_limit=-1)
    assert e.value.field == "default_time_limit"
    for submitted in (given, asked):
        client.cancel(submitted.task_id)
        assert client.wait(submitted.task_id, timeout=30).status == "cancelled"
    # A cancelled task holds its GPU until its agent confirms the stop; then the team may go.
    deadline = time.monotonic() + 30
    while client.team(name).batch.used > 0:
        assert time.monotonic() < deadline, "the cancelled tasks still hold GPUs"
        time.sleep(0.05)
    client.delete_team(name)


def test_a_task_waits_for_its_dependencies_and_shows_where_each_stands(client):
    parent = client.submit("sleep 1", gpu_count=1, priority="low")
    ok = client.submit("true", gpu_count=1, priority="low", depends_on=[parent.task_id])
    not_ok = client.submit("true", gpu_count=1, priority="low",
                           depends_on=[(parent.task_id, "afternotok")])
    held = client.get(ok.task_id)
    assert held.status == "pending"
    assert held.depends_on == [dgpu.Dependency(parent.task_id, "afterok", "waiting")]
    assert held.pending_reason in ("dependency", None)
    assert client.wait(ok.task_id, timeout=30).status == "success"
    done = client.get(ok.task_id)
    assert done.depends_on == [dgpu.Dependency(parent.task_id, "afterok", "satisfied")]
    assert done.started_at >= client.get(parent.task_id).finished_at
    never = client.wait(not_ok.task_id, timeout=30)
    assert (never.status, never.error, never.exit_code) == (
        "failed", "dependency_never_satisfied", None)
    assert never.depends_on[0].state == "never_satisfied"
    with pytest.raises(dgpu.InvalidField) as e:
        client.submit("true", gpu_count=1, priority="low", depends_on=["task-999999"])
    assert (e.value.status, e.value.field, e.value.message) == (
        400, "depends_on", "depends_on[0]: task-999999 does not exist")
    with pytest.raises(dgpu.InvalidField) as e:
        client.submit("true", gpu_count=1, priority="low",
                      depends_on=[(parent.task_id, "afterdone")])
    assert e.value.field == "depends_on"


def test_team_bad_input(client):
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_team("client-bad", weight=0)
    assert (e.value.status, e.value.field, e.value.message) == (
        400, "weight", "weight must be a number above 0")
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_team("client-bad", online=-1)
    assert (e.value.status, e.value.field) == (400, "online")
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_team("client-bad", batch=1000)
    assert (e.value.status, e.value.field) == (400, "batch")
    assert e.value.message.startswith("batch: the batch guarantees would add up to ")
    assert e.value.message.endswith(" GPUs, more than the batch quota of 2")
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_team("client-bad", online=2, max_gpus=1)
    assert (e.value.status, e.value.field) == (400, "max_gpus")
    with pytest.raises(dgpu.InvalidField) as e:
        client.set_team("Client Bad", online=1)
    assert (e.value.status, e.value.field) == (400, None)
    with pytest.raises(dgpu.UnknownField) as e:
        client._call("PUT", "/api/v1/teams/client-bad", body={"gpus": 1},
                     fields=dgpu.client.TEAM_FIELDS)
    assert (e.value.status, e.value.field) == (400, "gpus")
    assert "client-bad" not in [x.name for x in client.teams()]


def test_a_team_with_tasks_cannot_be_deleted(client):
    name = "client-busy"
    client.set_team(name, batch=1)
    tid = client.submit("true", gpu_count=64, priority="low", team=name).task_id
    assert client.team(name).pending == 1
    with pytest.raises(dgpu.Conflict) as e:
        client.delete_team(name)
    assert (e.value.status, e.value.message) == (
        409, "team %s has 1 pending task(s) and holds 0 GPU(s); delete it once they have ended"
        % name)
    client.cancel(tid)
    assert client.team(name).pending == 0
    assert client.delete_team(name) is None


def test_submit_with_team_and_preemption_fields(client):
    team = "client-research"
    s = client.submit("true", gpu_count=1, priority="low", team=team, preemptible=False,
                      preemption_grace_seconds=30, user="alice")
    t = client.wait(s.task_id, timeout=30, poll_interval=0.05)
    assert (t.status, t.team, t.user, t.preemptible, t.preemption_grace_seconds, t.borrowed,
            t.preemptions, t.error) == ("success", team, "alice", False, 30, False, 0, "")
    d = client.wait(client.submit("true", gpu_count=1, priority="low").task_id, timeout=30,
                    poll_interval=0.05)
    assert (d.team, d.user, d.preemptible, d.preemption_grace_seconds, d.borrowed,
            d.preemptions) == ("default", "", True, -1, False, 0)
    assert [x.task_id for x in client.list(team=team)] == [s.task_id]
    p = client.page(team=team, limit=5)
    assert ([x.task_id for x in p.tasks], p.total, p.next) == ([s.task_id], 1, None)
    assert d.task_id in [x.task_id for x in client.list(team="default", status="success")]
    # A team that has tasks but no limits.
    r = client.team(team)
    assert (r.name, r.configured, r.online.guaranteed, r.batch.guaranteed, r.pending) == (
        team, False, 0, 0, 0)
    with pytest.raises(dgpu.InvalidField) as e:
        client.page(team="Not A Team")
    assert (e.value.status, e.value.field) == (400, "team")


def test_quota_reports_borrowed_and_lent(client):
    harness.wait_until(lambda: client.gpus().busy == 0, 15, what="no GPU busy")
    raw = client._call("GET", "/api/v1/quota")
    for klass in ("online", "batch"):
        assert (raw[klass]["borrowed"], raw[klass]["lent"]) == (0, 0)
    q = client.quota()
    assert (q.online.borrowed, q.online.lent, q.batch.borrowed, q.batch.lent) == (0, 0, 0, 0)


def test_submit_sends_cpus_and_memory_and_the_model_reads_them():
    c = ScriptedClient([(201, {"task_id": "task-2", "status": "pending",
                               "created_at": "2026-01-05T10:00:00Z"})])
    c.submit("python load.py", priority="low", gpu_count=1, cpus=1.5, memory_mb=16384)
    assert c.requests == [
        ("POST", URL + "/tasks",
         '{"priority": "low", "gpu_count": 1, "command": "python load.py", "cpus": 1.5, '
         '"memory_mb": 16384}', "application/json")]
    task = dgpu.Task.from_json({
        "task_id": "task-2", "name": "", "priority": "low", "gpu_count": 1, "gpu_model": "",
        "command": "x", "env": {}, "timeout_seconds": 0, "image": "", "status": "pending",
        "node_id": None, "allocated_gpus": [], "pending_reason": "insufficient_cpu",
        "attempts": 0, "allocation": [], "exit_code": None, "error": "",
        "created_at": "2026-01-05T10:00:00Z", "started_at": None, "finished_at": None,
        "cpus": 1.5, "memory_mb": None})
    assert (task.cpus, task.memory_mb, task.pending_reason) == (1.5, None, "insufficient_cpu")
    assert task.node_selector == {}


def test_submit_sends_a_node_selector():
    c = ScriptedClient([(201, {"task_id": "task-3", "status": "pending",
                               "created_at": "2026-01-05T10:00:00Z"})])
    c.submit("python eval.py", priority="low", gpu_count=1, node_selector={"rack": "r1"})
    assert c.requests == [
        ("POST", URL + "/tasks",
         '{"priority": "low", "gpu_count": 1, "command": "python eval.py", '
         '"node_selector": {"rack": "r1"}}', "application/json")]
