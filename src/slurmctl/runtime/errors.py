"""One small exception tree for every API failure, translated once at the client boundary.

Callers catch `NotFound` or `Conflict` instead of comparing HTTP status codes spread across the code base.
`outage_reason` tells an API server that is briefly away (restarting, overloaded, unreachable) from everything else,
so that the controller logs an outage as one line and keeps tracebacks for real bugs.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from slurmctl.runtime.clock import REAL_CLOCK, Clock

# After a restart the API server answers 403 for a few seconds, until its RBAC authorizer has synced its caches: a
# 403 this soon after the server was last unreachable is part of the outage, not a missing permission.
RECONNECT_GRACE_SECONDS = 30.0


class ApiError(Exception):
    """An API request failed; `status` is the HTTP status (0 when no response arrived)."""

    status: int = 0

    def __init__(self, message: str, *, status: int | None = None, reason: str = "", detail: str = "") -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.reason = reason
        self.message = message
        self.detail = detail or message  # the server's own words (a Status message), without our request context
        # Set by the client (OutageWindow) when the failure came while the server was just back from an outage.
        self.after_outage = False


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
    return cls(text, status=status, reason=reason, detail=message)


def is_transient(exc: BaseException) -> bool:
    """Failures worth retrying an idempotent read for."""
    return isinstance(exc, TooManyRequests | ServerError | Timeout)


# A 500 that is the server refusing the object, not the server being unwell: server-side apply on older API servers
# answers 500 when it cannot convert the body to the schema's types ("failed to create typed patch object: ...
# expected map, got string"), and etcd refuses objects over its request size.
_REJECTING_500 = ("typed patch", "typed value", "is invalid", "request is too large", "too long")


# A 403 that is admission refusing the object, not RBAC refusing the caller: the namespace's Pod Security level, or
# a ResourceQuota it would exceed. Retrying the same pod cannot succeed until the namespace changes.
_REFUSING_403 = ("violates PodSecurity", "exceeded quota")


def rejection(exc: BaseException) -> str | None:
    """The server's message when `exc` says the API server refused the object itself (its content: 400, 422, a 403
    from Pod Security or a quota, or a 500 that names a conversion or size failure), else None. Retrying the same
    body cannot succeed: the caller should report it where the user looks and wait for a change, not retry in a
    loop."""
    if not isinstance(exc, ApiError) or (isinstance(exc, ServerError) and exc.status != 500):
        return None
    if isinstance(exc, Invalid) or exc.status == 400:
        return exc.detail
    if isinstance(exc, Forbidden) and any(marker in exc.detail for marker in _REFUSING_403):
        return exc.detail
    if exc.status == 500 and any(marker in exc.detail.lower() for marker in _REJECTING_500):
        return exc.detail
    return None


# Raised outside the client's translation (a reconcile timeout, a library that talks to the server on its own).
_CONNECTION_FAILURES = (ConnectionError, TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


def outage_reason(exc: BaseException) -> str | None:
    """A short reason when `exc` means the API server is briefly unavailable, else None.

    Unavailable: no answer (connection refused or reset, a timeout), 429, any 5xx, and a 403 right after the server
    came back (see RECONNECT_GRACE_SECONDS). Everything else (a rejected request, a real 403, a bug) returns None and
    keeps its traceback in the log. An exception group is an outage when every exception in it is.
    """
    if isinstance(exc, BaseExceptionGroup):
        reasons = [outage_reason(inner) for inner in exc.exceptions]
        return reasons[0] if reasons and None not in reasons else None
    reason: str | None = None
    if isinstance(exc, Timeout | TimeoutError):
        reason = "timeout"
    elif isinstance(exc, TooManyRequests):
        reason = "429 TooManyRequests"
    elif isinstance(exc, ServerError):
        reason = f"{exc.status} {exc.reason}".strip() if exc.status else exc.reason or "no answer"
    elif isinstance(exc, Forbidden) and exc.after_outage:
        reason = "403 right after an outage"
    elif isinstance(exc, _CONNECTION_FAILURES):
        reason = type(exc).__name__
    return reason


class OutageWindow:
    """Remembers when the API server was last unavailable, and marks a 403 that comes soon after as part of it.

    The client feeds every API failure through `observe` once, where it translates errors, so the judgement is made
    in one place and travels with the exception (`ApiError.after_outage`) to whoever logs it.
    """

    def __init__(self, *, clock: Clock = REAL_CLOCK, grace: float = RECONNECT_GRACE_SECONDS) -> None:
        self._clock = clock
        self._grace = grace
        self._last_unavailable: float | None = None

    def observe(self, exc: ApiError) -> None:
        now = self._clock.monotonic()
        if isinstance(exc, ServerError | Timeout | TooManyRequests):
            self._last_unavailable = now
        elif isinstance(exc, Forbidden) and self._last_unavailable is not None:
            exc.after_outage = now - self._last_unavailable <= self._grace
