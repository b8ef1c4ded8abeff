"""An eviction waits for jobs only as long as the cluster admin allows (--max-eviction-hold): past it the worker is
set DOWN, so that Slurm requeues its jobs, and its pod becomes evictable; while Slurm cannot be asked, the same bound
makes the pod evictable (its preStop sets the node DOWN). Without a hold nothing changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurmctl.reconcilers.eviction_hold import CordonedSince, expired, hold_reason
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.slurm import Node
from test.unit.reconcilers.env import Env
from test.unit.reconcilers.fake_slurm import FakeSlurm
from test.unit.reconcilers.test_evictions import CORDONED_A, P0, P1, is_evictable, on_two_nodes
from test.unit.runtime.fakes import FakeClock

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HOLD = 600.0


def worker(name: str = P0, on: str = "node-a") -> WorkerPod:
    return WorkerPod(name, on, True, True, True, terminating=False, evictable=False)


def node(*state: str, reason: str = CORDONED_A, ago: float = HOLD) -> Node:
    return Node(P0, frozenset(state), reason, "root", NOW - timedelta(seconds=ago), (), (), 2, 0)


@pytest.mark.parametrize(
    ("slurm_node", "jobs", "cordoned", "hold", "expected"),
    [
        (node("ALLOCATED", "DRAIN"), {P0: (7,)}, {P0}, HOLD, [P0]),  # the whole hold, job 7 still runs
        (node("ALLOCATED", "DRAIN", ago=HOLD - 1), {P0: (7,)}, {P0}, HOLD, []),  # not yet
        (node("ALLOCATED", "DRAIN"), {P0: (7,)}, {P0}, 0.0, []),  # no hold: for ever
        (node("IDLE", "DRAIN"), {}, {P0}, HOLD, []),  # idle: evictable already, nothing to requeue
        (node("ALLOCATED", "DRAIN", reason="bad DIMM"), {P0: (7,)}, {P0}, HOLD, []),  # an administrator's drain
        (node("ALLOCATED", "DRAIN"), {P0: (7,)}, set(), HOLD, []),  # uncordoned since
        (node("ALLOCATED"), {P0: (7,)}, {P0}, HOLD, []),  # not drained (yet)
    ],
)
def test_which_workers_waited_the_whole_hold(
    slurm_node: Node, jobs: dict[str, tuple[int, ...]], cordoned: set[str], hold: float, expected: list[str]
) -> None:
    assert expired([worker()], {P0: slurm_node}, jobs, cordoned=cordoned, now=NOW, hold=hold) == expected


async def test_cordoned_since_counts_from_first_seen_and_forgets_an_uncordon() -> None:
    clock = FakeClock()
    since = CordonedSince(clock)
    key = ("ns", "c")
    assert since.held(key, {P0}, 30) == (set(), set())
    await clock.advance(29)
    assert since.held(key, {P0, P1}, 30) == (set(), set())
    await clock.advance(1)
    assert since.held(key, {P0, P1}, 30) == ({P0}, {P0})
    assert since.held(key, {P0, P1}, 30) == ({P0}, set()), "said once"
    assert since.held(key, {P1}, 30) == (set(), set()), "P0 uncordoned: forgotten"
    assert since.held(key, {P0, P1}, 0) == (set(), set()), "no hold: never"


async def test_a_job_that_never_ends_is_requeued_after_the_hold_and_the_pod_becomes_evictable() -> None:
    async with Env(max_eviction_hold=HOLD) as env:
        slurm = FakeSlurm()
        await on_two_nodes(env, slurm)
        slurm.run_job(7, P0)
        env.k8s_node("node-a", unschedulable=True)  # kubectl drain: the cordon first
        await env.poll_slurm()
        assert slurm.calls == [("drain", (P0,), CORDONED_A)]
        await env.poll_slurm()
        assert len(slurm.calls) == 1 and not is_evictable(env, P0), "within the hold: job 7 runs on"

        # The drain began a hold ago (by Slurm's clock) and job 7 still runs.
        slurm.add_node(
            P0, "ALLOCATED", "DRAIN", reason=CORDONED_A, since=datetime.now(UTC) - timedelta(seconds=HOLD + 1)
        )
        await env.poll_slurm()
        assert slurm.calls[1:] == [("down", (P0,), hold_reason(HOLD))]
        assert not slurm.queue, "Slurm took job 7 off the node (requeued)"
        message = (
            f"set {P0} DOWN in Slurm: its eviction waited 600s (--max-eviction-hold) for jobs 7, which Slurm requeues"
        )
        assert ("Warning", "EvictionHoldExpired", message) in env.events()
        await env.poll_slurm()
        assert is_evictable(env, P0), "kubectl drain's eviction now goes through"
        assert not is_evictable(env, P1)


async def test_without_a_hold_the_job_keeps_the_eviction_waiting() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await on_two_nodes(env, slurm)
        slurm.run_job(7, P0)
        env.k8s_node("node-a", unschedulable=True)
        await env.poll_slurm()
        slurm.add_node(P0, "ALLOCATED", "DRAIN", reason=CORDONED_A, since=datetime(2020, 1, 1, tzinfo=UTC))
        for _ in range(2):
            await env.poll_slurm()
        assert slurm.calls == [("drain", (P0,), CORDONED_A)] and slurm.queue
        assert not is_evictable(env, P0)


async def test_while_slurm_cannot_be_asked_the_hold_alone_makes_the_pod_evictable() -> None:
    clock = FakeClock()
    async with Env(max_eviction_hold=30, clock=clock) as env:
        slurm = FakeSlurm()
        await on_two_nodes(env, slurm)
        env.edit(lambda s: s.update(rest={"enabled": False}))  # nothing says whether jobs run
        env.k8s_node("node-a", unschedulable=True)
        await env.poll_slurm()
        assert not is_evictable(env, P0), "the hold starts"
        await clock.advance(29)
        await env.poll_slurm()
        assert not is_evictable(env, P0)
        await clock.advance(1)
        await env.poll_slurm()
        assert is_evictable(env, P0) and not is_evictable(env, P1), "node-b is not cordoned"
        assert [e[:2] for e in env.events()].count(("Warning", "EvictionHoldExpired")) == 1
        env.k8s_node("node-a")  # uncordoned
        await env.poll_slurm()
        assert not is_evictable(env, P0)
