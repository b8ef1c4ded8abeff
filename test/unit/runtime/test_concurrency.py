"""`bounded`: a pass's writes, a few at once, each to its end; `pause`: a long pass in pieces."""

from __future__ import annotations

import asyncio
import contextlib
import inspect

from slurmctl.runtime.concurrency import bounded, pause


async def test_at_most_the_limit_run_at_once_and_every_result_comes_back_in_order() -> None:
    running: set[int] = set()
    most = 0
    release, full = asyncio.Event(), asyncio.Event()

    async def write(i: int) -> int:
        nonlocal most
        running.add(i)
        most = max(most, len(running))
        if len(running) == 4:
            full.set()
        await release.wait()
        running.discard(i)
        if i == 3:
            raise ValueError("refused")
        return i * 10

    task = asyncio.create_task(bounded((write(i) for i in range(10)), limit=4))
    await full.wait()
    assert most == 4 and not task.done()
    release.set()
    results = await task
    assert most == 4
    assert [r if not isinstance(r, BaseException) else str(r) for r in results] == [
        0, 10, 20, "refused", 40, 50, 60, 70, 80, 90,
    ]  # fmt: skip


async def test_cancelling_the_pass_cancels_its_writes() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def write() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    waiting = write()  # its turn never comes: the limit is 1
    task = asyncio.create_task(bounded([write(), waiting], limit=1))
    await started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert cancelled.is_set() and task.cancelled()
    assert inspect.getcoroutinestate(waiting) == inspect.CORO_CLOSED


async def test_a_pause_lets_what_is_ready_run_before_the_pass_goes_on() -> None:
    """A long pass's pieces: another controller's pass, ready meanwhile, runs between them, not after all of them."""
    ran = []

    async def other() -> None:
        ran.append("other pass")

    task = asyncio.create_task(other())
    ran.append("first piece")
    await pause()
    ran.append("second piece")
    await task
    assert ran == ["first piece", "other pass", "second piece"]
