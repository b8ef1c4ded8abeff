"""Which objects a spec change touches: a user editing one worker group or scaling must not roll unrelated pods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.meta import CONFIG_HASH_ANNOTATION
from test.unit.render.samples import manifests, object_key, sample_doc, to_yaml


def _render(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {object_key(obj): obj for obj in manifests(SlurmCluster.model_validate(doc))}


def _edit(change: Callable[[dict[str, Any]], None]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    doc = sample_doc("research")
    before = _render(doc)
    change(doc)
    return before, _render(doc)


def _h100(doc: dict[str, Any]) -> dict[str, Any]:
    groups: list[dict[str, Any]] = [g for g in doc["spec"]["workers"] if g["name"] == "h100"]
    (group,) = groups
    return group


def _changed(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> set[str]:
    assert before.keys() == after.keys()
    return {key for key in before if before[key] != after[key]}


def _hash(obj: dict[str, Any]) -> str:
    annotations: dict[str, str] = obj["spec"]["template"]["metadata"]["annotations"]
    return annotations[CONFIG_HASH_ANNOTATION]


def _slurmd_conf(obj: dict[str, Any]) -> str:
    (slurmd,) = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"]
    (env,) = [e for e in slurmd["env"] if e["name"] == "SLURMD_CONF"]
    return str(env["value"])


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda g: g.update(features=["h100", "nvlink", "ib"]), id="features"),
        pytest.param(lambda g: g["resources"]["requests"].update(cpu=96), id="cpus"),
        pytest.param(lambda g: g.update(sharedMemorySize="256Gi"), id="shared-memory"),
    ],
)
def test_editing_one_group_rolls_only_that_group(change: Callable[[dict[str, Any]], None]) -> None:
    """A node's definition travels with its pod (dynamic nodes register with it), not in a file every daemon reads:
    no config changes, slurmctld and the other groups stay as they are."""
    before, after = _edit(lambda doc: change(_h100(doc)))
    assert _changed(before, after) == {"statefulset-research-worker-h100"}
    assert _hash(before["statefulset-research-worker-h100"]) == _hash(after["statefulset-research-worker-h100"])


def test_the_node_definition_follows_the_group() -> None:
    before, after = _edit(lambda doc: _h100(doc).update(features=["ib"]))
    assert _slurmd_conf(before["statefulset-research-worker-h100"]).startswith("Feature=h100,nvlink ")
    assert _slurmd_conf(after["statefulset-research-worker-h100"]).startswith("Feature=h100,ib ")


def test_scaling_a_group_changes_only_its_replicas() -> None:
    """Scaling changes no Slurm config: no daemon restarts, and new nodes register themselves."""
    before, after = _edit(lambda doc: _h100(doc).update(size=6))
    assert after["statefulset-research-worker-h100"]["spec"]["replicas"] == 6
    assert _changed(before, after) == {"statefulset-research-worker-h100"}
    assert (
        before["statefulset-research-worker-h100"]["spec"]["template"]
        == (after["statefulset-research-worker-h100"]["spec"]["template"])
    )


def test_adding_a_group_rolls_nothing_slurmctld_takes_its_node_set_in_place() -> None:
    def add(doc: dict[str, Any]) -> None:
        doc["spec"]["workers"].append({"name": "extra", "size": 1})

    before, after = _edit(add)
    assert "statefulset-research-worker-extra" in after
    nodes = after["configmap-research-slurm-configs"]["data"]["nodes.conf"]
    assert "NodeSet=extra Feature=extra\n" in nodes
    for name in ("controller", "worker-h100", "worker-cpu", "login"):
        key = f"statefulset-research-{name}"
        assert _hash(before[key]) == _hash(after[key]), key


def test_a_slurm_conf_change_that_reconfigure_takes_rolls_no_pod() -> None:
    before, after = _edit(lambda doc: doc["spec"]["slurm"]["config"].update(maxJobCount=60000))
    assert "MaxJobCount=60000" in after["configmap-research-slurm-configs"]["data"]["slurm.conf"]
    for kept in (
        "statefulset-research-controller",
        "statefulset-research-worker-cpu",
        "statefulset-research-worker-h100",
        "statefulset-research-login",
        "deployment-research-accounting",
    ):
        assert _hash(before[kept]) == _hash(after[kept]), kept


def test_what_reconfigure_cannot_change_rolls_the_daemons_but_not_the_login_nodes() -> None:
    """Listening ports and authentication (scontrol(1)): the daemons restart, workers one drained node at a time. The
    login pods do not: users' commands read the new slurm.conf there, and a restart would end their sessions."""
    extra = "SlurmdPort=7000"
    before, after = _edit(lambda doc: doc["spec"]["slurm"].update(extraConfig=extra))
    for rolled in (
        "statefulset-research-controller",
        "statefulset-research-worker-cpu",
        "statefulset-research-worker-h100",
    ):
        assert _hash(before[rolled]) != _hash(after[rolled]), rolled
    assert _hash(before["statefulset-research-login"]) == _hash(after["statefulset-research-login"])
    assert after["statefulset-research-worker-cpu"]["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_rendering_is_deterministic() -> None:
    doc = sample_doc("research")
    first = [to_yaml(obj) for obj in manifests(SlurmCluster.model_validate(doc))]
    second = [to_yaml(obj) for obj in manifests(SlurmCluster.model_validate(doc))]
    assert first == second


def test_the_order_of_groups_and_partitions_in_the_spec_does_not_matter() -> None:
    doc = sample_doc("research")
    before = _render(doc)
    doc["spec"]["workers"].reverse()
    doc["spec"]["partitions"].reverse()
    doc["spec"]["jail"]["subMounts"].reverse()
    assert _render(doc) == before


def test_turning_container_steps_on_rolls_the_workers_only() -> None:
    """Each worker prepares its node for container steps when it starts (images/scripts/entrypoint-worker): a running
    one would take oci.conf and fail every `srun --container`, so the workers are re-created, one drained node at a
    time. slurmctld and the login nodes keep running."""
    before, after = _edit(lambda doc: doc["spec"].update(containers={"enabled": True}))
    assert "oci.conf" in after["configmap-research-slurm-configs"]["data"]
    for rolled in ("statefulset-research-worker-cpu", "statefulset-research-worker-h100"):
        assert _hash(before[rolled]) != _hash(after[rolled]), rolled
    for kept in ("statefulset-research-controller", "statefulset-research-login"):
        assert _hash(before[kept]) == _hash(after[kept]), kept
