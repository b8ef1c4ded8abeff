"""Evictions against the real API server: the operator applies the workers' budget (policy/v1), and once
kube-controller-manager's disruption controller has computed it, the eviction API (what `kubectl drain` calls)
refuses with 429 to evict a running worker pod that is not labelled evictable, and lets one labelled evictable go.
Which pods the operator labels is unit-tested (test/unit/reconcilers/test_evictions.py); that the label has this
effect, and that the operator's server-side applies set and take off that label beside the SlurmNodeState condition
without touching anything else, is what only a real API server shows.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from slurmctl.reconcilers.slurm_marks import EVICTABLE_FIELD_MANAGER, FIELD_MANAGER
from slurmctl.render import meta
from slurmctl.runtime import Applier, Client
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
                "policy", "v1", namespace, "poddisruptionbudgets", f"{NAME}-workers", _request_timeout=T
            )
        )
        return found

    pdb = await eventually(budget, timeout=30, what="the workers' PodDisruptionBudget")
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
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
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


async def test_the_evictable_label_is_set_and_taken_off_by_server_side_apply_beside_the_condition(
    api: client.ApiClient, namespace: str
) -> None:
    """The two field managers the Slurm node loop writes a worker pod with: the label on the pod, the condition on
    its /status. API servers before 1.22 keep one managedFields entry per manager whatever the subresource, so the
    two must not share one, or each apply would drop the other's field."""
    core = client.CoreV1Api(api)
    name = f"{NAME}-worker-cpu-0"
    labels = {meta.LABEL_INSTANCE: NAME, meta.LABEL_COMPONENT: "workers"}
    container = {"name": "slurmd", "image": "registry.invalid/worker:1"}
    # No token: this pod never runs.
    spec = {"containers": [container], "automountServiceAccountToken": False}
    body = {"metadata": {"name": name, "labels": labels}, "spec": spec}
    await core.create_namespaced_pod(namespace, body, _request_timeout=T)
    applier = Applier(Client(api, timeout=10))
    ref = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
    evictable = {**ref, "metadata": {**ref["metadata"], "labels": {meta.LABEL_EVICTABLE: "true"}}}
    condition = {"type": "SlurmNodeState", "status": "False", "reason": "Drained", "message": "bad DIMM"}

    async def read() -> tuple[dict[str, str], list[str]]:
        pod = await core.read_namespaced_pod(name, namespace, _request_timeout=T)
        return dict(pod.metadata.labels or {}), [c.type for c in pod.status.conditions or []]

    await applier.apply(evictable, field_manager=EVICTABLE_FIELD_MANAGER)
    await applier.apply_status({**ref, "status": {"conditions": [condition]}}, field_manager=FIELD_MANAGER)
    found, conditions = await read()
    assert found == {**labels, meta.LABEL_EVICTABLE: "true"} and "SlurmNodeState" in conditions
    await applier.apply(ref, field_manager=EVICTABLE_FIELD_MANAGER)
    found, conditions = await read()
    assert found == labels, "taken off, and only it"
    assert "SlurmNodeState" in conditions, "the condition stays"
    await applier.apply(evictable, field_manager=EVICTABLE_FIELD_MANAGER)
    await applier.apply_status(
        {**ref, "status": {"conditions": [{**condition, "reason": "Idle"}]}}, field_manager=FIELD_MANAGER
    )
    found, _ = await read()
    assert found.get(meta.LABEL_EVICTABLE) == "true", "a condition write leaves the label alone"
