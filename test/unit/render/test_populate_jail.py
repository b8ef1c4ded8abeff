"""The populate-jail Job and the rule that decides when a reconciler replaces it."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.populate_jail import GENERATION_ANNOTATION, needs_recreate, render_populate_jail_job
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


def _job(generation: str | None, *, failed: bool = False, succeeded: bool = False) -> dict[str, Any]:
    job: dict[str, Any] = {"metadata": {"annotations": {GENERATION_ANNOTATION: generation} if generation else {}}}
    conditions = [{"type": "Failed", "status": "True"}] if failed else []
    conditions += [{"type": "Complete", "status": "True"}] if succeeded else []
    job["status"] = {"conditions": conditions}
    return job


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


@pytest.mark.parametrize(
    ("overwrite", "live", "expected"),
    [
        pytest.param(False, None, False, id="no-job-yet: apply, nothing to delete"),
        pytest.param(False, _job("1", succeeded=True), False, id="populated: never again"),
        pytest.param(False, _job("1"), False, id="running"),
        pytest.param(True, _job("1", succeeded=True), True, id="overwrite-requested: once more"),
        pytest.param(True, _job("3", succeeded=True), False, id="overwrite-done-for-this-generation"),
        pytest.param(True, _job("3", failed=True), False, id="overwrite-failed-this-generation: no loop"),
        pytest.param(False, _job("1", failed=True), True, id="failed-then-spec-changed: retry"),
        pytest.param(False, _job("3", failed=True), False, id="failed-this-generation: no loop"),
        pytest.param(True, _job(None, succeeded=True), True, id="unannotated-job: overwrite"),
        pytest.param(True, _job("garbage", succeeded=True), True, id="unreadable-annotation: overwrite"),
    ],
)
def test_when_the_job_is_replaced(overwrite: bool, live: dict[str, Any] | None, expected: bool) -> None:
    assert needs_recreate(_cluster(overwrite=overwrite, generation=3), live) is expected


def test_a_recreated_job_is_not_replaced_again_in_the_same_generation() -> None:
    """Re-running "exactly once": the Job rendered for the generation satisfies needs_recreate at once."""
    cluster = _cluster(overwrite=True, generation=4)
    assert needs_recreate(cluster, _job("3", succeeded=True))
    fresh = render_populate_jail_job(cluster)
    assert not needs_recreate(cluster, fresh)
    assert not needs_recreate(cluster, {**fresh, "status": {"conditions": [{"type": "Failed", "status": "True"}]}})
