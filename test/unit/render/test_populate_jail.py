"""The populate-jail Job: what it copies, with which settings, and the generation it records."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster, VolumeRef
from slurmctl.render.populate_jail import (
    GENERATION_ANNOTATION,
    MAX_VOLUME_DESCRIPTION,
    render_populate_jail_job,
    volume_description,
)
from test.unit.render.samples import sample_doc


def _cluster(*, overwrite: bool = False, adopt: bool = False, generation: int | None = 3) -> SlurmCluster:
    doc = sample_doc("research")
    doc["spec"]["populateJail"] = {
        "overwrite": overwrite,
        "adopt": adopt,
        "image": "registry.example.com/my-jail-populator:1",
        "nodeSelector": {"storage": "fast"},
    }
    doc["metadata"]["generation"] = generation
    return SlurmCluster.model_validate(doc)


def _env(job: dict[str, Any]) -> dict[str, str]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_the_job_copies_into_the_jail_volume_with_the_populator_settings() -> None:
    job = render_populate_jail_job(_cluster())
    assert job["metadata"]["name"] == "research-populate-jail"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"storage": "fast"}
    assert pod["volumes"] == [{"name": "jail", "persistentVolumeClaim": {"claimName": "research-jail"}}]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/my-jail-populator:1"
    assert container["volumeMounts"] == [{"name": "jail", "mountPath": "/mnt/jail"}]
    assert _env(job) == {
        "JAIL_DIR": "/mnt/jail",
        "SOURCE_ROOT": "/jail-rootfs",
        "OVERWRITE": "false",
        "ADOPT": "false",
        "JAIL_VOLUME": "PersistentVolumeClaim research-jail",
        "TERMINATION_LOG": "/dev/termination-log",
    }
    assert "CHOWN" in container["securityContext"]["capabilities"]["add"]
    assert 0 < job["spec"]["backoffLimit"] <= 5
    assert "ttlSecondsAfterFinished" not in job["spec"]


def test_overwrite_and_generation_are_on_the_job() -> None:
    job = render_populate_jail_job(_cluster(overwrite=True, generation=7))
    assert _env(job)["OVERWRITE"] == "true"
    assert job["metadata"]["annotations"] == {GENERATION_ANNOTATION: "7"}


def test_offline_rendering_has_no_generation_annotation() -> None:
    assert "annotations" not in render_populate_jail_job(_cluster(generation=None))["metadata"]


def test_adopt_is_on_the_job() -> None:
    assert _env(render_populate_jail_job(_cluster(adopt=True)))["ADOPT"] == "true"


def test_a_refusal_reaches_the_pod_status_and_any_failure_its_log_tail() -> None:
    (container,) = render_populate_jail_job(_cluster())["spec"]["template"]["spec"]["containers"]
    assert container["terminationMessagePath"] == _env(render_populate_jail_job(_cluster()))["TERMINATION_LOG"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_messages_name_the_volume_by_its_claim_or_its_source() -> None:
    assert volume_description(VolumeRef(claim_name="jail")) == "PersistentVolumeClaim jail"
    nfs = VolumeRef(source={"nfs": {"server": "fs1", "path": "/export/jail"}})
    assert volume_description(nfs) == 'nfs volume {"path": "/export/jail", "server": "fs1"}'
    huge = volume_description(VolumeRef(source={"csi": {"driver": "x", "volumeAttributes": {"k": "v" * 500}}}))
    assert len(huge) == MAX_VOLUME_DESCRIPTION and huge.startswith("csi volume {") and huge.endswith("...")
