"""The operator's reconcilers against the real control plane, running as their own ServiceAccount.

There is no kubelet: a test that needs workloads to look ready marks their Pods Ready and Running, and the real
StatefulSet controller turns that into readyReplicas, as it would on a real cluster.
"""

from __future__ import annotations

import base64
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from test.e2e.apiserver_metrics import request_counts
from test.e2e.harness import ControlPlane, eventually
from test.e2e.operator import (
    RunningOperator,
    no_namespace_terminating,
    operator_writes,
    reconciles,
    service_account_kubeconfig,
    slurmctl_events,
)

pytestmark = pytest.mark.e2e
T = 10
GROUP, VERSION, PLURAL = "slurm.slurmctl.io", "v1", "slurmclusters"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
NAME = "c1"


def spec(size: int = 2) -> dict[str, Any]:
    return {
        "jail": {"volume": {"claimName": "jail"}},
        "workers": [{"name": "cpu", "size": size, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}],
        "login": {"sshRootPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests test@example"]},
    }


@pytest.fixture(scope="session")
def operator_kubeconfig(installed: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return service_account_kubeconfig(installed, tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture
async def operator(operator_kubeconfig: Path) -> AsyncIterator[RunningOperator]:
    running = await RunningOperator(operator_kubeconfig, resync_period=1.0).start()
    try:
        yield running
    finally:
        await running.stop()


class Cluster:
    """The SlurmCluster under test and the objects around it, read through the admin client."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.ns = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)

    async def create(self, body_spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SlurmCluster",
            "metadata": {"name": NAME},
            "spec": body_spec,
        }
        await self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body, _request_timeout=T)

    async def get(self) -> dict[str, Any]:
        obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, NAME, _request_timeout=T
        )
        return obj

    async def patch(self, ops: list[dict[str, Any]]) -> None:
        await self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, NAME, ops, _content_type=JSON_PATCH, _request_timeout=T
        )

    async def condition(self, type_: str) -> dict[str, Any] | None:
        status = (await self.get()).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)

    async def phase(self) -> str | None:
        return ((await self.get()).get("status") or {}).get("phase")

    async def wait_phase(self, phase: str, timeout: float = 30) -> None:
        async def reached() -> bool:
            return await self.phase() == phase

        await eventually(reached, timeout=timeout, what=f"phase {phase}")

    async def sts(self, name: str) -> Any:
        return await self.apps.read_namespaced_stateful_set(name, self.ns, _request_timeout=T)

    async def replicas(self, name: str) -> int | None:
        try:
            return int((await self.sts(name)).spec.replicas)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def configmap(self, name: str) -> dict[str, str]:
        """The ConfigMap's data; empty while it does not exist yet."""
        try:
            cm = await self.core.read_namespaced_config_map(name, self.ns, _request_timeout=T)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return dict(cm.data or {})

    async def populate_jail(self) -> None:
        """Mark the populate-jail Job succeeded, as the Job controller would once its pod finished the copy.

        The write must come after the Job controller's first sync (it counts the pending pod as active), or that
        sync overwrites it; and it is repeated until it stays.
        """
        batch = client.BatchV1Api(self.custom.api_client)
        name = f"{NAME}-populate-jail"

        async def started() -> Any | None:
            try:
                job = await batch.read_namespaced_job(name, self.ns, _request_timeout=T)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            return job if (job.status.active or 0) >= 1 else None

        await eventually(started, timeout=30, what="the populate-jail Job to be started by its controller")
        complete = {"type": "Complete", "status": "True"}

        async def succeeded() -> bool:
            job = await batch.read_namespaced_job(name, self.ns, _request_timeout=T)
            if (job.status.succeeded or 0) >= 1:
                return True
            await batch.patch_namespaced_job_status(
                name,
                self.ns,
                {"status": {"succeeded": 1, "conditions": [complete]}},
                _content_type=MERGE_PATCH,
                _request_timeout=T,
            )
            return False

        await eventually(succeeded, timeout=15, interval=0.05, what="the Job's succeeded status to stay written")

    async def make_pods_ready(self) -> int:
        """Mark every pod of the cluster Running and Ready, as a kubelet would once the containers pass probes."""
        pods = await self.core.list_namespaced_pod(
            self.ns, label_selector=f"app.kubernetes.io/instance={NAME}", _request_timeout=T
        )
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for pod in pods.items:
            if pod.status.phase != "Running":
                await self.core.patch_namespaced_pod_status(
                    pod.metadata.name,
                    self.ns,
                    {"status": {"phase": "Running", "conditions": [ready]}},
                    _content_type="application/strategic-merge-patch+json",
                    _request_timeout=T,
                )
        return len(pods.items)

    async def become_available(self, expected_pods: int) -> None:
        await self.populate_jail()

        async def all_ready() -> bool:
            await self.make_pods_ready()
            return await self.phase() == "Available"

        await eventually(all_ready, timeout=60, interval=0.3, what=f"phase Available with {expected_pods} pods ready")

    async def children(self) -> dict[tuple[str, str], Any]:
        selector = f"app.kubernetes.io/instance={NAME}"
        found: dict[tuple[str, str], Any] = {}
        for kind, lister in (
            ("ConfigMap", self.core.list_namespaced_config_map),
            ("Secret", self.core.list_namespaced_secret),
            ("Service", self.core.list_namespaced_service),
            ("StatefulSet", self.apps.list_namespaced_stateful_set),
            ("Job", client.BatchV1Api(self.custom.api_client).list_namespaced_job),
        ):
            for item in (await lister(self.ns, label_selector=selector, _request_timeout=T)).items:
                found[(kind, item.metadata.name)] = item
        return found


EXPECTED_CHILDREN = {
    ("ConfigMap", "c1-slurm-configs"),
    ("ConfigMap", "c1-sshd"),
    ("Secret", "c1-munge"),
    ("Secret", "c1-ssh-host-keys"),
    ("Service", "c1-controller"),
    ("Service", "c1-workers"),
    ("Service", "c1-login"),
    ("Service", "c1-login-headless"),
    ("StatefulSet", "c1-controller"),
    ("StatefulSet", "c1-worker-cpu"),
    ("StatefulSet", "c1-login"),
    ("Job", "c1-populate-jail"),
}


async def test_sample_creates_every_child_and_status_follows_the_workloads(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec())

    async def gated() -> bool:
        found = set(await cluster.children())
        return ("Job", "c1-populate-jail") in found and ("StatefulSet", "c1-controller") in found

    await eventually(gated, timeout=30, what="the populate-jail Job and the controller")
    # The jail is empty until the Job succeeds: no worker or login node may start on it.
    assert not {("StatefulSet", "c1-worker-cpu"), ("StatefulSet", "c1-login")} & set(await cluster.children())
    await cluster.populate_jail()

    async def all_children() -> dict[tuple[str, str], Any] | None:
        found = await cluster.children()
        return found if set(found) >= EXPECTED_CHILDREN else None

    children = await eventually(all_children, timeout=30, what="every child object")
    assert set(children) == EXPECTED_CHILDREN
    uid = (await cluster.get())["metadata"]["uid"]
    for (_kind, name), obj in children.items():
        owners = obj.metadata.owner_references or []
        assert [(o.kind, o.name, o.uid, o.controller) for o in owners] == [("SlurmCluster", NAME, uid, True)], name
        assert obj.metadata.labels["app.kubernetes.io/managed-by"] == "slurmctl", name

    munge = children[("Secret", "c1-munge")]
    assert len(base64.b64decode(munge.data["munge.key"])) == 1024
    conf = await cluster.configmap("c1-slurm-configs")
    assert "NodeName=c1-worker-cpu-1 NodeAddr=c1-worker-cpu-1.c1-workers CPUs=2 RealMemory=4096" in conf["nodes.conf"]
    assert "required /usr/lib/slurmctl/chroot.so jail=/mnt/jail" in conf["plugstack.conf"]
    assert (await cluster.configmap("c1-sshd"))["authorized_keys"].startswith("ssh-ed25519 ")

    # Nothing is ready yet: the phase says so and each component names what it waits for.
    assert await cluster.phase() in ("Pending", "Reconciling")
    await cluster.become_available(expected_pods=4)
    status = (await cluster.get())["status"]
    assert status["controllerReady"] == "1/1"
    assert status["workersReady"] == "2/2"
    assert status["loginReady"] == "1/1"
    assert status["workers"] == [{"name": "cpu", "desired": 2, "ready": 2}]
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {
        "SpecValid": "True",
        "JailPopulated": "True",
        "ControllerReady": "True",
        "WorkersReady": "True",
        "LoginReady": "True",
        "BenchmarkScheduled": "False",
    }

    # A worker that was ready and is not any more makes the cluster Degraded, not Reconciling.
    pod = await cluster.core.read_namespaced_pod("c1-worker-cpu-0", namespace, _request_timeout=T)
    await cluster.core.patch_namespaced_pod_status(
        pod.metadata.name,
        namespace,
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        _content_type="application/strategic-merge-patch+json",
        _request_timeout=T,
    )
    await cluster.wait_phase("Degraded")
    workers = await cluster.condition("WorkersReady")
    assert workers is not None
    assert workers["status"] == "False"
    assert "cpu 1/2" in workers["message"]


async def test_scaling_a_group_follows_the_edit_and_the_node_list(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec(size=2))
    await cluster.populate_jail()

    async def replicas_are(n: int) -> bool:
        return await cluster.replicas("c1-worker-cpu") == n

    await eventually(lambda: replicas_are(2), timeout=30, what="the worker StatefulSet")
    latencies = []
    for size in (5, 2, 5, 2, 5, 2):
        started = time.monotonic()
        await cluster.patch([{"op": "replace", "path": "/spec/workers/0/size", "value": size}])
        await eventually(lambda size=size: replicas_are(size), timeout=10, interval=0.005, what=f"{size} replicas")
        latencies.append(time.monotonic() - started)

        async def node_list_follows(size: int = size) -> bool:
            nodes = (await cluster.configmap("c1-slurm-configs")).get("nodes.conf", "")
            return f"c1-worker-cpu-{size - 1} " in nodes and f"c1-worker-cpu-{size} " not in nodes

        await eventually(node_list_follows, timeout=10, what=f"nodes.conf with {size} workers")
    print(
        f"\nscale edit -> StatefulSet replicas latency: p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} edits"
    )
    # Scaling changes the node list but not what a worker reads at start: the workers' pod template is unchanged.
    hashes = {(await cluster.sts("c1-worker-cpu")).spec.template.metadata.annotations["slurm.slurmctl.io/config-hash"]}
    assert len(hashes) == 1


async def test_drift_is_repaired_and_fields_of_other_managers_are_left_alone(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec())
    await cluster.populate_jail()

    async def children_exist() -> bool:
        return set(await cluster.children()) >= EXPECTED_CHILDREN

    await eventually(children_exist, timeout=30, what="every child object")

    await cluster.core.delete_namespaced_service("c1-workers", namespace, _request_timeout=T)

    async def service_back() -> bool:
        try:
            await cluster.core.read_namespaced_service("c1-workers", namespace, _request_timeout=T)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    await eventually(service_back, timeout=30, what="the deleted Service to be re-created")

    # Another tool changes a field slurmctl owns (replicas) and adds one slurmctl does not (an annotation).
    await cluster.apps.patch_namespaced_stateful_set(
        "c1-worker-cpu",
        namespace,
        {"metadata": {"annotations": {"example.com/owner": "other-tool"}}, "spec": {"replicas": 7}},
        _content_type=MERGE_PATCH,
        _request_timeout=T,
    )

    async def replicas_reverted() -> bool:
        return await cluster.replicas("c1-worker-cpu") == 2

    await eventually(replicas_reverted, timeout=30, what="replicas reverted to the spec's 2")
    sts = await cluster.sts("c1-worker-cpu")
    assert sts.metadata.annotations.get("example.com/owner") == "other-tool"


async def test_invalid_spec_fails_names_the_field_changes_no_child_and_recovers(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec())
    await cluster.become_available(expected_pods=4)
    before = {key: obj.metadata.resource_version for key, obj in (await cluster.children()).items()}
    counts = {c: reconciles(c) for c in ("controller", "workers", "login")}

    await cluster.patch(
        [{"op": "add", "path": "/spec/partitions", "value": [{"name": "main", "workers": ["gpu2"], "default": True}]}]
    )
    await cluster.wait_phase("Failed")
    spec_valid = await cluster.condition("SpecValid")
    assert spec_valid is not None
    assert spec_valid["status"] == "False"
    assert 'spec.partitions[0].workers[0]: unknown worker group "gpu2"' in spec_valid["message"]

    async def invalid_spec_event() -> bool:
        events = await cluster.core.list_namespaced_event(namespace, _request_timeout=T)
        return any(e.reason == "InvalidSpec" and "gpu2" in e.message for e in events.items)

    await eventually(invalid_spec_event, timeout=30, what="an InvalidSpec event")

    async def components_saw_it() -> bool:
        return all(reconciles(c) > n for c, n in counts.items())

    await eventually(components_saw_it, timeout=30, what="every component to reconcile the invalid spec")
    after = {key: obj.metadata.resource_version for key, obj in (await cluster.children()).items()}
    assert after == before

    await cluster.patch([{"op": "replace", "path": "/spec/partitions", "value": [{"name": "main", "default": True}]}])
    await cluster.wait_phase("Available")
    recovered = await cluster.condition("SpecValid")
    assert recovered is not None
    assert recovered["status"] == "True"


async def test_deleting_the_cluster_removes_children_but_keeps_claims(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec())

    async def state_claim() -> bool:
        claims = await cluster.core.list_namespaced_persistent_volume_claim(namespace, _request_timeout=T)
        return any(c.metadata.name == "state-c1-controller-0" for c in claims.items)

    await eventually(state_claim, timeout=60, what="the controller's state claim")
    await cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME, _request_timeout=T)

    async def children_gone() -> bool:
        return not await cluster.children()

    await eventually(children_gone, timeout=60, what="the garbage collector to remove the children")
    assert await state_claim(), "the claim holding slurmctld's state must outlive the cluster"


async def test_steady_state_and_restart_cost_zero_writes(
    api: client.ApiClient, namespace: str, operator: RunningOperator, operator_kubeconfig: Path
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec())
    await cluster.become_available(expected_pods=4)
    controllers = ("cluster", "controller", "workers", "login")

    async def quiet_for(periods: int) -> None:
        start = {c: reconciles(c) for c in controllers}

        async def resynced() -> bool:
            return all(reconciles(c) >= start[c] + periods for c in controllers)

        await eventually(resynced, timeout=60, what=f"{periods} resyncs of every controller")

    await no_namespace_terminating(api)
    await quiet_for(2)  # let the last status writes of convergence land

    async def writes_over(periods: int) -> dict[str, int]:
        before = await request_counts(api)
        await quiet_for(periods)
        return operator_writes(before, await request_counts(api))

    events_before = await slurmctl_events(api, namespace)
    assert await writes_over(5) == {}, "a converged cluster must cost no API writes per resync"
    assert await slurmctl_events(api, namespace) == events_before

    await operator.stop()
    restarted = await RunningOperator(operator_kubeconfig, resync_period=1.0).start()
    try:
        assert await writes_over(3) == {}, "restarting on a converged cluster must cost no API writes"
        assert await slurmctl_events(api, namespace) == events_before
    finally:
        await restarted.stop()
