"""The informer against a scripted list/watch source: relists on 410, the watchdog, bookmarks, backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from slurmctl.runtime.errors import Gone, ServerError
from slurmctl.runtime.informer import Event, EventType, Informer
from test.unit.runtime.fakes import END, FakeClock, FakeSource, config_map, settle, until


@dataclass
class Running:
    informer: Informer
    source: FakeSource
    clock: FakeClock
    events: list[tuple[str, str, bool]]


def _record(events: list[tuple[str, str, bool]]):  # type: ignore[no-untyped-def]
    def listener(event: Event) -> None:
        events.append((event.type.value, event.obj["metadata"]["name"], event.low_priority))

    return listener


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    source, clock = FakeSource(), FakeClock()
    source.put("a", app="x")
    source.put("b", app="y")
    informer = Informer(source, name="cm", clock=clock, page_size=1)
    events: list[tuple[str, str, bool]] = []
    informer.add_listener(_record(events))
    task = asyncio.create_task(informer.run())
    await until(lambda: informer.has_synced and len(source.streams) == 1, "initial list and watch")
    yield Running(informer, source, clock, events)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_initial_paged_list_fills_the_store_strips_managed_fields_and_emits_low_priority_adds(
    running: Running,
) -> None:
    inf = running.informer
    assert running.source.list_calls == 2  # two objects, page size one
    assert sorted(o["metadata"]["name"] for o in inf.store) == ["a", "b"]
    assert all("managedFields" not in o["metadata"] for o in inf.store)
    # The API server leaves apiVersion and kind out of a list's items; cached, they carry them as a watch event's do.
    assert all((o["apiVersion"], o["kind"]) == ("v1", "ConfigMap") for o in inf.store)
    assert running.events == [("add", "a", True), ("add", "b", True)]
    assert running.source.watch_rvs == ["2"]


async def test_watch_events_update_the_store_and_notify_listeners(running: Running) -> None:
    src = running.source
    src.send({"type": "ADDED", "object": config_map("c", 3)})
    src.send({"type": "MODIFIED", "object": config_map("a", 4, app="z")})
    src.send({"type": "DELETED", "object": config_map("b", 5)})
    await until(lambda: len(running.events) == 5)
    assert running.events[2:] == [("add", "c", False), ("update", "a", False), ("delete", "b", False)]
    assert running.informer.store.get("ns/a")["metadata"]["labels"] == {"app": "z"}  # type: ignore[index]
    assert running.informer.store.list(labels={"app": "z"})[0]["metadata"]["name"] == "a"
    assert running.informer.resource_version == "5"


async def test_an_object_listed_then_watched_differs_only_in_what_changed(running: Running) -> None:
    """Predicates compare an update's old and new object: a listed one lacked the apiVersion and kind its first watch
    event carries, and at 10,240 workers every pod's first event after a relist woke a pass over every pod."""
    seen: list[Event] = []
    running.informer.add_listener(seen.append)
    running.source.send({"type": "MODIFIED", "object": config_map("a", 3, app="x")})
    await until(lambda: any(not e.low_priority for e in seen))
    (event,) = [e for e in seen if not e.low_priority]
    assert event.old is not None
    unversioned = [{**o, "metadata": {**o["metadata"], "resourceVersion": ""}} for o in (event.old, event.obj)]
    assert unversioned[0] == unversioned[1]


async def test_410_gone_relists_replaces_the_store_and_emits_deletes_for_vanished_objects(running: Running) -> None:
    src = running.source
    # While the watch is broken, the world changes: b is deleted, c is created, a is modified.
    src.delete("b")
    src.put("c")
    src.put("a", app="changed")
    running.events.clear()
    src.send({"type": "ERROR", "object": {"kind": "Status", "code": 410}} and Gone("too old", status=410))
    await until(lambda: len(src.streams) == 2, "a new watch after the relist")
    assert sorted(running.events) == [("add", "c", True), ("delete", "b", True), ("update", "a", True)]
    assert sorted(o["metadata"]["name"] for o in running.informer.store) == ["a", "c"]
    assert src.watch_rvs[-1] == str(src.rv)  # watching again from the relist's resourceVersion
    assert running.informer.relists == 1


async def test_a_relist_stores_each_page_as_it_arrives_and_deletes_after_the_last(running: Running) -> None:
    """A relist of 10,240 pods held all of them decoded beside the store's own decoded copies (~0.3 GiB at the
    operator's peak); page by page it holds one page."""
    src, store = running.source, running.informer.store
    src.put("a", app="changed")
    src.delete("b")
    src.put("c")
    second_page, release = asyncio.Event(), asyncio.Event()
    list_page = src.list_page

    async def slow_after_the_first(*, limit: int, continue_token: str | None) -> dict[str, object]:
        if continue_token is not None:
            second_page.set()
            await release.wait()
        return await list_page(limit=limit, continue_token=continue_token)

    src.list_page = slow_after_the_first  # type: ignore[method-assign]
    src.send(Gone("too old", status=410))
    await second_page.wait()
    assert store.get("ns/a")["metadata"]["labels"] == {"app": "changed"}  # type: ignore[index]
    assert store.get("ns/b") is not None  # deleted only once the whole list is in
    release.set()
    await until(lambda: len(src.streams) == 2, "a new watch after the relist")
    assert sorted(o["metadata"]["name"] for o in store) == ["a", "c"]


async def test_a_silent_watch_is_reconnected_by_the_watchdog_without_relisting(running: Running) -> None:
    src, clock = running.source, running.clock
    await clock.advance(69)
    assert len(src.streams) == 1
    await clock.advance(2)  # 71 s without an event or bookmark: reconnect at once
    assert len(src.streams) == 2
    assert not running.informer.is_stale()  # the new watch opened: a sign of life
    assert src.watch_rvs == ["2", "2"]
    assert src.list_calls == 2  # no relist: the resourceVersion is still good


async def test_events_and_bookmarks_feed_the_watchdog(running: Running) -> None:
    src, clock = running.source, running.clock
    for rv in range(10, 15):
        await clock.advance(60)
        src.send({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": str(rv)}}})
        await settle()
    assert len(src.streams) == 1  # 300 s in, never silent for 70 s


async def test_bookmarks_advance_the_resource_version_without_events(running: Running) -> None:
    src = running.source
    before = [o["metadata"]["resourceVersion"] for o in running.informer.store]
    src.send({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": "42"}}})
    src.send(END)  # the server's timeout ends the watch normally
    await until(lambda: len(src.streams) == 2)
    assert src.watch_rvs == ["2", "42"]
    assert len(running.events) == 2  # only the initial adds
    assert [o["metadata"]["resourceVersion"] for o in running.informer.store] == before


async def test_server_errors_back_off_and_retry_from_the_same_resource_version(running: Running) -> None:
    src, clock = running.source, running.clock
    src.send(ServerError("503", status=503))
    await settle()
    assert len(src.streams) == 1  # backing off, not hammering
    await clock.advance(2)
    assert len(src.streams) == 2
    assert src.watch_rvs == ["2", "2"]


async def test_list_failures_back_off_until_the_list_succeeds() -> None:
    source, clock = FakeSource(), FakeClock()
    source.put("a")
    source.list_errors = [ServerError("down", status=0), ServerError("down", status=0)]
    informer = Informer(source, name="cm", clock=clock)
    task = asyncio.create_task(informer.run())
    try:
        await settle()
        assert not informer.has_synced
        await clock.advance(60)
        assert informer.has_synced
        assert source.list_calls == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_resync_redelivers_cached_objects_as_low_priority_updates_without_api_calls() -> None:
    source, clock = FakeSource(), FakeClock()
    source.put("a")
    informer = Informer(source, name="cm", clock=clock, resync_period=600)
    events: list[tuple[str, str, bool]] = []
    informer.add_listener(_record(events))
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: informer.has_synced)
        for _ in range(11):  # keep the watch alive past the resync period
            await clock.advance(55)
            source.send({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}})
        assert events == [("add", "a", True), ("update", "a", True)]
        assert source.list_calls == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_listener_does_not_stop_the_others(running: Running) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("bug")

    running.informer.add_listener(broken)
    late: list[tuple[str, str, bool]] = []
    running.informer.add_listener(_record(late))  # a late listener first sees what is cached
    assert late == [("add", "a", True), ("add", "b", True)]
    running.source.send({"type": "ADDED", "object": config_map("c", 3)})
    await until(lambda: len(late) == 3)
    assert running.events[-1] == (EventType.ADDED.value, "c", False)


async def test_malformed_events_are_ignored(running: Running) -> None:
    running.source.send({"type": "ADDED", "object": "garbage"})
    running.source.send({"type": "WHAT", "object": config_map("z", 9)})
    running.source.send({"type": "ADDED", "object": config_map("c", 10)})
    await until(lambda: running.informer.store.get("ns/c") is not None)
    assert running.informer.store.get("ns/z") is None


async def test_a_watch_that_closes_at_once_is_retried_with_backoff_not_in_a_tight_loop(running: Running) -> None:
    src, clock = running.source, running.clock
    src.send(END)
    await settle()
    assert len(src.streams) == 1
    await clock.advance(2)
    assert len(src.streams) == 2


async def test_an_expired_continue_token_during_the_list_restarts_the_list() -> None:
    source, clock = FakeSource(), FakeClock()
    source.put("a")
    source.list_errors = [Gone("continue token expired", status=410)]
    informer = Informer(source, name="cm", clock=clock)
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: informer.has_synced)
        assert source.list_calls == 2
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failure_streak_logs_one_warning_then_every_tenth_retry(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="slurmctl.runtime.informer")
    source, clock = FakeSource(), FakeClock()
    source.put("a")
    source.list_errors = [ServerError("down", status=0) for _ in range(11)]
    informer = Informer(source, name="cm", clock=clock)
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(40):
            await clock.advance(31)
            if informer.has_synced:
                break
        assert informer.has_synced
        retries = [r for r in caplog.records if "list/watch failed" in r.getMessage()]
        assert len(retries) == 11
        warned = [r.getMessage() for r in retries if r.levelno == logging.WARNING]
        assert len(warned) == 2 and "attempt=1 " in warned[0] and "attempt=10 " in warned[1]
        assert not any(r.exc_info for r in retries), "one line, no traceback"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
