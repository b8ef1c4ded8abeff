"""Carrying out a component's `Plan` (reconcilers/plan.py), the same way for every component: Slurm first (what Slurm
is told can only hold more nodes, never release one: every release was decided on what Slurm said before), then the
Events, the applies (bounded, concurrent; a delete of an object applied anew goes before them), the deletes (each of
the incarnation observed), the creates (at once; none while an apply is rejected), the accounting records (one at a
time, reconcilers/limits.py), and last the status part, with one `changed()` of the Slurm snapshot for all the Slurm
actions.

A refused Slurm action ends the Slurm part (the rest would meet the same Slurm) and turns the component's condition
into what its plan said a refusal means; the rest of the plan is carried out. An API server that rejects an object
ends the pass as `ApplyRejected` (reconcilers/base.py reports it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from slurmctl.api.v1 import Condition, Reason, SlurmClusterStatus
from slurmctl.reconcilers.limits import LimitsRefusedError, write_records
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.plan import Create, Delete, Plan, RecordWrites, SlurmAction
from slurmctl.render.kinds import Kind
from slurmctl.runtime import Conflict, Result
from slurmctl.runtime.logs import kv
from slurmctl.slurm import SlurmError

if TYPE_CHECKING:
    from slurmctl.reconcilers.base import ComponentReconciler

log = logging.getLogger(__name__)

# The Event reason of each Slurm action once Slurm took it.
_ANNOUNCED = {"drain": "Draining", "power_up": "PoweringUp", "resume": "ResumeRetried", "power_down": "PoweringDown"}


async def execute(rec: ComponentReconciler, loaded: Loaded, plan: Plan) -> Result | None:
    """Carry out `plan` for `rec`'s component on the cluster `loaded`; the Result asks for the plan's requeue."""
    refused = await _slurm(rec, loaded, plan.slurm)
    for note in plan.events:
        rec.events.record(loaded.obj, note.type, note.reason, note.message)
    for message, context in plan.warnings:
        log.warning("%s %s", message, kv(namespace=loaded.namespace, name=loaded.name, **context))
    # A delete of an object the plan applies anew (a Job re-run) comes first; the others after the applies, so that
    # the status part follows them closely (a user who sees a pod go reads the condition that says why).
    applied = {(Kind(obj["apiVersion"], obj["kind"]), obj["metadata"]["name"]) for obj in plan.apply}
    first = [gone for gone in plan.delete if (gone.kind, gone.name) in applied]
    await _delete(rec, loaded, first)
    await rec.apply(loaded, plan.apply)
    await _delete(rec, loaded, [gone for gone in plan.delete if (gone.kind, gone.name) not in applied])

    async def create(one: Create) -> bool:
        return await rec.create(loaded, await one.body())

    made = await asyncio.gather(*(create(one) for one in plan.create))
    for one, created in zip(plan.create, made, strict=True):
        if created and one.announce:
            rec.event(loaded, "Normal", "Created", one.announce)
    failed, retry = await _records(rec, loaded, plan.records) if plan.records else (None, None)
    status = plan.status
    for overwrite in (refused, failed):
        if overwrite is not None:
            conds = [c for c in (status.conditions if status else []) if c.type != overwrite.type]
            status = (status or SlurmClusterStatus()).model_copy(update={"conditions": [*conds, overwrite]})
    if status is not None:
        await rec.write_status(loaded, status)
    again = min(filter(None, (plan.requeue_after, retry)), default=None)
    return Result(requeue_after=again) if again is not None else None


async def _delete(rec: ComponentReconciler, loaded: Loaded, deletes: list[Delete]) -> None:
    for gone in deletes:
        try:
            await rec.delete(
                loaded, gone.kind, gone.name, why=gone.why, propagation=gone.propagation, uid=gone.uid, event=gone.event
            )
        except Conflict:  # another incarnation of the name by now: the next pass decides on that one
            log.debug("delete skipped %s", kv(kind=gone.kind.kind, name=gone.name, uid=gone.uid))


async def _slurm(rec: ComponentReconciler, loaded: Loaded, actions: tuple[SlurmAction, ...]) -> Condition | None:
    """Tell Slurm what the plan says, in order; the component's condition when Slurm refuses (None: all taken)."""
    if not actions:
        return None
    c, ns = loaded.name, loaded.namespace
    rec.ctx.slurm.changed(c, ns)
    for action in actions:
        try:
            api = rec.ctx.slurm.client(c, ns)
            if action.verb == "drain":
                await api.drain(action.nodes, reason=action.reason)
            elif action.verb == "resume":
                await api.resume(action.nodes)
            elif action.verb == "power_down":
                await api.power_down_asap(action.nodes)
            else:
                await api.power_up(action.nodes)
        except SlurmError as exc:
            message = f"{action.failed}: {exc}"
            if rec.is_news(loaded, action.failed_reason, message):  # once per finding, not once per pass
                log.warning("slurm refused %s", kv(namespace=ns, name=c, action=action.verb, error=str(exc)))
            return rec.condition(loaded, ok=False, reason=action.failed_reason, message=message)
        rec.event(loaded, "Normal", _ANNOUNCED[action.verb], action.announce)
    return None


async def _records(
    rec: ComponentReconciler, loaded: Loaded, step: RecordWrites
) -> tuple[Condition | None, float | None]:
    """Write the accounting records; what their condition says instead of the plan's when Slurm refuses one or cannot
    be asked, and when to look again then (None, None: all taken)."""
    c, ns = loaded.name, loaded.namespace
    try:
        written = await write_records(rec.ctx.slurm.client(c, ns), step.writes)
    except LimitsRefusedError as exc:
        reason, message, retry = Reason.LIMITS_REFUSED, f"Slurm refused {exc}", None
    except SlurmError as exc:
        reason, message, retry = Reason.SLURM_UNREACHABLE, f"{step.unreachable}: {exc}", step.retry_after
    else:
        if written:
            log.info("accounting records written %s", kv(namespace=ns, name=c, records=written))
            rec.event(loaded, "Normal", step.condition, f"wrote {written} accounting records to Slurm")
        return None, None
    if rec.is_news(loaded, reason, message, type_=step.condition):  # once per finding, not once per pass
        rec.warn(loaded, reason.value, message)
    return rec.condition(loaded, ok=False, reason=reason, message=message, type_=step.condition), retry
