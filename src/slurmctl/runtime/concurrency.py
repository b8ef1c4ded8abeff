"""Many independent writes of one pass in flight at once, but not all of them: one at a time, a pass costs a round
trip per object (a thousand pods' conditions took ~90 s), and all at once floods the API server and the client's
connection pool."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")

# Writes one pass has in flight at once (64 worker groups render ~130 objects; a pass may mark thousands of pods).
WRITES_IN_FLIGHT = 8


async def bounded(calls: Iterable[Awaitable[T]], limit: int = WRITES_IN_FLIGHT) -> list[T | BaseException]:
    """Await every call, at most `limit` at once, each to its end (one failing does not stop the others): the
    results, or the exception each raised, in the calls' order. Cancellation is not swallowed."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        try:
            async with gate:
                return await call
        except asyncio.CancelledError:
            if inspect.iscoroutine(call):
                call.close()  # cancelled before its turn: never awaited, and closed so that it says nothing
            raise

    return await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)


async def pause() -> None:
    """Let the event loop run whatever else is ready before going on. A pass over a cluster of 10,240 workers is a few
    hundred milliseconds of CPU between its awaits, and an await that has nothing to wait for does not yield: another
    controller's pass (the one a spec edit woke) then waited for all of it. Placed between a long pass's pieces, it
    waits for one piece."""
    await asyncio.sleep(0)
