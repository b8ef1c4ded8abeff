"""The jail gate (reconcilers/jail_gate.py): open once the populate-jail Job succeeded, and kept open by
JailPopulated after the Job is gone."""

from __future__ import annotations

from slurmctl.reconcilers.jail_gate import jail_gate_open
from slurmctl.reconcilers.loading import Loaded
from slurmctl.render.kinds import JOB
from test.unit.reconcilers.env import NAME, NS, Env, spec


def gate(env: Env) -> bool:
    loaded = env.ctx.loader.load(env.cluster())
    assert isinstance(loaded, Loaded)
    return jail_gate_open(env.manager.cache, loaded)


async def test_the_gate_opens_when_the_job_succeeds_and_stays_open_without_it() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("cluster", "populate-jail")
        assert not gate(env), "the Job runs"
        env.job_fails()
        assert not gate(env)
        env.job_succeeds()
        assert gate(env), "the Job succeeded (before JailPopulated says so)"
        await env.run("populate-jail")
        await env.manager.client.delete(*JOB, f"{NAME}-populate-jail", namespace=NS)
        assert gate(env), "JailPopulated remembers"


async def test_the_gate_stays_closed_without_the_job_or_the_condition() -> None:
    async with Env() as env:
        env.create(spec())
        assert not gate(env)
