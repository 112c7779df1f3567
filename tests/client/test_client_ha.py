"""The Python client against a leader/standby pair (tests/ha/ha_cluster.py): a standby refuses
writes with NotLeader naming the leader; a submit is never repeated; reads are served; and the
idempotent writes (set_quota, cancel) ride out a failover through their retries."""

import re
import threading
import time

import pytest

import dgpu
from conftest import checked_client_class
from ha_cluster import HaCluster, wait_until

Client = checked_client_class()


@pytest.fixture
def pair():
    c = HaCluster("client")
    ok = False
    try:
        c.start_pair()
        c.start_agent("ag1", gpus=4)
        c.wait_agents_online("a", ["ag1"])
        yield c
        ok = True
    finally:
        if not ok:
            print(c.diagnostics())
        c.close(keep=not ok)


def requests_counted(cluster, name, route, code):
    """dgpu_http_requests_total{route, code} of scheduler `name`."""
    status, _, text = cluster.request(name, "GET", "/metrics")
    assert status == 200
    m = re.search(r'^dgpu_http_requests_total\{route="%s",code="%d"\} (\d+)$'
                  % (re.escape(route), code), text, re.M)
    return int(m.group(1)) if m else 0


def test_standby_refuses_writes_and_a_submit_is_never_repeated(pair):
    b = Client("http://" + pair.http_address("b"), retries=5, backoff=0.05)
    env = {"HA_TEST_RUN": pair.marker}
    start = time.monotonic()
    with pytest.raises(dgpu.NotLeader) as e:
        b.submit("true", gpu_count=1, priority="high", env=env)
    assert time.monotonic() - start < 1.0
    assert (e.value.status, e.value.code, e.value.leader) == (503, "not_leader",
                                                              pair.http_address("a"))
    assert "standby" in e.value.message
    assert e.value.retried is False
    assert requests_counted(pair, "b", "POST /api/v1/tasks", 503) == 1
    # Without retries the idempotent writes fail at once too.
    b0 = Client("http://" + pair.http_address("b"), retries=0)
    with pytest.raises(dgpu.NotLeader):
        b0.set_quota(online_percent=0.5)
    with pytest.raises(dgpu.NotLeader):
        b0.cancel("task-1")
    assert requests_counted(pair, "b", "PUT /api/v1/quota", 503) == 1
    # Reads are served by the standby from its replicated state.
    a = Client("http://" + pair.http_address("a"))
    tid = a.submit("true", gpu_count=1, priority="high", env=env).task_id
    assert a.wait(tid, timeout=15, poll_interval=0.05).status == "success"
    wait_until(lambda: _status_on(b, tid) == "success", 10, what="task replicated to B")
    # Agents register with the leader only: until it leads, a standby knows none.
    assert b.agents() == []
    assert b.gpus().total == 0
    assert b.quota().total_gpus == 0


def _status_on(client, tid):
    try:
        return client.get(tid).status
    except dgpu.NotFound:
        return None


def test_idempotent_writes_retry_through_a_failover(pair):
    a = Client("http://" + pair.http_address("a"))
    tid = a.submit(pair.pid_command(60), gpu_count=1, priority="high",
                   env={"HA_TEST_RUN": pair.marker}).task_id
    wait_until(lambda: a.get(tid).status == "running", 15, what="task running")
    wait_until(lambda: _status_on(Client("http://" + pair.http_address("b")), tid)
               == "running", 10, what="task replicated to B")
    # Retries enough to outlast the standby's heartbeat timeout (2 s) and its promotion.
    b = Client("http://" + pair.http_address("b"), retries=60, backoff=0.1,
                    max_backoff=0.3)
    results = {}

    def run(name, call):
        try:
            results[name] = ("ok", call())
        except Exception as e:  # Reported by the assertions below.
            results[name] = ("error", e)

    threads = [threading.Thread(target=run, args=("quota", lambda: b.set_quota(0.25))),
               threading.Thread(target=run, args=("cancel", lambda: b.cancel(tid)))]
    for t in threads:
        t.start()
    wait_until(lambda: requests_counted(pair, "b", "PUT /api/v1/quota", 503) >= 1
               and requests_counted(pair, "b", "DELETE /api/v1/tasks/{id}", 503) >= 1, 10,
               what="both calls refused once by the standby")
    pair.schedulers["a"].kill9()
    for t in threads:
        t.join(timeout=30)
    assert results == {"quota": ("ok", None), "cancel": ("ok", None)}
    assert pair.role("b") == "leader"
    pair.wait_agents_online("b", ["ag1"])
    q = b.quota()
    assert q.online_percent == pytest.approx(0.25)
    assert (q.online.quota, q.batch.quota) == (1, 3)
    assert b.wait(tid, timeout=15, poll_interval=0.05).status == "cancelled"
    assert requests_counted(pair, "b", "PUT /api/v1/quota", 200) == 1
    assert requests_counted(pair, "b", "DELETE /api/v1/tasks/{id}", 200) == 1
