"""The `benchmark` reconciler: the NCCL CronJob exists while there are GPU groups, suspended while disabled."""

from __future__ import annotations

from slurmctl.render.kinds import CRONJOB
from test.unit.reconcilers.env import NAME, Env, spec

CRON = f"{NAME}-nccl-benchmark"
GPU = {"name": "gpu", "size": 1, "gpus": 8}


async def test_no_gpu_groups_means_no_cronjob_and_enabling_it_there_is_a_spec_error() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("benchmark")
        assert env.names(CRONJOB) == []
        assert env.reason("BenchmarkScheduled") == ("False", "Disabled")
        env.edit(lambda s: s.update(healthChecks={"ncclBenchmark": {"enabled": True}}))
        await env.run()
        assert env.reason("SpecValid") == ("False", "InvalidSpec")
        assert env.names(CRONJOB) == []


async def test_the_cronjob_follows_gpu_groups_and_the_enabled_switch() -> None:
    async with Env() as env:
        body = spec(healthChecks={"ncclBenchmark": {"enabled": True, "schedule": "0 3 * * *"}})
        body["workers"].append(GPU)
        env.create(body)
        await env.run("benchmark")
        cron = env.get(CRONJOB, CRON)
        assert cron is not None and cron["spec"]["suspend"] is False
        assert env.reason("BenchmarkScheduled") == ("True", "Scheduled")
        env.edit(lambda s: s["healthChecks"]["ncclBenchmark"].update(enabled=False))
        await env.run("benchmark")
        assert env.get(CRONJOB, CRON)["spec"]["suspend"] is True  # type: ignore[index]
        assert env.reason("BenchmarkScheduled") == ("False", "Disabled")
        env.edit(lambda s: s.update(workers=s["workers"][:1]))
        await env.run("benchmark")
        assert env.names(CRONJOB) == []
        mark = env.mark()
        await env.run("benchmark")
        assert env.writes_since(mark) == []
