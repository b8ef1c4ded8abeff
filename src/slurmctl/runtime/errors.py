"""One small exception tree for every API failure, translated once at the client boundary.

Callers catch `NotFound` or `Conflict` instead of comparing HTTP status codes spread across the code base.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """An API request failed; `status` is the HTTP status (0 when no response arrived)."""

    status: int = 0

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):  # noqa: N818 - the names Kubernetes users know
    status = 404


class Conflict(ApiError):  # noqa: N818 - the names Kubernetes users know
    status = 409


class Gone(ApiError):  # noqa: N818 - the names Kubernetes users know
    """The requested resourceVersion is too old (etcd compacted it): relist."""

    status = 410


class Invalid(ApiError):  # noqa: N818 - the names Kubernetes users know
    status = 422


class Forbidden(ApiError):  # noqa: N818 - the names Kubernetes users know
    status = 403


class TooManyRequests(ApiError):  # noqa: N818 - the names Kubernetes users know
    status = 429


class ServerError(ApiError):
    """5xx, or no answer at all (connection refused or reset): the server side is unwell; worth retrying reads."""

    status = 500


class Timeout(ApiError):  # noqa: N818 - the names Kubernetes users know
    """The client gave up waiting (every call has a finite timeout)."""

    status = 0


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix (e.g. an invalid spec): no requeue until the object changes."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_for_status(status: int, body: bytes | str | dict[str, Any] | None, *, context: str = "") -> ApiError:
    """Build the matching exception from an HTTP status and a Kubernetes `Status` body (or whatever came back)."""
    message, reason = "", ""
    payload: Any = body
    if isinstance(body, bytes | str):
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
            message = (body.decode(errors="replace") if isinstance(body, bytes) else body)[:500]
    if isinstance(payload, dict):
        message = str(payload.get("message", "")) or message
        reason = str(payload.get("reason", ""))
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    text = f"{context}: {status} {reason} {message}".strip() if context else f"{status} {reason} {message}".strip()
    return cls(text, status=status, reason=reason)


def is_transient(exc: BaseException) -> bool:
    """Failures worth retrying an idempotent read for."""
    return isinstance(exc, TooManyRequests | ServerError | Timeout)
