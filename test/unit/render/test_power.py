"""The resume signal (render/power.py): the per-cluster ServiceAccount, its Role (patch of one ConfigMap, by name),
the binding and the ConfigMap, rendered for every cluster; the token projected into the controller pods only, and
only with an elastic group; ResumeProgram set to the script that writes the signal."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render.manifests import Inputs
from slurmctl.render.power import RESUME_PROGRAM, TOKEN_MOUNT, TOKEN_SECONDS
from slurmctl.render.slurm_conf import render_slurm_configs
from test.unit.render.samples import sample_doc


def _cluster(*, elastic: bool = False, standby: bool = False) -> SlurmCluster:
    doc = sample_doc("minimal")
    doc["metadata"]["uid"] = "u-1"
    if elastic:
        doc["spec"]["workers"][0]["autoscale"] = {"min": 0, "max": 2}
    if standby:
        doc["spec"]["controller"] = {**doc["spec"].get("controller", {}), "standby": True}
    return SlurmCluster.model_validate(doc)


def _objects(cluster: SlurmCluster) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in desired_objects(Inputs.offline(cluster))}


def _pods(objs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod template (StatefulSets, Deployments, Jobs, CronJobs), by its object."""
    out = {}
    for key, obj in objs.items():
        spec = obj.get("spec", {})
        template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
        if template is not None:
            out[key] = template["spec"]
    return out


def test_every_cluster_gets_a_service_account_whose_role_may_only_patch_its_power_configmap() -> None:
    objs = _objects(_cluster())
    sa = objs["ServiceAccount/minimal-power"]
    assert sa["automountServiceAccountToken"] is False
    assert sa["metadata"]["ownerReferences"][0]["uid"] == "u-1", "it goes with its SlurmCluster"
    role = objs["Role/minimal-power"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["minimal-power"], "verbs": ["patch"]}
    ]
    binding = objs["RoleBinding/minimal-power"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "minimal-power"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "minimal-power", "namespace": sa["metadata"]["namespace"]}
    ]
    configmap = objs["ConfigMap/minimal-power"]
    assert "data" not in configmap, "its data is ResumeProgram's: the operator's apply never owns or resets it"


def test_without_an_elastic_group_no_pod_mounts_a_token() -> None:
    for key, pod in _pods(_objects(_cluster(standby=True))).items():
        assert pod.get("automountServiceAccountToken") is False, key
        assert "serviceAccountName" not in pod, key
        assert not [v for v in pod["volumes"] if "projected" in v], key


def test_with_an_elastic_group_only_the_controller_pods_project_the_power_token() -> None:
    pods = _pods(_objects(_cluster(elastic=True, standby=True)))
    controllers = {"StatefulSet/minimal-controller", "StatefulSet/minimal-controller-backup"}
    assert controllers <= set(pods)
    for key, pod in pods.items():
        assert pod.get("automountServiceAccountToken") is False, key
        if key not in controllers:
            assert "serviceAccountName" not in pod, key
            assert not [v for v in pod["volumes"] if "projected" in v], key
            continue
        assert pod["serviceAccountName"] == "minimal-power"
        (volume,) = [v for v in pod["volumes"] if "projected" in v]
        sources = volume["projected"]["sources"]
        assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}}
        assert "audience" not in sources[0]["serviceAccountToken"], "the API server's own audience"
        (slurmctld,) = pod["containers"]
        assert {"name": volume["name"], "mountPath": TOKEN_MOUNT, "readOnly": True} in slurmctld["volumeMounts"]
        assert {"name": "SLURMCTL_POWER_CONFIGMAP", "value": "minimal-power"} in slurmctld["env"]
        assert "runAsUser" not in slurmctld["securityContext"], "else the kubelet writes the token 0600 for root"
        for init in pod["initContainers"]:
            assert all(m["name"] != volume["name"] for m in init.get("volumeMounts", [])), "munge sees no token"


def test_resume_program_is_the_signal_script_and_suspend_program_does_nothing() -> None:
    conf = render_slurm_configs(_cluster(elastic=True))["slurm.conf"].splitlines()
    assert f"ResumeProgram={RESUME_PROGRAM}" in conf
    assert "SuspendProgram=/bin/true" in conf
    assert not [line for line in conf if "power_save_interval" in line], "an allocation starts Slurm's power work"
