"""The work queue keeps client-go's promises; time is a fake clock, nothing sleeps for real."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from slurmctl.runtime.workqueue import ExponentialBackoff, ShutDown, WorkQueue
from test.unit.runtime.fakes import FakeClock, settle


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[WorkQueue[str]]:
    q: WorkQueue[str] = WorkQueue("test", clock=clock)
    timer = asyncio.create_task(q.run())
    yield q
    q.shutdown()
    await asyncio.wait_for(timer, 1)


async def drain_now(q: WorkQueue[str]) -> list[str]:
    """Items that `get` returns right now, each marked done."""
    out = []
    while len(q):
        item = await q.get()
        q.done(item)
        out.append(item)
    return out


async def test_adding_an_item_twice_queues_it_once(queue: WorkQueue[str]) -> None:
    for item in ("a", "b", "a", "a", "b", "c"):
        queue.add(item)
    assert len(queue) == 3
    got = [await queue.get() for _ in range(3)]
    assert got == ["a", "b", "c"]


async def test_an_item_is_never_handed_to_two_workers_at_once(queue: WorkQueue[str]) -> None:
    running: set[str] = set()
    overlaps: list[str] = []
    handled: list[str] = []

    async def worker() -> None:
        while True:
            try:
                item = await queue.get()
            except ShutDown:
                return
            if item in running:
                overlaps.append(item)
            running.add(item)
            await asyncio.sleep(0)  # yield mid-work so other workers and adders interleave
            await asyncio.sleep(0)
            running.discard(item)
            handled.append(item)
            queue.done(item)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for round_ in range(50):
        for item in ("x", "y", "z"):
            queue.add(item)
        if round_ % 3 == 0:
            await asyncio.sleep(0)
    await settle(200)
    queue.shutdown()
    await asyncio.gather(*workers)
    assert overlaps == []
    assert {"x", "y", "z"} <= set(handled)


async def test_an_item_added_while_processing_is_processed_exactly_once_more(queue: WorkQueue[str]) -> None:
    queue.add("a")
    item = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 1
    second = asyncio.create_task(queue.get())
    await settle()
    assert not second.done()  # not handed out again while still being processed
    queue.done(item)
    assert await asyncio.wait_for(second, 1) == "a"
    queue.done("a")
    assert len(queue) == 0
    queue.add("a")
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_backoff_doubles_from_5ms_up_to_the_cap_and_forget_resets_it() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff()
    delays = [backoff.when("a") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000.0
    assert max(delays) == 1000.0
    assert backoff.num_requeues("a") == 20
    assert backoff.when("b") == 0.005  # per item
    backoff.forget("a")
    assert backoff.num_requeues("a") == 0
    assert backoff.when("a") == 0.005
    custom: ExponentialBackoff[str] = ExponentialBackoff(base=1, cap=3)
    assert [custom.when("a") for _ in range(4)] == [1, 2, 3, 3]


async def test_add_rate_limited_waits_the_backoff_then_forget_restarts_it(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_rate_limited("a")
    assert len(queue) == 0
    await clock.advance(0.004)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1
    queue.done(await queue.get())
    queue.add_rate_limited("a")
    await clock.advance(0.009)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1
    assert queue.num_requeues("a") == 2
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_add_after_hands_items_out_in_due_order_with_one_timer(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add_after("late", 30)
    queue.add_after("early", 10)
    queue.add_after("middle", 20)
    queue.add_after("early", 25)  # an earlier pending time wins
    queue.add_after("now", 0)
    assert await drain_now(queue) == ["now"]
    await settle()
    assert clock.sleepers == 1  # one timer, not one per item
    await clock.advance(10)
    assert await drain_now(queue) == ["early"]
    await clock.advance(9.9)
    assert await drain_now(queue) == []
    await clock.advance(0.1)
    assert await drain_now(queue) == ["middle"]
    await clock.advance(10)
    assert await drain_now(queue) == ["late"]


async def test_real_changes_overtake_resync_and_initial_list_items(queue: WorkQueue[str]) -> None:
    for item in ("list-1", "list-2", "list-3"):
        queue.add(item, low_priority=True)
    queue.add("change")
    queue.add("list-3")  # a real change to an item already waiting at low priority promotes it
    got = [await queue.get() for _ in range(4)]
    assert got == ["change", "list-3", "list-1", "list-2"]


async def test_get_waits_for_an_item(queue: WorkQueue[str]) -> None:
    getter = asyncio.create_task(queue.get())
    await settle()
    assert not getter.done()
    queue.add("a")
    assert await asyncio.wait_for(getter, 1) == "a"


async def test_shutdown_wakes_waiting_workers_and_ignores_new_items(queue: WorkQueue[str]) -> None:
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.shutdown()
    results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(r, ShutDown) for r in results)
    queue.add("a")
    queue.add_after("b", 1)
    assert len(queue) == 0
    with pytest.raises(ShutDown):
        await queue.get()


async def test_shutdown_with_drain_waits_for_items_in_flight(queue: WorkQueue[str]) -> None:
    queue.add("a")
    queue.add("b")
    a = await queue.get()
    b = await queue.get()
    drain = asyncio.create_task(queue.shutdown_with_drain())
    await settle()
    queue.done(a)
    await settle()
    assert not drain.done()
    queue.done(b)
    await asyncio.wait_for(drain, 1)
    with pytest.raises(ShutDown):
        await queue.get()
