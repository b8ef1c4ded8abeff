"""A converged object re-applied costs zero writes, as counted by the API server itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from slurmctl.runtime import Applier, Cache, Client, Informer
from slurmctl.runtime.apply import Cached
from slurmctl.runtime.informer import ClientSource
from test.e2e.apiserver_metrics import PATCH_VERBS, delta, request_counts, writes
from test.e2e.harness import eventually
from test.e2e.operator import no_namespace_terminating

pytestmark = pytest.mark.e2e


def intent(namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "converged", "namespace": namespace, "labels": {"app": "e2e"}, "annotations": None},
        "data": data,
    }


@pytest.fixture
async def cached_applier(api: client.ApiClient, namespace: str) -> AsyncIterator[tuple[Applier, Informer]]:
    rt = Client(api, timeout=10)
    informer = Informer(ClientSource(rt, "v1", "ConfigMap", namespace=namespace), name="cm")
    cache = Cache({("v1", "ConfigMap"): informer}, namespace=namespace)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 30)
        yield Applier(rt, lookup=cache.lookup), informer
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_twenty_identical_reapplies_cost_zero_patch_requests(
    api: client.ApiClient, namespace: str, cached_applier: tuple[Applier, Informer]
) -> None:
    applier, informer = cached_applier
    before_first = await request_counts(api)
    applied = await applier.apply(intent(namespace, k="v"), field_manager="slurmctl")
    rv = applied["metadata"]["resourceVersion"]

    async def cache_caught_up() -> bool:
        cached = informer.store.get(f"{namespace}/converged")
        return cached is not None and cached["metadata"]["resourceVersion"] == rv

    await eventually(cache_caught_up, timeout=30, what="the informer to see the applied object")
    # The API server counts every client: the namespace controller reads ConfigMaps while it deletes earlier tests'
    # namespaces, so let that finish before counting.
    await no_namespace_terminating(api)
    before = await request_counts(api)
    assert (
        sum(writes(before_first, before, resource="configmaps", verbs=PATCH_VERBS).values()) == 1
    )  # the metric sees our applies

    for _ in range(20):
        await applier.apply(intent(namespace, k="v"), field_manager="slurmctl")
    after = await request_counts(api)
    assert writes(before, after, resource="configmaps", verbs=PATCH_VERBS) == {}
    reads = {k: v for k, v in delta(before, after, resource="configmaps").items() if k[0] in ("GET", "LIST")}
    assert reads == {}  # not even a read: the cache answered

    # A real change still goes out, exactly once.
    await applier.apply(intent(namespace, k="changed"), field_manager="slurmctl")
    changed = await request_counts(api)
    assert sum(writes(after, changed, resource="configmaps", verbs=PATCH_VERBS).values()) == 1


async def test_without_an_informer_reapplies_cost_reads_but_no_writes(api: client.ApiClient, namespace: str) -> None:
    rt = Client(api, timeout=10)
    applier = Applier(rt, lookup=lambda *_: Cached.NOT_WATCHED)
    await applier.apply(intent(namespace, k="v"), field_manager="slurmctl")
    before = await request_counts(api)
    for _ in range(20):
        await applier.apply(intent(namespace, k="v"), field_manager="slurmctl")
    after = await request_counts(api)
    assert writes(before, after, resource="configmaps", verbs=PATCH_VERBS) == {}
    assert delta(before, after, resource="configmaps").get(("GET", "configmaps")) == 20


async def test_the_apply_body_owns_only_what_the_intent_names(api: client.ApiClient, namespace: str) -> None:
    rt = Client(api, timeout=10)
    applier = Applier(rt)
    await applier.apply(intent(namespace, k="v"), field_manager="slurmctl")
    live = await rt.get("v1", "ConfigMap", "converged", namespace=namespace)
    assert [m["manager"] for m in live["metadata"]["managedFields"]] == ["slurmctl"]
    # The None in the intent was dropped, not sent as null: the only annotation is the applier's intent digest.
    assert list(live["metadata"]["annotations"]) == ["slurmctl.io/intent-digest"]
