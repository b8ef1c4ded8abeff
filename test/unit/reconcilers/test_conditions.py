"""A condition is always writable: a message past metav1.Condition's limit is cut, not refused, and the cut message
is what the next pass compares with (so it is not news again on every pass)."""

from __future__ import annotations

import pytest

from slurmctl.api.v1 import MAX_CONDITION_MESSAGE, Reason
from slurmctl.reconcilers.conditions import is_news, make_condition


@pytest.mark.parametrize(
    "length", [0, 100, MAX_CONDITION_MESSAGE, MAX_CONDITION_MESSAGE + 1, 10 * MAX_CONDITION_MESSAGE]
)
def test_a_message_of_any_length_makes_a_condition_the_api_server_takes(length: int) -> None:
    message = "n" * length
    cond = make_condition({}, "WorkersReady", ok=False, reason=Reason.DRAINING, message=message)
    assert len(cond.message) <= MAX_CONDITION_MESSAGE
    if length <= MAX_CONDITION_MESSAGE:
        assert cond.message == message
    else:
        assert cond.message.startswith("n" * (MAX_CONDITION_MESSAGE - 64))
        assert cond.message.endswith(f"({length - MAX_CONDITION_MESSAGE + 64} characters more)")
    written = {"conditions": [cond.model_dump(mode="json", by_alias=True)]}
    assert not is_news(written, "WorkersReady", Reason.DRAINING, message)
