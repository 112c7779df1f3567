"""dgpu: the Python client of the dgpu GPU scheduler's REST API (v1).

    import dgpu
    c = dgpu.Client()                      # $DGPU_SERVER, else http://127.0.0.1:8080
    t = c.submit("python train.py", gpu_count=1, priority="high")
    print(c.wait(t.task_id, timeout=3600).exit_code)
"""

from .client import DEFAULT_SERVER, UNCHANGED, Client, Snapshot, TaskPage, resolve_server
from .errors import (AlreadyExists, ApiError, Conflict, ConnectionFailed, DgpuError, Forbidden,
                     InsecureRemoteAccess, Internal, InvalidField, LogUnavailable,
                     InvalidJson, MethodNotAllowed, NotFound, NotLeader, PayloadTooLarge,
                     StorageUnavailable, TooManyPending, Unauthenticated, Unavailable,
                     UnknownField, UnsupportedMediaType, WaitTimeout)
from .models import (DEFAULT_TEAM, DEPENDENCY_CONDITIONS, FINISHED, PENDING_REASONS, PRIORITIES,
                     STATUSES, Agent, Dependency, Gpu, GpuList, NodeAllocation, Quota, QuotaClass,
                     Submitted, Task, Team, TeamClass)

__version__ = "0.1.0"

__all__ = [
    "Client", "TaskPage", "Snapshot", "DEFAULT_SERVER", "UNCHANGED", "resolve_server",
    "DgpuError", "ApiError", "ConnectionFailed", "WaitTimeout",
    "InvalidJson", "InvalidField", "UnknownField", "NotFound", "MethodNotAllowed", "Conflict",
    "PayloadTooLarge", "UnsupportedMediaType", "NotLeader", "Unavailable", "StorageUnavailable",
    "Internal", "Forbidden", "AlreadyExists", "Unauthenticated", "InsecureRemoteAccess",
    "TooManyPending", "LogUnavailable",
    "Task", "NodeAllocation", "Submitted", "Gpu", "GpuList", "Quota", "QuotaClass", "Team",
    "TeamClass", "Agent", "Dependency", "PRIORITIES", "STATUSES", "FINISHED", "PENDING_REASONS",
    "DEFAULT_TEAM", "DEPENDENCY_CONDITIONS",
]
