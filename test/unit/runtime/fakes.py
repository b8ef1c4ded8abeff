"""Fakes for runtime unit tests: a clock that only moves when told, and a scripted list/watch source."""

from __future__ import annotations

import asyncio
import copy
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

from slurmctl.runtime.errors import ServerError

Obj = dict[str, Any]
END = object()  # pushed into a watch stream: the server ends the watch normally


async def settle(rounds: int = 50) -> None:
    """Let every runnable task run until the loop is quiet (no real time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], what: str = "condition", rounds: int = 200) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


class FakeClock:
    def __init__(self) -> None:
        self._now = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), next(self._seq), future))
        await future

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in deadline order and letting each wake-up run before the next."""
        target = self._now + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            due, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, due)
            if not future.done():
                future.set_result(None)
                await settle()
        self._now = target
        await settle()


def config_map(name: str, rv: int, *, namespace: str = "ns", **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(rv),
            "labels": labels,
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
    }


class FakeSource:
    """A tiny API server for one resource type: state changes only when the test says, watches are scripted queues."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.rv = 0
        self.list_calls = 0
        self.list_errors: list[BaseException] = []
        self.watch_rvs: list[str] = []
        self.streams: list[asyncio.Queue[object]] = []
        self.refuse_watches = False  # the server is unreachable: every watch fails to connect

    def put(self, name: str, **labels: str) -> Obj:
        self.rv += 1
        self.objects[name] = config_map(name, self.rv, **labels)
        return self.objects[name]

    def delete(self, name: str) -> Obj:
        self.rv += 1
        return self.objects.pop(name)

    async def list_page(self, *, limit: int, continue_token: str | None) -> Obj:
        self.list_calls += 1
        if self.list_errors:
            raise self.list_errors.pop(0)
        names = sorted(self.objects)
        start = int(continue_token or 0)
        page = names[start : start + limit]
        more = start + limit < len(names)
        # As the API server lists: the list says its apiVersion and kind, its items do not.
        items = [
            {k: v for k, v in copy.deepcopy(self.objects[n]).items() if k not in ("apiVersion", "kind")} for n in page
        ]
        return {
            "apiVersion": "v1",
            "kind": "ConfigMapList",
            "items": items,
            "metadata": {"resourceVersion": str(self.rv), **({"continue": str(start + limit)} if more else {})},
        }

    def watch(self, *, resource_version: str, timeout_seconds: int, on_open: Callable[[], None]) -> AsyncIterator[Obj]:
        assert 300 <= timeout_seconds <= 600
        self.watch_rvs.append(resource_version)
        queue: asyncio.Queue[object] = asyncio.Queue()
        self.streams.append(queue)
        return self._stream(queue, on_open)

    async def _stream(self, queue: asyncio.Queue[object], on_open: Callable[[], None]) -> AsyncIterator[Obj]:
        if self.refuse_watches:
            raise ServerError("connection refused", status=0)
        on_open()
        while True:
            item = await queue.get()
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, dict)
            yield item

    def send(self, item: object) -> None:
        """Deliver to the newest watch."""
        self.streams[-1].put_nowait(item)
