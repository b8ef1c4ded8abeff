"""Informers and the client against the real API server: create/update/delete are followed, discovery answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from slurmctl.runtime import Client, Conflict, Event, Informer, Invalid, NotFound
from slurmctl.runtime.informer import ClientSource
from test.e2e.harness import eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
async def rt(api: client.ApiClient) -> Client:
    return Client(api, timeout=10)


@pytest.fixture
async def informer(rt: Client, namespace: str) -> AsyncIterator[tuple[Informer, list[tuple[str, str]]]]:
    inf = Informer(ClientSource(rt, "v1", "ConfigMap", namespace=namespace), name="cm", page_size=2)
    seen: list[tuple[str, str]] = []

    def listener(event: Event) -> None:
        seen.append((event.type.value, event.obj["metadata"]["name"]))

    inf.add_listener(listener)
    task = asyncio.create_task(inf.run())
    try:
        yield inf, seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def cm(name: str, namespace: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


async def test_informer_follows_create_update_and_delete_of_real_objects(
    rt: Client, namespace: str, informer: tuple[Informer, list[tuple[str, str]]]
) -> None:
    inf, seen = informer
    for i in range(5):  # more than one page of the initial list
        await rt.create(cm(f"pre-{i}", namespace))
    await rt.create(cm("late", namespace))  # before or after the list: either way it must arrive
    await asyncio.wait_for(inf.wait_synced(), 30)

    await rt.create(cm("new", namespace, k="1"))
    await rt.apply(cm("new", namespace, k="2"), field_manager="e2e")
    await rt.delete("v1", "ConfigMap", "pre-0", namespace=namespace)

    async def converged() -> bool:
        cached = inf.store.get(f"{namespace}/new")
        return cached is not None and cached.get("data") == {"k": "2"} and inf.store.get(f"{namespace}/pre-0") is None

    await eventually(converged, timeout=30, what="the cache to follow the changes")
    names = sorted(o["metadata"]["name"] for o in inf.store)
    assert names == ["kube-root-ca.crt", "late", "new", "pre-1", "pre-2", "pre-3", "pre-4"] or names == [
        "late", "new", "pre-1", "pre-2", "pre-3", "pre-4"
    ]  # fmt: skip
    assert ("delete", "pre-0") in seen and ("update", "new") in seen
    assert all("managedFields" not in o["metadata"] for o in inf.store)
    live = await rt.list("v1", "ConfigMap", namespace=namespace)
    assert sorted(o["metadata"]["name"] for o in live["items"]) == names


async def test_discovery_answers_which_versions_are_served(rt: Client) -> None:
    assert await rt.is_served("batch/v1", "Job")
    assert await rt.is_served("batch/v1", "CronJob")
    assert not await rt.is_served("batch/v1beta1", "CronJob")  # removed in 1.25
    assert not await rt.is_served("nothing.example.com/v1", "Thing")
    assert await rt.is_served("coordination.k8s.io/v1", "Lease")
    res = await rt.resource("rbac.authorization.k8s.io/v1", "ClusterRole")  # not in the table: discovered
    assert (res.plural, res.namespaced) == ("clusterroles", False)


async def test_errors_are_translated_once(rt: Client, namespace: str) -> None:
    with pytest.raises(NotFound):
        await rt.get("v1", "ConfigMap", "missing", namespace=namespace)
    await rt.delete("v1", "ConfigMap", "missing", namespace=namespace)  # already gone is fine
    await rt.create(cm("dup", namespace))
    with pytest.raises(Conflict):
        await rt.create(cm("dup", namespace))
    with pytest.raises(Invalid):
        await rt.create(cm("Not_Valid", namespace))
