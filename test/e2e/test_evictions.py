"""Evictions against the real API server (Kubernetes 1.20, which serves PodDisruptionBudgets only as policy/v1beta1):
the operator applies the workers' budget in the version discovery finds, and once kube-controller-manager's
disruption controller has computed it, the eviction API (what `kubectl drain` calls) refuses with 429 to evict a
running worker pod that is not labelled evictable, and lets one labelled evictable go. Which pods the operator labels
is unit-tested (test/unit/reconcilers/test_evictions.py); that the label has this effect is what only a real API
server shows.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from slurmctl.render import meta
from test.e2e.clusters import NAME, Cluster, T, absent_on_404, spec
from test.e2e.harness import eventually
from test.e2e.operator import RunningOperator

pytestmark = pytest.mark.e2e

WORKERS = [f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"]


async def test_a_worker_pod_is_evicted_only_once_labelled_evictable(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    custom = client.CustomObjectsApi(api)
    await cluster.create(spec(size=2))
    await cluster.populate_jail()

    async def budget() -> dict[str, Any] | None:
        found: dict[str, Any] | None = await absent_on_404(
            lambda: custom.get_namespaced_custom_object(
                "policy", "v1beta1", namespace, "poddisruptionbudgets", f"{NAME}-workers", _request_timeout=T
            )
        )
        return found

    pdb = await eventually(budget, timeout=30, what="the workers' PodDisruptionBudget as policy/v1beta1")
    assert pdb["spec"]["maxUnavailable"] == 0

    async def workers_running() -> bool:
        await cluster.make_pods_ready()  # as the kubelet would report them (there is no kubelet here)
        pods = await cluster.core.list_namespaced_pod(
            namespace, label_selector=f"{meta.LABEL_COMPONENT}=workers", _request_timeout=T
        )
        return sorted(p.metadata.name for p in pods.items if p.status.phase == "Running") == WORKERS

    await eventually(workers_running, timeout=30, interval=0.3, what="both worker pods Running")

    async def computed() -> dict[str, Any] | None:
        pdb = await budget()
        status = (pdb or {}).get("status") or {}
        observed = pdb is not None and status.get("observedGeneration") == pdb["metadata"]["generation"]
        return status if observed and status.get("expectedPods") == 2 else None

    status = await eventually(computed, timeout=60, interval=0.3, what="the disruption controller's status")
    assert status["disruptionsAllowed"] == 0

    async def evict(pod: str) -> int:
        body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        try:
            await cluster.core.create_namespaced_pod_eviction(pod, namespace, body, _request_timeout=T)
        except ApiException as exc:
            return int(exc.status)
        return 201

    assert await evict(WORKERS[0]) == 429, "its Slurm node may run a job: the eviction is refused"
    pod = await cluster.core.read_namespaced_pod(WORKERS[0], namespace, _request_timeout=T)
    assert pod.metadata.deletion_timestamp is None

    # What the operator writes once Slurm says the node is drained and runs no job.
    label = {"metadata": {"labels": {meta.LABEL_EVICTABLE: "true"}}}
    await cluster.core.patch_namespaced_pod(WORKERS[1], namespace, label, _request_timeout=T)
    assert await evict(WORKERS[1]) == 201, "evictable: the budget no longer selects it"

    async def evicted() -> bool:
        pod = await absent_on_404(lambda: cluster.core.read_namespaced_pod(WORKERS[1], namespace, _request_timeout=T))
        return (
            pod is None
            or pod.metadata.deletion_timestamp is not None
            or meta.LABEL_EVICTABLE not in (pod.metadata.labels or {})
        )

    await eventually(evicted, timeout=30, what=f"{WORKERS[1]} evicted (deleted, or re-created by its StatefulSet)")
    assert await evict(WORKERS[0]) == 429, "the other one is still protected"
