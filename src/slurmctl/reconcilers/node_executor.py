"""Carrying out the Slurm node loop's plans (reconcilers/node_plans.py): the repair's steps in order, then the
status (the pods' marks and the node counts).

One `changed()` of the Slurm snapshot before the first step that changes Slurm or takes a pod away. A node Slurm no
longer knows is left out of a step (one INFO line); Slurm refusing a step otherwise ends the repair (the rest would
meet the same Slurm) and is returned with what was done until then; a step whose refusal the plan tolerates is one
WARNING line. A pod deletion the API server refuses is one WARNING and the repair goes on (the next pass decides
again).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurmctl.api.v1 import SlurmClusterStatus
from slurmctl.reconcilers.base import status_part
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.events import Events
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.node_plans import Done, RepairPlan, StatusPlan
from slurmctl.reconcilers.node_steps import ForceDelete, Replace, SlurmWrite
from slurmctl.reconcilers.plan import LogLine, Note, Obj
from slurmctl.reconcilers.slurm_access import SlurmApi
from slurmctl.reconcilers.slurm_marks import write_marks
from slurmctl.reconcilers.unhealthy import CordonBudget, Replacement, cordon_patch
from slurmctl.render.kinds import NODE, POD
from slurmctl.runtime import ApiError, Conflict
from slurmctl.runtime.logs import kv
from slurmctl.slurm import SlurmApiError, SlurmError, SlurmUnknownNodeError

log = logging.getLogger(__name__)


@dataclass
class NodeExecutor:
    """One per operator: its cordon budget counts every cluster's cordons together."""

    ctx: Context
    events: Events
    cordons: CordonBudget = field(init=False)

    def __post_init__(self) -> None:
        self.manager = self.ctx.manager
        self.cordons = CordonBudget(self.manager.clock)

    async def repair(self, loaded: Loaded, plan: RepairPlan) -> tuple[Done, SlurmError | None]:
        """Carry out the repair; what got done, and Slurm's error when Slurm refused a step (the rest not taken)."""
        c, ns = loaded.name, loaded.namespace
        self._say(loaded, plan.events, plan.warnings)
        if any(isinstance(step, SlurmWrite | ForceDelete) for step in plan.steps):
            self.ctx.slurm.changed(c, ns)
        gone: set[str] = set()
        force_deleted: set[str] = set()
        replaced: list[Replacement] = []

        def done() -> Done:
            return Done(frozenset(gone), frozenset(force_deleted), tuple(replaced))

        api = self.ctx.slurm.client(c, ns)
        for step in plan.steps:
            if isinstance(step, SlurmWrite):
                try:
                    unknown = await _write(api, step)
                except SlurmApiError as exc:
                    if not step.refusal:
                        return done(), exc
                    log.warning("%s %s", step.refusal, kv(namespace=ns, name=c, node=",".join(step.nodes), error=exc))
                    continue
                except SlurmError as exc:
                    return done(), exc
                if unknown:
                    log.info(
                        "nodes gone from Slurm left out %s",
                        kv(namespace=ns, name=c, verb=step.verb, node=",".join(unknown)),
                    )
                self._say(loaded, step.notes)
            elif isinstance(step, ForceDelete):
                if await self._force_delete(loaded, step):
                    gone.add(step.pod)
                    force_deleted.add(step.uid)
            elif await self._replace(loaded, step):
                gone.add(step.replacement.pod)
                replaced.append(step.replacement)
        return done(), None

    async def write_status(self, loaded: Loaded, plan: StatusPlan) -> None:
        """The pods' marks, then the node counts through the one status writer (it writes only a change)."""
        self._say(loaded, plan.events, plan.warnings)
        await write_marks(self.manager, plan.conditions, plan.evictable)
        if plan.counts is not None:
            self.ctx.status.submit(loaded.obj, status_part(SlurmClusterStatus(slurm_nodes=plan.counts)))

    async def write_marks(self, evictable: Iterable[Obj]) -> None:
        """Only the evictable labels (a cluster whose spec is invalid: Slurm was not asked)."""
        await write_marks(self.manager, (), evictable)

    def _say(self, loaded: Loaded, notes: Iterable[Note], warnings: Iterable[LogLine] = ()) -> None:
        for note in notes:
            self.events.record(loaded.obj, note.type, note.reason, note.message)
        for message, context in warnings:
            log.warning("%s %s", message, kv(namespace=loaded.namespace, name=loaded.name, **context))

    async def _force_delete(self, loaded: Loaded, step: ForceDelete) -> bool:
        """Delete this incarnation of the pod (its uid) at once; True when it is gone (also when the name holds
        another pod already)."""
        try:
            await self.manager.client.delete(
                *POD, step.pod, namespace=loaded.namespace, grace_period_seconds=0, uid=step.uid
            )
        except Conflict as exc:  # the name holds another pod already: this one is gone
            log.info(
                "pod of a lost node already replaced %s",
                kv(namespace=loaded.namespace, pod=step.pod, uid=step.uid, error=exc),
            )
            return True
        except ApiError as exc:
            where = kv(namespace=loaded.namespace, pod=step.pod, node=step.host, error=exc)
            log.warning("cannot delete the pod of a lost node %s", where)
            return False
        self._say(loaded, (step.note,))
        return True

    async def _replace(self, loaded: Loaded, step: Replace) -> bool:
        """Cordon (and label) the Kubernetes node first: a pod deleted from an uncordoned node could come back to it.
        Nothing is deleted when the cordon fails."""
        r = step.replacement
        where = {"namespace": loaded.namespace, "name": loaded.name, "pod": r.pod, "node": r.k8s_node}
        if not self.cordons.allows():
            log.info("unhealthy worker waits: the operator cordoned its most nodes for now %s", kv(**where))
            return False
        self.cordons.spend()
        try:
            await self.manager.client.merge_patch(NODE.api_version, NODE.kind, r.k8s_node, cordon_patch(r))
        except ApiError as exc:
            log.warning("cannot cordon the node of an unhealthy worker: its pod stays %s", kv(**where, error=exc))
            return False
        try:
            await self.manager.client.delete(*POD, r.pod, namespace=loaded.namespace, uid=r.uid)
        except Conflict:
            log.info("pod of an unhealthy worker already replaced %s", kv(**where))
            return True
        except ApiError as exc:
            log.warning("cannot delete the pod of an unhealthy worker %s", kv(**where, error=exc))
            return False
        self._say(loaded, (step.note,))
        return True


async def _write(api: SlurmApi, step: SlurmWrite) -> list[str]:
    """Carry out `step`; the nodes Slurm does not know, left out. A node deleted since the snapshot the plan was made
    on (its pod's preStop, a scale-in) needs no drain, resume, DOWN or delete, but slurmctld refuses a whole update
    that names it: the roll's resumes failed so while it deleted nodes, and the pass wrote nothing. The nodes are then
    written one at a time."""
    try:
        await _write_nodes(api, step, step.nodes)
    except SlurmUnknownNodeError:
        if len(step.nodes) == 1:
            return list(step.nodes)
    else:
        return []
    unknown = []
    for name in step.nodes:
        try:
            await _write_nodes(api, step, (name,))
        except SlurmUnknownNodeError:
            unknown.append(name)
    return unknown


async def _write_nodes(api: SlurmApi, step: SlurmWrite, nodes: tuple[str, ...]) -> None:
    if step.verb == "drain":
        await api.drain(nodes, reason=step.reason)
    elif step.verb == "resume":
        await api.resume(nodes)
    elif step.verb == "set_down":
        await api.set_down(nodes, reason=step.reason)
    else:
        for name in nodes:
            await api.delete_node(name)
