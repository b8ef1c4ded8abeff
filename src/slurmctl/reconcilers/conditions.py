"""A component's status condition as it will be written: the one place that decides a condition's transition time, so
that an unchanged condition renders an identical status part (and its write is skipped) whoever builds it, the
plan of an observation or a reconciler that still writes on its own."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from slurmctl.api.v1 import MAX_CONDITION_MESSAGE, Condition, Reason
from slurmctl.reconcilers.observed import condition_of, generation_of


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def make_condition(
    obj: Mapping[str, Any], type_: str, *, ok: bool, reason: Reason, message: str, at: datetime | None = None
) -> Condition:
    """A condition for the live object `obj`; lastTransitionTime is kept verbatim while the status does not flip,
    so an unchanged condition renders an identical intent and its apply is skipped. A flip happens `at` (the
    observation's time; now when not given). A message past the API's limit is cut (`bounded`): a condition that could
    not be written would stop its component's every pass."""
    status = "True" if ok else "False"
    previous = condition_of(obj, type_)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
    return Condition.model_validate(
        {
            "type": type_,
            "status": status,
            "observedGeneration": generation_of(obj),
            "lastTransitionTime": since or at or now(),
            "reason": reason.value,
            "message": bounded(message),
        }
    )


def bounded(message: str, limit: int = MAX_CONDITION_MESSAGE) -> str:
    """`message`, or its start and how much was cut when it is longer than `limit` characters."""
    if len(message) <= limit:
        return message
    cut = limit - 64  # room for the note of what was cut
    return f"{message[:cut]} ... ({len(message) - cut} characters more)"


def is_news(status: Mapping[str, Any], type_: str, reason: Reason, message: str) -> bool:
    """Whether a condition would say something new compared with `status` (as the status writer will leave it): what
    decides that a Warning Event is due, once per finding, not once per pass."""
    said = condition_of({"status": status}, type_)
    return said is None or said.get("reason") != reason.value or said.get("message") != bounded(message)
