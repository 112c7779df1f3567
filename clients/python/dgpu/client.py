"""The client of the dgpu scheduler's REST API (v1), standard library only.

    import dgpu
    c = dgpu.Client()                      # $DGPU_SERVER, else http://127.0.0.1:8080
    t = c.submit("python train.py", gpu_count=1, priority="high")
    print(c.wait(t.task_id, timeout=3600).exit_code)

The API is described in api/openapi.yaml (served at GET /api/v1/openapi.yaml).
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import (ApiError, Conflict, ConnectionFailed, NotFound, WaitTimeout,
                     error_from_response)
from .models import Agent, GpuList, Quota, Submitted, Task, Team

__all__ = ["Client", "TaskPage", "Snapshot", "DEFAULT_SERVER", "UNCHANGED", "resolve_server"]

DEFAULT_SERVER = "http://127.0.0.1:8080"
API = "/api/v1"
SQLITE_HEADER = b"SQLite format 3\x00"
SUBMIT_FIELDS = ("priority", "gpu_count", "command", "gpu_model", "env", "name",
                 "timeout_seconds", "image", "team", "user", "preemptible",
                 "preemption_grace_seconds", "array", "max_retries", "retry_backoff_seconds",
                 "nodes", "gpus_per_node", "cpus", "memory_mb", "node_selector", "depends_on")
TEAM_FIELDS = ("online", "batch", "max_gpus", "weight", "default_time_limit")


class _Unchanged:
    """The type of UNCHANGED, which has this one instance."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "dgpu.UNCHANGED"


# The default of Client.set_team's `max_gpus`: leave the cap as it is. (None there removes the
# cap, as null does in the API.)
UNCHANGED = _Unchanged()


def resolve_server(server: Optional[str] = None) -> str:
    """The scheduler URL the way dgpuctl finds it: `server`, else $DGPU_SERVER (when set and not
    empty), else http://127.0.0.1:8080; trailing slashes are dropped and a URL without a scheme
    gets ``http://``."""
    if not server:
        server = os.environ.get("DGPU_SERVER") or DEFAULT_SERVER
    server = server.rstrip("/")
    if "://" not in server:
        server = "http://" + server
    return server


@dataclass(frozen=True)
class TaskPage:
    """One page of ``GET /api/v1/tasks``: the tasks (newest first), the number of tasks that
    match the filters over all pages, and `next`: the id to pass as `after` for the next page
    (None on the last page)."""
    tasks: List[Task]
    total: int
    next: Optional[str] = None


@dataclass(frozen=True)
class Snapshot:
    """A copy of the scheduler's database saved by Client.snapshot: where it is, its size, and
    the tasks and journal position it holds (None when the server did not say)."""
    path: str
    bytes: int
    tasks: Optional[int]
    last_applied_seq: Optional[int]
    epoch: Optional[int]


class Client:
    """A connection to one scheduler.

    Args:
        server: the scheduler URL; None reads it as dgpuctl does (see resolve_server).
        token: sent as ``Authorization: Bearer <token>``; None reads $DGPU_TOKEN (unset or empty:
            no header). The v1 scheduler does not check it.
        ca_file: a PEM bundle to verify an https:// scheduler against; None uses the system's.
        timeout: seconds one HTTP request may take.
        retries: how many times an idempotent call (GET, PUT, DELETE) is repeated after a
            connection error or a 503; a submit (POST) is never repeated.
        backoff: the first delay between tries, in seconds; it doubles each try (with jitter) up
            to `max_backoff`.

    Errors: every call raises a subclass of dgpu.ApiError for an error answer (one class per
    error code) and dgpu.ConnectionFailed when no answer came. A Client may be shared by
    threads: it holds no connection between calls.
    """

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None,
                 ca_file: Optional[str] = None, *, timeout: float = 10.0, retries: int = 4,
                 backoff: float = 0.2, max_backoff: float = 5.0) -> None:
        self.server = resolve_server(server)
        self.token = token if token is not None else (os.environ.get("DGPU_TOKEN") or None)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._ssl: Optional[ssl.SSLContext] = None
        if self.server.startswith("https://"):
            self._ssl = ssl.create_default_context(cafile=ca_file)
        elif ca_file is not None:
            raise ValueError("ca_file is given but the server %s is not https" % self.server)

    # -- tasks ---------------------------------------------------------------------------------

    def submit(self, command: str, *, priority: str, gpu_count: Optional[int] = None,
               gpu_model: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               name: Optional[str] = None, timeout_seconds: Optional[int] = None,
               image: Optional[str] = None, team: Optional[str] = None,
               preemptible: Optional[bool] = None,
               preemption_grace_seconds: Optional[int] = None,
               user: Optional[str] = None, array: Optional[int] = None,
               max_retries: Optional[int] = None,
               retry_backoff_seconds: Optional[int] = None, nodes: Optional[int] = None,
               gpus_per_node: Optional[int] = None, cpus: Optional[float] = None,
               memory_mb: Optional[int] = None,
               node_selector: Optional[Mapping[str, str]] = None,
               depends_on: Optional[Sequence[Union[str, Tuple[str, str]]]] = None
               ) -> Submitted:
        """Submits a task (``POST /api/v1/tasks``); returns its id, status and creation time.

        `priority` is ``"high"`` (online quota) or ``"low"`` (batch quota). `team` is the team
        the task belongs to (the server's ``"default"`` without it); `preemptible` False keeps
        the task from being preempted (the server's default is True); `preemption_grace_seconds`
        is its SIGTERM to SIGKILL time when preempted (the scheduler's default without it);
        `user` is recorded as who submitted it. `array` submits a job array of that many tasks
        (1 to 100,000; each sees its index as DGPU_ARRAY_INDEX), listed in ``task_ids``.
        `max_retries` retries a failed run that many times, after `retry_backoff_seconds`
        (doubling for each next retry). `nodes` with `gpus_per_node` submits a gang: that many
        members, one per node, started together (`gpu_count`, if given too, must be their
        product); each member sees DGPU_NODE_RANK, MASTER_ADDR, MASTER_PORT and the rest.
        `cpus` (at most 3 decimals) and `memory_mb` are what each member asks for besides its
        GPUs (without them: its GPUs' share of the node it lands on). `node_selector` (label
        key to value) lets only nodes with all of those labels (``agent.labels``) take it.
        `depends_on` lists the tasks it waits for: ids (``"task-3"``: it must succeed) or
        ``(task_id, condition)`` pairs, condition one of DEPENDENCY_CONDITIONS; the id of a job
        array's member stands for the whole array.
        Optional fields left None are not sent. Never retried: a ConnectionFailed leaves it
        unknown whether the task was accepted."""
        body: Dict[str, Any] = {"priority": priority}
        if gpu_count is not None:
            body["gpu_count"] = gpu_count
        body["command"] = command
        for key, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node),
                           ("gpu_model", gpu_model), ("env", env), ("name", name),
                           ("timeout_seconds", timeout_seconds), ("image", image),
                           ("team", team), ("user", user), ("preemptible", preemptible),
                           ("preemption_grace_seconds", preemption_grace_seconds),
                           ("array", array), ("max_retries", max_retries),
                           ("retry_backoff_seconds", retry_backoff_seconds), ("cpus", cpus),
                           ("memory_mb", memory_mb), ("node_selector", node_selector)):
            if value is not None:
                body[key] = dict(value) if key in ("env", "node_selector") else value
        if depends_on is not None:
            body["depends_on"] = [
                {"task_id": d} if isinstance(d, str) else {"task_id": d[0], "condition": d[1]}
                for d in depends_on]
        doc = self._call("POST", API + "/tasks", body=body, idempotent=False,
                         fields=SUBMIT_FIELDS)
        return Submitted.from_json(doc)

    def get(self, task_id: str) -> Task:
        """The task (``GET /api/v1/tasks/{id}``). NotFound for an unknown id."""
        return Task.from_json(self._call("GET", self._task_path(task_id)))

    def events(self, task_id: str) -> List[dict]:
        """The task's history, oldest first (``GET /api/v1/tasks/{id}/events``): dicts with
        ``time``, ``type`` (submitted, scheduled, started, preempted, requeued, node_lost,
        finished, cancelled), ``node_id`` when there is one, and ``message``. NotFound for an
        unknown id."""
        return self._call("GET", self._task_path(task_id) + "/events")["events"]

    def logs(self, task_id: str, tail: Optional[int] = None, rank: int = 0) -> str:
        """The task's output so far (``GET /api/v1/tasks/{id}/logs``), read by the scheduler from
        the agent that holds it; with `tail`, its last lines only. LogUnavailable when no
        connected agent holds it, NotFound for an unknown id."""
        with self._stream(self._task_path(task_id) + "/logs",
                          self._log_query(tail, rank, False), "text/plain") as resp:
            return resp.read().decode("utf-8", errors="replace")

    def follow_logs(self, task_id: str, tail: Optional[int] = None,
                    rank: int = 0) -> Iterator[str]:
        """The task's output as it is written, piece by piece, until the task ends
        (``?follow=true``; ``tail=0``: only what comes next)."""
        with self._stream(self._task_path(task_id) + "/logs",
                          self._log_query(tail, rank, True), "text/plain", follow=True) as resp:
            while True:
                piece = resp.read1(65536)
                if not piece:
                    return
                yield piece.decode("utf-8", errors="replace")

    def watch(self, since: Optional[int] = None) -> Iterator[dict]:
        """The live feed (``GET /api/v1/watch``): dicts with ``id``, ``event`` (``task``,
        ``node``, ``quota``, and ``sync`` once caught up, ``reset`` when events were lost: list
        again) and ``data`` (the object as its endpoint shows it). Resume after an event with
        ``since=<its id>``. Runs until the caller stops iterating or the stream breaks
        (ConnectionFailed)."""
        query = [("since", str(since))] if since is not None else []
        with self._stream(API + "/watch", query, "text/event-stream", follow=True) as resp:
            frame: Dict[str, Any] = {"id": None, "event": "message", "data": ""}
            try:
                for raw in resp:
                    line = raw.decode("utf-8").rstrip("\n")
                    if not line:
                        if frame["data"] or frame["id"] is not None:
                            frame["data"] = json.loads(frame["data"]) if frame["data"] else None
                            yield frame
                        frame = {"id": None, "event": "message", "data": ""}
                        continue
                    if line.startswith(":"):
                        continue
                    key, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if key == "id":
                        frame["id"] = int(value)
                    elif key == "event":
                        frame["event"] = value
                    elif key == "data":
                        frame["data"] += ("\n" if frame["data"] else "") + value
            except (OSError, http.client.HTTPException) as e:
                raise ConnectionFailed(self.server, "the watch stream broke: %s" % e) from e

    @staticmethod
    def _log_query(tail: Optional[int], rank: int, follow: bool) -> List[Tuple[str, str]]:
        query = []
        if tail is not None:
            query.append(("tail", str(tail)))
        if follow:
            query.append(("follow", "true"))
        if rank:
            query.append(("rank", str(rank)))
        return query

    def _stream(self, path: str, query: Sequence[Tuple[str, str]], accept: str,
                follow: bool = False) -> Any:
        """Opens a GET whose body is read by the caller (a log, the watch feed): the response,
        or ApiError / ConnectionFailed. A followed stream has no read timeout."""
        url = self.server + path + ("?" + urllib.parse.urlencode(list(query)) if query else "")
        headers = {"Accept": accept + ", application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(url, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=None if follow else self.timeout,
                                          context=self._ssl)
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            finally:
                e.close()
            raise self._api_error(e.code, e.headers, raw, 0, ("tail", "rank", "follow", "since"))
        except (OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", None) or e
            raise ConnectionFailed(self.server, str(reason)) from e

    def usage(self, start: Optional[datetime.datetime] = None,
              end: Optional[datetime.datetime] = None, group_by: str = "team") -> dict:
        """GPU time in [start, end) by team or user (``GET /api/v1/usage``), as the scheduler's
        JSON: ``{from, to, group_by, groups: [{name, gpu_seconds, tasks}]}``. Without `start`,
        the 24 hours before `end`; without `end`, now. Times without a zone are UTC."""
        query = [("group_by", group_by)]
        for key, when in (("from", start), ("to", end)):
            if when is not None:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=datetime.timezone.utc)
                query.append((key, when.isoformat()))
        return self._call("GET", API + "/usage", query=query)

    def page(self, status: Optional[str] = None, priority: Optional[str] = None,
             limit: int = 50, offset: int = 0, after: Optional[str] = None,
             team: Optional[str] = None) -> TaskPage:
        """One page of tasks, newest first (``GET /api/v1/tasks``); `limit` is 1 to 1000.
        `after` (a task id, usually the `next` of the page before) starts the page past that
        task, at the same cost at any depth; it cannot be combined with a non-zero `offset`.
        `team` lists only the tasks of that team."""
        query: List[Tuple[str, str]] = []
        if status is not None:
            query.append(("status", status))
        if priority is not None:
            query.append(("priority", priority))
        if team is not None:
            query.append(("team", team))
        query.append(("limit", str(limit)))
        if after is not None:
            query.append(("after", after))
        if offset or after is None:
            query.append(("offset", str(offset)))
        doc = self._call("GET", API + "/tasks", query=query,
                         fields=("status", "priority", "team", "limit", "offset", "after"))
        return TaskPage(tasks=[Task.from_json(t) for t in doc["tasks"]], total=doc["total"],
                        next=doc.get("next"))

    def list(self, status: Optional[str] = None, priority: Optional[str] = None,
             page_size: int = 100, team: Optional[str] = None) -> Iterator[Task]:
        """Every task that matches the filters, newest first, read page by page (by keyset) as
        the iteration goes: each task that existed when the iteration started and still matches
        is seen exactly once; tasks submitted meanwhile are newer and not part of it."""
        after: Optional[str] = None
        while True:
            p = self.page(status=status, priority=priority, limit=page_size, after=after,
                          team=team)
            yield from p.tasks
            if p.next is None:
                return
            after = p.next

    def cancel(self, task_id: str, grace_seconds: Optional[int] = None) -> None:
        """Cancels a task (``DELETE /api/v1/tasks/{id}``): a pending one leaves the queue, a
        running one is stopped (SIGTERM, SIGKILL after `grace_seconds`). Conflict when it
        already finished. Retried like a read: when a repeated try finds the task cancelled (the
        first try took effect, its answer was lost), the call succeeds."""
        query = [("grace_seconds", str(grace_seconds))] if grace_seconds is not None else []
        path = self._task_path(task_id)
        try:
            self._call("DELETE", path, query=query, fields=("grace_seconds",))
        except Conflict as e:
            if not e.retried:
                raise
            if self.get(task_id).status != "cancelled":
                raise

    def wait(self, task_id: str, timeout: Optional[float] = None,
             poll_interval: float = 0.5) -> Task:
        """Polls the task until it finished (success, failed or cancelled) and returns it.
        WaitTimeout (a TimeoutError) after `timeout` seconds; None waits for ever."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            task = self.get(task_id)
            if task.finished:
                return task
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(task_id, timeout or 0.0, task)
            delay = poll_interval
            if deadline is not None:
                delay = max(0.0, min(delay, deadline - time.monotonic()))
            time.sleep(delay)

    # -- cluster -------------------------------------------------------------------------------

    def quota(self) -> Quota:
        """The online/batch quota (``GET /api/v1/quota``)."""
        return Quota.from_json(self._call("GET", API + "/quota"))

    def set_quota(self, online_percent: Optional[float] = None,
                  batch_percent: Optional[float] = None) -> None:
        """Changes the split (``PUT /api/v1/quota``): fractions in [0, 1]; given both, they must
        add up to 1. Running tasks are never stopped by it."""
        body: Dict[str, Any] = {}
        if online_percent is not None:
            body["online_percent"] = online_percent
        if batch_percent is not None:
            body["batch_percent"] = batch_percent
        self._call("PUT", API + "/quota", body=body, fields=("online_percent", "batch_percent"))

    def gpus(self) -> GpuList:
        """Every GPU of every agent, and the counts by status (``GET /api/v1/gpus``)."""
        return GpuList.from_json(self._call("GET", API + "/gpus"))

    def agents(self) -> List[Agent]:
        """Every agent (``GET /api/v1/agents``)."""
        return [Agent.from_json(a) for a in self._call("GET", API + "/agents")["agents"]]

    def autoscale(self) -> dict:
        """The autoscaled node groups, their nodes and the nodes asked for, as the scheduler's
        JSON (``GET /api/v1/autoscale``); ``enabled`` is false when autoscaling is off."""
        return self._call("GET", API + "/autoscale")

    def cordon(self, agent_id: str) -> Agent:
        """Keeps new tasks off a node (``POST /api/v1/agents/{id}/cordon``); its running tasks
        go on. Returns the agent. NotFound for an agent that never registered."""
        return self._set_mode(agent_id, "cordon", None)[0]

    def uncordon(self, agent_id: str) -> Agent:
        """Lets a cordoned or draining node take tasks again; returns the agent."""
        return self._set_mode(agent_id, "uncordon", None)[0]

    def drain(self, agent_id: str, evict: bool = False,
              grace_seconds: Optional[int] = None) -> Tuple[Agent, int]:
        """Marks a node draining (no new tasks); with `evict`, stops its tasks now, each with
        `grace_seconds` between SIGTERM and SIGKILL (None: its own preemption grace), and they
        go back to their queues. Returns the agent and the number of tasks evicted."""
        body: Dict[str, Any] = {"evict": evict}
        if grace_seconds is not None:
            body["grace_seconds"] = grace_seconds
        return self._set_mode(agent_id, "drain", body)

    def _set_mode(self, agent_id: str, verb: str,
                  body: Optional[Mapping[str, Any]]) -> Tuple[Agent, int]:
        path = API + "/agents/" + urllib.parse.quote(agent_id, safe="") + "/" + verb
        # Retried like a read: setting a mode twice is harmless, and a second eviction finds
        # the tasks already stopping.
        answer = self._call("POST", path, body=body, fields=("evict", "grace_seconds"))
        return Agent.from_json(answer["agent"]), int(answer.get("evicted", 0))

    def snapshot(self, path: str, overwrite: bool = False) -> Snapshot:
        """Saves a consistent copy of the whole database (``GET /api/v1/snapshot``) to `path`,
        as ``dgpuctl snapshot`` does: streamed to ``<path>.part``, checked to be a SQLite
        database, fsynced and renamed, so `path` is the whole copy or untouched. An existing
        `path` raises FileExistsError unless `overwrite`. A 503 (another snapshot is being
        taken) is retried like a read."""
        if os.path.exists(path) and not overwrite:
            raise FileExistsError("%s exists; pass overwrite=True to replace it" % path)
        part = path + ".part"
        headers = {"Accept": "application/vnd.sqlite3, application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.server + API + "/snapshot", headers=headers)
        tries = 0
        while True:
            try:
                with urllib.request.urlopen(req, timeout=max(self.timeout, 60.0),
                                            context=self._ssl) as resp, open(part, "wb") as out:
                    while True:
                        chunk = resp.read(1 << 20)
                        if not chunk:
                            break
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                    answer = resp.headers
                break
            except urllib.error.HTTPError as e:
                try:
                    raw = e.read()
                finally:
                    e.close()
                if e.code == 503 and tries < self.retries:
                    tries += 1
                    self._sleep(tries)
                    continue
                raise self._api_error(e.code, e.headers, raw, tries)
            except (OSError, http.client.HTTPException) as e:
                if os.path.exists(part):
                    os.remove(part)
                if tries < self.retries:
                    tries += 1
                    self._sleep(tries)
                    continue
                reason = getattr(e, "reason", None) or e
                raise ConnectionFailed(self.server, str(reason)) from e
        with open(part, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head != SQLITE_HEADER:
            os.remove(part)
            raise ApiError("the snapshot is not a SQLite database", 200)
        os.replace(part, path)

        def number(name: str) -> Optional[int]:
            value = answer.get(name)
            return int(value) if value is not None and value.isdigit() else None

        return Snapshot(path, os.path.getsize(path), number("X-Dgpu-Snapshot-Tasks"),
                        number("X-Dgpu-Snapshot-Seq"), number("X-Dgpu-Snapshot-Epoch"))

    # -- teams ---------------------------------------------------------------------------------

    def teams(self) -> List[Team]:
        """Every team that has limits, tasks or usage, sorted by name (``GET /api/v1/teams``)."""
        return [Team.from_json(t) for t in self._call("GET", API + "/teams")["teams"]]

    def team(self, name: str) -> Team:
        """One team (``GET /api/v1/teams/{name}``). NotFound for an unknown team."""
        return Team.from_json(self._call("GET", self._team_path(name)))

    def set_team(self, name: str, online: Optional[int] = None, batch: Optional[int] = None,
                 max_gpus: Union[int, None, _Unchanged] = UNCHANGED,
                 weight: Optional[float] = None,
                 default_time_limit: Union[int, None, _Unchanged] = UNCHANGED) -> Team:
        """Creates or changes a team's limits (``PUT /api/v1/teams/{name}``) and returns the
        team as it is then. Only what is given is sent; the rest keeps its value (for a new
        team: no guarantee, no cap, weight 1).

        Args:
            online, batch: GPUs guaranteed to the team in that class (integers >= 0); None
                leaves the guarantee unchanged.
            max_gpus: a cap on the team's GPUs over both classes (an integer >= 0); None removes
                the cap (no cap, as ``null`` in the API and ``Team.max_gpus``); the default,
                dgpu.UNCHANGED, leaves it as it is.
            weight: the fair-share weight (a number above 0); None leaves it unchanged.
            default_time_limit: seconds given as the time limit to the team's tasks submitted
                without one; None removes it (the scheduler's default applies); the default,
                dgpu.UNCHANGED, leaves it as it is.

        InvalidField (with ``field``) for a bad value, or when the guarantees of a class would
        add up to more than its quota. Retried like a read: setting the same values twice is
        harmless."""
        body: Dict[str, Any] = {}
        if online is not None:
            body["online"] = online
        if batch is not None:
            body["batch"] = batch
        if max_gpus is not UNCHANGED:
            body["max_gpus"] = max_gpus
        if weight is not None:
            body["weight"] = weight
        if default_time_limit is not UNCHANGED:
            body["default_time_limit"] = default_time_limit
        return Team.from_json(self._call("PUT", self._team_path(name), body=body,
                                         fields=TEAM_FIELDS))

    def delete_team(self, name: str) -> None:
        """Deletes a team's limits (``DELETE /api/v1/teams/{name}``). NotFound when it has no
        limits; Conflict while it has pending or running tasks. Retried like a read: when a
        repeated try finds no limits left (the first try took effect, its answer was lost), the
        call succeeds."""
        try:
            self._call("DELETE", self._team_path(name))
        except NotFound as e:
            if not e.retried:
                raise

    # -- transport -----------------------------------------------------------------------------

    @staticmethod
    def _task_path(task_id: str) -> str:
        return API + "/tasks/" + urllib.parse.quote(task_id, safe="")

    @staticmethod
    def _team_path(name: str) -> str:
        return API + "/teams/" + urllib.parse.quote(name, safe="")

    def _call(self, method: str, path: str, query: Sequence[Tuple[str, str]] = (),
              body: Optional[Mapping[str, Any]] = None, idempotent: bool = True,
              fields: Sequence[str] = ()) -> Any:
        """One API call: the parsed JSON of a 2xx answer; raises ApiError or ConnectionFailed.
        An idempotent call is repeated after a connection error or a 503."""
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        tries = 0
        while True:
            retry = idempotent and tries < self.retries
            try:
                status, answer_headers, raw = self._send(method, url, data, headers)
            except (OSError, http.client.HTTPException) as e:
                if retry:
                    tries += 1
                    self._sleep(tries)
                    continue
                reason = getattr(e, "reason", None) or e
                raise ConnectionFailed(self.server, str(reason)) from e
            if status == 503 and retry:
                tries += 1
                self._sleep(tries)
                continue
            if status >= 400:
                raise self._api_error(status, answer_headers, raw, tries, fields)
            doc = self._json_or_none(raw)
            if doc is None:
                raise ApiError("HTTP %d with a body that is not JSON" % status, status)
            return doc

    @staticmethod
    def _json_or_none(raw: bytes) -> Any:
        try:
            return json.loads(raw.decode("utf-8")) if raw else None
        except (ValueError, UnicodeDecodeError):
            return None

    @classmethod
    def _api_error(cls, status: int, headers: Message, raw: bytes, tries: int,
                   fields: Sequence[str] = ()) -> ApiError:
        """The exception for an error answer, marked as retried when it came to a repeat."""
        err = error_from_response(status, cls._json_or_none(raw), leader=headers.get("X-Leader"),
                                  fields=fields)
        err.retried = tries > 0
        return err

    def _send(self, method: str, url: str, data: Optional[bytes],
              headers: Mapping[str, str]) -> Tuple[int, Message, bytes]:
        """One HTTP exchange: status, response headers and body. Raises OSError or
        HTTPException when no answer came."""
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            try:
                return e.code, e.headers, e.read()
            finally:
                e.close()

    def _sleep(self, tries: int) -> None:
        delay = min(self.max_backoff, self.backoff * (2 ** (tries - 1)))
        time.sleep(delay * random.uniform(0.5, 1.0))
