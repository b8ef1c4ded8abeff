"""Work queue throughput: add/get/done cycles per second with a single worker (target >= 100,000/s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from slurmctl.runtime.workqueue import ShutDown, WorkQueue

CYCLES = 200_000
KEYS = 1_000  # realistic: a bounded set of objects, each added many times


async def _sequential() -> float:
    queue: WorkQueue[int] = WorkQueue("bench-sequential")
    started = time.perf_counter()
    for i in range(CYCLES):
        queue.add(i % KEYS)
        item = await queue.get()
        queue.done(item)
    return CYCLES / (time.perf_counter() - started)


async def _producer_and_worker() -> float:
    """A producer adding in bursts and one worker task: the shape of informer events feeding a controller."""
    queue: WorkQueue[int] = WorkQueue("bench-worker")
    handled = 0

    async def worker() -> None:
        nonlocal handled
        while True:
            try:
                item = await queue.get()
            except ShutDown:
                return
            handled += 1
            queue.done(item)

    task = asyncio.create_task(worker())
    started = time.perf_counter()
    for burst in range(CYCLES // KEYS):
        for i in range(KEYS):
            queue.add(burst * KEYS + i)
        while len(queue):  # noqa: ASYNC110 - yielding to the worker is the point
            await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    queue.shutdown()
    await task
    return handled / elapsed


async def _run() -> list[tuple[str, float, str]]:
    return [
        ("workqueue_cycles_single_worker", await _sequential(), "cycles/s"),
        ("workqueue_cycles_producer_worker", await _producer_and_worker(), "cycles/s"),
    ]


def run() -> Iterator[tuple[str, float, str]]:
    yield from asyncio.run(_run())
