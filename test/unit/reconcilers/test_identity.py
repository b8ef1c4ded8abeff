"""The `identity` reconciler: the Job runs on a populated jail, again when spec.identity changes (and once more when
every entry is removed, to lock them), and what it refused reaches the user as a condition, one Event and one log
line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from slurmctl.render import meta
from slurmctl.render.identity import IDENTITY_HASH_ANNOTATION
from slurmctl.render.kinds import JOB
from test.unit.reconcilers.env import NAME, NS, Env, spec

JOB_NAME = f"{NAME}-identity"
USERS = {"users": [{"name": "ada", "uid": 2100}]}
REFUSED = "spec.identity.users[0].uid: 2100 is already used by jailuser"


def pod_ends(env: Env, message: str, *, exit_code: int = 0) -> None:
    """The live Job's pod ends with this termination message, and the Job counts it."""
    job = env.get(JOB, JOB_NAME)
    assert job is not None
    uid = job["metadata"]["uid"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": JOB_NAME, "uid": uid, "controller": True}
    terminated = {"exitCode": exit_code, "reason": "Completed", "message": message}
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{JOB_NAME}-{job['metadata']['uid']}",
                "namespace": NS,
                "labels": meta.labels(NAME, "identity"),
                "ownerReferences": [owner],
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [{"name": "sync-identity", "state": {"terminated": terminated}}],
            },
        }
    )
    status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    env.fake.set_status(*JOB, JOB_NAME, status, namespace=NS)


def records(job: dict[str, Any] | None) -> str:
    assert job is not None
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return next(e["value"] for e in container["env"] if e["name"] == "IDENTITY")


async def test_nothing_declared_runs_no_job() -> None:
    async with Env() as env:
        await env.available()
        assert env.names(JOB) == [f"{NAME}-populate-jail"]
        assert env.condition("IdentitySynced") is None
        assert env.phase() == "Available"


async def test_the_job_waits_for_the_jail_then_writes_and_reports() -> None:
    async with Env() as env:
        env.create(spec(identity=USERS))
        await env.converge()
        assert JOB_NAME not in env.names(JOB), "nothing is written into a jail before it is populated"
        assert env.reason("IdentitySynced") == ("False", "WaitingForJail")
        env.job_succeeds()
        await env.converge()
        assert JOB_NAME in env.names(JOB)
        ada = "user\tspec.identity.users[0]\tada\t2100\t2100\t-\t/bin/bash\t/home/ada"
        assert ada in records(env.get(JOB, JOB_NAME))
        assert env.reason("IdentitySynced") == ("False", "Syncing")
        pod_ends(env, "1 users and 1 groups written, 0 locked, 0 refused\n")
        await env.converge()
        assert env.reason("IdentitySynced") == ("True", "Synced")
        cond = env.condition("IdentitySynced")
        assert cond is not None and "1 users and 1 groups written" in cond["message"]


async def test_a_change_re_runs_the_job_and_removing_everyone_still_runs_it() -> None:
    async with Env() as env:
        env.create(spec(identity=USERS))
        await env.converge()
        env.job_succeeds()
        await env.converge()
        first = env.get(JOB, JOB_NAME)
        assert first is not None
        pod_ends(env, "1 users and 1 groups written, 0 locked, 0 refused\n")
        await env.converge()

        def without_users(s: dict[str, Any]) -> None:
            s["identity"] = {"users": []}

        env.edit(without_users)
        await env.converge()
        again = env.get(JOB, JOB_NAME)
        assert again is not None and again["metadata"]["uid"] != first["metadata"]["uid"]
        annotations = again["metadata"]["annotations"]
        assert annotations[IDENTITY_HASH_ANNOTATION] != first["metadata"]["annotations"][IDENTITY_HASH_ANNOTATION]
        assert records(again) == "", "an empty set: the Job locks who it made before"
        assert env.reason("IdentitySynced") == ("False", "Syncing")


async def test_refused_entries_are_named_in_the_condition_with_one_event_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Env() as env:
        env.create(spec(identity=USERS))
        await env.converge()
        env.job_succeeds()
        await env.converge()
        pod_ends(env, f"0 users and 1 groups written, 0 locked, 1 refused\n{REFUSED}\n")
        with caplog.at_level(logging.WARNING):
            await env.converge()
            await env.converge()
        assert env.reason("IdentitySynced") == ("False", "IdentityConflict")
        cond = env.condition("IdentitySynced")
        assert cond is not None and REFUSED in cond["message"]
        warnings = [(t, r) for t, r, _ in env.events() if r == "IdentityConflict"]
        assert warnings == [("Warning", "IdentityConflict")]
        lines = [r for r in caplog.records if "identity entries refused" in r.getMessage()]
        assert len(lines) == 1 and "2100 is already used by jailuser" in lines[0].getMessage()
        assert env.phase() != "Failed", "a refused entry never fails the cluster"


async def test_a_failed_job_is_reported_and_not_retried_in_a_loop() -> None:
    async with Env() as env:
        env.create(spec(identity=USERS))
        await env.converge()
        env.job_succeeds()
        await env.converge()
        uid = env.get(JOB, JOB_NAME)["metadata"]["uid"]  # type: ignore[index]
        failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff limit"}
        env.fake.set_status(*JOB, JOB_NAME, {"failed": 4, "conditions": [failed]}, namespace=NS)
        await env.converge()
        assert env.reason("IdentitySynced") == ("False", "JobFailed")
        assert env.get(JOB, JOB_NAME)["metadata"]["uid"] == uid  # type: ignore[index]


async def test_a_deleted_job_runs_again_for_the_same_spec() -> None:
    """After removing an account made by hand that was in the way, deleting the Job is how to run it again."""
    async with Env() as env:
        env.create(spec(identity=USERS))
        await env.converge()
        env.job_succeeds()
        await env.converge()
        pod_ends(env, f"0 users and 1 groups written, 0 locked, 1 refused\n{REFUSED}\n")
        await env.converge()
        uid = env.get(JOB, JOB_NAME)["metadata"]["uid"]  # type: ignore[index]
        await env.fake.delete(*JOB, JOB_NAME, namespace=NS)
        await env.converge()
        again = env.get(JOB, JOB_NAME)
        assert again is not None and again["metadata"]["uid"] != uid
        assert env.reason("IdentitySynced") == ("False", "Syncing")
