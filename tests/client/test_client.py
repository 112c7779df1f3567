"""The Python client (clients/python, package dgpu) against a real scheduler and real agents:
every method, every field of the task object, and the error classes for bad input, unknown
tasks, conflicts, unreachable servers and the retry rules."""

import datetime
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import dgpu
import dgpu.errors
import harness
from conftest import checked_client_class, missing_dependency
from dgpu_testlib import free_port

UTC = datetime.timezone.utc


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


def test_gpus_agents_and_quota(client):
    g = client.gpus()
    assert isinstance(g, dgpu.GpuList)
    assert g.total == 8 and len(g.gpus) == 8
    assert g.idle + g.busy + g.offline == 8
    assert {x.id for x in g.gpus} == {"a%d-gpu-%d" % (n, i) for n in (1, 2) for i in range(4)}
    assert all(x.model == harness.GPU_MODEL and x.memory_mb == 32768 for x in g.gpus)
    agents = client.agents()
    assert sorted(a.id for a in agents) == ["a1", "a2"]
    assert all(a.status == "online" and a.gpus == 4 for a in agents)
    assert all(isinstance(a.last_heartbeat, datetime.datetime) for a in agents)
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
             "already_exists": dgpu.AlreadyExists}
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


def test_package_installs_with_pip(tmp_path):
    for module, package in (("pip", "python3-pip"), ("setuptools", "python3-setuptools")):
        probe = subprocess.run([sys.executable, "-c", "import " + module], capture_output=True)
        if probe.returncode != 0:
            missing_dependency("%s is not installed (Debian: %s)" % (module, package))
    # A copy: setuptools builds in the source folder, which must stay clean.
    src = str(tmp_path / "src")
    shutil.copytree(os.path.join(harness.HERE, "..", "..", "clients", "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                          "--no-deps", "--no-index", "--target", str(tmp_path / "site"), src],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    site = tmp_path / "site" / "dgpu"
    assert (site / "py.typed").is_file()
    assert (site / "client.py").is_file()
    check = subprocess.run([sys.executable, "-c", "import dgpu; print(dgpu.__version__, "
                            "dgpu.__file__)"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("0.1.0 " + str(site))
