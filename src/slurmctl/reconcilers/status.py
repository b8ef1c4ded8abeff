"""The one writer of SlurmCluster status: every component hands it its part (its condition, its summary), and it
writes what changed, per cluster, in one server-side apply a moment later.

Why one writer: each component used to apply its own condition under its own field manager, and the cluster
component re-applied the phase after each of them, about a dozen status writes per cluster on the way to Available.
Now the parts that arrive while a write is due go out together; a part that only repeats what the status already
says writes nothing. When a write is due depends on what it says: a new phase or a failure goes out within
`COALESCE_SECONDS` (what one pass of the components says); progress within a phase waits `PROGRESS_SECONDS` for more;
a new cluster's first parts wait for its phase. The phase is derived from the conditions about to be written
(`derive`, set by the cluster component), so it moves in the same write as the condition that moves it.

The writer applies the whole status under one field manager, so it must know the whole status: the last status it
wrote until the cache shows that write, else the cached status. Fields that releases with one field manager per
component (`slurmctl-<component>`) still co-own are handed over after a write (an empty apply by each such manager),
so that a field this writer drops later (a removed worker group's row) really goes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from slurmctl.api.v1 import API_VERSION, KIND, Reason
from slurmctl.reconcilers.views import ClusterStatus
from slurmctl.render.kinds import SLURM_CLUSTER
from slurmctl.runtime import ApiError, Manager, NotFound
from slurmctl.runtime.apply import covers
from slurmctl.runtime.clock import sleep_or_event
from slurmctl.runtime.errors import outage_reason, rejection
from slurmctl.runtime.logs import kv
from slurmctl.runtime.objects import ObjectMeta, meta_of, view

log = logging.getLogger(__name__)

FIELD_MANAGER = "slurmctl-status"
# Releases before this writer applied status under one manager per component: `slurmctl-<component>`.
_FORMER_MANAGER_PREFIX = "slurmctl-"
# How long parts wait for others to join them: news (a new phase, a failure) only as long as one pass of the
# components takes; progress within a phase ("2/3 ready", "populating") longer, so that a cluster coming up writes a
# few summaries rather than every step.
COALESCE_SECONDS = 0.2
PROGRESS_SECONDS = 4.0  # 2 s: 3.8-5 status writes per cluster in bench many_clusters, 4 s: 3.1
# A new cluster's first status waits for the cluster component's part (its phase, news): the other components' first
# parts go out with it rather than before it, each on its own, while the cluster component works through the queue.
FIRST_SECONDS = 10.0
BACKLOG = 50  # clusters with pending parts beyond which progress waits longer
RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)

Status = dict[str, Any]
Key = tuple[str, str]  # namespace, name
# (the cached SlurmCluster, the status before this write, the status to write) -> the status to write
Derive = Callable[[Mapping[str, Any], Mapping[str, Any], Status], Status]
# (the cached SlurmCluster, the status before this write, the status written)
Written = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], None]


def overlay(base: Mapping[str, Any], part: Mapping[str, Any]) -> Status:
    """`part` over `base`: conditions replace those of their type (the others stay, in order), every other field is
    replaced whole (a component's part carries all its worker rows). JSON over JSON, key by key: what comes out is
    written as it is, every field of each condition kept."""
    merged = dict(base)
    for field, value in part.items():
        if field == "conditions":
            by_type = {c["type"]: c for c in merged.get("conditions") or []}
            by_type.update((c["type"], c) for c in value)
            merged["conditions"] = list(by_type.values())
        else:
            merged[field] = value
    return merged


def _not_older(live_rv: str, written_rv: str) -> bool:
    try:
        return int(live_rv) >= int(written_rv)
    except ValueError:
        return live_rv == written_rv


class _Cluster(msgspec.Struct, frozen=True, gc=False):
    """What the writer reads of a SlurmCluster, cached or as a write's answer: its metadata, and its status as the
    JSON the writer merges parts into and writes back whole."""

    metadata: ObjectMeta = ObjectMeta()
    status: Status = {}

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> _Cluster:
        return view(obj, cls)


@dataclass(frozen=True, slots=True)
class _Written:
    resource_version: str
    status: Status


def _status_body(key: Key, status: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": key[1], "namespace": key[0]},
        "status": status,
    }


class StatusWriter:
    def __init__(
        self,
        manager: Manager,
        *,
        field_manager: str = FIELD_MANAGER,
        window: float = COALESCE_SECONDS,
        progress_window: float = PROGRESS_SECONDS,
        first_window: float = FIRST_SECONDS,
    ) -> None:
        self._manager = manager
        self._clock = manager.clock
        self.field_manager = field_manager
        self.window = window
        self.progress_window = progress_window
        self.first_window = first_window
        self.derive: Derive | None = None  # the phase (set by the cluster component)
        self.written: Written | None = None  # after each write (the cluster component's phase Events)
        self._pending: dict[Key, Status] = {}  # parts not written yet, merged
        self._due: dict[Key, float] = {}  # when each key's pending parts go out
        self._failures: dict[Key, int] = {}
        self._in_flight: set[Key] = set()
        # The status each in-flight write carries, shown by view() and judged by submit() until the write lands in
        # `_written`: a reconcile while the API server has not answered yet must not take it for unsaid (it warned
        # twice under load), nor a part that moves the phase beyond it for mere progress.
        self._writing: dict[Key, Status] = {}
        self._written: dict[Key, _Written] = {}  # what this writer wrote last, per cluster
        self._wake = asyncio.Event()

    # ---- what components call ---------------------------------------------------------------------------------
    def view(self, obj: Mapping[str, Any]) -> Status:
        """The status as it will be once what is pending is written: what a component compares its part with."""
        key = _key(obj)
        return overlay(overlay(self._base(key, obj), self._writing.get(key, {})), self._pending.get(key, {}))

    def submit(self, obj: Mapping[str, Any], part: Mapping[str, Any]) -> None:
        """Write `part` of the status of the SlurmCluster `obj` soon, together with whatever else comes meanwhile;
        nothing when the status already says it."""
        key = _key(obj)
        pending = overlay(self._pending.get(key, {}), part)
        # Judged against the status as it will be once the write in flight lands: against the one before it, the last
        # component's part that moves the phase looks like more progress and waits the progress window.
        base = overlay(self._base(key, obj), self._writing.get(key, {}))
        if covers(base, pending):
            self._pending.pop(key, None)  # what is left to say is already said
            self._due.pop(key, None)
            return
        self._pending[key] = pending
        if _is_failure(part) or self._phase_news(obj, base, pending):
            window = self.window
        elif self.derive is not None and "phase" not in base:
            window = self.first_window  # a new cluster's status starts with its phase: wait for the cluster's part
        else:
            # Many clusters coming up at once (a backlog of pending parts): progress waits longer, up to 4x.
            window = self.progress_window * min(4.0, max(1.0, len(self._pending) / BACKLOG))
        due = self._clock.monotonic() + window
        if due < self._due.get(key, float("inf")):
            self._due[key] = due
            self._wake.set()

    def _phase_news(self, obj: Mapping[str, Any], base: Mapping[str, Any], pending: Mapping[str, Any]) -> bool:
        """Whether the pending parts change the phase (the first one included): news, unlike progress within it."""
        status = overlay(base, pending)
        if self.derive is not None:
            status = self.derive(obj, base, status)
        return status.get("phase") != base.get("phase")

    def forget(self, namespace: str, name: str) -> None:
        """The cluster is gone: nothing more to write for it."""
        key = (namespace, name)
        for memo in (self._pending, self._due, self._written, self._failures):
            memo.pop(key, None)

    # ---- writing ----------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Write each cluster's pending parts when they are due, several clusters at once, while this process leads."""
        async with asyncio.TaskGroup() as tg:
            while True:
                self._wake.clear()
                now = self._clock.monotonic()
                for key, due in list(self._due.items()):
                    if due <= now and key not in self._in_flight:
                        self._in_flight.add(key)
                        tg.create_task(self._write_then_wake(key))
                waiting = [due for key, due in self._due.items() if key not in self._in_flight]
                await sleep_or_event(self._clock, min(waiting) - now if waiting else None, self._wake)

    async def flush(self) -> None:
        """Write everything pending now (tests; the run loop writes on its own)."""
        for key in list(self._pending):
            await self._write(key)

    async def _write_then_wake(self, key: Key) -> None:
        try:
            await self._write(key)
        except Exception:  # a bug: say so, and keep writing the other clusters' status
            log.exception("status write failed %s", kv(namespace=key[0], name=key[1]))
        finally:
            self._in_flight.discard(key)
            self._wake.set()

    async def _write(self, key: Key) -> None:
        self._due.pop(key, None)
        part = self._pending.pop(key, None)
        obj = self._manager.cache.get(*SLURM_CLUSTER, key[1], namespace=key[0])
        if not part or obj is None:
            if obj is None:
                self.forget(*key)
            return
        base = self._base(key, obj)
        status = overlay(base, part)
        if self.derive is not None:
            status = self.derive(obj, base, status)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("status write %s", kv(namespace=key[0], name=key[1], changed=",".join(_changes(base, status))))
        self._writing[key] = status  # with its phase: what `view` and `submit` compare with until it lands
        try:
            applied = await self._manager.apply_status(_status_body(key, status), field_manager=self.field_manager)
        except NotFound:
            self.forget(*key)
            return
        except ApiError as exc:
            self._retry_later(key, part, exc)
            return
        finally:
            self._writing.pop(key, None)
        self._failures.pop(key, None)
        answer = _Cluster.of(applied)
        if answer.metadata.resource_version:
            self._written[key] = _Written(answer.metadata.resource_version, answer.status or status)
        if self.written is not None:
            self.written(obj, base, status)
        await self._release_former_managers(key, applied)

    def _retry_later(self, key: Key, part: Status, exc: ApiError) -> None:
        detail = rejection(exc)
        if detail is not None:  # our own models made it: a bug, and the same body cannot succeed
            log.error("status rejected %s", kv(namespace=key[0], name=key[1], detail=detail))
            return
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS)) - 1]
        log.warning(
            "status write failed, retrying %s",
            kv(namespace=key[0], name=key[1], reason=outage_reason(exc) or exc.message, retry_s=delay),
        )
        self._pending[key] = overlay(part, self._pending.get(key, {}))  # what came meanwhile is newer
        self._due[key] = self._clock.monotonic() + delay
        self._wake.set()

    async def _release_former_managers(self, key: Key, applied: Mapping[str, Any]) -> None:
        """Managers of older releases still co-own the fields this writer now owns; an empty apply by each hands
        them over, so that a field this writer leaves out (a removed group's row) is removed. Only the answer to a
        write shows them (the cache keeps no managedFields), and after the first write of a cluster there are none."""
        former = {
            entry.manager
            for entry in meta_of(applied).managed_fields
            if entry.operation == "Apply"
            and entry.subresource == "status"
            and entry.manager.startswith(_FORMER_MANAGER_PREFIX)
            and entry.manager != self.field_manager
        }
        try:
            for manager in sorted(former):
                # No `status` key at all: an empty `status: {}` is itself a field the manager would go on owning.
                body = {k: v for k, v in _status_body(key, {}).items() if k != "status"}
                applied = await self._manager.client.apply(body, field_manager=manager, subresource="status")
                log.info("status taken over %s", kv(namespace=key[0], name=key[1], former_manager=manager))
        except ApiError as exc:  # the next write tries again
            log.warning("status take-over failed %s", kv(namespace=key[0], name=key[1], error=exc.message))
            return
        if former:
            answer = _Cluster.of(applied)
            if answer.metadata.resource_version:
                self._written[key] = _Written(answer.metadata.resource_version, answer.status)

    def _base(self, key: Key, obj: Mapping[str, Any]) -> Status:
        """The status as last written: `obj`'s own when it is not older than this writer's last write, else that
        write's. The last write is kept (until the next, or the cluster is gone), not dropped once one copy shows
        the cache caught up: a reconcile still holding a copy loaded before the write must see it too."""
        live = _Cluster.of(obj)  # its status a copy: the cached object is never changed
        written = self._written.get(key)
        if written is None:
            return live.status
        live_rv = live.metadata.resource_version
        if live_rv and _not_older(live_rv, written.resource_version):
            return live.status
        return written.status


def _is_failure(part: Mapping[str, Any]) -> bool:
    """Whether a part reports a failure (a False condition neither on its way nor switched off): news at once."""
    return any(
        c.status == "False" and not (Reason.means_progress(c.reason) or c.reason == Reason.DISABLED)
        for c in ClusterStatus.of(part).conditions
    )


def _key(obj: Mapping[str, Any]) -> Key:
    md = meta_of(obj)
    return md.namespace, md.name


def _changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a write changes, for the debug log: condition types (with their new reason), other fields."""
    old = {c.type: c for c in ClusterStatus.of(before).conditions}
    changed = [f"{c.type}={c.reason}" for c in ClusterStatus.of(after).conditions if old.get(c.type) != c]
    changed += [f"{k}={v}" for k, v in after.items() if k != "conditions" and before.get(k) != v]
    return changed
