"""Typed views of the REST API's objects (api/openapi.yaml, components/schemas).

Each class has every field of its JSON object; ``from_json`` builds it from the parsed body.
Times are timezone-aware ``datetime`` objects in UTC, or None where the API sends null.

The fields that came with teams and preemption (a task's ``team``, ``user``, ``preemptible``,
``preemption_grace_seconds``, ``borrowed``, ``preemptions``; a quota class's ``borrowed`` and
``lent``) take the value that means the same on a scheduler that does not send them yet: team
``"default"``, no user, preemptible, the default grace (-1), nothing borrowed, lent or preempted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["PRIORITIES", "STATUSES", "FINISHED", "PENDING_REASONS", "DEFAULT_TEAM",
           "DEPENDENCY_CONDITIONS", "Dependency", "NodeAllocation", "Usage", "Task", "Submitted", "Gpu", "GpuList", "QuotaClass", "Quota",
           "TeamClass", "Team", "Agent", "parse_time"]

PRIORITIES = ("high", "low")
STATUSES = ("pending", "running", "success", "failed", "cancelled")
FINISHED = ("success", "failed", "cancelled")
PENDING_REASONS = ("queued", "quota_exhausted", "team_limit", "waiting_for_preemption",
                   "no_node_fits", "no_gpu_model", "exceeds_cluster", "retry_backoff",
                   "insufficient_cpu", "insufficient_memory", "no_node_matches", "dependency",
                   "dependency_never_satisfied", "reserved_for")
# (reserved_for is shown with the task it is kept for: "reserved_for:task-42".)
# When a dependency is satisfied: its parent succeeded, ended without success, ended, started.
DEPENDENCY_CONDITIONS = ("afterok", "afternotok", "afterany", "after")
# The team of a task submitted without one.
DEFAULT_TEAM = "default"


def parse_time(text: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 UTC time of the API (``2026-01-05T10:00:00.123Z``), or None for null."""
    if text is None:
        return None
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text)


@dataclass(frozen=True)
class NodeAllocation:
    """The GPUs a task holds on one node, and the CPUs it is bound to there (None: not bound)."""
    node_id: str
    gpu_indices: List[int]
    cpu_set: Optional[List[int]] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NodeAllocation":
        cpus = d.get("cpu_set")
        return cls(node_id=d["node_id"], gpu_indices=list(d["gpu_indices"]),
                   cpu_set=None if cpus is None else list(cpus))


@dataclass(frozen=True)
class Dependency:
    """A task the task waits for: its id, the condition (one of DEPENDENCY_CONDITIONS) and where
    it stands: ``"waiting"``, ``"satisfied"`` or ``"never_satisfied"``."""
    task_id: str
    condition: str
    state: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Dependency":
        return cls(task_id=d["task_id"], condition=d["condition"], state=d["state"])


@dataclass(frozen=True)
class Usage:
    """What a task's latest run used, measured in its cgroups: CPU time in seconds (summed over a
    gang's members) and peak memory in MiB."""
    cpu_seconds: float
    max_memory_mb: int

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> Optional["Usage"]:
        if d is None:
            return None
        return cls(cpu_seconds=d["cpu_seconds"], max_memory_mb=d["max_memory_mb"])


@dataclass(frozen=True)
class Task:
    """A task, as ``GET /api/v1/tasks/{id}`` returns it.

    ``team`` is the team it belongs to, ``user`` who submitted it (``""`` when none was given),
    ``preemptible`` whether it may be preempted, ``preemption_grace_seconds`` its SIGTERM to
    SIGKILL time when preempted (-1: the scheduler's default), ``borrowed`` True while it runs
    on GPUs beyond its team's guarantee (it may then be preempted), ``preemptions`` how many
    times it was preempted. A task that was preempted and requeued has ``error == "preempted"``.
    """
    task_id: str
    name: str
    priority: str
    gpu_count: int
    gpu_model: str
    command: str
    env: Dict[str, str]
    timeout_seconds: int
    image: str
    status: str
    node_id: Optional[str]
    allocated_gpus: List[str]
    allocation: List[NodeAllocation]
    pending_reason: Optional[str]
    attempts: int
    exit_code: Optional[int]
    error: str
    created_at: Optional[datetime]
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    team: str = DEFAULT_TEAM
    user: str = ""
    preemptible: bool = True
    preemption_grace_seconds: int = -1
    borrowed: bool = False
    preemptions: int = 0
    array_index: Optional[int] = None  # A job array's member: its index (DGPU_ARRAY_INDEX).
    array_size: Optional[int] = None   # A job array's member: the array's size.
    max_retries: int = 0               # Retries a failed run gets.
    retry_backoff_seconds: int = 10    # Before the first retry, doubling for each next one.
    retries: int = 0                   # Times it failed and was queued again.
    retry_at: Optional[datetime] = None  # While it waits out a backoff: when it is queued again.
    nodes: int = 1                     # Members, one per node (a gang when more than 1).
    gpus_per_node: int = 0             # GPUs of each member.
    master_port: Optional[int] = None  # A gang's rendezvous port (DGPU_MASTER_PORT).
    cpus: Optional[float] = None       # Each member's CPUs: asked for, or given; None: unknown.
    memory_mb: Optional[int] = None    # Each member's memory in MiB, the same way.
    cpu_set: Optional[List[int]] = None  # The CPUs it is bound to (cpu_binding cpuset); None: not.
    usage: Optional[Usage] = None      # What it used (agents with isolation); None: not measured.
    node_selector: Dict[str, str] = field(default_factory=dict)  # Labels its nodes must have.
    depends_on: List[Dependency] = field(default_factory=list)  # Tasks it waits for.
    # get_task of a pending task: how many nodes could take it and why the others cannot.
    pending_detail: Optional[str] = None

    @property
    def finished(self) -> bool:
        """True once the task is success, failed or cancelled."""
        return self.status in FINISHED

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Task":
        return cls(
            task_id=d["task_id"], name=d["name"], priority=d["priority"],
            gpu_count=d["gpu_count"], gpu_model=d["gpu_model"], command=d["command"],
            env=dict(d["env"]), timeout_seconds=d["timeout_seconds"], image=d["image"],
            status=d["status"], node_id=d["node_id"], allocated_gpus=list(d["allocated_gpus"]),
            allocation=[NodeAllocation.from_json(a) for a in d["allocation"]],
            pending_reason=d["pending_reason"], attempts=d["attempts"], exit_code=d["exit_code"],
            error=d["error"], created_at=parse_time(d["created_at"]),
            started_at=parse_time(d["started_at"]), finished_at=parse_time(d["finished_at"]),
            team=d.get("team", DEFAULT_TEAM), user=d.get("user", ""),
            preemptible=d.get("preemptible", True),
            preemption_grace_seconds=d.get("preemption_grace_seconds", -1),
            borrowed=d.get("borrowed", False), preemptions=d.get("preemptions", 0),
            array_index=d.get("array_index"), array_size=d.get("array_size"),
            max_retries=d.get("max_retries", 0),
            retry_backoff_seconds=d.get("retry_backoff_seconds", 10),
            retries=d.get("retries", 0), retry_at=parse_time(d.get("retry_at")),
            nodes=d.get("nodes", 1), gpus_per_node=d.get("gpus_per_node", d["gpu_count"]),
            master_port=d.get("master_port"), cpus=d.get("cpus"), memory_mb=d.get("memory_mb"),
            cpu_set=None if d.get("cpu_set") is None else list(d["cpu_set"]),
            usage=Usage.from_json(d.get("usage")),
            node_selector=dict(d.get("node_selector") or {}),
            depends_on=[Dependency.from_json(x) for x in d.get("depends_on") or []],
            pending_detail=d.get("pending_detail"))


@dataclass(frozen=True)
class Submitted:
    """The answer to a submit: the new task's id, status (``pending``) and creation time; for
    a job array, ``task_ids`` lists every task by index (``task_id`` is the first)."""
    task_id: str
    status: str
    created_at: datetime
    task_ids: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Submitted":
        created = parse_time(d["created_at"])
        assert created is not None
        return cls(task_id=d["task_id"], status=d["status"], created_at=created,
                   task_ids=list(d.get("task_ids", [])))


@dataclass(frozen=True)
class Gpu:
    """One GPU of an agent; ``id`` is ``<node_id>-gpu-<index>``."""
    id: str
    node_id: str
    index: int
    model: str
    memory_mb: int
    status: str  # idle, busy, offline or unhealthy
    current_task: Optional[str]
    health_reason: Optional[str] = None  # Why its agent found it faulty; None when healthy.
    utilization: Optional[float] = None  # 0..1 in its agent's last heartbeat; None if unknown.

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Gpu":
        return cls(id=d["id"], node_id=d["node_id"], index=d["index"], model=d["model"],
                   memory_mb=d["memory_mb"], status=d["status"], current_task=d["current_task"],
                   health_reason=d.get("health_reason"), utilization=d.get("utilization"))


@dataclass(frozen=True)
class GpuList:
    """Every GPU and the counts by status."""
    total: int
    idle: int
    busy: int
    offline: int
    gpus: List[Gpu] = field(default_factory=list)
    unhealthy: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GpuList":
        return cls(total=d["total"], idle=d["idle"], busy=d["busy"], offline=d["offline"],
                   gpus=[Gpu.from_json(g) for g in d["gpus"]], unhealthy=d.get("unhealthy", 0))


@dataclass(frozen=True)
class QuotaClass:
    """GPUs of one class (online or batch): its quota, how many are used, how many are left,
    how many it uses beyond its quota (``borrowed``), how many of its quota the other class
    uses (``lent``), and by name the teams that hold a guarantee or GPUs in it (``teams``)."""
    quota: int
    used: int
    available: int
    borrowed: int = 0
    lent: int = 0
    teams: Mapping[str, "TeamClass"] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "QuotaClass":
        return cls(quota=d["quota"], used=d["used"], available=d["available"],
                   borrowed=d.get("borrowed", 0), lent=d.get("lent", 0),
                   teams={name: TeamClass.from_json(t)
                          for name, t in d.get("teams", {}).items()})


@dataclass(frozen=True)
class Quota:
    """The online/batch split of the cluster's GPUs."""
    total_gpus: int
    online: QuotaClass
    batch: QuotaClass
    online_percent: float
    batch_percent: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Quota":
        return cls(total_gpus=d["total_gpus"], online=QuotaClass.from_json(d["online"]),
                   batch=QuotaClass.from_json(d["batch"]), online_percent=d["online_percent"],
                   batch_percent=d["batch_percent"])


@dataclass(frozen=True)
class TeamClass:
    """A team's GPUs in one class: guaranteed to it, used by its tasks, and of those, how many
    are beyond the guarantee (``borrowed``: their tasks may be preempted)."""
    guaranteed: int
    used: int
    borrowed: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TeamClass":
        return cls(guaranteed=d["guaranteed"], used=d["used"], borrowed=d["borrowed"])


@dataclass(frozen=True)
class Team:
    """A team, as ``GET /api/v1/teams/{name}`` returns it: its guarantees and use per class,
    ``max_gpus`` (a cap over both classes; None: no cap), its fair-share ``weight``,
    ``default_time_limit`` (seconds given to its tasks submitted without a time limit; None: the
    scheduler's), its pending tasks and its usage in GPU-seconds. ``configured`` is False for a
    team that has tasks or usage but no limits."""
    name: str
    configured: bool
    online: TeamClass
    batch: TeamClass
    max_gpus: Optional[int]
    weight: float
    default_time_limit: Optional[int]
    pending: int
    usage_gpu_seconds: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Team":
        return cls(name=d["name"], configured=d["configured"],
                   online=TeamClass.from_json(d["online"]), batch=TeamClass.from_json(d["batch"]),
                   max_gpus=d["max_gpus"], weight=float(d["weight"]),
                   default_time_limit=d.get("default_time_limit"), pending=d["pending"],
                   usage_gpu_seconds=float(d["usage_gpu_seconds"]))


@dataclass(frozen=True)
class Agent:
    """One agent (node) as the scheduler sees it."""
    id: str
    address: str
    status: str  # online, cordoned, draining or offline
    gpus: int
    free_gpus: int
    last_heartbeat: Optional[datetime]
    mode: str = "schedulable"  # schedulable, cordoned or draining (kept while offline)
    tasks: int = 0  # Tasks holding GPUs there (running or stopping).
    labels: Mapping[str, str] = field(default_factory=dict)
    # Its GPUs joined by NVLink, as lists of GPU indices; empty when none is.
    nvlink_groups: Sequence[Sequence[int]] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Agent":
        return cls(id=d["id"], address=d["address"], status=d["status"], gpus=d["gpus"],
                   free_gpus=d["free_gpus"], last_heartbeat=parse_time(d["last_heartbeat"]),
                   mode=d.get("mode", "schedulable"), tasks=d.get("tasks", 0),
                   labels=dict(d.get("labels") or {}),
                   nvlink_groups=tuple(tuple(g) for g in d.get("nvlink_groups") or ()))
