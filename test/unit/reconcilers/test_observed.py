"""Reading live objects: when the populate-jail Job is replaced, and what a failed or refused Job says."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.observed import (
    MAX_REFUSAL_MESSAGE,
    JobState,
    WorkerPod,
    data_keys,
    generation_of,
    labels_of,
)
from slurmctl.render.populate_jail import GENERATION_ANNOTATION, REFUSED_EXIT_CODE, render_populate_jail_job
from test.unit.render.samples import sample_doc


def _cluster(*, overwrite: bool = False, generation: int | None = 3) -> SlurmCluster:
    doc = sample_doc("research")
    doc["spec"]["populateJail"] = {"overwrite": overwrite}
    doc["metadata"]["generation"] = generation
    return SlurmCluster.model_validate(doc)


def _job(generation: str | None, *, failed: bool = False, succeeded: bool = False) -> dict[str, Any]:
    job: dict[str, Any] = {"metadata": {"annotations": {GENERATION_ANNOTATION: generation} if generation else {}}}
    conditions = [{"type": "Failed", "status": "True"}] if failed else []
    conditions += [{"type": "Complete", "status": "True"}] if succeeded else []
    job["status"] = {"conditions": conditions}
    return job


@pytest.mark.parametrize(
    ("overwrite", "live", "expected"),
    [
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
def test_when_the_job_is_replaced(overwrite: bool, live: dict[str, Any], expected: bool) -> None:
    assert JobState.of(live).needs_recreate(_cluster(overwrite=overwrite, generation=3)) is expected


def test_a_recreated_job_is_not_replaced_again_in_the_same_generation() -> None:
    """Re-running "exactly once": the Job rendered for the generation satisfies needs_recreate at once."""
    cluster = _cluster(overwrite=True, generation=4)
    assert JobState.of(_job("3", succeeded=True)).needs_recreate(cluster)
    fresh = render_populate_jail_job(cluster)
    assert not JobState.of(fresh).needs_recreate(cluster)
    assert not JobState.of({**fresh, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}).needs_recreate(
        cluster
    )


def test_a_failed_job_says_why() -> None:
    job = {
        "status": {
            "failed": 4,
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff limit"}
            ],
        }
    }
    state = JobState.of(job)
    assert (state.failed, state.succeeded) == (True, False)
    assert state.failure == "BackoffLimitExceeded: backoff limit"


def _pod(created: str, exit_code: int | None, message: str = "") -> dict[str, Any]:
    state = {"terminated": {"exitCode": exit_code, "message": message}} if exit_code is not None else {"running": {}}
    return {
        "metadata": {"creationTimestamp": created},
        "status": {"containerStatuses": [{"name": "populate-jail", "state": state}]},
    }


def test_a_refused_volume_is_read_from_the_jobs_pods() -> None:
    refused_first = _pod("2026-01-01T00:00:00Z", REFUSED_EXIT_CODE, "refusing: 3 entries (etc home usr ...)")
    refused_later = _pod("2026-01-01T00:01:00Z", REFUSED_EXIT_CODE, "refusing: 4 entries (data etc home usr ...)\n")
    crashed = _pod("2026-01-01T00:02:00Z", 1, "rsync: No space left on device")
    running = _pod("2026-01-01T00:03:00Z", None)

    assert JobState.of(_job("3"), [refused_first, refused_later, crashed, running]).refusal == (
        "refusing: 4 entries (data etc home usr ...)"
    )
    assert JobState.of(_job("3"), [crashed, running]).refusal is None
    assert JobState.of(_job("3")).refusal is None
    silent = _pod("2026-01-01T00:00:00Z", REFUSED_EXIT_CODE)
    assert JobState.of(_job("3"), [silent]).refusal == ""
    long = _pod("2026-01-01T00:00:00Z", REFUSED_EXIT_CODE, "x" * 5000)
    assert len(JobState.of(_job("3"), [long]).refusal or "") == MAX_REFUSAL_MESSAGE


def test_a_refused_job_is_replaced_as_soon_as_the_spec_changes_even_while_it_retries() -> None:
    refused = [_pod("2026-01-01T00:00:00Z", REFUSED_EXIT_CODE, "refusing")]
    assert JobState.of(_job("1"), refused).needs_recreate(_cluster(generation=3))
    assert not JobState.of(_job("3"), refused).needs_recreate(_cluster(generation=3)), "no loop"
    assert not JobState.of(_job("1")).needs_recreate(_cluster(generation=3)), "a running copy is left alone"
    emptied = JobState.of({**_job("1"), "status": {"succeeded": 1}}, refused)  # a retry found the volume emptied
    assert not emptied.needs_recreate(_cluster(generation=3)), "a populated jail is never copied again"


@pytest.mark.parametrize("obj", [None, {}, {"metadata": None}, {"metadata": {"labels": None}}, {"data": None}])
def test_readers_of_an_object_without_the_field_say_none(obj: dict[str, Any] | None) -> None:
    assert labels_of(obj) == {}
    assert generation_of(obj) == 0
    assert data_keys(obj) == []


def test_readers_of_labels_generation_and_data_keys() -> None:
    obj = {"metadata": {"labels": {"a": "1"}, "generation": 4}, "data": {"ssh_host_ed25519_key": "x", "k": "y"}}
    labels = labels_of(obj)
    labels["b"] = "2"
    assert obj["metadata"]["labels"] == {"a": "1"}, "a copy"
    assert generation_of(obj) == 4
    assert data_keys(obj) == ["ssh_host_ed25519_key", "k"]


@pytest.mark.parametrize(
    "pod",
    [{}, {"status": None, "spec": None}, {"status": {"containerStatuses": None, "conditions": None, "podIP": None}}],
)
def test_a_pod_without_status_is_an_unscheduled_pod_that_is_not_ready(pod: dict[str, Any]) -> None:
    assert WorkerPod.of({"metadata": {"name": "w-0"}, **pod}) == WorkerPod("w-0", "", False, False, False, False, False)
