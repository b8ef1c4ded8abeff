"""The `accounting` reconciler: the external database's password, mariadb-operator, and disabling accounting.

The password must appear only in the `<c>-slurmdbd` Secret: never in a condition, an Event or an annotation."""

from __future__ import annotations

import json

from slurmctl.render.kinds import DEPLOYMENT, MARIADB, SECRET, SERVICE
from test.unit.reconcilers.env import NAME, NS, Env, spec

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
