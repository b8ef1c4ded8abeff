"""Keeps the QOS, accounts, users and associations `spec.accounting` declares in Slurm's accounting database, through
slurmrestd (the Slurm client), level-based, in three steps that a component's pass splits between its observation,
its plan and the executor:

- `read_records`: the live records of every kind the spec declares (the observation);
- `record_writes`: which records to send, compared with the desired ones (render/accounting_limits), purely: only
  those missing or different, so a converged cluster costs the reads and no write (the plan);
- `write_records`: send them one at a time, parents first, so that when Slurm refuses one its error can be tied to one
  field of the spec (the executor).

A missing association is made the way sacctmgr makes it (see SlurmClient.add_associations), then its limits are set
in the same pass: what follows an `add` is compared with Slurm as it is after it (a `level` write), since Slurm fills
in the new record's fields. Nothing is ever deleted: records the spec does not name (an account made with sacctmgr) are
not even looked at twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.plan import Obj, RecordWrite
from slurmctl.reconcilers.slurm_access import SlurmApi
from slurmctl.render.accounting_limits import changes, desired_state, new_associations
from slurmctl.slurm import ACCOUNTING_KINDS, AccountingKind, SlurmApiError

Records = Mapping[AccountingKind, Sequence[Obj]]


class LimitsRefusedError(Exception):
    """Slurm refused a record the spec declares; `field` is where in the spec it comes from."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def spec_field(cluster: SlurmCluster, kind: AccountingKind, record: dict[str, Any]) -> str:
    """The spec field a desired record comes from (for the condition and the Event when Slurm refuses it)."""
    accounting = cluster.spec.accounting
    base = "spec.accounting"
    if kind == "qos":
        index = next(i for i, q in enumerate(accounting.qos) if q.name == record["name"])
        return f"{base}.qos[{index}]"
    account_name = record["account"] if kind == "associations" else record.get("name")
    user = record.get("user") if kind == "associations" else None
    if kind == "users":
        account_name, user = record["default"]["account"], record["name"]
    index = next(i for i, a in enumerate(accounting.accounts) if a.name == account_name)
    if user:
        position = accounting.accounts[index].users.index(user)
        return f"{base}.accounts[{index}].users[{position}]"
    return f"{base}.accounts[{index}]"


async def read_records(client: SlurmApi, cluster: SlurmCluster) -> dict[AccountingKind, list[Obj]]:
    """Slurm's records of every kind the spec declares some of (a kind it declares none of is not asked for). Raises
    the client's SlurmError when Slurm cannot be asked."""
    desired = desired_state(cluster)
    return {kind: await client.accounting_records(kind) for kind in ACCOUNTING_KINDS if desired[kind]}


def record_writes(cluster: SlurmCluster, live: Records) -> tuple[RecordWrite, ...]:
    """What brings Slurm's records (`live`, as `read_records` read them) to the spec, in order: () when converged."""
    desired = desired_state(cluster)
    out: list[RecordWrite] = []
    level = False  # after an `add`, records are compared with Slurm as the add left it, not as it was observed
    for kind in ACCOUNTING_KINDS:
        if not desired[kind]:
            continue
        have = live.get(kind, ())
        if kind == "associations" and (missing := new_associations(desired[kind], list(have))):
            out += [RecordWrite("add", kind, where, spec_field(cluster, kind, record)) for where, record in missing]
            level = True
        sent = desired[kind] if level else changes(kind, desired[kind], list(have))
        out += [RecordWrite("level" if level else "update", kind, r, spec_field(cluster, kind, r)) for r in sent]
    return tuple(out)


async def write_records(client: SlurmApi, writes: Sequence[RecordWrite]) -> int:
    """Send `writes` in order; returns how many records were written. A `level` write reads its kind first (once per
    pass: all the writes before it are made). Raises LimitsRefusedError when Slurm refuses one (the rest are not sent),
    and the client's SlurmError when Slurm cannot be asked."""
    written = 0
    live: dict[AccountingKind, list[Obj]] = {}
    for write in writes:
        record = write.record
        if write.verb == "level":
            if write.kind not in live:
                live[write.kind] = await client.accounting_records(write.kind)
            differs = changes(write.kind, [record], live[write.kind])
            if not differs:
                continue
            (record,) = differs
        try:
            if write.verb == "add":
                await client.add_associations(record)
            else:
                await client.update_accounting_records(write.kind, [record])
        except SlurmApiError as exc:
            raise LimitsRefusedError(write.field, str(exc)) from None
        written += 1
    return written


async def apply_limits(client: SlurmApi, cluster: SlurmCluster) -> int:
    """The three steps at once, for a caller that holds a client: returns how many records were written."""
    return await write_records(client, record_writes(cluster, await read_records(client, cluster)))
