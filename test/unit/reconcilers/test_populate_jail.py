"""The `populate-jail` reconciler: the Job runs once, its outcome is JailPopulated, overwrite re-runs it once, and a
refused jail volume reaches the user with its fix."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from slurmctl.render import meta
from slurmctl.render.kinds import JOB
from slurmctl.render.populate_jail import REFUSED_EXIT_CODE
from test.unit.reconcilers.env import NAME, NS, Env, spec

JOB_NAME = f"{NAME}-populate-jail"
SAID = (
    "refusing to populate the jail volume /mnt/jail (PersistentVolumeClaim jail): it holds 3 entries (etc home usr ...)"
    " but was not populated by slurmctl"
)


def pod_ends(env: Env, index: int, exit_code: int, message: str = SAID) -> None:
    """A pod of the live Job ends, as the Job controller and the kubelet would leave it (retries are new pods)."""
    job = env.get(JOB, JOB_NAME)
    assert job is not None
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": JOB_NAME, "uid": job["metadata"]["uid"]}
    terminated = {"exitCode": exit_code, "reason": "Error", "message": message}
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{JOB_NAME}-{job['metadata']['uid']}-{index}",
                "namespace": NS,
                "labels": meta.labels(NAME, "populate-jail"),
                "ownerReferences": [{**owner, "controller": True}],
                "creationTimestamp": f"2026-01-01T00:0{index}:00Z",
            },
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"name": "populate-jail", "state": {"terminated": terminated}}],
            },
        }
    )


def env_of(job: dict[str, Any] | None) -> dict[str, str]:
    assert job is not None
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


async def test_the_job_runs_once_and_its_success_is_remembered() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("populate-jail")
        assert env.names(JOB) == [JOB_NAME]
        assert env.reason("JailPopulated") == ("False", "Populating")
        env.job_succeeds()
        await env.run("populate-jail")
        assert env.reason("JailPopulated") == ("True", "Populated")
        await env.fake.delete(*JOB, JOB_NAME, namespace="hpc")
        mark = env.mark()
        await env.run("populate-jail")
        assert env.writes_since(mark) == [], "a populated jail is never copied again, nor the condition rewritten"


async def test_a_failed_job_degrades_warns_once_and_is_retried_only_after_a_spec_change() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        env.job_fails()
        await env.converge()
        assert env.reason("JailPopulated") == ("False", "JobFailed")
        cond = env.condition("JailPopulated")
        assert cond is not None and "BackoffLimitExceeded" in cond["message"]
        assert env.phase() == "Degraded"
        assert ("Warning", "PopulateJailFailed") in [(t, r) for t, r, _ in env.events()]
        uid = env.get(JOB, JOB_NAME)["metadata"]["uid"]  # type: ignore[index]
        await env.run()
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] == uid, "no retry loop"  # type: ignore[index]
        env.edit(lambda s: s.update(populateJail={"image": "example.com/jail:2"}))
        await env.run("populate-jail")
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] != uid  # type: ignore[index]
        assert env.reason("JailPopulated") == ("False", "Populating")


async def test_overwrite_reruns_the_job_exactly_once_per_generation() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("populate-jail")
        env.job_succeeds()
        await env.run("populate-jail")
        first = env.get(JOB, JOB_NAME)["metadata"]["uid"]  # type: ignore[index]
        env.edit(lambda s: s.update(populateJail={"overwrite": True}))
        await env.run("populate-jail")
        second = env.get(JOB, JOB_NAME)
        assert second is not None and second["metadata"]["uid"] != first
        assert env.reason("JailPopulated") == ("False", "Overwriting")
        env.job_succeeds()
        await env.run("populate-jail")
        await env.run("populate-jail")
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] == second["metadata"]["uid"]  # type: ignore[index]
        assert env.reason("JailPopulated") == ("True", "Populated")
        deletes = [w for w in env.fake.writes if w.verb == "delete" and w.kind == "Job"]
        assert len(deletes) == 1


async def test_a_refused_volume_is_reported_once_with_its_fix_and_adopt_reruns_the_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with Env() as env:
        env.create(spec())
        await env.converge()
        first = env.get(JOB, JOB_NAME)
        assert first is not None

        pod_ends(env, 1, REFUSED_EXIT_CODE)
        await env.converge()

        assert env.reason("JailPopulated") == ("False", "JailNotEmpty")
        cond = env.condition("JailPopulated")
        assert cond is not None
        assert "PersistentVolumeClaim jail" in cond["message"]
        assert "spec.populateJail.adopt: true" in cond["message"]
        assert "point spec.jail.volume at an empty volume" in cond["message"]
        assert SAID in cond["message"]
        assert env.phase() == "Degraded"
        assert env.reason("WorkersReady") == ("False", "WaitingForJail")

        # The Job's retries are refused alike, then it gives up: nothing new to say.
        pod_ends(env, 2, REFUSED_EXIT_CODE)
        await env.converge()
        env.job_fails()
        await env.converge()
        assert env.reason("JailPopulated") == ("False", "JailNotEmpty")
        warnings = [(r, m) for t, r, m in env.events() if t == "Warning" and r != "PhaseChanged"]
        assert warnings == [("JailNotEmpty", cond["message"])]
        logged = [r for r in caplog.records if "JailNotEmpty" in r.getMessage()]
        assert len(logged) == 1 and logged[0].levelno == logging.WARNING

        env.edit(lambda s: s.update(populateJail={"adopt": True}))
        await env.run("populate-jail")

        second = env.get(JOB, JOB_NAME)
        assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]
        assert env_of(second)["ADOPT"] == "true"
        assert env.reason("JailPopulated") == ("False", "Populating"), (
            "the old Job's refused pods are not the new one's"
        )
        assert ("Normal", "RecreatingJob") in [(t, r) for t, r, _ in env.events()]
        env.job_succeeds()
        await env.converge()
        assert env.reason("JailPopulated") == ("True", "Populated")


async def test_a_refused_job_is_rerun_at_once_when_the_spec_changes_while_it_still_retries() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        pod_ends(env, 1, REFUSED_EXIT_CODE)
        await env.converge()
        first = env.get(JOB, JOB_NAME)
        assert first is not None and not first.get("status")  # not failed: the Job controller would retry

        env.edit(lambda s: s.update(jail={"volume": {"claimName": "empty-jail"}}))
        await env.run("populate-jail")

        second = env.get(JOB, JOB_NAME)
        assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]
        assert env_of(second)["JAIL_VOLUME"] == "PersistentVolumeClaim empty-jail"


async def test_a_pod_that_failed_otherwise_is_no_refusal() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        pod_ends(env, 1, 1, "rsync: write failed: No space left on device (28)")
        await env.converge()
        assert env.reason("JailPopulated") == ("False", "Populating")
        env.job_fails()
        await env.converge()
        assert env.reason("JailPopulated") == ("False", "JobFailed")
        assert [r for t, r, _ in env.events() if t == "Warning" and r != "PhaseChanged"] == ["PopulateJailFailed"]
