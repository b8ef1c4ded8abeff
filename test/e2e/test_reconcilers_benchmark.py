"""The NCCL benchmark CronJob against the real (1.20) control plane: batch/v1beta1 by discovery, suspend on disable."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from test.e2e.clusters import NAME, Cluster, T, gpu_spec
from test.e2e.harness import eventually

# Every test runs against the operator; none needs its handle.
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator")]


async def test_nccl_benchmark_cronjob_uses_batch_v1beta1_on_1_20_and_suspends_when_disabled(
    api: client.ApiClient, namespace: str
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(gpu_spec(benchmark=True))
    name = f"{NAME}-nccl-benchmark"

    async def cronjob_suspended_is(suspend: bool) -> dict[str, Any] | None:
        cronjob = await cluster.cronjob_v1beta1(name)
        return cronjob if cronjob is not None and cronjob["spec"].get("suspend") is suspend else None

    cronjob = await eventually(lambda: cronjob_suspended_is(False), timeout=30, what=f"CronJob {name} (v1beta1)")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    await cluster.wait_condition("BenchmarkScheduled", "True", "Scheduled")
    # This control plane does not serve batch/v1 CronJobs, so the object above is the fallback, not a second copy.
    with pytest.raises(ApiException) as not_served:
        await client.BatchV1Api(api).read_namespaced_cron_job(name, namespace, _request_timeout=T)
    assert not_served.value.status == 404

    await cluster.merge({"healthChecks": {"ncclBenchmark": {"enabled": False}}})
    await eventually(lambda: cronjob_suspended_is(True), timeout=30, what=f"CronJob {name} suspended")
    await cluster.wait_condition("BenchmarkScheduled", "False", "Disabled")
