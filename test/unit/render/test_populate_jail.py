"""The populate-jail Job: what it copies, with which settings, and the generation it records."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.populate_jail import GENERATION_ANNOTATION, render_populate_jail_job
from test.unit.render.samples import sample_doc


def _cluster(*, overwrite: bool = False, generation: int | None = 3) -> SlurmCluster:
    doc = sample_doc("research")
    doc["spec"]["populateJail"] = {
        "overwrite": overwrite,
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
    assert _env(job) == {"JAIL_DIR": "/mnt/jail", "SOURCE_ROOT": "/jail-rootfs", "OVERWRITE": "false"}
    assert "CHOWN" in container["securityContext"]["capabilities"]["add"]
    assert 0 < job["spec"]["backoffLimit"] <= 5
    assert "ttlSecondsAfterFinished" not in job["spec"]


def test_overwrite_and_generation_are_on_the_job() -> None:
    job = render_populate_jail_job(_cluster(overwrite=True, generation=7))
    assert _env(job)["OVERWRITE"] == "true"
    assert job["metadata"]["annotations"] == {GENERATION_ANNOTATION: "7"}


def test_offline_rendering_has_no_generation_annotation() -> None:
    assert "annotations" not in render_populate_jail_job(_cluster(generation=None))["metadata"]
