"""Keeps the QOS, accounts, users and associations `spec.accounting` declares in Slurm's accounting database, through
slurmrestd (the Slurm client), level-based.

Each reconcile reads the live records of every kind, compares them with the desired ones (render/accounting_limits),
and sends only the records that are missing or differ: a converged cluster costs the reads and no write. A missing
association is made the way sacctmgr makes it (see SlurmClient.add_associations), then its limits are set. Records are
sent one at a time, parents first, so that when Slurm refuses one its error can be tied to one field of the spec.
Nothing is ever deleted: records the spec does not name (an account made with sacctmgr) are not even looked at twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.slurm_access import SlurmApi
from slurmctl.render.accounting_limits import changes, desired_state, new_associations
from slurmctl.slurm import ACCOUNTING_KINDS, AccountingKind, SlurmApiError

log = logging.getLogger(__name__)


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


async def _send(call: Awaitable[None], cluster: SlurmCluster, kind: AccountingKind, record: dict[str, Any]) -> None:
    try:
        await call
    except SlurmApiError as exc:
        raise LimitsRefusedError(spec_field(cluster, kind, record), str(exc)) from None


async def apply_limits(client: SlurmApi, cluster: SlurmCluster) -> int:
    """Bring Slurm's records to the spec; returns how many records were written (0 when converged). Raises
    LimitsRefusedError when Slurm refuses one, and the client's SlurmError when Slurm cannot be asked."""
    desired = desired_state(cluster)
    written = 0
    for kind in ACCOUNTING_KINDS:
        if not desired[kind]:
            continue
        live = await client.accounting_records(kind)
        if kind == "associations" and (missing := new_associations(desired[kind], live)):
            for condition, record in missing:
                await _send(client.add_associations(condition), cluster, kind, record)
                written += 1
            live = await client.accounting_records(kind)  # their limits are compared with what was just made
        for record in changes(kind, desired[kind], live):
            await _send(client.update_accounting_records(kind, [record]), cluster, kind, record)
            written += 1
    if written:
        ns, name = cluster.key
        log.info("accounting records written cluster=%s/%s records=%d", ns, name, written)
    return written
