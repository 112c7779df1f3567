"""Exceptions of the dgpu client: one class per error code of the REST API.

The scheduler answers every error with ``{"error": {"code": ..., "message": ...}}`` and an HTTP
status (api/openapi.yaml lists which codes each endpoint returns). The client raises the class of
that code; each carries ``code``, ``message``, ``status`` (the HTTP status) and ``field`` (the
request field or query parameter the error is about, when there is one).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Type

__all__ = [
    "DgpuError", "ApiError", "ConnectionFailed", "WaitTimeout",
    "InvalidJson", "InvalidField", "UnknownField", "NotFound", "MethodNotAllowed", "Conflict",
    "PayloadTooLarge", "UnsupportedMediaType", "NotLeader", "Unavailable", "StorageUnavailable",
    "Internal", "Forbidden", "AlreadyExists", "LogUnavailable", "error_from_response",
]


class DgpuError(Exception):
    """Base class of every exception the client raises."""


class ApiError(DgpuError):
    """The scheduler answered with an error object.

    Attributes:
        code: the machine word of the error, e.g. ``"invalid_field"``.
        message: the scheduler's sentence.
        status: the HTTP status, e.g. 400.
        field: the request field or query parameter the error names, else None. The v1 server
            names it in the message only; the client reads it from there.
        leader: on a standby's answer, the leader's HTTP address from ``X-Leader``, else None.
        retried: True when the answer came to a repeated try of the call.
    """

    code = ""

    def __init__(self, message: str, status: int, code: Optional[str] = None,
                 field: Optional[str] = None, leader: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.status = status
        self.field = field
        self.leader = leader
        self.retried = False

    def __str__(self) -> str:
        return "%s (HTTP %d %s)" % (self.message, self.status, self.code)


class InvalidJson(ApiError):
    """400: the body is not a JSON object."""
    code = "invalid_json"


class InvalidField(ApiError):
    """400: a field or query parameter has a wrong type or value (``field`` names it)."""
    code = "invalid_field"


class UnknownField(ApiError):
    """400: a field or query parameter the endpoint does not know (``field`` names it)."""
    code = "unknown_field"


class NotFound(ApiError):
    """404: no such task, or no such endpoint."""
    code = "not_found"


class LogUnavailable(NotFound):
    """404: no connected agent holds the task's log (it has not run yet, its node is down, or
    the file was removed)."""
    code = "log_unavailable"


class MethodNotAllowed(ApiError):
    """405: the endpoint exists, but not with this method."""
    code = "method_not_allowed"


class Conflict(ApiError):
    """409: the task already finished."""
    code = "conflict"


class PayloadTooLarge(ApiError):
    """413: the request body is over 1 MiB."""
    code = "payload_too_large"


class UnsupportedMediaType(ApiError):
    """415: the request's Content-Type is not application/json."""
    code = "unsupported_media_type"


class NotLeader(ApiError):
    """503: the scheduler is a standby; ``leader`` is the leader's address when known."""
    code = "not_leader"


class Unavailable(ApiError):
    """503: the scheduler cannot serve the request now."""
    code = "unavailable"


class StorageUnavailable(ApiError):
    """503: the scheduler's storage failed; a submit answered so was not accepted."""
    code = "storage_unavailable"


class Forbidden(ApiError):
    """403: the caller's role or teams do not allow this (a viewer submitting, a user
    cancelling another user's task)."""
    code = "forbidden"


class InsecureRemoteAccess(Forbidden):
    """403: the scheduler runs without authentication and answers loopback clients only."""
    code = "insecure_remote_access"


class Unauthenticated(ApiError):
    """401: no token, or one the scheduler does not accept (unknown, expired, wrong audience);
    the message says which."""
    code = "unauthenticated"


class TooManyPending(ApiError):
    """429: the user has limits.max_pending_per_user pending tasks already."""
    code = "too_many_pending"


class AlreadyExists(ApiError):
    """409: the object exists already (no v1 endpoint returns it yet)."""
    code = "already_exists"


class Internal(ApiError):
    """500: a bug in the scheduler."""
    code = "internal"


class ConnectionFailed(DgpuError):
    """No answer: the scheduler could not be reached (after the retries the call allows)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__("cannot reach the scheduler at %s: %s" % (server, reason))
        self.server = server
        self.reason = reason


class WaitTimeout(DgpuError, TimeoutError):
    """Client.wait() ran out of time; ``task`` is the last state read."""

    def __init__(self, task_id: str, timeout: float, task: object) -> None:
        super().__init__("%s did not finish within %gs" % (task_id, timeout))
        self.task_id = task_id
        self.timeout = timeout
        self.task = task


_BY_CODE: Dict[str, Type[ApiError]] = {
    cls.code: cls for cls in (InvalidJson, InvalidField, UnknownField, NotFound,
                              MethodNotAllowed, Conflict, PayloadTooLarge, UnsupportedMediaType,
                              NotLeader, Unavailable, StorageUnavailable, Internal, Forbidden,
                              AlreadyExists, InsecureRemoteAccess, Unauthenticated,
                              TooManyPending, LogUnavailable)
}

_QUOTED = re.compile(r'^unknown (?:field|query parameter) "([^"]*)"')
_LEADING = re.compile(r'^(?:env key "([^"]*)"|([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?)\b)')


def _field_of(code: str, message: str, fields: Iterable[str]) -> Optional[str]:
    m = _QUOTED.match(message)
    if m:
        return m.group(1)
    if code != "invalid_field":
        return None
    m = _LEADING.match(message)
    if not m:
        return None
    if m.group(1) is not None:
        return "env." + m.group(1)
    name = m.group(2)
    return name if name.split(".", 1)[0] in set(fields) else None


def error_from_response(status: int, body: object, leader: Optional[str] = None,
                        fields: Iterable[str] = ()) -> ApiError:
    """The exception for an error answer: `body` is the parsed JSON (or None); `fields` are
    the request's field or parameter names, which the message may start with."""
    code, message = "", ""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", ""))
        message = str(body["error"].get("message", ""))
    if not message:
        message = "HTTP %d without an error object" % status
    cls = _BY_CODE.get(code, ApiError)
    return cls(message, status, code=code or None, field=_field_of(code, message, fields),
               leader=leader)
