"""The `populate-jail` component: the one-off Job that fills the jail volume, JailPopulated, and the gate that keeps
worker and login StatefulSets from starting on an empty jail.

The Job runs once per cluster. Its pod template is immutable, so a live Job is never re-applied: it is deleted and
applied anew only when `JobState.needs_recreate` says so (overwrite for a new generation, or a retry after a spec
change).
"""

from __future__ import annotations

from slurmctl.api.v1 import JAIL_POPULATED, Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler, Loaded
from slurmctl.reconcilers.observed import JobState
from slurmctl.render import meta
from slurmctl.render.kinds import JOB


def jail_gate_open(reconciler: ComponentReconciler, loaded: Loaded) -> bool:
    """Whether workers and login may run: the Job succeeded now or did before (the condition remembers, e.g. after
    the Job was deleted). An overwrite in progress or a failed re-run tears nothing down: existing StatefulSets stay."""
    job = reconciler.live(JOB, meta.populate_jail(loaded.name), loaded.namespace)
    if job is not None and JobState.of(job).succeeded:
        return True
    condition = loaded.condition(JAIL_POPULATED)
    return condition is not None and condition.status == "True"


class PopulateJailReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        cluster = loaded.cluster
        name = meta.populate_jail(loaded.name)
        live = self.live(JOB, name, loaded.namespace)
        job = JobState.of(live) if live is not None else None
        overwrite = cluster.spec.populate_jail.overwrite
        previous = loaded.condition(self.condition_type)
        if job is None and previous is not None and previous.status == "True" and not overwrite:
            return  # populated once; the Job is gone and must not run again
        if job is not None and job.needs_recreate(cluster):
            why = "overwrite requested" if overwrite else "retrying after a spec change"
            await self.manager.client.delete(*JOB, name, namespace=loaded.namespace)
            self.event(loaded, "Normal", "RecreatingJob", f"re-running Job {name}: {why}")
            job = None
        if job is None:
            await self.apply(loaded, self.desired(self.inputs(loaded)))
            reason = Reason.OVERWRITING if overwrite and previous is not None else Reason.POPULATING
            cond = self.condition(loaded, ok=False, reason=reason, message=self._running(name, overwrite))
        elif job.succeeded:
            message = f"Job {name} populated the jail"
            if overwrite:
                message += f" (overwrite for generation {loaded.generation})"
            cond = self.condition(loaded, ok=True, reason=Reason.POPULATED, message=message)
        elif job.failed:
            message = f"Job {name} failed: {job.failure}"
            if previous is None or previous.reason != Reason.JOB_FAILED:
                self.warn(loaded, "PopulateJailFailed", message)
            cond = self.condition(loaded, ok=False, reason=Reason.JOB_FAILED, message=message)
        else:
            reason = Reason.OVERWRITING if overwrite else Reason.POPULATING
            cond = self.condition(loaded, ok=False, reason=reason, message=self._running(name, overwrite))
        await self.write_status(loaded, SlurmClusterStatus(conditions=[cond]))

    @staticmethod
    def _running(name: str, overwrite: bool) -> str:
        what = "overwriting the jail (spec.populateJail.overwrite)" if overwrite else "copying the jail image"
        return f"Job {name} is {what}"
