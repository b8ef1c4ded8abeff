"""Applying spec.accounting's records through the Slurm client: writes only what differs, parents first, never
deletes, and ties a refusal to the spec field it came from. Slurm is fake_slurm's, which keeps records as slurmdbd
does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from slurmctl.reconcilers.limits import LimitsRefusedError, apply_limits
from test.unit.reconcilers.fake_slurm import FakeSlurm
from test.unit.render.test_accounting_limits import cluster

SPEC: dict[str, Any] = {
    "qos": [{"name": "small", "maxJobsPerUser": 1}],
    "accounts": [
        {"name": "theory", "parent": "physics", "users": ["alice"]},
        {"name": "physics", "users": ["alice", "bob"], "maxJobsPerUser": 1, "qos": ["small"]},
    ],
}


async def test_first_apply_writes_everything_then_nothing_while_the_spec_is_unchanged() -> None:
    fake = FakeSlurm()
    written = await apply_limits(fake, cluster(**SPEC))
    # The QOS and both accounts; five associations made as sacctmgr makes them, parents first; the limits of the
    # three that carry some; alice's default account (the first account listing her, not the first one made).
    assert written == len(fake.posts) == 1 + 2 + 5 + 3 + 1
    assert [k for k, _ in fake.posts] == ["qos", *["accounts"] * 2, *["add"] * 5, *["associations"] * 3, "users"]
    adds = [condition for kind, condition in fake.posts if kind == "add"]
    assert adds[0] == {"accounts": ["physics"], "clusters": ["hpc"], "association": {"parent": "root"}}
    assert adds[3] == {"accounts": ["theory"], "clusters": ["hpc"], "association": {"parent": "physics"}}
    assert fake.posts[-1] == ("users", {"name": "alice", "default": {"account": "theory"}})
    fake.posts.clear()
    assert await apply_limits(fake, cluster(**SPEC)) == 0
    assert fake.posts == []
    # What was there before and is not the spec's is neither changed nor deleted.
    assert fake.records["accounts"][("admins",)] == {"name": "admins", "description": "by hand", "organization": "it"}


async def test_a_changed_limit_writes_only_that_record() -> None:
    fake = FakeSlurm()
    await apply_limits(fake, cluster(**SPEC))
    fake.posts.clear()
    spec = copy.deepcopy(SPEC)
    spec["qos"][0]["maxJobsPerUser"] = 2
    assert await apply_limits(fake, cluster(**spec)) == 1
    ((kind, record),) = fake.posts
    assert kind == "qos" and record["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"]["number"] == 2


async def test_a_refused_record_names_its_spec_field() -> None:
    fake = FakeSlurm()
    spec = copy.deepcopy(SPEC)
    spec["accounts"][1]["grpTRES"] = {"billing": 5}
    fake.refuse = "billing"
    with pytest.raises(LimitsRefusedError) as refused:
        await apply_limits(fake, cluster(**spec))
    assert refused.value.field == "spec.accounting.accounts[1]"
    assert "Invalid TRES" in str(refused.value)
