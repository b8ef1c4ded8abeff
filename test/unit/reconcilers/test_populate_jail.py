"""The `populate-jail` reconciler: the Job runs once, its outcome is JailPopulated, overwrite re-runs it once."""

from __future__ import annotations

from slurmctl.render.kinds import JOB
from test.unit.reconcilers.env import NAME, Env, spec

JOB_NAME = f"{NAME}-populate-jail"


async def test_the_job_runs_once_and_its_success_is_remembered() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("populate-jail")
        assert env.names(JOB) == [JOB_NAME]
        assert env.reason("JailPopulated") == ("False", "Populating")
        env.job_succeeds()
        await env.run("populate-jail")
        assert env.reason("JailPopulated") == ("True", "Populated")
        await env.fake.delete(*JOB, JOB_NAME, namespace="hpc")
        mark = env.mark()
        await env.run("populate-jail")
        assert env.writes_since(mark) == [], "a populated jail is never copied again, nor the condition rewritten"


async def test_a_failed_job_degrades_warns_once_and_is_retried_only_after_a_spec_change() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        env.job_fails()
        await env.converge()
        assert env.reason("JailPopulated") == ("False", "JobFailed")
        cond = env.condition("JailPopulated")
        assert cond is not None and "BackoffLimitExceeded" in cond["message"]
        assert env.phase() == "Degraded"
        assert ("Warning", "PopulateJailFailed") in [(t, r) for t, r, _ in env.events()]
        uid = env.get(JOB, JOB_NAME)["metadata"]["uid"]  # type: ignore[index]
        await env.run()
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] == uid, "no retry loop"  # type: ignore[index]
        env.edit(lambda s: s.update(populateJail={"image": "example.com/jail:2"}))
        await env.run("populate-jail")
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] != uid  # type: ignore[index]
        assert env.reason("JailPopulated") == ("False", "Populating")


async def test_overwrite_reruns_the_job_exactly_once_per_generation() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("populate-jail")
        env.job_succeeds()
        await env.run("populate-jail")
        first = env.get(JOB, JOB_NAME)["metadata"]["uid"]  # type: ignore[index]
        env.edit(lambda s: s.update(populateJail={"overwrite": True}))
        await env.run("populate-jail")
        second = env.get(JOB, JOB_NAME)
        assert second is not None and second["metadata"]["uid"] != first
        assert env.reason("JailPopulated") == ("False", "Overwriting")
        env.job_succeeds()
        await env.run("populate-jail")
        await env.run("populate-jail")
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] == second["metadata"]["uid"]  # type: ignore[index]
        assert env.reason("JailPopulated") == ("True", "Populated")
        deletes = [w for w in env.fake.writes if w.verb == "delete" and w.kind == "Job"]
        assert len(deletes) == 1
