"""Caches that grow with the SlurmClusters, not with the Kubernetes cluster: every kind the operator owns is listed
and watched through the owned-children label selector, so the API server never sends (and the operator never holds)
the cluster's other ConfigMaps, Services, Deployments, Jobs... (issue 26)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from slurmctl.api.v1 import API_VERSION, KIND
from slurmctl.reconcilers.registry import COMPONENTS, register
from slurmctl.render import meta
from slurmctl.render.kinds import (
    CONFIGMAP,
    CRONJOB,
    DEPLOYMENT,
    JOB,
    NODE,
    PDB,
    POD,
    SECRET,
    SERVICE,
    SLURM_CLUSTER,
    STATEFULSET,
    Kind,
)
from slurmctl.runtime import Manager, ManagerOptions
from slurmctl.runtime.client import Obj, Resource
from slurmctl.runtime.fake import FakeClient
from test.unit.reconcilers.env import NAME, NS, Env, spec

OWNED = (CONFIGMAP, SECRET, SERVICE, STATEFULSET, DEPLOYMENT, JOB, CRONJOB, PDB)
UNRELATED = (CONFIGMAP, SERVICE, DEPLOYMENT, STATEFULSET, JOB, CRONJOB, PDB, SECRET, POD)


class SelectingServer(FakeClient):
    """A FakeClient that also answers LIST as the API server does, applying the label selector (equality terms, the
    only ones the operator sends), and holds each WATCH open without events: enough for real informers to sync."""

    def __init__(self) -> None:
        super().__init__()
        self.lists: dict[tuple[str, str], str | None] = {}

    async def list(self, api_version: str, kind: str, **query: Any) -> Obj:
        selector = query.get("label_selector")
        self.lists[(api_version, kind)] = selector
        wanted = dict(term.split("=", 1) for term in selector.split(",")) if selector else {}
        items = [copy.deepcopy(o) for o in self.store(api_version, kind).list(labels=wanted)]
        return {"metadata": {"resourceVersion": "1"}, "items": items}

    async def watch(
        self, res: Resource, *, namespace: str | None, on_open: Callable[[], None] | None = None, **query: Any
    ) -> AsyncIterator[Obj]:
        if on_open is not None:
            on_open()
        await asyncio.Event().wait()
        yield {}  # pragma: no cover


def _obj(kind: Kind, name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        md["labels"] = labels
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": md}


def _unrelated(fake: FakeClient) -> None:
    """What other teams keep in the Kubernetes cluster: unlabelled, or labelled by someone else (even with a name
    and component label like ours), in other namespaces and in the SlurmCluster's own."""
    for kind in UNRELATED:
        fake.put(_obj(kind, "theirs", "other"))
        fake.put(_obj(kind, "theirs", NS))
        fake.put(_obj(kind, f"{NAME}-lookalike", NS, {meta.LABEL_INSTANCE: NAME, meta.LABEL_COMPONENT: "workers"}))
        fake.put(_obj(kind, "helm", "other", {meta.LABEL_MANAGED_BY: "Helm"}))


async def test_every_kind_but_the_slurmclusters_and_nodes_is_watched_through_the_owned_children_selector() -> None:
    async with Env() as env:
        selectors = {kind: env.manager.label_selector(*kind) for kind in (*OWNED, POD)}
        assert selectors == dict.fromkeys((*OWNED, POD), meta.OWNED_SELECTOR)
        assert env.manager.label_selector(*SLURM_CLUSTER) is None  # the operator's own kind: every one is its work
        assert env.manager.label_selector(*NODE) is None  # not owned, read cluster-wide, trimmed instead


async def test_unrelated_objects_never_enter_the_cache_while_the_operator_sees_its_children() -> None:
    """The cluster converges as before beside other teams' objects, which no cache read ever returns."""
    async with Env() as env:
        _unrelated(env.fake)
        env.create(spec())
        await env.converge()
        cache = env.manager.cache
        for kind in OWNED:
            for obj in cache.list(*kind):
                assert meta.controlled_by(obj, env.ctx.loader.load(env.cluster()).cluster), (kind, obj["metadata"])  # type: ignore[union-attr]
            assert cache.get(*kind, "theirs", namespace=NS) is None
            assert cache.get(*kind, f"{NAME}-lookalike", namespace=NS) is None
        assert cache.get(*STATEFULSET, meta.controller(NAME), namespace=NS) is not None
        assert cache.get(*CONFIGMAP, meta.slurm_configs(NAME), namespace=NS) is not None


async def test_real_informers_list_with_the_selector_and_hold_nothing_unrelated() -> None:
    """Through the real informers and cache (not the fake cache): each LIST carries the selector, and after sync the
    stores hold the operator's children only, whatever else the namespaces hold."""
    server = SelectingServer()
    server.serve(*SLURM_CLUSTER)
    _unrelated(server)
    for n in range(100):  # many unrelated objects per kind: none of them is listed into this process
        for kind in (CONFIGMAP, SERVICE, DEPLOYMENT):
            server.put(_obj(kind, f"app-{n}", f"team-{n % 7}", {"app": f"app-{n}"}))
    mine = {kind: server.put(_obj(kind, f"{NAME}-{kind.kind.lower()}", NS, meta.labels(NAME, "x"))) for kind in OWNED}
    server.put({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": NAME, "namespace": NS}, "spec": spec()})
    options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False)
    manager = Manager(server, options)
    await register(manager, COMPONENTS)
    kinds = (*OWNED, POD, SLURM_CLUSTER, NODE)
    informers = [manager.informer(*kind) for kind in kinds]
    tasks = [asyncio.create_task(i.run()) for i in informers]
    try:
        async with asyncio.timeout(5):
            await asyncio.gather(*(i.wait_synced() for i in informers))
        for kind in OWNED:
            assert server.lists[kind] == meta.OWNED_SELECTOR
            held = manager.cache.list(*kind)
            assert [o["metadata"]["name"] for o in held] == [mine[kind]["metadata"]["name"]], kind
        assert manager.cache.list(*POD) == []
        assert len(manager.cache.list(*SLURM_CLUSTER)) == 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
