"""Readiness follows the informers: unsynced or stale watches make /readyz fail."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from slurmctl.runtime import Client, Manager, ManagerOptions
from slurmctl.runtime.cache import NotWatched
from slurmctl.runtime.errors import ServerError
from test.unit.runtime.fakes import FakeClock, FakeSource, until


async def test_readyz_fails_until_informers_sync_and_again_when_a_watch_goes_stale() -> None:
    clock = FakeClock()
    manager = Manager(cast(Client, object()), ManagerOptions(namespace="ns"), clock=clock)
    informer = manager.informer("v1", "ConfigMap")
    assert manager.informer("v1", "ConfigMap") is informer  # one shared informer per kind
    source = FakeSource()
    source.put("a")
    informer._source = source
    assert manager.readyz() == (False, "informer ConfigMap.v1 not synced")
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: informer.has_synced)
        assert manager.readyz() == (True, "ok")
        assert manager.cache.get("v1", "ConfigMap", "a", namespace="ns") is not None
        assert [o["metadata"]["name"] for o in manager.cache.list("v1", "ConfigMap", namespace="ns")] == ["a"]
        await clock.advance(60)
        source.send({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}})  # last sign of life
        await clock.advance(0)
        assert manager.readyz() == (True, "ok")
        source.refuse_watches = True  # the API server becomes unreachable
        source.send(ServerError("connection reset", status=0))
        await clock.advance(79)
        assert manager.readyz() == (True, "ok")  # within the watchdog period and its margin
        await clock.advance(2)
        assert manager.readyz() == (False, "informer ConfigMap.v1 watch is stale")
        source.refuse_watches = False
        await clock.advance(31)  # the next retry (backoff at most 30 s + 1) connects again
        assert manager.readyz() == (True, "ok")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_reading_an_unwatched_kind_is_a_clear_error() -> None:
    manager = Manager(cast(Client, object()))
    with pytest.raises(NotWatched, match="StatefulSet"):
        manager.cache.list("apps/v1", "StatefulSet")
