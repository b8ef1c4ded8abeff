"""Time as an injectable dependency, so the queue, informer and leader election run on a fake clock in unit tests."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


REAL_CLOCK = RealClock()


async def sleep_or_event(clock: Clock, seconds: float | None, event: asyncio.Event) -> bool:
    """Wait for `event` or until `seconds` pass on `clock`; True when the event fired. One timer, no task leak."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(seconds)) if seconds is not None else None
    try:
        await asyncio.wait([t for t in (waiter, sleeper) if t is not None], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, sleeper):
            if task is not None and not task.done():
                task.cancel()
    return event.is_set()
