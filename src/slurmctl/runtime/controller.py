"""The controller loop: a work queue, N workers, and controller-runtime's outcome table.

| reconcile outcome                 | queue action                   | reconcile_total result |
|-----------------------------------|--------------------------------|------------------------|
| raises an exception               | add_rate_limited (backoff)     | error                  |
| raises `TerminalError`            | forget; no requeue             | error (+ terminal)     |
| returns Result(requeue_after=d)   | forget, then add_after(d)      | requeue_after          |
| returns Result(requeue=True)      | add_rate_limited               | requeue                |
| returns None or Result()          | forget                         | success                |

A worker never dies from a reconcile failure; each attempt gets a fresh reconcile id in a contextvar for the logs.
Each failure is logged once, here: with its traceback when it may be a bug, as one WARNING line without one when the
API server is briefly unavailable (`errors.outage_reason`), at most one such line per controller every
OUTAGE_LOG_INTERVAL seconds, so an API server restart costs a few lines instead of a traceback per retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.errors import TerminalError, outage_reason
from slurmctl.runtime.handlers import Handler, Predicate, Request
from slurmctl.runtime.informer import Event
from slurmctl.runtime.logs import Throttle, controller_name, kv, reconcile_id, request_key
from slurmctl.runtime.metrics import Metrics, default_metrics
from slurmctl.runtime.workqueue import ExponentialBackoff, ShutDown, WorkQueue

log = logging.getLogger(__name__)

OUTAGE_LOG_INTERVAL = 30.0


@dataclass(frozen=True, slots=True)
class Result:
    requeue_after: float | None = None
    requeue: bool = False


Reconcile = Callable[[Request], Awaitable[Result | None]]


class Controller:
    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        *,
        max_concurrent_reconciles: int = 1,
        reconcile_timeout: float | None = None,
        clock: Clock = REAL_CLOCK,
        backoff: ExponentialBackoff[Request] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.name = name
        metrics = metrics or default_metrics()
        self._reconcile = reconcile
        self.workers = max(1, max_concurrent_reconciles)
        self.reconcile_timeout = reconcile_timeout
        self.queue: WorkQueue[Request] = WorkQueue(name, clock=clock, backoff=backoff, metrics=metrics)
        self._outage_log = Throttle(OUTAGE_LOG_INTERVAL, clock=clock)
        self._total = {
            r: metrics.reconcile_total.labels(name, r) for r in ("success", "error", "requeue_after", "requeue")
        }
        self._errors = metrics.reconcile_errors.labels(name)
        self._terminal = metrics.terminal_reconcile_errors.labels(name)
        self._time = metrics.reconcile_time.labels(name)
        self._active = metrics.active_workers.labels(name)
        metrics.max_concurrent_reconciles.labels(name).set(self.workers)

    def listener(
        self, handler: Handler, predicates: Iterable[Predicate] = (), *, batch: float = 0.0
    ) -> Callable[[Event], None]:
        """An informer listener that filters with `predicates` and enqueues what `handler` returns. `batch`: a change
        enqueues its request that many seconds later, with every change to it in the meantime (kube-controller-
        manager's `--endpoint-updates-batch-period`): a stream of events then wakes one pass a batch, not one pass
        after another. Initial lists and resyncs enqueue at once, behind real changes."""
        preds = tuple(predicates)

        def listen(event: Event) -> None:
            if all(p(event) for p in preds):
                for request in handler(event):
                    if batch > 0 and not event.low_priority:
                        self.queue.add_after(request, batch)
                    else:
                        self.queue.add(request, low_priority=event.low_priority)

        return listen

    def start(self, tg: asyncio.TaskGroup) -> list[asyncio.Task[None]]:
        """Start the queue's timer and the workers in the caller's TaskGroup; they end when the queue shuts down."""
        tasks = [tg.create_task(self.queue.run(), name=f"{self.name}-queue-timer")]
        tasks += [tg.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self.workers)]
        log.info("controller started %s", kv(controller=self.name, workers=self.workers))
        return tasks

    async def _worker(self) -> None:
        while True:
            try:
                request = await self.queue.get()
            except ShutDown:
                return
            try:
                await self.reconcile_handler(request)
            finally:
                self.queue.done(request)

    async def reconcile_handler(self, request: Request) -> None:
        tokens = (controller_name.set(self.name), request_key.set(str(request)), reconcile_id.set(str(uuid.uuid4())))
        self._active.inc()
        started = time.perf_counter()
        try:
            self._total[await self._attempt(request)].inc()
        finally:
            self._time.observe(time.perf_counter() - started)
            self._active.dec()
            for var, token in zip((controller_name, request_key, reconcile_id), tokens, strict=True):
                var.reset(token)

    async def _attempt(self, request: Request) -> str:
        try:
            if self.reconcile_timeout is not None:
                async with asyncio.timeout(self.reconcile_timeout):
                    result = await self._reconcile(request)
            else:
                result = await self._reconcile(request)
        except TerminalError as exc:
            self.queue.forget(request)
            self._errors.inc()
            self._terminal.inc()
            log.error("reconcile failed terminally, not retrying until the object changes %s", kv(error=exc))
            return "error"
        except Exception as exc:
            self.queue.add_rate_limited(request)
            self._errors.inc()
            retries = self.queue.num_requeues(request)
            reason = outage_reason(exc)
            if reason is None:
                log.exception("reconcile failed %s", kv(retries=retries))
            elif (held_back := self._outage_log.allow()) is not None:
                log.warning(
                    "reconcile failed, API server unavailable; retrying with backoff %s",
                    kv(reason=reason, error=exc, retries=retries, suppressed=held_back),
                )
            return "error"
        if result is not None and result.requeue_after is not None and result.requeue_after > 0:
            self.queue.forget(request)
            self.queue.add_after(request, result.requeue_after)
            return "requeue_after"
        if result is not None and result.requeue:
            self.queue.add_rate_limited(request)
            return "requeue"
        self.queue.forget(request)
        return "success"
