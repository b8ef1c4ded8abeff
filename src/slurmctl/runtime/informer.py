"""Shared informers: a reflector (paged LIST, then WATCH) feeding a local store and event listeners.

Semantics follow client-go's reflector: WATCH from the LIST's resourceVersion with bookmarks and a randomised
5-10 minute server timeout; `410 Gone` relists and replaces the store, emitting deletes for objects that vanished
meanwhile; 429/5xx/connection failures back off (tenacity, bounded); an inactivity watchdog reconnects a watch that
has delivered nothing, not even a bookmark, for about 70 seconds (half-open connections).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential, wait_random

from slurmctl.runtime.client import Client, Obj, Resource
from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.errors import ApiError, Gone, ServerError
from slurmctl.runtime.logs import kv
from slurmctl.runtime.objects import ListPage, Shared, meta_of, view
from slurmctl.runtime.store import Label, Store, Version, object_key

log = logging.getLogger(__name__)

WATCHDOG_SECONDS = 70.0
STALE_MARGIN = 10.0
MIN_WATCH_TIMEOUT = 300
RETRY_WARNING_EVERY = 10


class EventType(enum.Enum):
    ADDED = "add"
    UPDATED = "update"
    DELETED = "delete"


@dataclass(frozen=True, slots=True)
class Event:
    """What listeners receive. `low_priority` marks events from an initial list, a relist or a resync."""

    type: EventType
    obj: Obj
    old: Obj | None = None
    low_priority: bool = False


Listener = Callable[[Event], None]
Transform = Callable[[Obj], Obj]  # what the store keeps of each object (see Manager.trim)


class Source(Protocol):
    """Where an informer lists and watches from: the real API (`ClientSource`) or a scripted fake in tests."""

    async def list_page(self, *, limit: int, continue_token: str | None) -> Obj: ...

    def watch(
        self, *, resource_version: str, timeout_seconds: int, on_open: Callable[[], None]
    ) -> AsyncIterator[Obj]: ...


class ClientSource:
    """List and watch one resource type through `Client`; the resource path is resolved on first use.

    `label_selector` narrows both the LIST and the WATCH on the server, so objects outside it (e.g. Secrets the
    operator did not create) are never sent to this process at all.
    """

    def __init__(
        self,
        client: Client,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> None:
        self._client = client
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self._resource: Resource | None = None

    async def _res(self) -> Resource:
        if self._resource is None:
            self._resource = await self._client.resource(self.api_version, self.kind)
        return self._resource

    async def list_page(self, *, limit: int, continue_token: str | None) -> Obj:
        res = await self._res()
        return await self._client.list(
            self.api_version, self.kind, namespace=self.namespace if res.namespaced else None,
            label_selector=self.label_selector, limit=limit, continue_token=continue_token,
        )  # fmt: skip

    async def watch(
        self, *, resource_version: str, timeout_seconds: int, on_open: Callable[[], None]
    ) -> AsyncIterator[Obj]:
        res = await self._res()
        namespace = self.namespace if res.namespaced else None
        async for event in self._client.watch(
            res, namespace=namespace, resource_version=resource_version, timeout_seconds=timeout_seconds,
            on_open=on_open, label_selector=self.label_selector,
        ):  # fmt: skip
            yield event


def _retryable(exc: BaseException) -> bool:
    """Everything but 410 is retried with backoff: a missing RBAC rule or CRD may be fixed while we wait."""
    return isinstance(exc, ApiError) and not isinstance(exc, Gone)


def _strip(obj: Obj, keep_managed_fields: bool) -> Obj:
    """The object as the API server sent it, before anything keeps it: the one place its JSON is changed in place
    (managedFields, often most of a small object's size, are read by nothing that reads the cache)."""
    if not keep_managed_fields:
        (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _typed(item: Obj, listed: Mapping[str, Any]) -> Obj:
    """A listed item with the apiVersion and kind a watch event's object carries (changed in place, as `_strip`
    does). The API server leaves them out of a list's items, so the first watch event of each object after a list
    differed from the cached one in them: with 10,240 pods cached, each one's first event after a relist looked like
    a change to predicates that ignore the operator's own writes, and each woke a reconcile of all of them."""
    kind = listed.get("kind")
    if "kind" not in item and isinstance(kind, str):
        item["kind"] = kind.removesuffix("List")
    if "apiVersion" not in item and isinstance(listed.get("apiVersion"), str):
        item["apiVersion"] = listed["apiVersion"]
    return item


def _rv(obj: Obj) -> str:
    return meta_of(obj).resource_version


class Informer:
    def __init__(
        self,
        source: Source,
        *,
        name: str,
        clock: Clock = REAL_CLOCK,
        page_size: int = 500,
        resync_period: float | None = None,
        watchdog: float = WATCHDOG_SECONDS,
        keep_managed_fields: bool = False,
        rng: random.Random | None = None,
        label_selector: str | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.name = name
        self.label_selector = label_selector  # what the source was narrowed to (the cache answers only within it)
        self._transform = transform
        self.store = Store(encoded=True)
        self._source = source
        self._clock = clock
        self._page_size = page_size
        self._resync_period = resync_period
        self._watchdog = watchdog
        self._keep_managed_fields = keep_managed_fields
        self._rng = rng or random.Random()  # jitter, not security
        self._listeners: list[Listener] = []
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._last_activity = clock.monotonic()
        self.relists = 0  # LISTs after the first one (410 or lost watch): for tests and logs

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    @property
    def resource_version(self) -> str:
        return self._resource_version

    def is_stale(self) -> bool:
        """True when there has been no sign of a live connection (a list, a watch opened, an event or a bookmark)
        for longer than the watchdog period plus a margin for the reconnect itself."""
        return self._clock.monotonic() - self._last_activity > self._watchdog + STALE_MARGIN

    def add_listener(self, listener: Listener) -> None:
        """Listeners run synchronously in the informer task: keep them cheap (enqueue, never await)."""
        self._listeners.append(listener)
        if self.has_synced:  # a late listener still sees everything already cached, as client-go does
            for obj in self.store:
                self._emit_to(listener, Event(EventType.ADDED, obj, low_priority=True))

    def _emit(self, event: Event) -> None:
        for listener in self._listeners:
            self._emit_to(listener, event)

    def _emit_to(self, listener: Listener, event: Event) -> None:
        try:
            listener(event)
        except Exception:
            log.exception("event listener failed %s", kv(informer=self.name, event=event.type.value))

    # ---- the reflector ----------------------------------------------------------------------------------------
    async def run(self) -> None:
        """List and watch until cancelled. Owned by the manager's TaskGroup."""
        async with asyncio.TaskGroup() as tg:
            if self._resync_period:
                tg.create_task(self._resync_loop(self._resync_period))
            while True:
                try:
                    await self._retrying(self._list)
                    await self._retrying(self._watch_forever)
                except Gone as exc:  # a compacted resourceVersion or an expired continue token
                    log.info("resourceVersion expired, relisting %s", kv(informer=self.name, error=exc))
                self.relists += 1

    async def _retrying(self, step: Callable[[], Awaitable[None]]) -> None:
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.5, max=30.0) + wait_random(0, 1),
            retry=retry_if_exception(_retryable),
            sleep=self._clock.sleep,
            before_sleep=self._log_retry,
            reraise=True,
        ):
            with attempt:
                await step()

    def _log_retry(self, state: RetryCallState) -> None:
        """The first failure of a streak is a WARNING (one line, no traceback); the retries that follow are DEBUG,
        except every RETRY_WARNING_EVERY-th, so an outage costs one line per informer and a lasting failure (a
        missing RBAC rule) still shows now and then."""
        exc = state.outcome.exception() if state.outcome else None
        attempt = state.attempt_number
        level = logging.WARNING if attempt == 1 or attempt % RETRY_WARNING_EVERY == 0 else logging.DEBUG
        log.log(level, "list/watch failed, backing off %s", kv(informer=self.name, attempt=attempt, error=exc))

    async def _list(self) -> None:
        """Paged LIST: each page goes into the store as it arrives (adds, and updates for what changed), then what the
        list no longer holds is deleted. Why page by page and not the whole list at the end: a relist of a large
        cluster's pods (10,240 of them, relisted when the API server closes a watch that fell behind) held every
        listed pod decoded beside the store's decoded copies of the same pods, ~0.3 GiB at the operator's peak
        (docs/performance.md); now it holds one page. Between pages a relist's store mixes newer objects with ones not
        yet relisted, each as the API server once sent it, as a watch that is behind does."""
        listed: set[str] = set()
        token: str | None = None
        while True:
            answer = await self._source.list_page(limit=self._page_size, continue_token=token)
            page = view(answer, ListPage)
            for item in page.items:
                listed.add(self._listed(self._kept(_typed(item, answer))))
            token = page.metadata.continue_ or None
            if token is None:
                break
        for key in self.store.keys() - listed:
            gone = self.store.remove(key)
            if gone is not None:
                self._emit(Event(EventType.DELETED, gone, low_priority=True))
        self._resource_version = page.metadata.resource_version
        self._touch()
        self._synced.set()
        log.debug("listed %s", kv(informer=self.name, objects=len(listed), resourceVersion=self._resource_version))

    def _listed(self, obj: Obj) -> str:
        """Store one listed object, emit what it changed; returns its key."""
        old = self.store.put(obj)
        if old is None:
            self._emit(Event(EventType.ADDED, obj, low_priority=True))
        elif _rv(old) != _rv(obj):
            self._emit(Event(EventType.UPDATED, obj, old, low_priority=True))
        return object_key(obj)

    def _kept(self, obj: Obj) -> Obj:
        """What the store keeps of `obj`, and what listeners receive: the same object, so the views a listener's
        predicate decodes of it serve the passes that read it from the store (objects.Shared)."""
        obj = _strip(obj, self._keep_managed_fields)
        return Shared(obj if self._transform is None else self._transform(obj))

    def _touch(self) -> None:
        self._last_activity = self._clock.monotonic()

    async def _watch_forever(self) -> None:
        """Consecutive watches from the last seen resourceVersion; each ends at the server's timeout."""
        while True:
            timeout = self._rng.randint(MIN_WATCH_TIMEOUT, 2 * MIN_WATCH_TIMEOUT)
            opened = self._clock.monotonic()
            consumer = asyncio.ensure_future(self._consume(timeout))
            watchdog = asyncio.ensure_future(self._watchdog_expiry(opened))
            try:
                done, _ = await asyncio.wait([consumer, watchdog], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (consumer, watchdog):
                    task.cancel()
                await asyncio.gather(consumer, watchdog, return_exceptions=True)
            if consumer in done:
                if consumer.result() == 0 and self._clock.monotonic() - opened < 1.0:
                    # A server that ends watches at once would otherwise be hammered in a tight loop.
                    raise ServerError(f"watch {self.name}: closed at once", status=0, reason="WatchClosed")
            else:
                # Presumed a half-open connection: reconnect at once from the same resourceVersion. A server that
                # cannot be reached fails the reconnect, which then backs off.
                log.info("watch silent, reconnecting %s", kv(informer=self.name, seconds=self._watchdog))

    async def _watchdog_expiry(self, opened: float) -> None:
        while (remaining := max(self._last_activity, opened) + self._watchdog - self._clock.monotonic()) > 0:
            await self._clock.sleep(remaining)

    async def _consume(self, server_timeout: int) -> int:
        """Apply one watch's events; returns how many arrived."""
        stream = self._source.watch(
            resource_version=self._resource_version, timeout_seconds=server_timeout, on_open=self._touch
        )
        received = 0
        try:
            async for event in stream:
                received += 1
                self._touch()
                self._handle(event)
            return received
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _handle(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            log.warning("malformed watch event ignored %s", kv(informer=self.name, type=kind))
            return
        rv = _rv(obj)
        if kind == "BOOKMARK":
            self._resource_version = rv or self._resource_version
            return
        obj = self._kept(obj)
        key = object_key(obj)
        if kind in ("ADDED", "MODIFIED"):
            old = self.store.put(obj)
            if old is None:
                self._emit(Event(EventType.ADDED, obj))
            else:
                self._emit(Event(EventType.UPDATED, obj, old))
        elif kind == "DELETED":
            old = self.store.remove(key)
            self._emit(Event(EventType.DELETED, old if old is not None else obj))
        else:
            log.warning("unknown watch event ignored %s", kv(informer=self.name, type=kind))
            return
        if rv:
            self._resource_version = rv

    async def _resync_loop(self, period: float) -> None:
        """Re-deliver every cached object as a low-priority update; no API call (controller-runtime's SyncPeriod)."""
        while True:
            await self._clock.sleep(period)
            if self.has_synced:
                for obj in self.store:
                    self._emit(Event(EventType.UPDATED, obj, obj, low_priority=True))


class UnionStore(Store):
    """A read-only view over the stores of several informers of one kind (one per watched namespace). Their keys are
    disjoint (`namespace/name`), so the union needs no merging."""

    def __init__(self, stores: list[Store]) -> None:
        super().__init__()
        self._stores = stores

    def __len__(self) -> int:
        return sum(len(s) for s in self._stores)

    def __iter__(self) -> Iterator[Obj]:
        return iter([obj for s in self._stores for obj in s])

    def get(self, key: str) -> Obj | None:
        for store in self._stores:
            if (obj := store.get(key)) is not None:
                return obj
        return None

    def keys(self) -> set[str]:
        return set().union(*(s.keys() for s in self._stores))

    def changed(self, namespace: str, label: Label, since: Version | None) -> tuple[Version, frozenset[str] | None]:
        versions: list[int] = []
        keys: set[str] | None = set()
        for store in self._stores:
            mine = None if since is None else since[len(versions) : len(versions) + 2]  # a store's: (store, number)
            version, changed = store.changed(namespace, label, mine)
            versions += version
            keys = None if keys is None or changed is None else keys | changed
        return tuple(versions), None if keys is None else frozenset(keys)

    def put(self, obj: Obj) -> Obj | None:
        raise TypeError("a UnionStore is read-only; each informer writes its own store")

    def remove(self, key: str) -> Obj | None:
        raise TypeError("a UnionStore is read-only; each informer writes its own store")

    def list(
        self,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_uid: str | None = None,
        node_name: str | None = None,
    ) -> list[Obj]:
        found = [
            o
            for s in self._stores
            for o in s.list(namespace=namespace, labels=labels, owner_uid=owner_uid, node_name=node_name)
        ]
        return sorted(found, key=object_key)


class NamespacedInformers(Informer):
    """One kind watched in a fixed list of namespaces: an informer per namespace (RBAC Roles grant list/watch per
    namespace, never across all), presented as one informer with a union store."""

    def __init__(self, members: list[Informer], *, name: str, label_selector: str | None = None) -> None:
        self.name = name
        self.label_selector = label_selector
        self.members = members
        self.store = UnionStore([m.store for m in members])
        self.relists = 0

    @property
    def has_synced(self) -> bool:
        return all(m.has_synced for m in self.members)

    async def wait_synced(self) -> None:
        for member in self.members:
            await member.wait_synced()

    @property
    def resource_version(self) -> str:
        return ""

    def is_stale(self) -> bool:
        return any(m.is_stale() for m in self.members)

    def add_listener(self, listener: Listener) -> None:
        for member in self.members:
            member.add_listener(listener)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for member in self.members:
                tg.create_task(member.run(), name=f"informer-{member.name}")
