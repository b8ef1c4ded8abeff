"""Readiness follows the informers: unsynced or stale watches make /readyz fail; a clean shutdown gives the lease up."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

import pytest

from slurmctl.runtime import Client, Manager, ManagerOptions
from slurmctl.runtime.cache import NotWatched
from slurmctl.runtime.client import Obj
from slurmctl.runtime.errors import ServerError
from slurmctl.runtime.fake import FakeClient
from slurmctl.runtime.leader import LeaderElectionConfig
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


class _SlowLeaseReads(FakeClient):
    """Every read of the Lease answers `delay` seconds late, with what it held when asked. `renewing` is set while the
    leader's first renewal after it took the lease reads it: a release asked for then reads after it, and without
    renewals stopped first, the renewal's write lands between the release's read and its write."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.renewing = asyncio.Event()
        self._taken = False

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        found = await super().get(api_version, kind, name, namespace=namespace)
        if kind == "Lease":
            if self._taken:
                self.renewing.set()
            await asyncio.sleep(self.delay)
        return found

    async def replace(self, body: Mapping[str, Any]) -> Obj:
        written = await super().replace(body)
        self._taken = self._taken or body["kind"] == "Lease"
        return written


async def test_a_clean_shutdown_gives_the_lease_up_with_no_renewal_racing_the_release() -> None:
    """The successor takes over at once only if the release's write lands: renewals must have stopped before it."""
    election = LeaderElectionConfig("ns", "lease", identity="me", retry_period=0.001, renew_deadline=1.0)
    client = _SlowLeaseReads(delay=0.1)
    manager = Manager(client, ManagerOptions(namespace="ns", leader_election=election, grace_period=5,
                                             handle_signals=False))  # fmt: skip
    run = asyncio.create_task(manager.run())
    await asyncio.wait_for(client.renewing.wait(), timeout=10)
    manager.stop()
    await asyncio.wait_for(run, timeout=10)
    lease = await FakeClient.get(client, "coordination.k8s.io/v1", "Lease", "lease", namespace="ns")
    assert lease["spec"]["holderIdentity"] == "", lease["spec"]
