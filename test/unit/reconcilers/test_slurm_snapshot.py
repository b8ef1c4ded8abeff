"""One Slurm snapshot per cluster, shared by every reader: the Slurm node loop and the drain gate decide on the same
read when it is young enough for both, readers arriving during a read share it, an outage is one state every reader
sees, a change made to Slurm makes the next reader read again, and partitions are read once a minute. Time is a
fake clock here (the other reconciler tests read on every pass)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from slurmctl.reconcilers.slurm_metrics import collector_for, endpoint
from slurmctl.reconcilers.slurm_snapshot import GATE_MAX_AGE, NODE_LOOP_MAX_AGE, PARTITIONS_MAX_AGE
from slurmctl.render.kinds import STATEFULSET
from slurmctl.runtime import Request, Result
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect
from test.unit.runtime.fakes import FakeClock

CPU = f"{NAME}-worker-cpu"


async def started(env: Env, slurm: FakeSlurm, clock: FakeClock, *, size: int = 2) -> None:
    await env.available(spec(size=size))
    for i in range(size):
        slurm.add_node(f"{CPU}-{i}")
    connect(env, slurm, clock=clock)


async def test_the_node_loop_and_the_drain_gate_share_a_young_snapshot() -> None:
    async with Env() as env:
        slurm, clock = FakeSlurm(), FakeClock()
        await started(env, slurm, clock, size=3)
        await env.poll_slurm()
        assert slurm.reads == {"nodes": 1, "jobs": 1, "partitions": 1}
        await clock.advance(GATE_MAX_AGE / 2)
        slurm.run_job(7, f"{CPU}-2")
        env.edit(lambda s: s["workers"][0].update(size=2))
        await env.run("workers")
        assert slurm.reads["nodes"] == 1, "the gate decided on the node loop's snapshot"
        assert slurm.calls == [("drain", (f"{CPU}-2",), "slurmctl: scale-in of worker group cpu to 2")]
        await env.run("workers")
        assert slurm.reads["nodes"] == 2, "the drain made the snapshot stale: the gate read again"
        assert "for job 7" in env.condition("WorkersReady")["message"]  # type: ignore[index]
        result = await env.poll_slurm()
        assert slurm.reads["nodes"] == 2, "the node loop took the gate's snapshot"
        assert result == Result(requeue_after=NODE_LOOP_MAX_AGE), "and looks again once it is too old to share"
        await clock.advance(NODE_LOOP_MAX_AGE + 1)
        await env.poll_slurm()
        assert slurm.reads == {"nodes": 3, "jobs": 3, "partitions": 1}, "partitions are read once a minute"
        await clock.advance(PARTITIONS_MAX_AGE)
        await env.poll_slurm()
        assert slurm.reads == {"nodes": 4, "jobs": 4, "partitions": 2}


async def test_readers_arriving_during_a_read_share_it() -> None:
    async with Env() as env:
        slurm, clock = FakeSlurm(), FakeClock()
        await started(env, slurm, clock)
        slurm.slow = asyncio.Event()  # the first read stays in flight until the second reader has arrived
        first_reader = asyncio.create_task(env.ctx.slurm.snapshot(NAME, NS, max_age=0.0))
        await asyncio.wait_for(slurm.in_flight.wait(), timeout=5)
        second_reader = asyncio.create_task(env.ctx.slurm.snapshot(NAME, NS, max_age=0.0))
        # The loop runs callbacks in order: the second reader's first step (up to the read lock) before the release.
        asyncio.get_running_loop().call_soon(slurm.slow.set)
        first, second = await asyncio.gather(first_reader, second_reader)
        assert first is second
        assert slurm.reads["nodes"] == 1


async def test_an_outage_is_one_state_every_reader_sees_until_it_is_old() -> None:
    async with Env() as env:
        slurm, clock = FakeSlurm(), FakeClock()
        await started(env, slurm, clock, size=3)
        slurm.down = "slurmrestd: connection refused"
        await env.poll_slurm()
        assert slurm.reads["nodes"] == 1
        text = generate_latest(env.manager.metrics.registry).decode()
        assert f'slurm_up{{cluster="{NAME}",namespace="{NS}"}} 0.0' in text
        env.edit(lambda s: s["workers"][0].update(size=2))
        await env.run("workers")
        assert slurm.reads["nodes"] == 1, "the gate saw the node loop's outage without asking again"
        message = env.condition("WorkersReady")["message"]  # type: ignore[index]
        assert "Slurm cannot be asked" in message and "connection refused" in message
        slurm.down = ""
        await clock.advance(NODE_LOOP_MAX_AGE + 1)
        await env.poll_slurm()
        await env.run("workers")
        assert slurm.reads["nodes"] == 2
        assert slurm.calls == [("drain", (f"{CPU}-2",), "slurmctl: scale-in of worker group cpu to 2")]


def test_requests_to_slurmrestd_are_counted_by_endpoint() -> None:
    assert endpoint("/slurm/v0.0.42/nodes/") == "nodes"
    assert endpoint("/slurm/v0.0.42/node/c-worker-cpu-0") == "node", "no node names in a label"
    assert endpoint("/slurmdb/v0.0.42/users/?with_assocs") == "users"
    registry = CollectorRegistry()
    collector = collector_for(registry)
    for _ in range(3):
        collector.count(NS, NAME, "GET", "/slurm/v0.0.42/nodes/")
    collector.count(NS, NAME, "DELETE", "/slurm/v0.0.42/node/c-worker-cpu-0")
    text = generate_latest(registry).decode()
    series = "slurmctl_slurmrestd_requests_total"
    assert f'{series}{{cluster="{NAME}",endpoint="nodes",method="GET",namespace="{NS}"}} 3.0' in text
    assert f'{series}{{cluster="{NAME}",endpoint="node",method="DELETE",namespace="{NS}"}} 1.0' in text
    collector.forget(NS, NAME)
    assert "slurmctl_slurmrestd_requests_total{" not in generate_latest(registry).decode()


async def test_a_snapshot_that_says_something_new_wakes_the_workers_while_they_decide_on_slurm() -> None:
    async with Env() as env:
        slurm, clock = FakeSlurm(), FakeClock()
        await started(env, slurm, clock, size=3)
        told: list[tuple[str, str]] = []
        env.ctx.slurm.listen(lambda c, ns: told.append((ns, c)))
        queue = next(ctrl for ctrl in env.manager._controllers if ctrl.name == "workers").queue

        async def drained() -> None:  # what is queued: handed out and done, as a running controller would
            while len(queue):
                queue.done(await asyncio.wait_for(queue.get(), timeout=5))

        await drained()
        await env.poll_slurm()
        assert told == [(NS, NAME)], "the first snapshot is news"
        # The workers' last pass asked Slurm nothing (no node must go): at 10,240 workers each batch of nodes
        # registering woke a pass over every pod that would have decided the same.
        assert len(queue) == 0, "news wakes no component that did not decide on Slurm"

        slurm.run_job(7, f"{CPU}-2")
        env.edit(lambda s: s["workers"][0].update(size=2))
        await env.run("workers")  # a node must go: the drain gate decides on Slurm's snapshot
        await drained()
        await clock.advance(NODE_LOOP_MAX_AGE + 1)
        await env.poll_slurm()
        assert told == [(NS, NAME)] * 2, "the drain is news"
        assert await asyncio.wait_for(queue.get(), timeout=5) == Request(NS, NAME), "it wakes the workers component"
        queue.done(Request(NS, NAME))
        await clock.advance(NODE_LOOP_MAX_AGE + 1)
        await env.poll_slurm()
        assert len(told) == 2 and len(queue) == 0, "a new read that says the same wakes nobody"
        slurm.end_job(7)
        await clock.advance(NODE_LOOP_MAX_AGE + 1)
        await env.poll_slurm()
        assert told == [(NS, NAME)] * 3, "the job that held the leaving node ended: news"
        assert await asyncio.wait_for(queue.get(), timeout=5) == Request(NS, NAME), "the gate lets the node go now"


async def test_a_drain_slurm_refuses_closes_the_gate_in_the_condition_and_nothing_goes() -> None:
    async with Env() as env:
        slurm, clock = FakeSlurm(), FakeClock()
        await started(env, slurm, clock, size=3)
        await env.poll_slurm()
        env.edit(lambda s: s["workers"][0].update(size=2))
        slurm.down = "slurmctld is restarting"  # after the read: the gate decides on it, the drain is refused
        await env.run("workers")
        assert slurm.calls == [], "Slurm took nothing"
        condition = env.condition("WorkersReady")
        assert condition is not None and condition["reason"] == "SlurmUnreachable"
        assert condition["message"].endswith(": slurmctld is restarting")
        sts = env.get(STATEFULSET, CPU)
        assert sts is not None and sts["spec"]["replicas"] == 3, "its node stays"
