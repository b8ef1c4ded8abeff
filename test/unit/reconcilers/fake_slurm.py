"""An in-memory Slurm for the reconcilers' tests: nodes, jobs and partitions that drain, resume and fail as the real
slurmctld does behind slurmrestd (the client itself is tested against recorded answers in test/unit/slurm)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

from slurmctl.reconcilers.slurm_access import SlurmAccess
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.slurm import ExitCode, Job, Node, Partition, SlurmUnavailable
from test.unit.reconcilers.env import NAME, NS, Env


class FakeSlurm:
    def __init__(self) -> None:
        self.table: dict[str, Node] = {}
        self.queue: list[Job] = []
        self.parts: list[Partition] = []
        self.down = ""  # when set, every call fails with this as the reason
        self.calls: list[tuple[str, tuple[str, ...], str]] = []  # (verb, nodes, reason) of every change

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
        self.table[name] = dataclasses.replace(self.table[name], state=state, **changes)  # type: ignore[arg-type]

    # ---- the API ------------------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.down:
            raise SlurmUnavailable(self.down)

    async def nodes(self) -> list[Node]:
        self._check()
        return list(self.table.values())

    async def jobs(self) -> list[Job]:
        self._check()
        return list(self.queue)

    async def partitions(self) -> list[Partition]:
        self._check()
        return list(self.parts)

    async def drain(self, names: Sequence[str], *, reason: str) -> None:
        self._check()
        self.calls.append(("drain", tuple(names), reason))
        for name in names:
            now = datetime.now(UTC)
            self._set(name, self.table[name].state | {"DRAIN"}, reason=reason, reason_changed_at=now)

    async def resume(self, names: Sequence[str]) -> None:
        self._check()
        self.calls.append(("resume", tuple(names), ""))
        for name in names:
            self._set(name, self.table[name].state - {"DRAIN"}, reason="", reason_changed_at=None)


def connect(env: Env, slurm: FakeSlurm, *, name: str = NAME) -> None:
    """Give the cluster a ready slurmrestd pod and a JWT key, and route the operator's Slurm calls to `slurm` (the
    pod's address, on loopback, is never connected to)."""
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-rest-0", "namespace": NS, "labels": meta.labels(name, "rest")},
            "status": {"podIP": "127.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    env.secret(meta.jwt_key_secret(name), {JWT_KEY: b"k" * 32}, labels=meta.labels(name, "cluster"))
    env.ctx.slurm = SlurmAccess(env.manager.cache, connect=lambda url, token: slurm)
