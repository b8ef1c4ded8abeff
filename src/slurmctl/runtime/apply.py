"""The single write path: server-side apply with a client-side skip cache.

Every create/update an operator makes goes through `Applier.apply` (SSA, a field manager, force=True). Identical
re-applies are skipped without a request, cluster-api style: remember (object key, resourceVersion the last apply
returned, hash of the intent) and skip while the live resourceVersion still matches. The live resourceVersion comes
from the informer cache when the kind is watched (no request at all), else from a GET (a read, never a write).
Entries expire after a TTL (default 30 min) so ownership of the fields is re-asserted now and then, which also
repairs a field some other actor changed without changing the resourceVersion we compare (impossible in practice).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cachetools import TTLCache

from slurmctl.runtime import metrics
from slurmctl.runtime.client import Obj, drop_nones
from slurmctl.runtime.errors import NotFound
from slurmctl.runtime.logs import kv

log = logging.getLogger(__name__)

DEFAULT_TTL = 30 * 60.0


class Cached(enum.Enum):
    NOT_WATCHED = "not-watched"


# (api_version, kind, namespace, name) -> the cached object, None when absent, or NOT_WATCHED for unwatched kinds.
LiveLookup = Callable[[str, str, str, str], "Obj | Cached | None"]


class ApplyTransport(Protocol):
    async def apply(
        self, body: Mapping[str, Any], *, field_manager: str, subresource: str | None = None, force: bool = True
    ) -> Obj: ...

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj: ...


@dataclass(frozen=True, slots=True)
class _Applied:
    resource_version: str
    digest: str


def _not_watched(api_version: str, kind: str, namespace: str, name: str) -> Cached:
    return Cached.NOT_WATCHED


def intent_digest(body: Mapping[str, Any], field_manager: str) -> str:
    canonical = json.dumps([field_manager, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _rv(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


class Applier:
    def __init__(
        self,
        transport: ApplyTransport,
        *,
        lookup: LiveLookup = _not_watched,
        ttl: float = DEFAULT_TTL,
        maxsize: int = 100_000,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._lookup = lookup
        self._applied: TTLCache[tuple[str, ...], _Applied] = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)

    async def apply(self, intent: Mapping[str, Any], *, field_manager: str) -> Obj:
        """Apply `intent` (built from scratch: apiVersion, kind, metadata, spec...; `None`s are dropped)."""
        return await self._apply(drop_nones(intent), field_manager=field_manager, subresource=None)

    async def apply_status(self, obj: Mapping[str, Any], *, field_manager: str) -> Obj:
        """Apply only `obj["status"]` to the /status subresource, under a manager of its own (e.g. per component)."""
        meta = obj.get("metadata") or {}
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {k: meta[k] for k in ("name", "namespace") if meta.get(k)},
            "status": obj.get("status") or {},
        }
        return await self._apply(drop_nones(body), field_manager=field_manager, subresource="status")

    async def _apply(self, body: Obj, *, field_manager: str, subresource: str | None) -> Obj:
        meta = body.get("metadata") or {}
        api_version, kind = body["apiVersion"], body["kind"]
        namespace, name = meta.get("namespace") or "", meta["name"]
        key = (api_version, kind, namespace, name, field_manager, subresource or "")
        digest = intent_digest(body, field_manager)
        remembered = self._applied.get(key)
        if remembered is not None and remembered.digest == digest:
            live = await self._live(api_version, kind, namespace, name)
            if live is not None and _rv(live) == remembered.resource_version:
                metrics.APPLY_CACHE_HITS.labels(kind).inc()
                return live
        metrics.APPLY_CACHE_MISSES.labels(kind).inc()
        self._applied.pop(key, None)
        applied = await self._transport.apply(body, field_manager=field_manager, subresource=subresource)
        rv = _rv(applied)
        if rv:
            self._applied[key] = _Applied(rv, digest)
        log.debug("applied %s", kv(kind=kind, namespace=namespace, name=name, manager=field_manager, rv=rv or ""))
        return applied

    async def _live(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        cached = self._lookup(api_version, kind, namespace, name)
        if cached is not Cached.NOT_WATCHED:
            return cached
        try:
            return await self._transport.get(api_version, kind, name, namespace=namespace or None)
        except NotFound:
            return None

    def forget(self) -> None:
        """Drop every remembered apply (the next apply of each object is sent)."""
        self._applied.clear()
