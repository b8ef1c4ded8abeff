"""Memory per cached object: 10,000 small ConfigMaps through an informer (tracemalloc), managedFields stripped or kept.

Objects arrive as the API server sends them (JSON pages parsed into dicts), so the figure is what a real informer
retains per object: the dict itself plus the store's indexes.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from slurmctl.runtime.informer import Informer

OBJECTS = 10_000
PAGE = 500


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
    pages = []
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


async def _run() -> list[tuple[str, float, str]]:
    return [
        ("cache_bytes_per_configmap", await _bytes_per_object(False), "bytes"),
        ("cache_bytes_per_configmap_with_managed_fields", await _bytes_per_object(True), "bytes"),
    ]


def run() -> Iterator[tuple[str, float, str]]:
    yield from asyncio.run(_run())
