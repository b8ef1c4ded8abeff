"""Narrowed informers: a label selector the server applies to both LIST and WATCH, and a fixed list of namespaces
(Roles grant list/watch per namespace, so the manager must never list across all of them)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from slurmctl.runtime import Manager, ManagerOptions
from slurmctl.runtime.client import Client, Resource


class RecordingClient(Client):
    """Answers LIST with one Secret per namespace and keeps WATCH open; records every query."""

    def __init__(self) -> None:  # no API client to wrap
        self.timeout = 5.0
        self.host = "recording"
        self.lists: list[tuple[str | None, str | None]] = []
        self.watches: list[tuple[str | None, str | None]] = []
        self.both_watching = asyncio.Event()

    async def resource(self, api_version: str, kind: str) -> Resource:
        return Resource(api_version, kind, kind.lower() + "s", namespaced=True)

    async def list(self, api_version: str, kind: str, **query: Any) -> dict[str, Any]:
        namespace = query.get("namespace")
        self.lists.append((namespace, query.get("label_selector")))
        item = {"metadata": {"name": "s", "namespace": namespace, "resourceVersion": "1", "labels": {"x": "y"}}}
        return {"metadata": {"resourceVersion": "1"}, "items": [item]}

    async def watch(  # type: ignore[override]
        self, res: Resource, *, namespace: str | None, on_open: Callable[[], None] | None = None, **query: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.watches.append((namespace, query.get("label_selector")))
        if len(self.watches) == 2:
            self.both_watching.set()
        if on_open is not None:
            on_open()
        await asyncio.Event().wait()
        yield {}  # pragma: no cover


async def test_selected_kinds_are_listed_and_watched_with_the_selector_in_each_watched_namespace_only() -> None:
    client = RecordingClient()
    manager = Manager(client, ManagerOptions(namespaces=("a", "b"), metrics_bind_address="0"))
    manager.select("v1", "Secret", label_selector="x=y")
    informer = manager.informer("v1", "Secret")
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await informer.wait_synced()
            await client.both_watching.wait()
        assert sorted(client.lists) == [("a", "x=y"), ("b", "x=y")], "never a LIST across namespaces or unselected"
        assert sorted(client.watches) == [("a", "x=y"), ("b", "x=y")]
        assert manager.cache.get("v1", "Secret", "s", namespace="b") is not None
        assert [o["metadata"]["namespace"] for o in manager.cache.list("v1", "Secret")] == ["a", "b"]
        assert not manager.cache.synced("v1", "Secret", "c"), "absent in an unwatched namespace proves nothing"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_selector_cannot_be_changed_once_the_kind_is_watched() -> None:
    manager = Manager(RecordingClient(), ManagerOptions(metrics_bind_address="0"))
    manager.informer("v1", "Secret")
    with pytest.raises(RuntimeError, match="already watched"):
        manager.select("v1", "Secret", label_selector="x=y")


async def test_a_cluster_scoped_kind_is_listed_once_in_the_namespaced_mode_and_trimmed() -> None:
    """Nodes have no per-namespace list: a manager limited to namespaces still watches them once, across the
    cluster, and keeps only what its transform returns."""
    client = RecordingClient()
    manager = Manager(client, ManagerOptions(namespaces=("a", "b"), metrics_bind_address="0"))

    def keep(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": obj["metadata"], "spec": {"unschedulable": True}}

    manager.trim("v1", "Node", keep)
    informer = manager.informer("v1", "Node")
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await informer.wait_synced()
        assert client.lists == [(None, None)], "one LIST, not one per watched namespace"
        assert manager.cache.get("v1", "Node", "s") == {
            "metadata": {"name": "s", "namespace": None, "resourceVersion": "1", "labels": {"x": "y"}},
            "spec": {"unschedulable": True},
        }
        assert manager.cache.synced("v1", "Node", "")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    with pytest.raises(RuntimeError, match="already watched"):
        manager.trim("v1", "Node", lambda obj: obj)
