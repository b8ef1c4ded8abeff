"""The `benchmark` component: the NCCL benchmark CronJob on clusters with GPU workers, and BenchmarkScheduled.

The CronJob's API version is chosen once, at start, by discovery: `batch/v1`, or `batch/v1beta1` on clusters older
than 1.21 that do not serve `batch/v1` CronJobs (clusters from 1.25 on serve only `batch/v1`).
"""

from __future__ import annotations

from slurmctl.api.v1 import BENCHMARK_SCHEDULED
from slurmctl.reconcilers.base import ComponentReconciler, Loaded
from slurmctl.render import meta
from slurmctl.render.benchmark import COMPONENT, render_benchmark_cronjob
from slurmctl.runtime import Manager


async def cronjob_api_version(manager: Manager) -> str:
    return "batch/v1" if await manager.is_served("batch/v1", "CronJob") else "batch/v1beta1"


class BenchmarkReconciler(ComponentReconciler):
    component = "benchmark"
    condition_type = BENCHMARK_SCHEDULED

    def __init__(self, manager: Manager, *, api_version: str) -> None:
        super().__init__(manager)
        self.api_version = api_version

    async def reconcile_valid(self, loaded: Loaded) -> None:
        spec = loaded.cluster.spec
        nccl = spec.health_checks.nccl_benchmark
        name = meta.nccl_benchmark(loaded.name)
        if not spec.gpu_groups:
            await self.prune(loaded, self.api_version, "CronJob", component=COMPONENT, keep=[])
            if nccl.enabled:
                reason, message = "NoGpuWorkers", "spec.healthChecks.ncclBenchmark is enabled but no group has GPUs"
            else:
                reason, message = "Disabled", "spec.healthChecks.ncclBenchmark.enabled is false"
            cond = self.condition(loaded, ok=False, reason=reason, message=message)
        else:
            await self.apply(loaded, [render_benchmark_cronjob(loaded.cluster, api_version=self.api_version)])
            if nccl.enabled:
                message = f"CronJob {name} runs on schedule {nccl.schedule!r}"
                cond = self.condition(loaded, ok=True, reason="Scheduled", message=message)
            else:
                message = f"CronJob {name} is suspended: spec.healthChecks.ncclBenchmark.enabled is false"
                cond = self.condition(loaded, ok=False, reason="Disabled", message=message)
        await self.write_status(loaded, {"conditions": [cond]})
