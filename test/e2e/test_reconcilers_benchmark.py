"""The NCCL benchmark CronJob against the real control plane: batch/v1, suspended on disable."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from test.e2e.clusters import NAME, Cluster, T, absent_on_404, gpu_spec
from test.e2e.harness import eventually

# Every test runs against the operator; none needs its handle.
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator")]


async def test_nccl_benchmark_cronjob_is_scheduled_and_suspends_when_disabled(
    api: client.ApiClient, namespace: str
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(gpu_spec(benchmark=True))
    name = f"{NAME}-nccl-benchmark"

    async def cronjob_suspended_is(suspend: bool) -> Any | None:
        cronjob = await absent_on_404(
            lambda: client.BatchV1Api(api).read_namespaced_cron_job(name, namespace, _request_timeout=T)
        )
        return cronjob if cronjob is not None and cronjob.spec.suspend is suspend else None

    cronjob = await eventually(lambda: cronjob_suspended_is(False), timeout=30, what=f"CronJob {name}")
    assert cronjob.spec.concurrency_policy == "Forbid"
    await cluster.wait_condition("BenchmarkScheduled", "True", "Scheduled")

    await cluster.merge({"healthChecks": {"ncclBenchmark": {"enabled": False}}})
    await eventually(lambda: cronjob_suspended_is(True), timeout=30, what=f"CronJob {name} suspended")
    await cluster.wait_condition("BenchmarkScheduled", "False", "Disabled")
