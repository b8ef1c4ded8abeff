"""The `populate-jail` component: the one-off Job that fills the jail volume, and JailPopulated. The gate that keeps
worker and login StatefulSets from starting on an empty jail reads both (reconcilers/jail_gate.py).

The Job runs once per cluster. Its pod template is immutable, so a live Job is never re-applied: it is deleted and
applied anew only when `JobState.needs_recreate` says so (overwrite for a new generation, or a retry after a spec
change).

A volume that holds someone else's files is refused by the copier, untouched (images/scripts/populate-jail). The Job's
status cannot say so (it counts failed pods, not why they failed), its pods can: they carry the component label, so
the operator's pod informer (owned-children selector, no further permission) holds them, and a pod that ended with
`REFUSED_EXIT_CODE` says why in its termination message. That is reported as JailNotEmpty naming the volume and the
fix, with one Warning Event; the fix is a spec change, which re-runs the Job at once.
"""

from __future__ import annotations

from slurmctl.api.v1 import JAIL_POPULATED, Condition, Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import component_is
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import JobState, cluster_of_pod, owner_uids, uid
from slurmctl.reconcilers.plan import Delete, Note, Obj, Plan
from slurmctl.render import meta
from slurmctl.render.kinds import JOB, POD
from slurmctl.render.manifests import populate_jail_objects
from slurmctl.render.populate_jail import COMPONENT, volume_description
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder


class PopulateJailReconciler(ComponentReconciler):
    def watch(self, builder: ControllerBuilder) -> None:
        """The Job's pods: one that refused the volume is news even before the Job counts it as failed."""
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(COMPONENT)])


def plan(obs: Observation) -> Plan:
    loaded = obs.loaded
    cluster = loaded.cluster
    name = meta.populate_jail(loaded.name)
    live = obs.owned(JOB).get(name)
    # The pods this very Job ran (a deleted Job's pods linger until the garbage collector takes them).
    job = JobState.of(live, [p for p in obs.pods.values() if uid(live) in owner_uids(p)]) if live is not None else None
    overwrite = cluster.spec.populate_jail.overwrite
    previous = loaded.condition(JAIL_POPULATED)
    if job is None and previous is not None and previous.status == "True" and not overwrite:
        return Plan(JAIL_POPULATED)  # populated once; the Job is gone and must not run again
    deletes: tuple[Delete, ...] = ()
    if live is not None and job is not None and job.needs_recreate(cluster):
        if overwrite:
            why = "overwrite requested"
        elif job.refusal is not None:
            why = "retrying the refused jail volume after a spec change"
        else:
            why = "retrying after a spec change"
        rerun = Note("Normal", "RecreatingJob", f"re-running Job {name}: {why}")
        deletes = (Delete(JOB, name, why, uid=uid(live), event=rerun),)
        job = None
    events: tuple[Note, ...] = ()
    apply: tuple[Obj, ...] = ()

    def cond(ok: bool, reason: Reason, message: str) -> Condition:
        return obs.condition(JAIL_POPULATED, ok=ok, reason=reason, message=message)

    if job is None:
        apply = tuple(populate_jail_objects(obs.inputs()))
        reason = Reason.OVERWRITING if overwrite and previous is not None else Reason.POPULATING
        condition = cond(False, reason, _running(name, overwrite))
    elif job.succeeded:
        message = f"Job {name} populated the jail"
        if overwrite:
            message += f" (overwrite for generation {loaded.generation})"
        condition = cond(True, Reason.POPULATED, message)
    elif job.refusal is not None:
        message = _refused(loaded, name, job.refusal)
        events = obs.warn_once(JAIL_POPULATED, Reason.JAIL_NOT_EMPTY, message)
        condition = cond(False, Reason.JAIL_NOT_EMPTY, message)
    elif job.failed:
        message = f"Job {name} failed: {job.failure}"
        if previous is None or previous.reason != Reason.JOB_FAILED:
            events = (Note("Warning", "PopulateJailFailed", message),)
        condition = cond(False, Reason.JOB_FAILED, message)
    elif (refused := obs.refusals.get(name)) is not None:
        events = obs.warn_once(JAIL_POPULATED, Reason.POD_REFUSED, refused)
        condition = cond(False, Reason.POD_REFUSED, refused)
    else:
        reason = Reason.OVERWRITING if overwrite else Reason.POPULATING
        condition = cond(False, reason, _running(name, overwrite))
    status = SlurmClusterStatus(conditions=[condition])
    return Plan(JAIL_POPULATED, apply=apply, delete=deletes, events=events, status=status)


def _refused(loaded: Loaded, name: str, said: str) -> str:
    volume = volume_description(loaded.cluster.spec.jail.volume)
    message = (
        f"Job {name} refused to populate the jail volume ({volume}, spec.jail.volume): it holds files but was not"
        " populated by slurmctl, and nothing in it was changed. Set spec.populateJail.adopt: true to add the"
        " image's files to it (every file it holds is kept, nothing is deleted), or point spec.jail.volume at an"
        " empty volume."
    )
    return f"{message} The Job's pod said: {said}" if said else message


def _running(name: str, overwrite: bool) -> str:
    what = "overwriting the jail (spec.populateJail.overwrite)" if overwrite else "copying the jail image"
    return f"Job {name} is {what}"
