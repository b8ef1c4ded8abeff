"""Informer memory (tracemalloc): what the caches hold, per object and against the size of the Kubernetes cluster.

- Memory per cached object: 10,000 small ConfigMaps through an informer, managedFields stripped or kept. Objects
  arrive as the API server sends them (JSON pages parsed into dicts), so the figure is what a real informer retains
  per object: the dict itself plus the store's indexes.
- Growth with the rest of the cluster (issue 26): the operator's real registration (`reconcilers.register`: every
  informer it starts, with its selectors) synced against an API-server stand-in that holds one SlurmCluster's
  children, then the same plus 10,000 unrelated ConfigMaps, Services and Deployments each in other namespaces. The
  stand-in applies label selectors as the API server does (equality terms) and sends JSON, parsed into fresh dicts.
  The goal is no growth; the baseline beside it is the same run with the selectors of before issue 26 (Secrets and
  Pods only). What it does not show: the API server's own cost, or a real watch's events.
- A relist of a large cluster's pods: 10,240 worker pods (the pod template the operator renders, scheduled, Running)
  cached and kept decoded (a workers pass lists them all), then listed again with every pod changed, as after the API
  server closed a watch that fell behind. The figure is what the relist adds at its peak over what the store holds
  (tracemalloc's peak); the baseline beside it is what the store holds. At 10,240 workers the operator's peak memory
  rose by ~0.3 GiB minutes after the last pod started (docs/performance.md): a relist held every listed pod decoded
  beside the store's decoded set of the same pods.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from bench import goal
from slurmctl.api.v1 import API_VERSION, KIND, OPEN_POLICY, check_cluster
from slurmctl.reconcilers import registry
from slurmctl.reconcilers.registry import desired_objects, register
from slurmctl.render.manifests import Inputs
from slurmctl.runtime import Manager, ManagerOptions
from slurmctl.runtime.client import KNOWN, Client, Obj, Resource
from slurmctl.runtime.informer import Informer

OBJECTS = 10_000
PAGE = 500
UNRELATED = 10_000  # of each of ConfigMaps, Services and Deployments, in other namespaces
RELIST_PODS = 10_240


def _config_map(i: int) -> dict[str, Any]:
    """Shaped like a ConfigMap the 1.20 API server returns after one server-side apply."""
    return {
        "metadata": {
            "name": f"cluster-{i // 10}-config-{i % 10}",
            "namespace": f"team-{i % 20}",
            "uid": str(uuid.UUID(int=i)),
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": "2024-05-01T12:00:00Z",
            "labels": {"app.kubernetes.io/name": "slurm", "app.kubernetes.io/instance": f"cluster-{i // 10}"},
            "ownerReferences": [
                {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "name": f"cluster-{i // 10}",
                 "uid": str(uuid.UUID(int=10**9 + i // 10)), "controller": True, "blockOwnerDeletion": True}
            ],
            "managedFields": [
                {"manager": "slurmctl", "operation": "Apply", "apiVersion": "v1", "time": "2024-05-01T12:00:00Z",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {"f:key": {}},
                              "f:metadata": {"f:labels": {"f:app.kubernetes.io/instance": {},
                                                          "f:app.kubernetes.io/name": {}},
                                             "f:ownerReferences": {f"k:{{\"uid\":\"{i}\"}}": {".": {}}}}}}
            ],
        },
        "data": {"key": f"value-{i}"},
    }  # fmt: skip


class _PagedSource:
    def __init__(self, pages: list[bytes]) -> None:
        self._pages = pages

    async def list_page(self, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        page: dict[str, Any] = json.loads(self._pages[int(continue_token or 0)])
        return page

    async def watch(
        self, *, resource_version: str, timeout_seconds: int, on_open: Callable[[], None]
    ) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}


def _pages() -> list[bytes]:
    pages: list[bytes] = []
    for start in range(0, OBJECTS, PAGE):
        last = start + PAGE >= OBJECTS
        meta = {"resourceVersion": "200000", **({} if last else {"continue": str(len(pages) + 1)})}
        items = [_config_map(i) for i in range(start, min(start + PAGE, OBJECTS))]
        pages.append(json.dumps({"items": items, "metadata": meta}).encode())
    return pages


async def _bytes_per_object(keep_managed_fields: bool) -> float:
    pages = _pages()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    informer = Informer(_PagedSource(pages), name="bench", page_size=PAGE, keep_managed_fields=keep_managed_fields)
    task = asyncio.create_task(informer.run())
    await informer.wait_synced()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(informer.store) == OBJECTS
    return retained / OBJECTS


def _unrelated_service(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"svc-{i}", "namespace": f"team-{i % 50}", "labels": {"app": f"app-{i}"}},
        "spec": {"selector": {"app": f"app-{i}"}, "clusterIP": f"10.96.{i // 250}.{i % 250}", "type": "ClusterIP",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    }  # fmt: skip


def _unrelated_deployment(i: int) -> dict[str, Any]:
    labels = {"app": f"app-{i}", "app.kubernetes.io/managed-by": "Helm"}
    container = {
        "name": "app",
        "image": f"registry.example.com/team/app:{i}",
        "ports": [{"containerPort": 8080}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "env": [{"name": "LOG_LEVEL", "value": "info"}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"app-{i}", "namespace": f"team-{i % 50}", "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": f"app-{i}"}},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}},
        "status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "observedGeneration": 1},
    }  # fmt: skip


def _unrelated(i: int) -> list[dict[str, Any]]:
    cm = {**_config_map(i), "apiVersion": "v1", "kind": "ConfigMap"}
    return [cm, _unrelated_service(i), _unrelated_deployment(i)]


def _own_cluster() -> list[dict[str, Any]]:
    """One SlurmCluster (8 worker groups, accounting, slurmrestd) and every child the operator applies for it."""
    groups = [{"name": f"g{g}", "size": 64, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}} for g in range(8)]
    doc = {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": "hpc", "namespace": "slurm", "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {"jail": {"volume": {"claimName": "jail"}}, "workers": groups, "rest": {"enabled": True},
                 "login": {"sshRootPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForBench bench@example"]}},
    }  # fmt: skip
    cluster, problems = check_cluster(doc, policy=OPEN_POLICY)
    if cluster is None or problems:
        raise RuntimeError(f"the bench cluster is not valid: {problems}")
    return [doc, *desired_objects(Inputs.offline(cluster))]


class _ApiServer(Client):
    """LIST as the API server answers it: the label selector applied (equality terms, the only ones the operator
    sends), pages of `limit` with a continue token, JSON bytes parsed into fresh dicts; WATCH held open, silent."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:  # no API client to wrap
        self.timeout = 5.0
        self.host = "bench"
        self.listed_bytes = 0
        self._by_kind: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for n, obj in enumerate(objects):
            md = obj["metadata"]
            md.setdefault("uid", str(uuid.UUID(int=2**64 + n)))
            md.setdefault("resourceVersion", str(300_000 + n))
            md.setdefault("creationTimestamp", "2024-05-01T12:00:00Z")
            self._by_kind.setdefault((obj["apiVersion"], obj["kind"]), []).append(obj)

    async def is_served(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in KNOWN or (api_version, kind) == (API_VERSION, KIND)

    async def resource(self, api_version: str, kind: str) -> Resource:
        return Resource(api_version, kind, kind.lower() + "s", namespaced=kind != "Node")

    async def list(self, api_version: str, kind: str, **query: Any) -> Obj:
        selector = query.get("label_selector")
        wanted = dict(term.split("=", 1) for term in selector.split(",")) if selector else {}
        matching = [
            o for o in self._by_kind.get((api_version, kind), [])
            if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]  # fmt: skip
        start, limit = int(query.get("continue_token") or 0), query.get("limit") or len(matching) or 1
        more = start + limit < len(matching)
        meta = {"resourceVersion": "400000", **({"continue": str(start + limit)} if more else {})}
        body = json.dumps({"items": matching[start : start + limit], "metadata": meta}).encode()
        self.listed_bytes += len(body)
        page: Obj = json.loads(body)
        return page

    async def watch(
        self, res: Resource, *, namespace: str | None, on_open: Callable[[], None] | None = None, **query: Any
    ) -> AsyncIterator[Obj]:
        if on_open is not None:
            on_open()
        await asyncio.Event().wait()
        yield {}  # pragma: no cover


async def _operator_caches(objects: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Sync every informer the operator registers against `objects`: (bytes retained, objects held, bytes listed).
    The stand-in's own copy is allocated before tracing starts; the manager, its informers and stores after."""
    server = _ApiServer(objects)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False)
    manager = Manager(server, options)
    await register(manager)
    informers = list(manager._informers.values())  # the informers only, no controller
    tasks = [asyncio.create_task(i.run()) for i in informers]
    await asyncio.gather(*(i.wait_synced() for i in informers))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    held = sum(len(i.store) for i in informers)
    return retained, held, server.listed_bytes


async def _growth(*, selected: bool) -> tuple[int, int, int, int]:
    """(bytes retained for the cluster alone, growth with the unrelated objects, unrelated objects held, unrelated
    bytes listed). `selected=False`: the selectors of before issue 26, Secrets and Pods only."""
    original = registry.select_owned
    if not selected:
        registry.select_owned = lambda manager, owned: original(manager, ())
    try:
        alone, held_alone, listed_alone = await _operator_caches(_own_cluster())
        crowded = [*_own_cluster(), *(o for i in range(UNRELATED) for o in _unrelated(i))]
        beside, held_beside, listed_beside = await _operator_caches(crowded)
    finally:
        registry.select_owned = original
    return alone, beside - alone, held_beside - held_alone, listed_beside - listed_alone


def _worker_pods(count: int, rv: int) -> list[bytes]:
    """List pages of `count` worker pods as a kubelet reports them, from the first worker StatefulSet's template."""
    sts = next(o for o in _own_cluster() if o["kind"] == "StatefulSet" and "-worker-" in o["metadata"]["name"])
    template = sts["spec"]["template"]
    ready = [
        {"type": t, "status": "True", "lastTransitionTime": "2024-05-01T12:00:00Z"}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    containers = [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"], "imageID": "",
                   "started": True, "state": {"running": {"startedAt": "2024-05-01T12:00:00Z"}}}
                  for c in template["spec"]["containers"]]  # fmt: skip
    pods = []
    for i in range(count):
        name = f"hpc-worker-g{i // 160:02}-{i % 160}"
        metadata = {
            **template["metadata"],
            "name": name,
            "namespace": "slurm",
            "uid": str(uuid.UUID(int=i)),
            "resourceVersion": str(rv + i),
            "creationTimestamp": "2024-05-01T12:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": name.rsplit("-", 1)[0],
                    "uid": str(uuid.UUID(int=2**64 + i // 160)),
                    "controller": True,
                }
            ],
        }
        status = {
            "phase": "Running",
            "conditions": ready,
            "hostIP": "127.0.0.1",
            "podIP": f"127.1.{i // 250}.{i % 250}",
            "startTime": "2024-05-01T12:00:00Z",
            "containerStatuses": containers,
            "qosClass": "Burstable",
        }
        spec = {**template["spec"], "nodeName": f"kwok-node-{i % 1000}"}
        pods.append({"metadata": metadata, "spec": spec, "status": status})
    pages: list[bytes] = []
    for start in range(0, count, PAGE):
        more = start + PAGE < count
        meta = {"resourceVersion": str(rv + count), **({"continue": str(len(pages) + 1)} if more else {})}
        page = {"apiVersion": "v1", "kind": "PodList", "metadata": meta, "items": pods[start : start + PAGE]}
        pages.append(json.dumps(page, separators=(",", ":")).encode())
    return pages


async def _relist_peak() -> tuple[int, int]:
    """(bytes a relist of every pod adds at its peak, bytes the store holds before it) for RELIST_PODS worker pods."""
    first, second = _worker_pods(RELIST_PODS, 100_000), _worker_pods(RELIST_PODS, 200_000)
    source = _PagedSource(first)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    informer = Informer(source, name="pods", page_size=PAGE)
    await informer._list()
    informer.store.list(namespace="slurm")  # a workers pass: every pod decoded, and kept so
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.reset_peak()
    source._pages = second
    await informer._list()
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    assert len(informer.store) == RELIST_PODS
    return peak - held, held


async def _run() -> list[tuple[str, float, str]]:
    per_object = [
        ("cache_bytes_per_configmap", await _bytes_per_object(False), "bytes"),
        ("cache_bytes_per_configmap_with_managed_fields", await _bytes_per_object(True), "bytes"),
    ]
    await _operator_caches(_own_cluster())  # warm-up: first-use allocations (imports, class caches) not counted
    alone, growth, held, listed = await _growth(selected=True)
    _, growth_before, held_before, listed_before = await _growth(selected=False)
    unrelated = f"{UNRELATED:,} each of unrelated ConfigMaps, Services, Deployments"
    relist, held_pods = await _relist_peak()
    return [
        *per_object,
        ("operator_cache_bytes_one_cluster", alone, goal("bytes", "reported (every informer, 1 cluster x 8 groups)")),
        ("operator_cache_growth_unrelated", growth,
         goal("bytes", f"0 with {unrelated} | before issue 26 (Secrets, Pods selected) {growth_before:,} bytes")),
        ("operator_cache_unrelated_objects_held", held,
         goal("objects", f"0 | before issue 26 {held_before:,} objects")),
        ("operator_list_bytes_unrelated", listed, goal("bytes", f"0 | before issue 26 {listed_before:,} bytes")),
        ("informer_relist_peak_bytes", relist,
         goal("bytes", f"a page, not the list | what the store holds of {RELIST_PODS:,} pods: {held_pods:,} bytes")),
    ]  # fmt: skip


def run() -> Iterator[tuple[str, float, str]]:
    yield from asyncio.run(_run())
