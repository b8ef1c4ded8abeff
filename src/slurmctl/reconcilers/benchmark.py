"""The `benchmark` component: the NCCL benchmark CronJob on clusters with GPU workers, and BenchmarkScheduled.

The CronJob's API version is chosen once, at start, by discovery (registration resolves `kinds.FALLBACKS`):
`batch/v1`, or `batch/v1beta1` on clusters older than 1.21 that do not serve `batch/v1` CronJobs.
"""

from __future__ import annotations

from slurmctl.api.v1 import Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler, Loaded
from slurmctl.render import meta
from slurmctl.render.kinds import CRONJOB


class BenchmarkReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        spec = loaded.cluster.spec
        nccl = spec.health_checks.nccl_benchmark
        name = meta.nccl_benchmark(loaded.name)
        intents = self.desired(self.inputs(loaded))
        await self.apply(loaded, intents)
        await self.prune(loaded, CRONJOB, keep=[o["metadata"]["name"] for o in intents])
        if not spec.gpu_groups:
            if nccl.enabled:
                reason, message = (
                    Reason.NO_GPU_WORKERS,
                    "spec.healthChecks.ncclBenchmark is enabled but no group has GPUs",
                )
            else:
                reason, message = Reason.DISABLED, "spec.healthChecks.ncclBenchmark.enabled is false"
            cond = self.condition(loaded, ok=False, reason=reason, message=message)
        elif nccl.enabled:
            message = f"CronJob {name} runs on schedule {nccl.schedule!r}"
            cond = self.condition(loaded, ok=True, reason=Reason.SCHEDULED, message=message)
        else:
            message = f"CronJob {name} is suspended: spec.healthChecks.ncclBenchmark.enabled is false"
            cond = self.condition(loaded, ok=False, reason=Reason.DISABLED, message=message)
        await self.write_status(loaded, SlurmClusterStatus(conditions=[cond]))
