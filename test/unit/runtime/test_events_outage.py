"""Events that cannot be posted while the API server is away cost one log line per interval, not one per Event."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from slurmctl.runtime.errors import Invalid, ServerError
from slurmctl.runtime.events import EventRecorder
from slurmctl.runtime.fake import FakeClient

OBJ = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns", "uid": "u"}}


class Unavailable(FakeClient):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def create(self, body: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    ("error", "lines"),
    [(ServerError("POST events: 503", status=503), 1), (Invalid("POST events: 422 bad", status=422), 5)],
)
async def test_outage_failures_are_throttled_other_failures_each_logged(
    error: Exception, lines: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="slurmctl.runtime.events")
    recorder = EventRecorder(Unavailable(error), component="test")
    task = asyncio.create_task(recorder.run())
    try:
        for i in range(5):
            recorder.record(OBJ, "Normal", f"Reason{i}", "message")
        await recorder.flush()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert len([r for r in caplog.records if "could not post event" in r.getMessage()]) == lines
