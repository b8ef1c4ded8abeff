"""The populate-jail Job against the real control plane: the jail gate, a failed copy, overwrite once per generation,
a refused jail volume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from slurmctl.render.populate_jail import REFUSED_EXIT_CODE
from test.e2e.clusters import FAILED, GENERATION_ANNOTATION, MERGE_PATCH, NAME, SUCCEEDED, Cluster, job_uids, spec
from test.e2e.harness import eventually
from test.e2e.operator import RunningOperator

pytestmark = pytest.mark.e2e
# The other tests run against the operator fixture (resyncing every second); none needs its handle.
with_operator = pytest.mark.usefixtures("operator")


async def test_jail_gate_holds_workers_and_login_until_the_job_succeeds(
    api: client.ApiClient, namespace: str, operator_kubeconfig: Path
) -> None:
    """The Job's own completion opens the gate: this operator never resyncs, so no timer can have done it."""
    operator = await RunningOperator(operator_kubeconfig, resync_period=None).start()
    try:
        cluster = Cluster(api, namespace)
        await cluster.create(spec())
        job = await cluster.started_job()
        generation = (await cluster.get())["metadata"]["generation"]
        assert job.metadata.labels["app.kubernetes.io/component"] == "populate-jail"
        assert job.metadata.annotations[GENERATION_ANNOTATION] == str(generation)

        # Both gated components have looked and say what they wait for: the absence below is the gate, not slowness.
        for type_ in ("WorkersReady", "LoginReady"):
            await cluster.wait_condition(type_, "False", "WaitingForJail")
        await cluster.wait_condition("JailPopulated", "False", "Populating")
        gated = (f"{NAME}-worker-cpu", f"{NAME}-login")
        assert await cluster.statefulsets(*gated) == {}

        written = await cluster.finish_job(SUCCEEDED)

        async def both_exist() -> bool:
            return len(await cluster.statefulsets(*gated)) == 2

        # The figure is printed, not bounded: it measures the machine's load as much as the operator (1.02 s once
        # with modules side by side, 0.2 s alone). That the StatefulSets come at all, without a resync, is the claim.
        await eventually(both_exist, timeout=30, interval=0.05, what="the worker and login StatefulSets")
        print(f"\nJob succeeded -> worker and login StatefulSets exist: {(time.monotonic() - written) * 1000:.0f} ms")
        populated = await cluster.wait_condition("JailPopulated", "True", "Populated")
        assert populated["observedGeneration"] == generation
    finally:
        await operator.stop()


@with_operator
async def test_failed_job_reports_degrades_and_tears_nothing_down(api: client.ApiClient, namespace: str) -> None:
    cluster = Cluster(api, namespace)
    await cluster.create(spec())

    async def controller_exists() -> bool:
        return bool(await cluster.statefulsets(f"{NAME}-controller"))

    await eventually(controller_exists, timeout=30, what="the controller StatefulSet")
    await cluster.started_job()
    await cluster.resyncs(2)  # everything the gate lets through has been created
    before = {key: obj.metadata.uid for key, obj in (await cluster.children()).items()}

    await cluster.finish_job(FAILED)
    failed = await cluster.wait_condition("JailPopulated", "False", "JobFailed")
    assert "BackoffLimitExceeded" in failed["message"]
    assert "Job has reached the specified backoff limit" in failed["message"]
    await cluster.wait_phase("Degraded")
    event = await cluster.wait_event("Warning", "PopulateJailFailed", contains="BackoffLimitExceeded")
    assert event.involved_object.name == NAME

    await cluster.resyncs(2)
    after = {key: obj.metadata.uid for key, obj in (await cluster.children()).items()}
    assert after == before, "a failed Job must neither remove nor re-create anything (the Job included)"
    for type_ in ("WorkersReady", "LoginReady"):
        assert (await cluster.condition(type_) or {}).get("reason") == "WaitingForJail"
    assert await cluster.phase() == "Degraded"


@with_operator
async def test_overwrite_reruns_the_job_exactly_once_and_keeps_the_nodes(api: client.ApiClient, namespace: str) -> None:
    cluster = Cluster(api, namespace)
    nodes = (f"{NAME}-worker-cpu", f"{NAME}-login")
    async with job_uids(api, namespace) as uids:
        await cluster.create(spec())
        await cluster.finish_job(SUCCEEDED)

        async def nodes_exist() -> dict[str, str] | None:
            found = await cluster.statefulsets(*nodes)
            return found if len(found) == 2 else None

        node_uids = await eventually(nodes_exist, timeout=30, what="the worker and login StatefulSets")
        await cluster.wait_condition("JailPopulated", "True", "Populated")
        first = await cluster.job()
        assert first is not None

        generation = await cluster.merge({"populateJail": {"overwrite": True}})

        async def rerun() -> Any | None:
            job = await cluster.job()
            return job if job is not None and job.metadata.uid != first.metadata.uid else None

        second = await eventually(rerun, timeout=30, what="the populate-jail Job to be re-created")
        assert second.metadata.annotations[GENERATION_ANNOTATION] == str(generation)
        overwriting = await cluster.wait_condition("JailPopulated", "False", "Overwriting")
        assert "overwrite" in overwriting["message"]
        assert await cluster.statefulsets(*nodes) == node_uids, "an overwrite in progress must tear nothing down"

        await cluster.finish_job(SUCCEEDED, not_uid=first.metadata.uid)
        populated = await cluster.wait_condition("JailPopulated", "True", "Populated")
        assert populated["observedGeneration"] == generation

        await cluster.resyncs(3, ("populate-jail",))
        final = await cluster.job()
        assert final is not None
        assert final.metadata.uid == second.metadata.uid, "the overwrite must run once per generation"
        assert uids == {first.metadata.uid, second.metadata.uid}
    assert await cluster.statefulsets(*nodes) == node_uids


@with_operator
async def test_a_refused_jail_volume_is_reported_with_its_fix_and_adopt_reruns_the_job(
    api: client.ApiClient, namespace: str
) -> None:
    """The copier's refusal travels through its pod's termination message, read with the operator's own permissions
    (pods through the owned-children selector), before the Job has given up; setting adopt re-runs the Job at once."""
    cluster = Cluster(api, namespace)
    await cluster.create(spec())
    first = await cluster.started_job()
    pods = await cluster.core.list_namespaced_pod(
        namespace, label_selector=f"controller-uid={first.metadata.uid}", _request_timeout=10
    )
    said = "refusing to populate the jail volume /mnt/jail (PersistentVolumeClaim jail): it holds 2 entries (etc home)"
    terminated = {"exitCode": REFUSED_EXIT_CODE, "reason": "Error", "message": said}
    for pod in pods.items:  # what the kubelet reports once the copier exited
        status = {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "populate-jail",
                    "ready": False,
                    "restartCount": 0,
                    "image": pod.spec.containers[0].image,
                    "imageID": "",
                    "state": {"terminated": terminated},
                }
            ],
        }
        await cluster.core.patch_namespaced_pod_status(
            pod.metadata.name, namespace, {"status": status}, _content_type=MERGE_PATCH, _request_timeout=10
        )

    refused = await cluster.wait_condition("JailPopulated", "False", "JailNotEmpty")
    assert "PersistentVolumeClaim jail" in refused["message"]
    assert "spec.populateJail.adopt: true" in refused["message"]
    assert said in refused["message"]
    await cluster.wait_phase("Degraded")
    event = await cluster.wait_event("Warning", "JailNotEmpty", contains="spec.populateJail.adopt")
    assert event.involved_object.name == NAME

    generation = await cluster.merge({"populateJail": {"adopt": True}})
    second = await cluster.started_job(not_uid=first.metadata.uid)
    assert second.metadata.annotations[GENERATION_ANNOTATION] == str(generation)
    (container,) = second.spec.template.spec.containers
    assert {e.name: e.value for e in container.env}["ADOPT"] == "true"
    await cluster.wait_condition("JailPopulated", "False", "Populating")
    warnings = [e for e in await cluster.events() if (e.type, e.reason) == ("Warning", "JailNotEmpty")]
    assert len(warnings) == 1 and (warnings[0].count or 1) == 1, "one Event for one refusal"
