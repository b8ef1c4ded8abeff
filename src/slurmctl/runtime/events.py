"""Kubernetes Events (core/v1) posted from a background task, so recording never blocks a reconcile.

Repeats of the same type and reason on the same object within the aggregation window update one Event (count,
lastTimestamp, latest message) instead of creating a new one each time, as client-go's EventCorrelator does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slurmctl.runtime.client import Client, Obj
from slurmctl.runtime.errors import ApiError, NotFound, outage_reason
from slurmctl.runtime.logs import Throttle, kv
from slurmctl.runtime.objects import meta_of

log = logging.getLogger(__name__)

OUTAGE_LOG_INTERVAL = 30.0

NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE = 1024


@dataclass(slots=True)
class _Posted:
    namespace: str
    name: str
    count: int
    first_seen: float


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        client: Client,
        *,
        component: str,
        instance: str = "",
        queue_size: int = 1000,
        aggregation_window: float = 600.0,
    ) -> None:
        self._client = client
        # Posting fails for every event while the API server is away: one line per interval, as the controllers do.
        self._outage_log = Throttle(OUTAGE_LOG_INTERVAL)
        self.component = component
        self.instance = instance
        self._queue: asyncio.Queue[tuple[Obj, str, str, str]] = asyncio.Queue(maxsize=queue_size)
        self._window = aggregation_window
        self._posted: dict[tuple[str, ...], _Posted] = {}

    def record(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Queue an Event about `obj` (type Normal or Warning); drops it, with a log line, if the queue is full."""
        meta = meta_of(obj)
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "resourceVersion": meta.resource_version,
        }
        try:
            self._queue.put_nowait(({k: v for k, v in involved.items() if v}, type, reason, message[:MAX_MESSAGE]))
        except asyncio.QueueFull:
            log.warning("event dropped, recorder queue full %s", kv(reason=reason, object=meta.name))

    async def run(self) -> None:
        while True:
            involved, type_, reason, message = await self._queue.get()
            try:
                await self._post(involved, type_, reason, message)
            except ApiError as exc:
                self._log_failure(exc, reason=reason, name=involved.get("name", ""))
            finally:
                self._queue.task_done()

    def _log_failure(self, exc: ApiError, *, reason: str, name: str) -> None:
        if outage_reason(exc) is None:
            log.warning("could not post event %s", kv(reason=reason, object=name, error=exc))
        elif (held := self._outage_log.allow()) is not None:
            log.warning("could not post event %s", kv(reason=reason, object=name, error=exc, suppressed=held))

    async def flush(self) -> None:
        """Wait until every queued event has been posted (or failed); used on shutdown and in tests."""
        await self._queue.join()

    async def _post(self, involved: Obj, type_: str, reason: str, message: str) -> None:
        key = (str(involved.get("uid") or involved.get("name")), str(involved.get("kind")), type_, reason)
        now = time.monotonic()
        posted = self._posted.get(key)
        stamp = _timestamp()
        if posted is not None and now - posted.first_seen < self._window:
            patch = {"count": posted.count + 1, "lastTimestamp": stamp, "message": message}
            try:
                await self._client.merge_patch("v1", "Event", posted.name, patch, namespace=posted.namespace)
                posted.count += 1
                return
            except NotFound:
                pass  # expired or deleted: post a fresh one
        namespace = involved.get("namespace") or "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved.get('name', 'object')}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        created = await self._client.create(body)
        self._posted[key] = _Posted(namespace, created["metadata"]["name"], 1, now)
        if len(self._posted) > 4096:  # bound memory: forget the oldest aggregation entries
            for stale in list(self._posted)[:1024]:
                del self._posted[stale]
