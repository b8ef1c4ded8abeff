"""The status writer: what the components say within a moment goes out as one write per cluster, the phase moves
in the write that moves it, progress within a phase waits a little longer than news, and what the status already
says is not written again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from slurmctl.reconcilers.status import COALESCE_SECONDS, FIELD_MANAGER, PROGRESS_SECONDS
from slurmctl.render.kinds import SLURM_CLUSTER
from slurmctl.runtime import Request
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.runtime.fakes import FakeClock


@asynccontextmanager
async def writing(clock: FakeClock) -> AsyncIterator[Env]:
    """An Env whose status writer runs on `clock`, as it does while the operator leads."""
    async with Env(clock=clock) as env:
        task = asyncio.create_task(env.ctx.status.run())
        try:
            yield env
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def status_writes(env: Env, mark: int = 0) -> int:
    return len([w for w in env.writes_since(mark) if w.subresource == "status"])


async def reconcile_all(env: Env) -> None:
    """One pass of every component, without the flush `Env.run` does: the writer decides when to write."""
    for component in env.ctx.reconcilers.values():
        await component(Request(NS, NAME))


async def populated_and_ready(env: Env, clock: FakeClock) -> None:
    """A new cluster written once, its jail populated (the gate opens: the login StatefulSet is made) and then every
    pod ready: the components' next pass reports them ready."""
    env.create(spec())
    await reconcile_all(env)
    await clock.advance(COALESCE_SECONDS)
    env.job_succeeds()
    await reconcile_all(env)
    env.pods_ready()


async def test_one_pass_of_every_component_is_one_status_write_with_its_phase() -> None:
    clock = FakeClock()
    async with writing(clock) as env:
        env.create(spec())
        await reconcile_all(env)
        assert status_writes(env) == 0, "nothing before the window has passed"
        await clock.advance(COALESCE_SECONDS)
        assert status_writes(env) == 1
        assert env.phase() == "Reconciling"
        assert env.reason("SpecValid") == ("True", "Valid")
        assert env.reason("JailPopulated") == ("False", "Populating")
        assert env.reason("ControllerReady") == ("False", "NotReady")
        assert [w.field_manager for w in env.writes_since(0) if w.subresource == "status"] == [FIELD_MANAGER]

        mark = env.mark()
        await reconcile_all(env)
        await clock.advance(PROGRESS_SECONDS)
        assert status_writes(env, mark) == 0, "the status already says all of it"


async def test_progress_waits_for_more_and_the_phase_change_goes_out_at_once() -> None:
    clock = FakeClock()
    async with writing(clock) as env:
        await populated_and_ready(env, clock)
        mark = env.mark()
        await env.ctx.reconcilers["controller"](Request(NS, NAME))  # ready, but the cluster is not Available yet
        await clock.advance(COALESCE_SECONDS)
        assert status_writes(env, mark) == 0, "progress within the phase waits for more"
        assert env.reason("ControllerReady") == ("False", "NotReady")
        await reconcile_all(env)  # the rest turns ready: the phase changes
        await clock.advance(COALESCE_SECONDS)
        assert status_writes(env, mark) == 1
        assert env.phase() == "Available"
        assert env.reason("ControllerReady") == ("True", "Ready")


async def test_progress_alone_is_written_once_its_window_has_passed() -> None:
    clock = FakeClock()
    async with writing(clock) as env:
        env.create(spec())
        await reconcile_all(env)
        await clock.advance(COALESCE_SECONDS)
        env.job_succeeds()
        mark = env.mark()
        await env.ctx.reconcilers["populate-jail"](Request(NS, NAME))
        await clock.advance(PROGRESS_SECONDS - COALESCE_SECONDS)
        assert env.reason("JailPopulated") == ("False", "Populating")
        await clock.advance(COALESCE_SECONDS)
        assert status_writes(env, mark) == 1
        assert env.reason("JailPopulated") == ("True", "Populated")
        assert env.phase() == "Reconciling"


async def test_a_copy_of_the_cluster_from_before_a_write_still_sees_what_was_written() -> None:
    """A reconcile that loaded the cluster before the status write compares its part with the written status, also
    after another component's newer copy showed the cache caught up (else it takes old news for new: the populate-jail
    component warned twice about one refused volume)."""
    clock = FakeClock()
    async with writing(clock) as env:
        env.create(spec())
        older = env.get(SLURM_CLUSTER, NAME)
        assert older is not None
        await reconcile_all(env)
        await clock.advance(COALESCE_SECONDS)
        newer = env.get(SLURM_CLUSTER, NAME)
        assert newer is not None and status_writes(env) == 1

        def populated(obj: dict[str, Any]) -> str | None:
            conditions = env.ctx.status.view(obj).get("conditions") or []
            return next((c["reason"] for c in conditions if c["type"] == "JailPopulated"), None)

        assert populated(newer) == "Populating"
        assert populated(older) == "Populating"


async def test_a_part_that_completes_the_phase_while_a_write_is_in_flight_goes_out_at_once() -> None:
    """The last component turning ready while the write of the others' progress is still in flight moves the phase:
    news, judged against what is being written. Judged against the status before that write it looked like more
    progress and waited the progress window (up to 4x under a backlog): clusters of bench many_clusters reached
    Available 10 s late."""
    clock = FakeClock()
    async with writing(clock) as env:
        await populated_and_ready(env, clock)
        await clock.advance(PROGRESS_SECONDS)
        gate = asyncio.Event()
        apply_status = env.ctx.manager.apply_status

        async def slow(body: Any, **kw: Any) -> Any:
            await gate.wait()
            return await apply_status(body, **kw)

        env.ctx.manager.apply_status = slow  # type: ignore[method-assign]
        mark = env.mark()
        for name, component in env.ctx.reconcilers.items():
            if name != "rest":
                await component(Request(NS, NAME))
        await clock.advance(PROGRESS_SECONDS)  # the progress write starts, and waits for the API server
        await env.ctx.reconcilers["rest"](Request(NS, NAME))  # the last one ready: Available
        gate.set()
        await clock.advance(COALESCE_SECONDS)
        assert env.phase() == "Available"
        assert status_writes(env, mark) == 2
