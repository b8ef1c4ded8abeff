"""API failures become one small exception tree, whatever shape the server's answer has."""

from __future__ import annotations

import json

import pytest

from slurmctl.runtime.client import drop_nones
from slurmctl.runtime.errors import (
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    Timeout,
    TooManyRequests,
    error_for_status,
    is_transient,
    outage_reason,
)


@pytest.mark.parametrize(
    ("status", "cls"),
    [(401, Forbidden), (403, Forbidden), (404, NotFound), (409, Conflict), (410, Gone), (422, Invalid),
     (429, TooManyRequests), (500, ServerError), (503, ServerError), (400, ApiError)],
)  # fmt: skip
def test_statuses_map_to_the_exception_tree(status: int, cls: type[ApiError]) -> None:
    body = json.dumps({"kind": "Status", "reason": "Because", "message": "spec.size: must be >= 0"})
    exc = error_for_status(status, body.encode(), context="PATCH /x")
    assert type(exc) is cls
    assert exc.status == status
    assert exc.reason == "Because"
    assert "spec.size: must be >= 0" in str(exc) and "PATCH /x" in str(exc)


def test_a_body_that_is_not_json_still_gives_a_readable_error() -> None:
    exc = error_for_status(502, b"<html>bad gateway</html>")
    assert isinstance(exc, ServerError)
    assert "bad gateway" in str(exc)
    assert isinstance(error_for_status(500, None), ServerError)


def test_only_server_side_trouble_is_worth_retrying_a_read() -> None:
    assert is_transient(TooManyRequests("x")) and is_transient(ServerError("x")) and is_transient(Timeout("x"))
    assert not any(is_transient(e) for e in (NotFound("x"), Conflict("x"), Invalid("x"), Forbidden("x")))


def test_drop_nones_removes_nulls_at_every_depth() -> None:
    assert drop_nones({"a": None, "b": {"c": None, "d": [1, None, {"e": None}]}, "f": 0, "g": ""}) == {
        "b": {"d": [1, {}]},
        "f": 0,
        "g": "",
    }


def test_outage_reasons() -> None:
    refused = ServerError("GET /x: Cannot connect", status=0, reason="ConnectionFailed")
    assert outage_reason(refused) == "ConnectionFailed"
    assert outage_reason(error_for_status(503, b'{"reason":"ServiceUnavailable"}')) == "503 ServiceUnavailable"
    assert outage_reason(ExceptionGroup("two", [refused, Timeout("t")])) == "ConnectionFailed"
    # Anything that is not the server being away is not an outage: it keeps its traceback.
    for exc in (
        Invalid("422"),
        NotFound("404"),
        Forbidden("403"),
        KeyError("x"),
        ExceptionGroup("g", [refused, ValueError()]),
    ):
        assert outage_reason(exc) is None
