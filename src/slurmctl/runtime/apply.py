"""The single write path: server-side apply with a client-side skip cache.

Every create/update an operator makes goes through `Applier.apply` (SSA, a field manager, force=True). Identical
re-applies are skipped without a request, cluster-api style: remember (object key, resourceVersion the last apply
returned, hash of the intent) and skip while the live resourceVersion still matches, or, when it moved because another
actor wrote the object (a StatefulSet's status, another component's condition), while the live object still holds
the intent (the same check as after a restart, below). The live resourceVersion comes
from the informer cache when the kind is watched (no request at all), else from a GET (a read, never a write).
Entries expire after a TTL (default 30 min) so ownership of the fields is re-asserted now and then, which also
repairs a field some other actor changed without changing the resourceVersion we compare (impossible in practice).

A restarted operator remembers nothing, yet a converged cluster must still cost no writes. So with no remembered
entry an apply is also skipped when the live object already holds the intent: every value in the intent is there
(`covers`, which catches drift by other actors) and, for objects, the digest of this very intent is the one the last
apply stamped into an annotation (which catches fields dropped from the intent while the operator was down). The
/status subresource cannot carry that annotation, so for status `covers` alone decides.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cachetools import TTLCache

from slurmctl.runtime.client import Obj, drop_nones
from slurmctl.runtime.errors import NotFound
from slurmctl.runtime.logs import kv
from slurmctl.runtime.metrics import Metrics, default_metrics
from slurmctl.runtime.objects import meta_of
from slurmctl.runtime.wire import canonical

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


@dataclass(slots=True)
class _Applied:
    """An intent applied (`digest`) and the last resourceVersion of the object known to hold it: the object as it is
    after the apply, or a later one found to hold it still (changed by someone else: a StatefulSet's status). Moved
    on in place, as re-inserting an entry would restart its TTL. Why moved on: at 10,240 workers, each pass after an
    edit compared all 64 worker StatefulSets with their intents again, a third of the pass the edit waits on."""

    resource_version: str
    digest: str


def _not_watched(api_version: str, kind: str, namespace: str, name: str) -> Cached:
    return Cached.NOT_WATCHED


def intent_digest(body: Mapping[str, Any], field_manager: str) -> str:
    """SHA-256 of `[field_manager, body]` as compact JSON with sorted keys (`wire.canonical`, fast: the digest is
    taken of every intent, also of those the cache then skips). Earlier releases hashed `json.dumps` of the same;
    the bytes differ only for non-ASCII text and floats in exponent form, so an upgrade applies such an object once
    more."""
    return hashlib.sha256(canonical([field_manager, body])).hexdigest()


def _same_scalar(live: Any, want: Any) -> bool:
    # The server stores int-or-string values and quantities as strings ("2" for 2).
    return bool(live == want or (not isinstance(want, bool) and str(live) == str(want)))


def _is_zero(value: Any) -> bool:
    """Go's omitempty: the server stores no key for "", 0, false, {} or []."""
    return not value  # exactly JSON's zero values: "", 0, false, null, {}, []


def _key_of(item: Mapping[str, Any]) -> tuple[str, Any] | None:
    for field in ("name", "type"):
        if field in item:
            return field, item[field]
    return None


def covers(live: Any, want: Any) -> bool:
    """Whether `live` already holds every value of `want`: keys the server defaulted may be extra; list items that
    are named (by `name` or `type`) are matched by name, so items other field managers own may be extra too;
    other lists must match item by item."""
    if isinstance(want, Mapping):
        return isinstance(live, Mapping) and all(
            covers(live[k], v) if k in live else _is_zero(v) for k, v in want.items()
        )
    if isinstance(want, list):
        if not isinstance(live, list):
            return False
        keys = [_key_of(item) if isinstance(item, Mapping) else None for item in want]
        if want and all(keys):
            by_key = {_key_of(item): item for item in live if isinstance(item, Mapping)}
            return all(k in by_key and covers(by_key[k], item) for k, item in zip(keys, want, strict=True))
        return len(live) == len(want) and all(covers(a, b) for a, b in zip(live, want, strict=True))
    return _same_scalar(live, want)


def _rv(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else meta_of(obj).resource_version or None


class Applier:
    def __init__(
        self,
        transport: ApplyTransport,
        *,
        lookup: LiveLookup = _not_watched,
        digest_annotation: str = "slurmctl.io/intent-digest",
        ttl: float = DEFAULT_TTL,
        maxsize: int = 100_000,
        timer: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics or default_metrics()
        self._transport = transport
        self._lookup = lookup
        self._digest_annotation = digest_annotation
        # Keys this process has applied: once seen, an expired entry means "re-assert", not "just started".
        self._seen: set[tuple[str, ...]] = set()
        self._applied: TTLCache[tuple[str, ...], _Applied] = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)

    async def apply(self, intent: Mapping[str, Any], *, field_manager: str) -> Obj:
        """Apply `intent` (built from scratch: apiVersion, kind, metadata, spec...; `None`s are dropped)."""
        return await self._apply(drop_nones(intent), field_manager=field_manager, subresource=None)

    async def apply_status(self, obj: Mapping[str, Any], *, field_manager: str) -> Obj:
        """Apply only `obj["status"]` to the /status subresource, under a manager of its own (e.g. per component)."""
        meta = meta_of(obj)
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {k: v for k, v in (("name", meta.name), ("namespace", meta.namespace)) if v},
            "status": obj.get("status") or {},  # the caller's JSON, sent as it is: none, an empty status
        }
        return await self._apply(drop_nones(body), field_manager=field_manager, subresource="status")

    async def _apply(self, body: Obj, *, field_manager: str, subresource: str | None) -> Obj:
        meta = body["metadata"]  # rewritten below (the digest annotation), so read as JSON
        api_version, kind = body["apiVersion"], body["kind"]
        namespace, name = meta.get("namespace") or "", meta["name"]
        key = (api_version, kind, namespace, name, field_manager, subresource or "")
        digest = intent_digest(body, field_manager)
        if subresource is None:
            body = {
                **body,
                "metadata": {**meta, "annotations": {**meta.get("annotations", {}), self._digest_annotation: digest}},
            }
        remembered = self._applied.get(key)
        if remembered is None or remembered.digest == digest:
            live = await self._live(api_version, kind, namespace, name)
            fresh = remembered is None and key not in self._seen
            if (
                live is not None
                and (remembered is not None or fresh)
                and self._in_place(live, body, remembered, digest=digest, subresource=subresource)
            ):
                if remembered is None:
                    self._applied[key] = _Applied(_rv(live) or "", digest)
                else:
                    remembered.resource_version = _rv(live) or ""
                self._metrics.apply_cache_hits.labels(kind).inc()
                return live
        self._metrics.apply_cache_misses.labels(kind).inc()
        self._applied.pop(key, None)
        applied = await self._transport.apply(body, field_manager=field_manager, subresource=subresource)
        self._seen.add(key)
        rv = _rv(applied)
        if rv:
            self._applied[key] = _Applied(rv, digest)
        log.debug("applied %s", kv(kind=kind, namespace=namespace, name=name, manager=field_manager, rv=rv or ""))
        return applied

    def _in_place(
        self, live: Obj, body: Obj, remembered: _Applied | None, *, digest: str, subresource: str | None
    ) -> bool:
        if remembered is not None and _rv(live) == remembered.resource_version:
            return True
        # The resourceVersion moved: someone wrote the object since (the StatefulSet controller its status, another
        # component its condition). No reason to re-apply while the live object still holds this intent.
        if subresource is not None:
            return covers(live.get(subresource), body.get(subresource))
        stamped = meta_of(live).annotations.get(self._digest_annotation)
        # Objects from a LIST carry no apiVersion/kind; the key already says what they are.
        content = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
        return stamped == digest and covers(live, content)

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
        self._seen.update(self._applied.keys())
        self._applied.clear()
