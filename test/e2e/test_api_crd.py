"""The SlurmCluster API on a real API server: installation, samples, printer columns, explain, and rejection."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from slurmctl.api.v1 import (
    CRD_NAME,
    GROUP,
    PLURAL,
    VERSION,
    SlurmClusterSpec,
    SlurmClusterStatus,
    SlurmVersionStatus,
    crd,
)
from slurmctl.reconcilers.base import status_part
from test.e2e.harness import REPO, ControlPlane, eventually

pytestmark = pytest.mark.e2e
TIMEOUT = 10
APPLY = "application/apply-patch+yaml"
SAMPLES = REPO / "config" / "samples"
VALID: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "SlurmCluster",
    "metadata": {"name": "valid"},
    "spec": {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu", "size": 2}]},
}


def _leaves(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*prefix, key))]
    if isinstance(node, list) and node:
        return [leaf for index, value in enumerate(node) for leaf in _leaves(value, (*prefix, index))]
    return [(prefix, node)]


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


async def test_default_kustomization_installs_everything(installed: ControlPlane, api: client.ApiClient) -> None:
    stored = await client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD_NAME, _request_timeout=TIMEOUT)
    conditions = {c.type: c.status for c in stored.status.conditions}
    assert conditions.get("Established") == "True"
    assert conditions.get("NonStructuralSchema") is None
    # Nothing of the schema was dropped or rewritten by the server.
    served = api.sanitize_for_serialization(stored.spec.versions[0].schema.open_apiv3_schema)
    assert served == crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    deployment = await client.AppsV1Api(api).read_namespaced_deployment(
        "slurmctl-operator", "slurmctl-system", _request_timeout=TIMEOUT
    )
    assert deployment.spec.template.spec.service_account_name == "slurmctl-operator"
    rbac = client.RbacAuthorizationV1Api(api)
    await rbac.read_namespaced_role("slurmctl-operator", "default", _request_timeout=TIMEOUT)
    await rbac.read_cluster_role("slurmctl-operator-cluster-scoped", _request_timeout=TIMEOUT)
    await rbac.read_namespaced_role("slurmctl-leader-election", "slurmctl-system", _request_timeout=TIMEOUT)
    # A second apply changes nothing, as a GitOps tool re-applying the same tree would expect.
    installed.kubectl("apply", "--server-side", "-k", str(REPO / "config" / "default"))
    again = await client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD_NAME, _request_timeout=TIMEOUT)
    assert again.metadata.resource_version == stored.metadata.resource_version


async def test_samples_apply_and_keep_every_field(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    installed.kubectl("apply", "--server-side", "-n", namespace, "-f", str(SAMPLES))
    custom = client.CustomObjectsApi(api)
    for path in sorted(SAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] != "SlurmCluster":
                continue
            stored = await custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, doc["metadata"]["name"], _request_timeout=TIMEOUT
            )
            for leaf, value in _leaves(doc["spec"]):
                assert _at(stored["spec"], leaf) == value, f"{path.name}: spec.{leaf} was pruned or changed"
            # The server's defaults are the models' defaults.
            assert SlurmClusterSpec.model_validate(stored["spec"]) == SlurmClusterSpec.model_validate(doc["spec"])
    assert stored["spec"]["controller"]["size"] == 1
    assert stored["spec"]["slurm"]["cgroupVersion"] == "auto"


async def _apply_status(custom: client.CustomObjectsApi, namespace: str, manager: str, status: Any) -> None:
    """Server-side apply of the `valid` cluster's status under a field manager, as the operator's status writer does."""
    body = {"apiVersion": VALID["apiVersion"], "kind": "SlurmCluster", "metadata": {"name": "valid"}, "status": status}
    await custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "valid", body,
        field_manager=manager, force=True, _content_type=APPLY, _request_timeout=TIMEOUT,
    )  # fmt: skip


async def test_printer_columns_and_status_conditions_merge_by_type(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, VALID, _request_timeout=TIMEOUT)

    def condition(type_: str, status: str) -> dict[str, Any]:
        return {
            "type": type_,
            "status": status,
            "reason": "Observed",
            "message": "test",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }

    for manager, body in [
        (
            "slurmctl-cluster",
            {"phase": "Degraded", "controllerReady": "1/1", "workersReady": "1/2", "loginReady": "0/1"},
        ),
        ("slurmctl-slurm-nodes", {"slurmNodes": {"total": 2, "idle": 1, "allocated": 0, "drained": 1, "down": 0}}),
        ("slurmctl-workers", {"conditions": [condition("WorkersReady", "False")]}),
        ("slurmctl-login", {"conditions": [condition("LoginReady", "False")]}),
    ]:
        await _apply_status(custom, namespace, manager, body)
    stored = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "valid", _request_timeout=TIMEOUT
    )
    assert [c["type"] for c in stored["status"]["conditions"]] == ["WorkersReady", "LoginReady"]

    table = installed.kubectl("get", "slurm", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "CONTROLLER", "WORKERS", "LOGIN", "IDLE", "ALLOC", "DRAIN", "AGE"]
    assert table[1].split()[:8] == ["valid", "Degraded", "1/1", "1/2", "0/1", "1", "0", "1"]


async def test_explain_documents_the_worker_groups(installed: ControlPlane) -> None:
    async def explained() -> str | None:
        proc = installed.kubectl("explain", "slurmcluster.spec.workers", check=False)
        return proc.stdout if proc.returncode == 0 and "FIELDS" in proc.stdout else None

    text = " ".join((await eventually(explained, timeout=30, what="kubectl explain to know SlurmCluster")).split())
    for expected in (
        "Worker groups, one per kind of node",
        "Group name: a DNS label of at most 20 characters",
        "Number of worker nodes in the group (0 to 1000); edit it to scale.",
        "NVIDIA GPUs per node (nvidia.com/gpu); 0 means a CPU-only group.",
        "Size limit of /dev/shm on these nodes",
    ):
        assert expected in text


def _invalid(metadata_name: str = "bad", **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(VALID)
    body["metadata"]["name"] = metadata_name
    body["spec"].update(spec)
    return body


def _without(key: str) -> dict[str, Any]:
    body = copy.deepcopy(VALID)
    body["metadata"]["name"] = "bad"
    del body["spec"][key]
    return body


JAIL = {"volume": {"claimName": "jail"}}
INVALID = {
    "negative size": (_invalid(workers=[{"name": "cpu", "size": -1}]), "spec.workers[0].size"),
    "size above the maximum": (_invalid(workers=[{"name": "cpu", "size": 1001}]), "spec.workers[0].size"),
    "group name not a DNS label": (_invalid(workers=[{"name": "GPU_1"}]), "spec.workers[0].name"),
    "group name too long": (_invalid(workers=[{"name": "g" * 21}]), "spec.workers[0].name"),
    "duplicate group names": (_invalid(workers=[{"name": "cpu"}, {"name": "cpu"}]), "spec.workers[1]"),
    "cluster name too long": (_invalid("c" * 25), "metadata.name"),
    "unknown service type": (_invalid(login={"service": {"type": "External"}}), "spec.login.service.type"),
    "unknown cgroup version": (_invalid(slurm={"cgroupVersion": "v3"}), "spec.slurm.cgroupVersion"),
    "gpus as a string": (_invalid(workers=[{"name": "gpu", "gpus": "8"}]), "spec.workers[0].gpus"),
    "enabled as a string": (_invalid(accounting={"enabled": "yes"}), "spec.accounting.enabled"),
    "not a quantity": (_invalid(jail={**JAIL, "sharedMemorySize": "lots"}), "spec.jail.sharedMemorySize"),
    "node port out of range": (_invalid(login={"service": {"nodePort": 80}}), "spec.login.service.nodePort"),
    "no worker groups": (_invalid(workers=[]), "spec.workers"),
    "workers missing": (_without("workers"), "spec.workers"),
    "jail missing": (_without("jail"), "spec.jail"),
    "jail volume without a source": (_invalid(jail={"volume": {}}), "spec.jail.volume"),
    "external database without host": (
        _invalid(accounting={"enabled": True, "external": {"user": "slurm", "passwordSecretRef": {"name": "db"}}}),
        "spec.accounting.external.host",
    ),
    "negative MaxJobsPerUser": (
        _invalid(accounting={"enabled": True, "qos": [{"name": "small", "maxJobsPerUser": -5}]}),
        "spec.accounting.qos[0].maxJobsPerUser",
    ),
    "negative TRES limit": (
        _invalid(accounting={"enabled": True, "accounts": [{"name": "a", "maxTRESPerJob": {"cpu": -1}}]}),
        "spec.accounting.accounts[0].maxTRESPerJob.cpu",
    ),
    "ssh key smuggling a second line": (
        _invalid(login={"sshRootPublicKeys": ["ssh-ed25519 AAAA a@b\nssh-rsa AAAA evil"]}),
        "spec.login.sshRootPublicKeys",
    ),
}


async def test_invalid_manifests_are_rejected_naming_the_field(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    failures = []
    for case, (body, field) in INVALID.items():
        try:
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, body, _request_timeout=TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 422 or field not in (exc.body or ""):
                failures.append(f"{case}: HTTP {exc.status} without {field!r}: {exc.body}")
        else:
            failures.append(f"{case}: accepted")
    assert failures == []
    stored = await custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _request_timeout=TIMEOUT)
    assert stored["items"] == []
    # The same manifests through kubectl, with client-side validation off so the server has the last word.
    body, field = INVALID["unknown service type"]
    proc = installed.apply_unvalidated(body, namespace=namespace)
    assert proc.returncode != 0 and field in proc.stderr


async def test_slurm_line_status_survives_every_staged_pod_gone(
    installed: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    """When every staged pod is gone at once (a restart of every node), the cluster component's status part names no
    component's line: the API server must still take the whole status, not refuse it."""
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, VALID, _request_timeout=TIMEOUT)
    running = SlurmVersionStatus(
        version="25.11", components={"controller": "25.11", "workers": "25.11"}, phase="Current"
    )
    for part in (running, SlurmVersionStatus(components={}, phase="Current")):
        body = status_part(SlurmClusterStatus(phase="Degraded", slurm=part))
        await _apply_status(custom, namespace, "slurmctl-cluster", body)
    stored = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "valid", _request_timeout=TIMEOUT
    )
    assert stored["status"]["phase"] == "Degraded"
    assert SlurmVersionStatus.model_validate(stored["status"]["slurm"]).components == {}
