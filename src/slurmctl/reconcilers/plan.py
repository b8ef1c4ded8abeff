"""What a component decided in one pass, as data: a `Plan` is the pure output of a component's `plan(observation)`
and the only input of the generic executor (reconcilers/executor.py).

Deciding and writing are apart so that the decision can be tested without an API server or a Slurm (an observation
in, a plan out) and so that every component writes the same way: bounded concurrent applies, deletes that name the
incarnation they mean (a uid precondition), Slurm actions that mark the shared snapshot stale, accounting records
written one at a time, one status part.
Nothing here knows a component; each step says why it is taken, and that reason is what the Event and log say.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from slurmctl.api.v1 import Reason, SlurmClusterStatus
from slurmctl.render.kinds import Kind
from slurmctl.slurm import AccountingKind

Obj = dict[str, Any]
SlurmVerb = Literal["drain", "power_up", "resume", "power_down"]
RecordVerb = Literal["add", "update", "level"]
LogLine = tuple[str, Mapping[str, str]]  # a WARNING line and its key=value context


@dataclass(frozen=True)
class Note:
    """An Event on the cluster: `Normal` for what a user may want to follow, `Warning` for what they must notice."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Delete:
    """Delete a child, only the incarnation observed (`uid`: a precondition, so a pod re-created under the same name
    since the observation is never the one deleted). Its Event says `why`. A delete of an object the plan also applies
    comes before the applies (a Job deleted to be run anew is applied in the same pass), the others after them."""

    kind: Kind
    name: str
    why: str
    uid: str = ""
    propagation: Literal["Background", "Foreground", "Orphan"] = "Background"
    event: Note | None = None  # what the Event says instead of "deleted <kind> <name>: <why>" (e.g. a re-run Job)


@dataclass(frozen=True)
class Create:
    """Create an object that is never updated in place (an elastic worker's pod, a key Secret); `announce` is its
    Event once made ("": none), none when one of that name exists (the next pass looks again). Key material is made
    only when it is created (`make`, called by the executor): a plan stays a pure decision."""

    obj: Obj | None
    announce: str = ""
    make: Callable[[], Awaitable[Obj]] | None = None

    async def body(self) -> Obj:
        if self.obj is not None:
            return self.obj
        assert self.make is not None, "a Create has an object or a way to make one"
        return await self.make()


@dataclass(frozen=True)
class SlurmAction:
    """Change Slurm: drain `nodes` (with `reason`), power them up, resume them (undo a DOWN) or power them down as
    soon as they run no job (POWER_DOWN_ASAP). `announce` is the Event once Slurm took it. When
    Slurm refuses, the component's condition becomes `failed_reason` with `failed: <Slurm's error>` (the rest of the
    plan is still carried out: every other step was decided on what Slurm said before)."""

    verb: SlurmVerb
    nodes: tuple[str, ...]
    announce: str
    failed: str
    failed_reason: Reason
    reason: str = ""


@dataclass(frozen=True)
class RecordWrite:
    """One write to Slurm's accounting database (slurmdbd, through slurmrestd): `add` the association that the
    association condition `record` makes (as sacctmgr makes it), `update` a record of `kind` to `record`, or `level`
    one: send `record` only where Slurm's record differs, as Slurm holds it after this pass's earlier writes (a record
    an `add` of the same pass made or changed, whose fields Slurm filled in: the observation could not see them).
    `field`: the spec field the record comes from, which a refusal names."""

    verb: RecordVerb
    kind: AccountingKind
    record: Obj
    field: str


@dataclass(frozen=True)
class RecordWrites:
    """Accounting records to write, one at a time and in order (parents first), so that what Slurm refuses is tied to
    one spec field. `condition` is the condition they make true (the plan's status says so); the executor turns it
    into `Slurm refused <field>: <Slurm's error>` (LimitsRefused) when Slurm refuses one, the rest not sent, or into
    `<unreachable>: <error>` (SlurmUnreachable) when Slurm cannot be asked, looked at again after `retry_after`; either
    with one Warning Event when that is news. Once all are taken, an Event named after the condition says how many
    records were written (none when none was)."""

    writes: tuple[RecordWrite, ...]
    condition: str
    unreachable: str
    retry_after: float


@dataclass(frozen=True)
class Plan:
    """One pass of a component. `status` is its part of the cluster's status (None: leave the status as it is), and
    `condition` the type of the condition in it that a refused Slurm action overwrites; `warnings` are log lines (a
    finding the log must hold once, e.g. Slurm unreachable), with their key=value context; `records`: the accounting
    records to write, and the condition they make true."""

    condition: str
    apply: tuple[Obj, ...] = ()
    slurm: tuple[SlurmAction, ...] = ()
    delete: tuple[Delete, ...] = ()
    create: tuple[Create, ...] = ()
    events: tuple[Note, ...] = ()
    warnings: tuple[LogLine, ...] = ()
    status: SlurmClusterStatus | None = None
    requeue_after: float | None = None
    records: RecordWrites | None = None

    @property
    def objects(self) -> list[Obj]:
        """The objects this plan writes whose bodies it holds: those it applies, then those it creates from a known
        body. A key Secret has none (its key is made only when it is created): it is not among them."""
        return [*self.apply, *(create.obj for create in self.create if create.obj is not None)]
