"""slurmctld's objects, with and without a standby (Slurm's backup controller) on the primary's state claim."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.controller import config_hash, render_controller
from slurmctl.render.slurm_conf import render_slurm_configs, restart_settings
from test.unit.render.samples import sample, sample_doc

ANTI_AFFINITY_KEY = "preferredDuringSchedulingIgnoredDuringExecution"


def _cluster(**controller: Any) -> SlurmCluster:
    doc = sample_doc("minimal")
    doc["spec"]["controller"] = {**doc["spec"].get("controller", {}), **controller}
    return SlurmCluster.model_validate(doc)


def _objects(cluster: SlurmCluster) -> dict[str, dict[str, Any]]:
    configs = render_slurm_configs(cluster)
    objs = render_controller(cluster, configs=configs, munge_key_id="m", jwt_key_id="j")
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objs}


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def test_without_a_standby_one_statefulset_with_its_claim_template_and_one_slurmctld_host() -> None:
    cluster = sample("minimal")
    objs = _objects(cluster)
    assert sorted(objs) == ["Service/minimal-controller", "StatefulSet/minimal-controller"]
    sts = objs["StatefulSet/minimal-controller"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    # Apart from the login pods only (no other slurmctld to avoid).
    (term,) = _pod(sts)["affinity"]["podAntiAffinity"][ANTI_AFFINITY_KEY]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "login"
    slurm = render_slurm_configs(cluster)["slurm.conf"].splitlines()
    assert [line for line in slurm if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=minimal-controller-0(minimal-controller-0.minimal-controller)"
    ]
    assert "SlurmctldPidFile=/var/spool/slurmctld/slurmctld.pid" in slurm


def test_a_standby_is_a_second_slurmctld_host_after_the_primary_with_its_own_pid_file() -> None:
    slurm = render_slurm_configs(_cluster(standby=True))["slurm.conf"].splitlines()
    hosts = [i for i, line in enumerate(slurm) if line.startswith("SlurmctldHost=")]
    assert [slurm[i] for i in hosts] == [
        "SlurmctldHost=minimal-controller-0(minimal-controller-0.minimal-controller)",
        "SlurmctldHost=minimal-controller-backup-0(minimal-controller-backup-0.minimal-controller)",
    ]
    assert hosts[1] == hosts[0] + 1
    # Not in the shared state directory: a slurmctld that finds the pid file locked kills that pid and waits.
    assert "SlurmctldPidFile=/run/slurmctld/slurmctld.pid" in slurm
    assert "StateSaveLocation=/var/spool/slurmctld" in slurm


def test_the_standby_mounts_the_primary_s_claim_and_prefers_another_node() -> None:
    objs = _objects(_cluster(standby=True, stateVolume={"accessMode": "ReadWriteMany"}))
    assert sorted(objs) == [
        "Service/minimal-controller",
        "StatefulSet/minimal-controller",
        "StatefulSet/minimal-controller-backup",
    ]
    primary, backup = objs["StatefulSet/minimal-controller"], objs["StatefulSet/minimal-controller-backup"]
    # The primary keeps its claim template (immutable; an existing cluster's state is in its claim).
    assert primary["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    assert primary["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "volumeClaimTemplates" not in backup["spec"]
    state = next(v for v in _pod(backup)["volumes"] if v["name"] == "state")
    assert state == {"name": "state", "persistentVolumeClaim": {"claimName": "state-minimal-controller-0"}}
    mounts = _pod(backup)["containers"][0]["volumeMounts"]
    assert {"name": "state", "mountPath": "/var/spool/slurmctld"} in mounts
    # Both in the headless Service's DNS (<pod>.<c>-controller); the backup's selector never selects the primary.
    assert backup["spec"]["serviceName"] == "minimal-controller"
    selector = backup["spec"]["selector"]["matchLabels"]
    assert selector["slurm.slurmctl.io/controller-role"] == "backup"
    assert selector.items() <= backup["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= primary["spec"]["template"]["metadata"]["labels"].items()
    assert primary["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "minimal",
        "app.kubernetes.io/component": "controller",
    }
    env = {e["name"]: e.get("value") for e in _pod(backup)["containers"][0]["env"]}
    assert env["SLURMCTLD_STANDBY"] == "true"
    assert "SLURMCTLD_STANDBY" not in {e["name"] for e in _pod(primary)["containers"][0]["env"]}
    # Each prefers a node without the other (and without login pods).
    for sts, other in ((primary, "minimal-controller-backup-0"), (backup, "minimal-controller-0")):
        _, term = _pod(sts)["affinity"]["podAntiAffinity"][ANTI_AFFINITY_KEY]
        assert term["podAffinityTerm"] == {
            "labelSelector": {"matchLabels": {"statefulset.kubernetes.io/pod-name": other}},
            "topologyKey": "kubernetes.io/hostname",
        }
    hashes = {
        o["spec"]["template"]["metadata"]["annotations"]["slurm.slurmctl.io/config-hash"] for o in (primary, backup)
    }
    assert len(hashes) == 1


def test_a_user_s_pod_anti_affinity_replaces_the_default() -> None:
    """The rule of every component (render/pods.py `scheduling`): the user's podAntiAffinity is used as given."""
    mine = {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "zone"}}
    affinity = {"podAntiAffinity": {ANTI_AFFINITY_KEY: [mine]}, "nodeAffinity": {"x": 1}}
    backup = _objects(_cluster(standby=True, affinity=affinity))["StatefulSet/minimal-controller-backup"]
    assert _pod(backup)["affinity"] == affinity


def test_size_zero_stops_both() -> None:
    objs = _objects(_cluster(standby=True, size=0))
    assert objs["StatefulSet/minimal-controller"]["spec"]["replicas"] == 0
    assert objs["StatefulSet/minimal-controller-backup"]["spec"]["replicas"] == 0


def test_turning_the_standby_on_restarts_slurmctld_once() -> None:
    """A new SlurmctldHost line (every line counts, not only the last) and the pid file are restart settings."""
    before, after = render_slurm_configs(_cluster()), render_slurm_configs(_cluster(standby=True))
    assert restart_settings(after)["slurmctldhost"] == (
        "minimal-controller-0(minimal-controller-0.minimal-controller) "
        "minimal-controller-backup-0(minimal-controller-backup-0.minimal-controller)"
    )
    assert config_hash(before, munge_key_id="m", jwt_key_id="j") != config_hash(after, munge_key_id="m", jwt_key_id="j")


def test_slurmctld_timeout_is_typed() -> None:
    doc = sample_doc("minimal")
    doc["spec"].setdefault("slurm", {})["config"] = {"slurmctldTimeout": 30}
    assert "SlurmctldTimeout=30" in render_slurm_configs(SlurmCluster.model_validate(doc))["slurm.conf"].splitlines()
    doc["spec"]["slurm"]["config"] = {"slurmctldTimeout": 3}
    with pytest.raises(ValidationError):
        SlurmCluster.model_validate(doc)
