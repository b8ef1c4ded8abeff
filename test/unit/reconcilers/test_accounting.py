"""The `accounting` reconciler: the external database's password, mariadb-operator, disabling accounting, and the
limits of spec.accounting applied to Slurm (LimitsApplied).

The password must appear only in the `<c>-slurmdbd` Secret: never in a condition, an Event or an annotation."""

from __future__ import annotations

import copy
import json
from typing import Any

from slurmctl.render.kinds import DEPLOYMENT, MARIADB, SECRET, SERVICE
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect

PASSWORD = "s3cret-Db-pass"
EXTERNAL = {
    "enabled": True,
    "external": {"host": "db.example.com", "user": "slurm", "passwordSecretRef": {"name": "db", "key": "pw"}},
}


def leaks(env: Env, secret: str) -> list[str]:
    """Where, outside the slurmdbd Secret, the text shows up."""
    out = []
    for (_, kind, _, name), obj in env.fake.objects.items():
        if (kind, name) in (("Secret", f"{NAME}-slurmdbd"), ("Secret", "db")):
            continue
        if secret in json.dumps(obj):
            out.append(f"{kind}/{name}")
    return out


async def test_waits_for_the_password_secret_then_runs_slurmdbd_with_it() -> None:
    async with Env() as env:
        env.create(spec(accounting=EXTERNAL))
        await env.converge()
        assert env.reason("AccountingReady") == ("False", "PasswordSecretMissing")
        assert env.phase() == "Degraded"
        assert ("Warning", "PasswordSecretMissing") in [(t, r) for t, r, _ in env.events()]
        env.secret("db", {"pw": PASSWORD.encode()})
        await env.converge()
        assert f"StoragePass={PASSWORD}\n" in env.secret_text(f"{NAME}-slurmdbd", "slurmdbd.conf")
        assert env.reason("AccountingReady") == ("False", "NotReady")
        # Not answering yet: the condition names the database slurmdbd keeps trying (the usual culprit).
        assert "db.example.com:3306" in (env.condition("AccountingReady") or {})["message"]
        env.pods_ready()
        await env.run("accounting")
        assert env.reason("AccountingReady") == ("True", "Ready")
        assert leaks(env, PASSWORD) == []


async def test_a_new_password_rolls_slurmdbd_and_an_unusable_one_is_reported_without_quoting_it() -> None:
    async with Env() as env:
        env.create(spec(accounting=EXTERNAL))
        env.secret("db", {"pw": PASSWORD.encode()})
        await env.converge()
        deployment = env.get(DEPLOYMENT, f"{NAME}-accounting")
        assert deployment is not None
        hash_ = deployment["spec"]["template"]["metadata"]["annotations"]["slurm.slurmctl.io/config-hash"]
        env.secret("db", {"pw": b"another-Pass-1"})
        await env.run("accounting")
        rolled = env.get(DEPLOYMENT, f"{NAME}-accounting")
        assert rolled is not None
        assert rolled["spec"]["template"]["metadata"]["annotations"]["slurm.slurmctl.io/config-hash"] != hash_
        bad = "has space#and-hash"
        env.secret("db", {"pw": bad.encode()})
        await env.run("accounting")
        assert env.reason("AccountingReady") == ("False", "InvalidPassword")
        assert leaks(env, bad) == [] and bad not in str(env.events())
        assert "another-Pass-1" in env.secret_text(f"{NAME}-slurmdbd", "slurmdbd.conf"), "the last good one stays"


async def test_mariadb_needs_its_operator_and_its_passwords_are_created_once() -> None:
    async with Env() as env:
        env.create(spec(accounting={"enabled": True, "mariadb": {"enabled": True}}))
        await env.run("cluster")
        results = await env.run("accounting")
        assert env.reason("AccountingReady") == ("False", "MariaDBOperatorMissing")
        assert results["accounting"] is not None and results["accounting"].requeue_after
        env.fake.serve(*MARIADB)
        await env.run("accounting")
        assert [o["metadata"]["name"] for o in env.fake.of_kind(*MARIADB)] == [f"{NAME}-mariadb"]
        passwords = env.get(SECRET, f"{NAME}-mariadb-passwords")
        await env.run("accounting")
        assert env.get(SECRET, f"{NAME}-mariadb-passwords") == passwords


async def test_disabling_accounting_removes_slurmdbd_but_keeps_the_database_passwords() -> None:
    async with Env() as env:
        env.fake.serve(*MARIADB)
        env.create(spec(accounting={"enabled": True, "mariadb": {"enabled": True}}))
        await env.converge()
        assert f"{NAME}-accounting" in env.names(DEPLOYMENT)
        env.edit(lambda s: s["accounting"].update(enabled=False))
        await env.converge()
        assert env.names(DEPLOYMENT) == [f"{NAME}-rest"]
        assert f"{NAME}-accounting" not in env.names(SERVICE)
        assert f"{NAME}-slurmdbd" not in env.names(SECRET)
        assert f"{NAME}-mariadb-passwords" in env.names(SECRET)
        assert env.reason("AccountingReady") == ("False", "Disabled")
        assert env.fake.find(*SECRET, f"{NAME}-munge", namespace=NS) is not None


async def test_the_users_password_secret_is_read_by_name_never_cached_and_rechecked_while_missing() -> None:
    async with Env() as env:
        env.create(spec(accounting=EXTERNAL))
        result = (await env.run())["accounting"]
        assert result is not None and result.requeue_after, "a missing password is looked for again, not watched"
        env.secret("db", {"pw": PASSWORD.encode()})
        assert env.manager.cache.get(*SECRET, "db", namespace=NS) is None, "only the operator's own Secrets are cached"
        await env.converge()
        assert f"StoragePass={PASSWORD}\n" in env.secret_text(f"{NAME}-slurmdbd", "slurmdbd.conf")
        assert env.manager.cache.get(*SECRET, f"{NAME}-slurmdbd", namespace=NS) is not None


LIMITS = {
    **EXTERNAL,
    "qos": [{"name": "small", "maxJobsPerUser": 1}],
    "accounts": [{"name": "physics", "users": ["alice"], "maxJobsPerUser": 1, "qos": ["small"]}],
}


async def accounting_available(env: Env, slurm: FakeSlurm, accounting: dict[str, Any]) -> None:
    """A cluster whose slurmdbd answers and whose slurmrestd is ready (routed to `slurm`)."""
    env.secret("db", {"pw": PASSWORD.encode()})
    await env.available(spec(accounting=accounting))
    connect(env, slurm)


async def test_declared_limits_reach_slurm_once_and_a_converged_cluster_writes_nothing() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await accounting_available(env, slurm, LIMITS)
        results = await env.run("accounting")
        assert [kind for kind, _ in slurm.posts] == ["qos", "accounts", "add", "add", "associations", "associations"]
        assert env.reason("LimitsApplied") == ("True", "Applied")
        assert ("Normal", "LimitsApplied", "wrote 6 accounting records to Slurm") in env.events()
        relevel = results["accounting"]
        assert relevel is not None and relevel.requeue_after == 60.0, "a limit changed by hand is put back"
        slurm.posts.clear()
        mark = env.mark()
        await env.run("accounting")
        await env.run("accounting")
        assert slurm.posts == [] and env.writes_since(mark) == []
        # Editing a limit writes that one record; the condition stays as it was.
        env.edit(lambda s: s["accounting"]["qos"][0].update(maxJobsPerUser=3))
        await env.run("accounting")
        ((kind, record),) = slurm.posts
        assert kind == "qos" and record["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"]["number"] == 3
        assert env.reason("LimitsApplied") == ("True", "Applied")


async def test_limits_wait_for_slurm_and_say_so_without_degrading_the_cluster() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        slurm.down = "slurmrestd: connection refused"
        await accounting_available(env, slurm, LIMITS)
        results = await env.run("accounting")
        await env.run("accounting")
        cond = env.condition("LimitsApplied")
        assert cond is not None and (cond["status"], cond["reason"]) == ("False", "SlurmUnreachable")
        assert "connection refused" in cond["message"]
        retry = results["accounting"]
        assert retry is not None and retry.requeue_after == 10.0
        warnings = [e for e in env.events() if e[1] == "SlurmUnreachable"]
        assert len(warnings) == 1, "the same outage is said once"
        assert env.phase() == "Available" and env.reason("AccountingReady") == ("True", "Ready")
        slurm.down = ""
        await env.run("accounting")
        assert env.reason("LimitsApplied") == ("True", "Applied")


async def test_a_record_slurm_refuses_is_named_by_its_spec_field_in_the_condition_and_one_event() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        slurm.refuse = "billing"
        limits = {**LIMITS, "accounts": [{**LIMITS["accounts"][0], "grpTRES": {"billing": 5}}]}
        await accounting_available(env, slurm, limits)
        await env.run("accounting")
        await env.run("accounting")
        cond = env.condition("LimitsApplied")
        assert cond is not None and (cond["status"], cond["reason"]) == ("False", "LimitsRefused")
        assert "spec.accounting.accounts[0]" in cond["message"] and "Invalid TRES" in cond["message"]
        assert [e[1] for e in env.events()].count("LimitsRefused") == 1
        # The QOS and the account before it were written; what Slurm refused was not.
        assert [kind for kind, _ in slurm.posts] == ["qos", "accounts", "add", "add"]


async def test_without_slurmrestd_limits_say_that_they_need_it() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await accounting_available(env, slurm, LIMITS)
        env.edit(lambda s: s.update(rest={"enabled": False}))
        await env.run("accounting")
        cond = env.condition("LimitsApplied")
        assert cond is not None and cond["reason"] == "SlurmUnreachable" and "spec.rest.enabled" in cond["message"]
        assert slurm.posts == []


async def test_dropping_every_account_and_qos_from_the_spec_deletes_nothing_in_slurm() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await accounting_available(env, slurm, LIMITS)
        await env.run("accounting")
        before = copy.deepcopy(slurm.records)
        env.edit(lambda s: s["accounting"].update(qos=[], accounts=[]))
        await env.run("accounting")
        assert slurm.records == before
        cond = env.condition("LimitsApplied")
        assert cond is not None and cond["status"] == "True" and "declares no accounts" in cond["message"]


async def test_a_cluster_that_never_declared_limits_has_no_limits_condition_and_asks_slurm_nothing() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        slurm.down = "must not be asked"
        await accounting_available(env, slurm, EXTERNAL)
        await env.run("accounting")
        assert env.condition("LimitsApplied") is None
