"""A rate-limited, delaying work queue with client-go's semantics.

- De-duplication: an item waiting in the queue is queued once however often it is added (the dirty set).
- Exclusivity: an item handed out by `get` is not handed out again until `done` (the processing set); an item added
  while it is being processed is queued exactly once more when `done` is called.
- `add_after` is driven by one timer task (`run`), never a task per item.
- Per-item exponential backoff for `add_rate_limited`, reset by `forget`.
- Two priorities: events from an initial list or a resync (`low_priority=True`) wait behind real changes.

Deliberate difference from client-go: after `shutdown`, `get` raises `ShutDown` at once instead of handing out the
items still queued; reconciliation is level-based, so they are simply re-listed on the next start, and a stopping
manager does not start new work.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from slurmctl.runtime.clock import REAL_CLOCK, Clock, sleep_or_event
from slurmctl.runtime.metrics import Metrics, default_metrics

T = TypeVar("T", bound=Hashable)

_HIGH, _LOW = 0, 1


class ShutDown(Exception):  # noqa: N818 - client-go's name
    """The queue is shutting down: the worker should return."""


class ExponentialBackoff(Generic[T]):
    """client-go's ItemExponentialFailureRateLimiter: base * 2^failures, capped."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        # Past 2^60 the float is far beyond any cap; avoid overflowing.
        return float(min(self.cap, self.base * 2 ** min(failures, 60)))

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class WorkQueue(Generic[T]):
    def __init__(
        self,
        name: str,
        *,
        clock: Clock = REAL_CLOCK,
        backoff: ExponentialBackoff[T] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.name = name
        metrics = metrics or default_metrics()
        self._clock = clock
        self._backoff: ExponentialBackoff[T] = backoff or ExponentialBackoff()
        self._queues: tuple[deque[T], deque[T]] = (deque(), deque())
        self._queued: dict[T, int] = {}  # the dirty set: item -> priority it waits with
        self._processing: dict[T, float] = {}  # item -> when processing started (perf_counter)
        self._added_at: dict[T, float] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._waiting: dict[T, float] = {}  # add_after: item -> due time (earliest wins)
        self._heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()
        self._timer_wake = asyncio.Event()
        self._shutting_down = False
        self._drained = asyncio.Event()
        self._depth = metrics.workqueue_depth.labels(name)
        self._adds = metrics.workqueue_adds.labels(name)
        self._queue_duration = metrics.workqueue_queue_duration.labels(name)
        self._work_duration = metrics.workqueue_work_duration.labels(name)
        self._retries = metrics.workqueue_retries.labels(name)
        metrics.workqueue_unfinished_work.labels(name).set_function(self._unfinished_work)
        metrics.workqueue_longest_running.labels(name).set_function(self._longest_running)

    def __len__(self) -> int:
        return len(self._queued)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def add(self, item: T, *, low_priority: bool = False) -> None:
        if self._shutting_down:
            return
        priority = _LOW if low_priority else _HIGH
        current = self._queued.get(item)
        if current is not None:
            if priority < current:  # a real change overtakes a resync already waiting for the same item
                self._queued[item] = priority
                self._queues[priority].append(item)
            return
        self._adds.inc()
        self._queued[item] = priority
        if item in self._processing:
            return  # `done` queues it again
        self._push(item, priority)

    def _push(self, item: T, priority: int) -> None:
        self._queues[priority].append(item)
        self._added_at.setdefault(item, time.perf_counter())
        self._depth.inc()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def _pop(self) -> T | None:
        for priority, queue in enumerate(self._queues):
            while queue:
                item = queue.popleft()
                # Skip stale entries: items promoted to high priority, or already handed out.
                if self._queued.get(item) == priority and item not in self._processing:
                    return item
        return None

    async def get(self) -> T:
        """The next item, waiting for one; raises `ShutDown` once the queue is shutting down."""
        while True:
            if self._shutting_down:
                raise ShutDown
            item = self._pop()
            if item is not None:
                break
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # Hand a wake-up we may have consumed on to the next waiter.
                if waiter.done() and not waiter.cancelled() and self._waiters:
                    self._waiters.popleft().set_result(None)
                raise
        del self._queued[item]
        now = time.perf_counter()
        self._depth.dec()
        self._queue_duration.observe(now - self._added_at.pop(item, now))
        self._processing[item] = now
        return item

    def done(self, item: T) -> None:
        started = self._processing.pop(item, None)
        if started is not None:
            self._work_duration.observe(time.perf_counter() - started)
        priority = self._queued.get(item)
        if priority is not None and not self._shutting_down:
            self._push(item, priority)
        if self._shutting_down and not self._processing:
            self._drained.set()

    def add_after(self, item: T, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        due = self._clock.monotonic() + delay
        current = self._waiting.get(item)
        if current is not None and current <= due:
            return
        self._waiting[item] = due
        heapq.heappush(self._heap, (due, next(self._seq), item))
        if self._heap[0][2] == item:
            self._timer_wake.set()

    def add_rate_limited(self, item: T) -> None:
        self._retries.inc()
        self.add_after(item, self._backoff.when(item))

    def forget(self, item: T) -> None:
        self._backoff.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._backoff.num_requeues(item)

    async def run(self) -> None:
        """The single timer task behind `add_after`; returns when the queue shuts down."""
        while not self._shutting_down:
            now = self._clock.monotonic()
            while self._heap and self._heap[0][0] <= now:
                due, _, item = heapq.heappop(self._heap)
                if self._waiting.get(item) == due:
                    del self._waiting[item]
                    self.add(item)
            self._timer_wake.clear()
            timeout = self._heap[0][0] - now if self._heap else None
            await sleep_or_event(self._clock, timeout, self._timer_wake)

    def shutdown(self) -> None:
        """Stop accepting items; waiting and future `get` calls raise `ShutDown`; the timer task returns."""
        self._shutting_down = True
        self._timer_wake.set()
        if not self._processing:
            self._drained.set()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def shutdown_with_drain(self) -> None:
        """`shutdown`, then wait until every item being processed is `done`."""
        self.shutdown()
        await self._drained.wait()

    def _unfinished_work(self) -> float:
        now = time.perf_counter()
        return sum(now - started for started in self._processing.values())

    def _longest_running(self) -> float:
        if not self._processing:
            return 0.0
        return time.perf_counter() - min(self._processing.values())
