"""The operator's core reconcilers (cluster, controller, workers, login) against the real control plane, running as
their own ServiceAccount. Helpers and specs: test/e2e/clusters.py; the operator fixtures: test/e2e/conftest.py.
"""

from __future__ import annotations

import base64
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from test.e2e.apiserver_metrics import request_counts
from test.e2e.clusters import (
    GROUP,
    MERGE_PATCH,
    NAME,
    PLURAL,
    SUCCEEDED,
    VERSION,
    Cluster,
    T,
    accounting_spec,
    gpu_spec,
    spec,
)
from test.e2e.harness import eventually
from test.e2e.operator import (
    RunningOperator,
    no_namespace_terminating,
    operator_writes,
    reconciles,
    slurmctl_events,
)

pytestmark = pytest.mark.e2e


EXPECTED_CHILDREN = {
    ("ConfigMap", "c1-slurm-configs"),
    ("ConfigMap", "c1-sshd"),
    ("Secret", "c1-munge"),
    ("Secret", "c1-jwt-key"),
    ("Secret", "c1-ssh-host-keys"),
    ("Service", "c1-controller"),
    ("Service", "c1-workers"),
    ("Service", "c1-login"),
    ("Service", "c1-login-headless"),
    ("Service", "c1-login-0"),
    ("Service", "c1-rest"),
    ("StatefulSet", "c1-controller"),
    ("StatefulSet", "c1-worker-cpu"),
    ("StatefulSet", "c1-login"),
    ("Deployment", "c1-rest"),
    ("Job", "c1-populate-jail"),
    ("NetworkPolicy", "c1-slurm"),
    ("NetworkPolicy", "c1-slurmrestd"),
    ("NetworkPolicy", "c1-login-ssh"),
    # The resume signal's identity and ConfigMap (render/power.py), made for every cluster.
    ("ServiceAccount", "c1-power"),
    ("Role", "c1-power"),
    ("RoleBinding", "c1-power"),
    ("ConfigMap", "c1-power"),
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
    assert "NodeSet=cpu Feature=cpu\n" in conf["nodes.conf"]
    slurmd = (await cluster.sts("c1-worker-cpu")).spec.template.spec.containers[0]
    assert {e.name: e.value for e in slurmd.env}["SLURMD_CONF"] == "Feature=cpu CPUs=2 RealMemory=4096"
    assert "required /usr/lib/slurmctl/chroot.so jail=/mnt/jail" in conf["plugstack.conf"]
    assert (await cluster.configmap("c1-sshd"))["authorized_keys"].startswith("ssh-ed25519 ")

    # Nothing is ready yet: the phase says so and each component names what it waits for.
    assert await cluster.phase() in ("Pending", "Reconciling")
    await cluster.become_available(expected_pods=5)
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
        "RestReady": "True",
        "BenchmarkScheduled": "False",
        "SlurmVersion": "True",
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

    async def template_hash() -> str:
        annotations = (await cluster.sts("c1-worker-cpu")).spec.template.metadata.annotations
        return str(annotations["slurm.slurmctl.io/config-hash"])

    # Scaling changes no Slurm config (workers are dynamic nodes): neither the configs nor the workers' pod template
    # change through any edit (a new hash would roll every worker on each scale).
    first_hash = await template_hash()
    first_configs = await cluster.configmap("c1-slurm-configs")
    latencies = []
    for size in (3, 4, 5, 6, 7, 8):
        started = time.monotonic()
        await cluster.patch([{"op": "replace", "path": "/spec/workers/0/size", "value": size}])
        await eventually(lambda size=size: replicas_are(size), timeout=10, interval=0.005, what=f"{size} replicas")
        latencies.append(time.monotonic() - started)

        assert await cluster.configmap("c1-slurm-configs") == first_configs, f"scaling to {size} changed a config"
        assert await template_hash() == first_hash, f"scaling to {size} changed the workers' pod template"
    print(
        f"\nscale edit -> StatefulSet replicas latency: p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} edits"
    )

    # Scale-in drains the leaving nodes in Slurm first. This control plane runs no pods, so there is no slurmrestd
    # to ask: the group keeps its nodes (fail closed) and WorkersReady says why.
    await cluster.patch([{"op": "replace", "path": "/spec/workers/0/size", "value": 2}])

    async def held() -> bool:
        cond = await cluster.condition("WorkersReady")
        return cond is not None and cond["reason"] == "SlurmUnreachable" and "slurmrestd" in cond["message"]

    await eventually(held, timeout=30, what="WorkersReady to say Slurm cannot be asked")
    assert await cluster.replicas("c1-worker-cpu") == 8


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

    # Another tool changes a field slurmctl owns (replicas) and adds one slurmctl does not (an annotation). (Down, not
    # up: replicas above the spec are nodes that must go, and those wait for Slurm's drain.)
    await cluster.apps.patch_namespaced_stateful_set(
        "c1-worker-cpu",
        namespace,
        {"metadata": {"annotations": {"example.com/owner": "other-tool"}}, "spec": {"replicas": 0}},
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
    await cluster.become_available(expected_pods=5)
    before = {key: obj.metadata.resource_version for key, obj in (await cluster.children()).items()}
    counts = {c: reconciles(c) for c in ("controller", "workers", "login")}

    # A mistake the CRD's rules cannot see (the API server refuses an unknown worker group itself): an option
    # slurmctl writes from the structured fields.
    bad = [{"name": "main", "default": True, "options": {"Nodes": "ALL"}}]
    await cluster.patch([{"op": "add", "path": "/spec/partitions", "value": bad}])
    await cluster.wait_phase("Failed")
    spec_valid = await cluster.condition("SpecValid")
    assert spec_valid is not None
    assert spec_valid["status"] == "False"
    assert "spec.partitions[0].options.Nodes: Nodes is set by slurmctl" in spec_valid["message"]

    async def invalid_spec_event() -> bool:
        events = await cluster.core.list_namespaced_event(namespace, _request_timeout=T)
        return any(e.reason == "InvalidSpec" and "options.Nodes" in e.message for e in events.items)

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
    await cluster.become_available(expected_pods=5)
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


async def test_steady_state_costs_zero_writes_with_every_component(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create_password_secret(f"pw-{uuid.uuid4().hex}")
    await cluster.create(accounting_spec(gpu_spec(benchmark=True)))
    await cluster.finish_job(SUCCEEDED)

    async def available() -> bool:
        return await cluster.phase() == "Available"

    await cluster.ready_until(available, what="phase Available with accounting and the benchmark")
    assert (await cluster.condition("AccountingReady") or {}).get("status") == "True"
    await cluster.wait_condition("BenchmarkScheduled", "True", "Scheduled")

    await no_namespace_terminating(api)
    await cluster.resyncs(2)
    events_before = await slurmctl_events(api, namespace)
    before = await request_counts(api)
    await cluster.resyncs(5)
    after = await request_counts(api)
    assert operator_writes(before, after) == {}, "a converged cluster with every component must cost no API writes"
    assert await slurmctl_events(api, namespace) == events_before, "no Event from slurmctl either"


async def test_status_rows_an_older_release_wrote_go_once_the_operator_writes_the_status(
    api: client.ApiClient, namespace: str, operator: RunningOperator
) -> None:
    """Releases before the status writer applied status under one field manager per component. A row such a manager
    wrote for a group the spec no longer has must not stay for ever: the operator hands those managers' fields over
    to its own on its next status write, and the row goes."""
    cluster = Cluster(api, namespace)
    await cluster.create(spec())
    await cluster.become_available(expected_pods=4)
    rows = [{"name": "cpu", "desired": 2, "ready": 2}, {"name": "retired", "desired": 1, "ready": 1}]
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SlurmCluster",
        "metadata": {"name": NAME},
        "status": {"workers": rows},
    }
    await cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, NAME, body, field_manager="slurmctl-workers", force=True,
        _content_type="application/apply-patch+yaml", _request_timeout=T,
    )  # fmt: skip
    assert [r["name"] for r in (await cluster.get())["status"]["workers"]] == ["cpu", "retired"]

    await cluster.patch([{"op": "replace", "path": "/spec/workers/0/size", "value": 3}])  # a status write follows

    async def rows_now() -> list[str] | None:
        names = [r["name"] for r in (await cluster.get())["status"].get("workers") or []]
        return names if names == ["cpu"] else None

    await eventually(rows_now, timeout=30, what="the retired group's row gone")
    managers = {e["manager"] for e in (await cluster.get())["metadata"]["managedFields"]}
    assert "slurmctl-workers" not in managers
