"""An in-memory Slurm: nodes, jobs and partitions that drain, resume and fail as the real slurmctld does behind
slurmrestd, and accounting records kept as slurmdbd keeps them. The reconcilers' unit tests call it in-process
(test/unit/reconcilers/fake_slurm.py); the scale harness serves it over slurmrestd's REST API
(test/fake_slurm/restd.py), so both are answered by one model of Slurm."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from slurmctl.render.accounting_limits import record_key
from slurmctl.slurm import (
    AccountingKind,
    ExitCode,
    Job,
    Node,
    Partition,
    SlurmApiError,
    SlurmUnavailable,
    SlurmUnknownNodeError,
)


class FakeSlurm:
    def __init__(self) -> None:
        self.table: dict[str, Node] = {}
        self.queue: list[Job] = []
        self.parts: list[Partition] = []
        self.down = ""  # when set, every call fails with this as the reason
        self.calls: list[tuple[str, tuple[str, ...], str]] = []  # (verb, nodes, reason) of every change
        self.pings: dict[str, bool] = {}  # SlurmctldHost -> answers slurmrestd's ping
        self.reads: Counter[str] = Counter()  # "nodes", "jobs", "partitions": how often each was asked for
        self.slow: asyncio.Event | None = None  # when set: reading the nodes waits for it (a read in flight)
        self.in_flight = asyncio.Event()  # set once a slow read of the nodes has begun
        # Accounting records by kind and key; what a fresh slurmdbd has, and an account an administrator made.
        self.records: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {
            "qos": {("normal",): {"name": "normal", "id": 1}},
            "accounts": {("admins",): {"name": "admins", "description": "by hand", "organization": "it"}},
            "users": {},
            "associations": {},
        }
        self.posts: list[tuple[str, dict[str, Any]]] = []  # every accounting record written
        self.refuse: str | None = None  # a record whose text contains this is refused, as slurmdbd refuses a bad TRES

    # ---- the world ----------------------------------------------------------------------------------------------
    def add_node(self, name: str, *state: str, reason: str = "", since: datetime | None = None) -> None:
        self.table[name] = Node(
            name=name,
            state=frozenset(state or ("IDLE",)),
            reason=reason,
            reason_set_by="root" if reason else "",
            reason_changed_at=since,
            features=("cpu",),
            partitions=("main",),
            cpus=2,
            alloc_cpus=0,
        )

    def run_job(self, job_id: int, node: str) -> None:
        running = ExitCode(status=("PENDING",), return_code=None, signal=None)
        job = Job(job_id=job_id, name="sleep", user="alice", state="RUNNING", nodes=(node,), exit_code=running)
        self.queue.append(job)
        self._set(node, (self.table[node].state - {"IDLE"}) | {"ALLOCATED"})

    def end_job(self, job_id: int) -> None:
        job = next(j for j in self.queue if j.job_id == job_id)
        self.queue.remove(job)
        for node in job.nodes:
            self._set(node, (self.table[node].state - {"ALLOCATED"}) | {"IDLE"})

    def _set(self, name: str, state: frozenset[str], **changes: object) -> None:
        self.table[name] = msgspec.structs.replace(self.table[name], state=state, **changes)

    # ---- the API ------------------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.down:
            raise SlurmUnavailable(self.down)

    def _known(self, names: Sequence[str]) -> None:
        """As slurmctld's node update: one name it does not know refuses the whole update, nothing changed."""
        if unknown := [name for name in names if name not in self.table]:
            message = f"Slurm refused (HTTP 500): Invalid node name specified: {','.join(unknown)}"
            raise SlurmUnknownNodeError(message, status=500, errors=["Invalid node name specified"])

    async def controllers(self) -> dict[str, bool]:
        self._check()
        return dict(self.pings)

    async def nodes(self) -> list[Node]:
        self.reads["nodes"] += 1
        if self.slow is not None:
            self.in_flight.set()
            await self.slow.wait()
        self._check()
        return list(self.table.values())

    async def jobs(self) -> list[Job]:
        self.reads["jobs"] += 1
        self._check()
        return list(self.queue)

    async def partitions(self) -> list[Partition]:
        self.reads["partitions"] += 1
        self._check()
        return list(self.parts)

    async def drain(self, names: Sequence[str], *, reason: str) -> None:
        self._check()
        self.calls.append(("drain", tuple(names), reason))
        self._known(names)
        for name in names:
            now = datetime.now(UTC)
            self._set(name, self.table[name].state | {"DRAIN"}, reason=reason, reason_changed_at=now)

    async def resume(self, names: Sequence[str]) -> None:
        self._check()
        self.calls.append(("resume", tuple(names), ""))
        self._known(names)
        for name in names:
            state = self.table[name].state - {"DRAIN"}
            if "DOWN" in state:  # as slurmctld does: a DOWN node is IDLE again (its power flags kept)
                state = (state - {"DOWN"}) | {"IDLE"}
            self._set(name, state, reason="", reason_changed_at=None)

    async def power_down_asap(self, names: Sequence[str]) -> None:
        """As slurmctld does: drained (reason POWER_DOWN_ASAP unless it has one) and marked POWER_DOWN; its power
        saving powers the node down once it is idle (the test says when)."""
        self._check()
        self.calls.append(("power_down", tuple(names), ""))
        self._known(names)
        for name in names:
            node = self.table[name]
            reason = node.reason or "POWER_DOWN_ASAP"
            self._set(name, node.state | {"DRAIN", "POWER_DOWN", "POWER_DRAIN"}, reason=reason)

    async def power_up(self, names: Sequence[str]) -> None:
        """As slurmctld does: a powered-down node is powering up (and not responding) until its slurmd registers."""
        self._check()
        self.calls.append(("power_up", tuple(names), ""))
        self._known(names)
        for name in names:
            state = self.table[name].state - {"POWERED_DOWN"}
            self._set(name, state | {"POWERING_UP", "NOT_RESPONDING"})

    async def set_down(self, names: Sequence[str], *, reason: str) -> None:
        """As slurmctld does: its jobs end at once (requeued or failed: gone from the node), DOWN with the reason,
        the DRAIN flag kept."""
        self._check()
        self.calls.append(("down", tuple(names), reason))
        self._known(names)
        for name in names:
            for job in [j for j in self.queue if name in j.nodes]:
                self.queue.remove(job)
            state = (self.table[name].state - {"IDLE", "ALLOCATED", "MIXED", "COMPLETING"}) | {"DOWN"}
            self._set(name, state, reason=reason, reason_changed_at=datetime.now(UTC))

    async def delete_node(self, name: str) -> None:
        """`scontrol delete node`: refused while the node runs a job, or when Slurm does not know it."""
        self._check()
        self.calls.append(("delete", (name,), ""))
        self._known([name])
        node = self.table[name]
        if node.busy:
            raise SlurmApiError("Slurm refused (HTTP 500): Node has jobs", status=500, errors=["busy"])
        del self.table[name]

    def not_responding(self, name: str) -> None:
        """slurmctld's ping of the node's slurmd went unanswered."""
        self._set(name, self.table[name].state | {"NOT_RESPONDING"})

    async def accounting_records(self, kind: AccountingKind) -> list[dict[str, Any]]:
        self._check()
        return copy.deepcopy(list(self.records[kind].values()))

    async def update_accounting_records(self, kind: AccountingKind, records: Sequence[dict[str, Any]]) -> None:
        """A POST adds a record or overwrites the fields it carries, as slurmrestd's does; associations must exist
        (one made here would be outside slurmdbd's hierarchy: add_associations makes them)."""
        self._check()
        for record in records:
            self._refused(record)
            key = record_key(kind, record)
            if kind == "associations" and key not in self.records[kind]:
                raise AssertionError(f"association {key} created through /associations/")
            self.posts.append((kind, copy.deepcopy(record)))
            self.records[kind][key] = _merge(self.records[kind].get(key, {}), record)

    async def add_associations(self, condition: dict[str, Any]) -> None:
        """sacctmgr's `add account A parent=P` (the parent must exist) and `add user U account=A`."""
        self._check()
        self._refused(condition)
        self.posts.append(("add", copy.deepcopy(condition)))
        ((cluster,), (account,)) = condition["clusters"], condition["accounts"]
        users = condition.get("users") or [""]
        parent = (condition.get("association") or {}).get("parent", "root")
        if parent not in ("root", *self._accounts()) or (users != [""] and account not in self._accounts()):
            raise SlurmApiError("Slurm refused (HTTP 500): Invalid parent account", status=500, errors=["parent"])
        for user in users:
            record = {"cluster": cluster, "account": account, "user": user, "partition": ""}
            if not user:
                record["parent_account"] = parent
            self.records["associations"][record_key("associations", record)] = record
            self.records["accounts"].setdefault((account,), {"name": account})
            if user:
                self.records["users"].setdefault((user,), {"name": user, "default": {"account": account}})

    def _refused(self, record: dict[str, Any]) -> None:
        if self.refuse and self.refuse in str(record):
            raise SlurmApiError("Slurm refused (HTTP 500): Invalid TRES", status=500, errors=["Invalid TRES"])

    def _accounts(self) -> set[str]:
        return {a["account"] for a in self.records["associations"].values() if not a.get("user")}


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(old)
    for key, value in new.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) and "set" not in value else value
    return out
