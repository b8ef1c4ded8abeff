"""`spec.maintenance`: the windows in which changes that restart a Slurm daemon's pod are applied, and the arithmetic
of those windows (pure: every function takes `now`, so a test fakes the clock by passing one).

A window is either recurring (`schedule`, a five-field cron expression in UTC, and `duration`) or absolute (`start`
and `end`, RFC 3339 timestamps). Without windows every change is applied at once, as before windows existed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated

from cronsim import CronSim, CronSimError
from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema

from .cel import Rule, validations
from .types import ApiModel, Duration, parse_duration

MAX_WINDOWS = 16
# RFC 3339 as the API server's `format: date-time` accepts it (a zone is required: a window is an instant, not a
# wall-clock time somewhere).
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
# The shape of a cron expression: five fields, or one of cron's @ names (whether the fields make sense is the
# operator's check, validation.py, with the same library that later iterates the schedule).
CRON_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$"


def _check_timestamp(value: str) -> str:
    if not _TIMESTAMP.fullmatch(value):
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp such as 2026-12-24T22:00:00Z")
    parse_timestamp(value)
    return value


def parse_timestamp(value: str) -> datetime:
    """An RFC 3339 timestamp (checked by the schema) as an aware datetime in UTC."""
    return datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00")).astimezone(UTC)


Timestamp = Annotated[
    str,
    AfterValidator(_check_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time", "maxLength": 64}),
]


class MaintenanceWindow(ApiModel):
    """One window: recurring (schedule and duration) or absolute (start and end)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "has(self.schedule) == has(self.duration)",
                message="schedule and duration go together (a recurring window)",
            ),
            Rule("has(self.start) == has(self.end)", message="start and end go together (an absolute window)"),
            Rule(
                "has(self.schedule) != has(self.start)",
                message="a window is either recurring (schedule and duration) or absolute (start and end)",
            ),
            Rule(
                "!has(self.start) || !has(self.end) || timestamp(self.end) > timestamp(self.start)",
                message="end is not after start",
                field_path=".end",
            ),
        )
    )

    schedule: str | None = Field(
        None,
        max_length=128,
        pattern=CRON_PATTERN,
        description="When a recurring window starts: a cron expression (minute hour day-of-month month day-of-week) "
        "in UTC, e.g. '0 2 * * 6' for Saturdays at 02:00.",
    )
    duration: Duration | None = Field(None, description="How long a recurring window lasts, e.g. 4h or 1h30m.")
    start: Timestamp | None = Field(
        None, description="Start of an absolute window (RFC 3339, e.g. 2026-12-24T22:00:00Z)."
    )
    end: Timestamp | None = Field(None, description="End of an absolute window (RFC 3339), after start.")


# maxUnavailable as a percentage: 1% to 100% of the cluster's fixed workers.
PERCENT_PATTERN = r"^(100|[1-9][0-9]?)%$"
_PERCENT = re.compile(PERCENT_PATTERN)


def _check_max_unavailable(value: int | str) -> int | str:
    if isinstance(value, int) and value < 1:
        raise ValueError(f"{value} is less than 1 (a roll takes out at least one node at a time)")
    if isinstance(value, str) and not _PERCENT.fullmatch(value):
        raise ValueError(f"{value!r} is neither a count nor a percentage from 1% to 100%")
    return value


# Kubernetes' int-or-string, as the quantities are declared (types.QUANTITY_SCHEMA, which says why not
# `x-kubernetes-int-or-string`): the API server refuses a string that is no percentage; a count below 1 is the
# operator's to report.
MaxUnavailable = Annotated[
    int | str,
    AfterValidator(_check_max_unavailable),
    WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True, "pattern": PERCENT_PATTERN}),
]


class MaintenanceSpec(ApiModel):
    """When changes that restart Slurm daemons' pods are applied, and how many workers a roll takes out at once."""

    windows: list[MaintenanceWindow] = Field(
        default_factory=list,
        max_length=MAX_WINDOWS,
        description="Windows in which changes that restart a Slurm daemon's pod (an image, any pod setting of the "
        "controller, workers, login, rest or accounting) are applied; outside them such changes wait "
        "(MaintenancePending) and a Slurm MAINT reservation over all nodes covers the next window. Empty: applied at "
        "once.",
    )
    max_unavailable: MaxUnavailable = Field(
        1,
        description="How many worker nodes a roll (a change that re-creates worker pods) may have out of service at "
        "once, over all fixed worker groups: a count, or a percentage of the cluster's fixed workers rounded down (at "
        "least 1). Each node is drained first and re-created once its jobs end; the next goes only when one is back "
        "in Slurm.",
    )

    def nodes_at_once(self, workers: int) -> int:
        """maxUnavailable as a number of nodes, for a cluster of `workers` fixed workers."""
        if isinstance(self.max_unavailable, int):
            return self.max_unavailable
        return max(1, workers * int(self.max_unavailable.rstrip("%")) // 100)


@dataclass(frozen=True)
class Span:
    """One occurrence of a window: from `start` (inclusive) to `end` (exclusive), of spec.maintenance.windows[index]."""

    start: datetime
    end: datetime
    index: int

    @property
    def field(self) -> str:
        return f"spec.maintenance.windows[{self.index}]"


def schedule_problem(schedule: str) -> str | None:
    """What is wrong with a cron expression (None: it parses and has a next occurrence)."""
    try:
        next(CronSim(schedule, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration) as exc:
        return f"{schedule!r} is not a cron expression this operator can use: {exc or 'it never occurs'}"
    return None


def _latest_start(window: MaintenanceWindow, now: datetime) -> datetime | None:
    """The last start of a window at or before `now`."""
    if window.start is not None:
        start = parse_timestamp(window.start)
        return start if start <= now else None
    assert window.schedule is not None
    try:
        # CronSim walks back from strictly before its start; a start exactly at `now` counts.
        return next(CronSim(window.schedule, now.replace(microsecond=0) + timedelta(seconds=1), reverse=True))
    except (CronSimError, StopIteration):
        return None


def _next_start(window: MaintenanceWindow, now: datetime) -> datetime | None:
    """The first start of a window strictly after `now`."""
    if window.start is not None:
        start = parse_timestamp(window.start)
        return start if start > now else None
    assert window.schedule is not None
    try:
        return next(CronSim(window.schedule, now))
    except (CronSimError, StopIteration):
        return None


def _length(window: MaintenanceWindow, start: datetime) -> timedelta:
    if window.end is not None:
        return parse_timestamp(window.end) - start
    assert window.duration is not None
    return parse_duration(window.duration)


def current_window(windows: Sequence[MaintenanceWindow], now: datetime) -> Span | None:
    """The window open at `now` (of several, the one that stays open longest); None outside every window."""
    now = now.astimezone(UTC)
    open_: list[Span] = []
    for index, window in enumerate(windows):
        start = _latest_start(window, now)
        if start is not None and now < start + _length(window, start):
            open_.append(Span(start, start + _length(window, start), index))
    return max(open_, key=lambda span: (span.end, -span.index), default=None)


def next_window(windows: Sequence[MaintenanceWindow], now: datetime) -> Span | None:
    """The next window to open after `now` (the earliest start; None when no window ever opens again)."""
    now = now.astimezone(UTC)
    upcoming: list[Span] = []
    for index, window in enumerate(windows):
        start = _next_start(window, now)
        if start is not None:
            upcoming.append(Span(start, start + _length(window, start), index))
    return min(upcoming, key=lambda span: (span.start, span.index), default=None)


def rfc3339(at: datetime) -> str:
    """An instant as the conditions and Events print it: UTC, seconds, `Z`."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
