"""The controller loop follows controller-runtime's outcome table; a failing reconcile never kills a worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from prometheus_client import REGISTRY

from slurmctl.runtime.controller import OUTAGE_LOG_INTERVAL, Controller, Result
from slurmctl.runtime.errors import (
    Forbidden,
    OutageWindow,
    ServerError,
    TerminalError,
    Timeout,
    TooManyRequests,
)
from slurmctl.runtime.handlers import Request, enqueue_object
from slurmctl.runtime.informer import Event, EventType
from slurmctl.runtime.logs import reconcile_id
from test.unit.runtime.fakes import FakeClock, settle, until

Outcome = Callable[[Request], Awaitable[Result | None]]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Harness:
    def __init__(self, name: str, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, str | None]] = []
        self.behaviour: dict[str, Outcome] = {}
        self.controller = Controller(name, self._reconcile, clock=clock, max_concurrent_reconciles=2)

    async def _reconcile(self, request: Request) -> Result | None:
        self.calls.append((request.name, reconcile_id.get()))
        behaviour = self.behaviour.get(request.name)
        return await behaviour(request) if behaviour else None

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


@pytest.fixture
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    h = Harness(f"ctrl-{request.node.name}"[:60], FakeClock())
    async with asyncio.TaskGroup() as tg:
        h.controller.start(tg)
        yield h
        h.controller.queue.shutdown()


def req(name: str) -> Request:
    return Request("ns", name)


async def test_success_forgets_the_item_and_counts_success(harness: Harness) -> None:
    harness.controller.queue.add(req("ok"))
    await until(lambda: harness.count("ok") == 1)
    await settle()
    name = harness.controller.name
    assert sample("controller_runtime_reconcile_total", controller=name, result="success") == 1
    assert harness.controller.queue.num_requeues(req("ok")) == 0
    await harness.clock.advance(3600)
    assert harness.count("ok") == 1


async def test_an_exception_requeues_with_growing_backoff_and_the_worker_survives(harness: Harness) -> None:
    async def boom(_: Request) -> None:
        raise RuntimeError("transient")

    harness.behaviour["bad"] = boom
    harness.controller.queue.add(req("bad"))
    await until(lambda: harness.count("bad") == 1)
    await harness.clock.advance(0.004)
    assert harness.count("bad") == 1
    await harness.clock.advance(0.001)  # 5 ms backoff
    assert harness.count("bad") == 2
    await harness.clock.advance(0.0099)
    assert harness.count("bad") == 2
    await harness.clock.advance(0.0001)  # then 10 ms
    assert harness.count("bad") == 3
    name = harness.controller.name
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 3
    assert sample("controller_runtime_reconcile_total", controller=name, result="error") == 3
    # The workers are still alive: other items are reconciled.
    harness.controller.queue.add(req("ok"))
    await until(lambda: harness.count("ok") == 1)


async def test_a_terminal_error_is_not_retried_but_counted(harness: Harness) -> None:
    async def invalid(_: Request) -> None:
        raise TerminalError("spec.workers[0].name is not DNS-safe")

    harness.behaviour["invalid"] = invalid
    harness.controller.queue.add(req("invalid"))
    await until(lambda: harness.count("invalid") == 1)
    await harness.clock.advance(2000)
    assert harness.count("invalid") == 1
    name = harness.controller.name
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 1
    harness.controller.queue.add(req("invalid"))  # the object changed: reconciled again
    await until(lambda: harness.count("invalid") == 2)


async def test_requeue_after_resets_backoff_and_polls_after_the_delay(harness: Harness) -> None:
    failures = 0

    async def poll(_: Request) -> Result:
        nonlocal failures
        if failures < 3:
            failures += 1
            raise RuntimeError("not yet")
        return Result(requeue_after=30)

    harness.behaviour["poll"] = poll
    harness.controller.queue.add(req("poll"))
    await harness.clock.advance(1)  # three failures with 5/10/20 ms backoff, then success
    assert harness.count("poll") == 4
    assert harness.controller.queue.num_requeues(req("poll")) == 0  # forgotten
    await harness.clock.advance(29)  # success came at 35 ms: the poll is due at 30.035 s
    assert harness.count("poll") == 4
    await harness.clock.advance(0.1)
    assert harness.count("poll") == 5
    name = harness.controller.name
    assert sample("controller_runtime_reconcile_total", controller=name, result="requeue_after") == 2


async def test_a_batched_watch_wakes_one_pass_for_the_changes_of_a_batch(harness: Harness) -> None:
    listen = harness.controller.listener(enqueue_object, batch=0.5)
    pod = {"metadata": {"namespace": "ns", "name": "c"}}
    for _ in range(5):
        listen(Event(EventType.UPDATED, pod, old=pod))
        await harness.clock.advance(0.05)
    assert harness.count("c") == 0, "the first change waits its batch"
    await harness.clock.advance(0.3)  # 0.55 s after the first change
    assert harness.count("c") == 1, "one pass for the five changes"
    listen(Event(EventType.ADDED, pod, low_priority=True))  # a resync: at once
    await settle()
    assert harness.count("c") == 2
    await harness.clock.advance(1)
    assert harness.count("c") == 2


async def test_requeue_true_uses_the_rate_limiter(harness: Harness) -> None:
    async def again(_: Request) -> Result:
        return Result(requeue=True)

    harness.behaviour["again"] = again
    harness.controller.queue.add(req("again"))
    await until(lambda: harness.count("again") == 1)
    await harness.clock.advance(0.005)
    assert harness.count("again") == 2
    assert harness.controller.queue.num_requeues(req("again")) == 2


async def test_every_attempt_gets_a_fresh_reconcile_id(harness: Harness) -> None:
    for name in ("a", "b"):
        harness.controller.queue.add(req(name))
    await until(lambda: len(harness.calls) == 2)
    harness.controller.queue.add(req("a"))
    await until(lambda: len(harness.calls) == 3)
    ids = [rid for _, rid in harness.calls]
    assert all(ids) and len(set(ids)) == 3
    assert reconcile_id.get() is None  # not leaked into the caller's context


async def test_a_reconcile_timeout_counts_as_an_error_and_retries() -> None:
    started = asyncio.Event()

    async def hang(_: Request) -> None:
        started.set()
        await asyncio.Event().wait()

    controller = Controller("ctrl-timeout", hang, clock=FakeClock(), reconcile_timeout=0.01)
    async with asyncio.TaskGroup() as tg:
        controller.start(tg)
        controller.queue.add(req("slow"))
        await asyncio.wait_for(started.wait(), 1)
        await until(lambda: controller.queue.num_requeues(req("slow")) == 1, rounds=10_000)
        controller.queue.shutdown()
    assert sample("controller_runtime_reconcile_errors_total", controller="ctrl-timeout") == 1


async def test_two_workers_never_reconcile_the_same_request_concurrently(harness: Harness) -> None:
    inside: set[str] = set()
    overlaps = 0

    async def slow(request: Request) -> None:
        nonlocal overlaps
        if request.name in inside:
            overlaps += 1
        inside.add(request.name)
        await harness.clock.sleep(1)
        inside.discard(request.name)

    harness.behaviour["same"] = slow
    harness.controller.queue.add(req("same"))
    await until(lambda: harness.count("same") == 1)
    harness.controller.queue.add(req("same"))  # changed mid-reconcile
    await settle()
    assert harness.count("same") == 1
    await harness.clock.advance(1)
    assert harness.count("same") == 2  # exactly one more
    await harness.clock.advance(1)
    assert harness.count("same") == 2
    assert overlaps == 0
    name = harness.controller.name
    assert sample("controller_runtime_max_concurrent_reconciles", controller=name) == 2


def _reconcile_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "slurmctl.runtime.controller" and "reconcile failed" in r.message]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ServerError("GET /x: Cannot connect to host", status=0, reason="ConnectionFailed"), "ConnectionFailed"),
        (ServerError("GET /x: 503 ServiceUnavailable starting", status=503, reason="ServiceUnavailable"), "503"),
        (TooManyRequests("PATCH /x: 429", status=429), "429 TooManyRequests"),
        (Timeout("GET /x: timed out"), "timeout"),
        (ConnectionResetError("Connection reset by peer"), "ConnectionResetError"),
    ],
)
async def test_an_api_outage_is_one_warning_line_per_interval_without_a_traceback(
    harness: Harness, caplog: pytest.LogCaptureFixture, error: Exception, reason: str
) -> None:
    async def unavailable(_: Request) -> None:
        raise error

    caplog.set_level(logging.INFO)
    harness.behaviour["down"] = unavailable
    harness.controller.queue.add(req("down"))
    await until(lambda: harness.count("down") == 1)
    await harness.clock.advance(OUTAGE_LOG_INTERVAL - 1)  # backoff doubles from 5 ms: a dozen retries meanwhile
    failures = harness.count("down")
    assert failures > 10
    (line,) = _reconcile_failures(caplog)
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert "API server unavailable" in line.message and f"reason={reason}" in line.message.replace('"', "")
    assert "suppressed=0" in line.message and "\n" not in line.getMessage()

    await harness.clock.advance(600)  # a long outage: at most one line per interval, counting what it held back
    lines = _reconcile_failures(caplog)
    assert 2 <= len(lines) <= 600 / OUTAGE_LOG_INTERVAL + 1
    held_back = [int(r.message.rsplit("suppressed=", 1)[1].split()[0]) for r in lines]
    assert len(lines) + sum(held_back) == harness.count("down")  # every failure either logged or counted
    assert all(r.exc_info is None and r.levelno == logging.WARNING for r in lines)


async def test_a_403_is_an_outage_only_right_after_one(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    window = OutageWindow(clock=harness.clock)
    window.observe(ServerError("GET /x: connection refused", status=0, reason="ConnectionFailed"))
    await harness.clock.advance(5)
    warming_up = Forbidden("PATCH /x: 403 Forbidden", status=403)
    window.observe(warming_up)
    await harness.clock.advance(60)
    denied = Forbidden("PATCH /x: 403 Forbidden", status=403)
    window.observe(denied)
    outcomes = [warming_up, denied]

    async def forbidden(_: Request) -> None:
        if outcomes:
            raise outcomes.pop(0)

    harness.behaviour["rbac"] = forbidden
    harness.controller.queue.add(req("rbac"))
    await until(lambda: harness.count("rbac") == 1)
    await harness.clock.advance(1)
    assert harness.count("rbac") == 3  # two failures, then success
    first, second = _reconcile_failures(caplog)[-2:]
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert second.levelno == logging.ERROR and second.exc_info is not None  # a real missing permission


async def test_a_bug_keeps_its_traceback_on_every_retry(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    async def bug(_: Request) -> None:
        raise KeyError("spec")

    harness.behaviour["bug"] = bug
    harness.controller.queue.add(req("bug"))
    await until(lambda: harness.count("bug") == 1)
    await harness.clock.advance(0.02)
    lines = _reconcile_failures(caplog)
    assert len(lines) == harness.count("bug") >= 3  # each failure logged exactly once
    assert all(r.levelno == logging.ERROR and r.exc_info is not None for r in lines)
