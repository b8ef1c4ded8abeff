"""Applying spec.accounting's records through the Slurm client: writes only what differs, parents first, never
deletes, and ties a refusal to the spec field it came from. Slurm is a fake that keeps records like slurmdbd does."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.limits import LimitsRefusedError, apply_limits
from slurmctl.render.accounting_limits import record_key
from slurmctl.slurm import AccountingKind, SlurmApiError, SlurmClient

EXTERNAL = {"host": "db", "user": "slurm", "passwordSecretRef": {"name": "db", "key": "password"}}
SPEC: dict[str, Any] = {
    "qos": [{"name": "small", "maxJobsPerUser": 1}],
    "accounts": [
        {"name": "theory", "parent": "physics", "users": ["alice"]},
        {"name": "physics", "users": ["alice", "bob"], "maxJobsPerUser": 1, "qos": ["small"]},
    ],
}


def cluster(accounting: dict[str, Any]) -> SlurmCluster:
    return SlurmCluster.model_validate(
        {
            "apiVersion": "slurm.slurmctl.io/v1",
            "kind": "SlurmCluster",
            "metadata": {"name": "hpc", "namespace": "ns"},
            "spec": {
                "jail": {"volume": {"claimName": "jail"}},
                "workers": [{"name": "cpu"}],
                "accounting": {"enabled": True, "external": EXTERNAL, **accounting},
            },
        }
    )


class FakeSlurm:
    """Records by kind and key; a POST adds or overwrites the fields it carries, as slurmrestd's does."""

    def __init__(self) -> None:
        self.records: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {
            "qos": {("normal",): {"name": "normal", "id": 1}},
            "accounts": {("admins",): {"name": "admins", "description": "by hand", "organization": "it"}},
            "users": {},
            "associations": {},
        }
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.refuse: str | None = None

    async def accounting_records(self, kind: AccountingKind) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.records[kind].values()))

    async def update_accounting_records(self, kind: AccountingKind, records: Sequence[dict[str, Any]]) -> None:
        for record in records:
            if self.refuse and self.refuse in str(record):
                raise SlurmApiError("Slurm refused (HTTP 500): Invalid TRES", status=500, errors=["Invalid TRES"])
            if kind == "associations" and record.get("parent_account") not in (None, "root", *self._accounts()):
                raise AssertionError(f"parent {record['parent_account']} written after its child")
            self.posts.append((kind, copy.deepcopy(record)))
            key = record_key(kind, record)
            self.records[kind][key] = _merge(self.records[kind].get(key, {}), record)

    def _accounts(self) -> set[str]:
        return {a["account"] for a in self.records["associations"].values() if not a.get("user")}


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(old)
    for key, value in new.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) and "set" not in value else value
    return out


def slurm_client(fake: FakeSlurm) -> SlurmClient:
    return cast(SlurmClient, fake)


async def test_first_apply_writes_everything_then_nothing_while_the_spec_is_unchanged() -> None:
    fake = FakeSlurm()
    written = await apply_limits(slurm_client(fake), cluster(SPEC))
    assert written == len(fake.posts) == 1 + 2 + 2 + 5  # qos, accounts, users, associations
    assert [k for k, _ in fake.posts] == ["qos", "accounts", "accounts", "users", "users", *["associations"] * 5]
    fake.posts.clear()
    assert await apply_limits(slurm_client(fake), cluster(SPEC)) == 0
    assert fake.posts == []
    # What was there before and is not the spec's is neither changed nor deleted.
    assert fake.records["accounts"][("admins",)] == {"name": "admins", "description": "by hand", "organization": "it"}


async def test_a_changed_limit_writes_only_that_record() -> None:
    fake = FakeSlurm()
    await apply_limits(slurm_client(fake), cluster(SPEC))
    fake.posts.clear()
    spec = copy.deepcopy(SPEC)
    spec["qos"][0]["maxJobsPerUser"] = 2
    assert await apply_limits(slurm_client(fake), cluster(spec)) == 1
    ((kind, record),) = fake.posts
    assert kind == "qos" and record["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"]["number"] == 2


async def test_a_refused_record_names_its_spec_field() -> None:
    fake = FakeSlurm()
    spec = copy.deepcopy(SPEC)
    spec["accounts"][1]["grpTRES"] = {"billing": 5}
    fake.refuse = "billing"
    with pytest.raises(LimitsRefusedError) as refused:
        await apply_limits(slurm_client(fake), cluster(spec))
    assert refused.value.field == "spec.accounting.accounts[1]"
    assert "Invalid TRES" in str(refused.value)
