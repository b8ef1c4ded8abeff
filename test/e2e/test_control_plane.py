"""The harness's control plane is a real Kubernetes: SSA, StatefulSet and garbage collectors, CRDs with schemas."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from test.e2e.harness import ControlPlane, control_plane_script, eventually

pytestmark = pytest.mark.e2e
TIMEOUT = 10
APPLY = "application/apply-patch+yaml"


def test_the_api_server_and_kubectl_are_the_minor_the_test_runs_on(
    control_plane: ControlPlane, kube_minor: str
) -> None:
    """Each test of this suite runs on every minor `make test` covers (test/e2e/conftest.py): what answers is that
    minor's API server, and the kubectl the tests run is its own, whichever minor the worker ran before."""
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    for side in ("serverVersion", "clientVersion"):
        major, minor = versions[side]["major"], versions[side]["minor"]
        assert f"{major}.{minor}" == kube_minor, f"{side}: {versions[side]['gitVersion']}"


async def test_server_side_apply_configmap_and_identical_reapply_is_a_noop(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ssa", "namespace": namespace, "labels": {"app": "slurmctl-test"}},
        "data": {"slurm.conf": "ClusterName=test\n"},
    }
    first = await core.patch_namespaced_config_map(
        "ssa",
        namespace,
        body,
        field_manager="slurmctl-test",
        force=True,
        _content_type=APPLY,
        _request_timeout=TIMEOUT,
    )
    read = await core.read_namespaced_config_map("ssa", namespace, _request_timeout=TIMEOUT)
    assert read.data == {"slurm.conf": "ClusterName=test\n"}
    assert read.metadata.labels == {"app": "slurmctl-test"}
    assert [m.manager for m in read.metadata.managed_fields] == ["slurmctl-test"]
    assert read.metadata.managed_fields[0].operation == "Apply"

    second = await core.patch_namespaced_config_map(
        "ssa",
        namespace,
        body,
        field_manager="slurmctl-test",
        force=True,
        _content_type=APPLY,
        _request_timeout=TIMEOUT,
    )
    assert second.metadata.resource_version == first.metadata.resource_version


async def test_statefulset_controller_creates_pods(api: client.ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(api)
    core = client.CoreV1Api(api)
    labels = {"app": "sts-test"}
    await apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "serviceName": "web",
                "podManagementPolicy": "Parallel",
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
                },
            },
        },
        _request_timeout=TIMEOUT,
    )

    async def pods() -> list[str]:
        listed = await core.list_namespaced_pod(namespace, label_selector="app=sts-test", _request_timeout=TIMEOUT)
        names = sorted(p.metadata.name for p in listed.items)
        return names if len(names) == 2 else []

    assert await eventually(pods, timeout=60, what="the StatefulSet's pods") == ["web-0", "web-1"]


async def test_garbage_collector_deletes_dependents_of_a_deleted_owner(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}}, _request_timeout=TIMEOUT
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid, "controller": True}
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [ref]}}, _request_timeout=TIMEOUT
    )
    await core.delete_namespaced_config_map("owner", namespace, _request_timeout=TIMEOUT)

    async def dependent_gone() -> bool:
        try:
            await core.read_namespaced_config_map("dependent", namespace, _request_timeout=TIMEOUT)
        except ApiException as exc:
            return exc.status == 404
        return False

    await eventually(dependent_gone, timeout=60, what="the garbage collector to delete the dependent")


GROUP = "e2e.slurmctl.io"


@pytest.fixture
async def widget_crd(api: client.ApiClient) -> AsyncIterator[str]:
    """A tiny namespaced CRD with a schema, a scale subresource and a status subresource."""
    plural = f"widgets{uuid.uuid4().hex[:6]}"
    ext = client.ApiextensionsV1Api(api)
    await ext.create_custom_resource_definition(
        {
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "scope": "Namespaced",
                "names": {
                    "plural": plural,
                    "singular": plural[:-1],
                    "kind": f"W{plural}",
                    "listKind": f"W{plural}List",
                },
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "subresources": {
                            "status": {},
                            "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                        },
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "required": ["replicas"],
                                        "properties": {
                                            "replicas": {"type": "integer", "minimum": 0, "maximum": 100},
                                            "flavour": {"type": "string", "enum": ["plain", "fancy"]},
                                        },
                                    },
                                    "status": {
                                        "type": "object",
                                        "properties": {"replicas": {"type": "integer"}},
                                    },
                                },
                            }
                        },
                    }
                ],
            },
        },
        _request_timeout=TIMEOUT,
    )

    async def established() -> bool:
        crd = await ext.read_custom_resource_definition(f"{plural}.{GROUP}", _request_timeout=TIMEOUT)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    await eventually(established, timeout=30, what="the CRD to be established")
    try:
        yield plural
    finally:
        await ext.delete_custom_resource_definition(f"{plural}.{GROUP}", _request_timeout=TIMEOUT)


async def test_custom_resource_scale_subresource_and_schema_rejection(
    api: client.ApiClient, namespace: str, widget_crd: str, control_plane: ControlPlane
) -> None:
    custom = client.CustomObjectsApi(api)
    plural = widget_crd
    kind = f"W{plural}"
    await custom.create_namespaced_custom_object(
        GROUP,
        "v1",
        namespace,
        plural,
        {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": "w"}, "spec": {"replicas": 1}},
        _request_timeout=TIMEOUT,
    )
    await custom.patch_namespaced_custom_object_scale(
        GROUP,
        "v1",
        namespace,
        plural,
        "w",
        {"spec": {"replicas": 3}},
        _content_type="application/merge-patch+json",
        _request_timeout=TIMEOUT,
    )
    obj = await custom.get_namespaced_custom_object(GROUP, "v1", namespace, plural, "w", _request_timeout=TIMEOUT)
    assert obj["spec"]["replicas"] == 3

    scaled = control_plane.kubectl("scale", f"{plural}.{GROUP}/w", "-n", namespace, "--replicas=5")
    assert "scaled" in scaled.stdout
    obj = await custom.get_namespaced_custom_object(GROUP, "v1", namespace, plural, "w", _request_timeout=TIMEOUT)
    assert obj["spec"]["replicas"] == 5

    invalid = [
        ({"replicas": -1}, "spec.replicas"),
        ({"replicas": "many"}, "spec.replicas"),
        ({"replicas": 1, "flavour": "odd"}, "spec.flavour"),
        ({}, "spec.replicas"),
    ]
    for index, (spec, field) in enumerate(invalid):
        with pytest.raises(ApiException) as caught:
            await custom.create_namespaced_custom_object(
                GROUP,
                "v1",
                namespace,
                plural,
                {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": f"bad-{index}"}, "spec": spec},
                _request_timeout=TIMEOUT,
            )
        assert caught.value.status == 422, caught.value.body
        assert field in json.loads(caught.value.body)["message"]

    listed = await custom.list_namespaced_custom_object(GROUP, "v1", namespace, plural, _request_timeout=TIMEOUT)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["w"]


def _running(pid: int) -> bool:
    """A zombie waiting for init to reap it is stopped: only its exit status is left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _pids(state: Path) -> dict[str, int]:
    return {p.name: int(p.read_text()) for p in (state / "pids").iterdir()}


def test_up_is_idempotent_down_stops_exactly_what_it_started_and_busy_ports_are_detected(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    up = control_plane_script("up", state)
    try:
        assert up.returncode == 0, up.stderr
        assert f"export KUBECONFIG={state}/kubeconfig" in up.stdout
        pids = _pids(state)
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        again = control_plane_script("up", state)
        assert again.returncode == 0, again.stderr
        assert "already up" in again.stderr
        assert _pids(state) == pids
        status = control_plane_script("status", state)
        assert status.returncode == 0
        assert status.stdout.startswith("up: https://127.0.0.1:")

        busy_port = int((state / "server").read_text().strip().rsplit(":", 1)[1])
        other = tmp_path / "other"
        clash = subprocess.run(
            ["bash", "hack/control-plane.sh", "up"],
            env={**os.environ, "SLURMCTL_CLUSTER_DIR": str(other), "APISERVER_PORT": str(busy_port)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert clash.returncode != 0
        assert f"port {busy_port} on 127.0.0.1 is already in use" in clash.stderr
    finally:
        down = control_plane_script("down", state)
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    for name, pid in pids.items():
        assert not _running(pid), f"{name} (pid {pid}) still running after down"
    assert control_plane_script("status", state).returncode != 0
