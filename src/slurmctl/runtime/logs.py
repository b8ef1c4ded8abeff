"""Structured logging: key=value (or JSON) lines carrying the controller, request and reconcile id of the attempt.

The ids travel in contextvars, so every log line emitted while reconciling, in any module, names its reconcile.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime

from slurmctl.runtime.clock import REAL_CLOCK, Clock

reconcile_id: ContextVar[str | None] = ContextVar("reconcile_id", default=None)
controller_name: ContextVar[str | None] = ContextVar("controller_name", default=None)
request_key: ContextVar[str | None] = ContextVar("request_key", default=None)

_CONTEXT = (("controller", controller_name), ("request", request_key), ("reconcileID", reconcile_id))


def kv(**fields: object) -> str:
    """`key=value` pairs for a log message; values with spaces or quotes are JSON-quoted so lines stay parseable."""
    parts = []
    for key, value in fields.items():
        text = str(value)
        if not text or any(c in text for c in ' "=\n\t'):
            text = json.dumps(text)
        parts.append(f"{key}={text}")
    return " ".join(parts)


class Throttle:
    """Lets one log line through per `interval` and counts the ones held back.

    For failures that repeat on every retry while something outside is down (the API server restarting): the first
    is logged at once, then at most one line per interval, each saying how many were held back since the last.
    """

    def __init__(self, interval: float, *, clock: Clock = REAL_CLOCK) -> None:
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._held = 0

    def allow(self) -> int | None:
        """None when this line is to be held back; else the number held back before it (then reset)."""
        now = self._clock.monotonic()
        if self._last is not None and now - self._last < self._interval:
            self._held += 1
            return None
        held, self._held, self._last = self._held, 0, now
        return held


def _context() -> dict[str, str]:
    return {name: value for name, var in _CONTEXT if (value := var.get()) is not None}


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _context()
        return f"{line} {kv(**context)}" if context else line


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_context(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: str = "info", fmt: str = "text") -> None:
    """Root logger setup for the `run` command: one handler on stderr, text or JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
