"""The `populate-jail` component: the one-off Job that fills the jail volume, JailPopulated, and the gate that keeps
worker and login StatefulSets from starting on an empty jail.

The Job runs once per cluster. Its pod template is immutable, so a live Job is never re-applied: it is deleted and
applied anew only when `needs_recreate` says so (overwrite for a new generation, or a retry after a spec change).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import JAIL_POPULATED
from slurmctl.reconcilers.base import ComponentReconciler, Loaded
from slurmctl.render import meta
from slurmctl.render.populate_jail import job_failed, needs_recreate, render_populate_jail_job

JOB = ("batch/v1", "Job")


def job_succeeded(job: Mapping[str, Any] | None) -> bool:
    return int(((job or {}).get("status") or {}).get("succeeded") or 0) >= 1


def _failure(job: Mapping[str, Any]) -> str:
    conditions = (job.get("status") or {}).get("conditions") or []
    failed: Mapping[str, Any] = next(
        (c for c in conditions if c.get("type") == "Failed" and c.get("status") == "True"), {}
    )
    return f"{failed.get('reason', 'Failed')}: {failed.get('message', 'the Job failed')}"


def populated_condition(loaded: Loaded) -> Mapping[str, Any] | None:
    conditions = (loaded.obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == JAIL_POPULATED), None)


def jail_gate_open(reconciler: ComponentReconciler, loaded: Loaded) -> bool:
    """Whether workers and login may run: the Job succeeded now or did before (the condition remembers, e.g. after
    the Job was deleted). An overwrite in progress or a failed re-run tears nothing down: existing StatefulSets stay."""
    job = reconciler.live(*JOB, meta.populate_jail(loaded.name), loaded.namespace)
    if job_succeeded(job):
        return True
    condition = populated_condition(loaded)
    return condition is not None and condition.get("status") == "True"


class PopulateJailReconciler(ComponentReconciler):
    component = "populate-jail"
    condition_type = JAIL_POPULATED

    async def reconcile_valid(self, loaded: Loaded) -> None:
        cluster = loaded.cluster
        name = meta.populate_jail(loaded.name)
        job = self.live(*JOB, name, loaded.namespace)
        overwrite = cluster.spec.populate_jail.overwrite
        previous = populated_condition(loaded)
        if job is None and previous is not None and previous.get("status") == "True" and not overwrite:
            return  # populated once; the Job is gone and must not run again
        if job is not None and needs_recreate(cluster, job):
            await self.manager.client.delete(*JOB, name, namespace=loaded.namespace)
            why = "overwrite requested" if overwrite else "retrying after a spec change"
            self.event(loaded, "Normal", "RecreatingJob", f"re-running Job {name}: {why}")
            job = None
        if job is None:
            await self.apply(loaded, [render_populate_jail_job(cluster)])
            reason = "Overwriting" if overwrite and previous is not None else "Populating"
            cond = self.condition(loaded, ok=False, reason=reason, message=self._running(name, overwrite))
        elif job_succeeded(job):
            message = f"Job {name} populated the jail"
            if overwrite:
                message += f" (overwrite for generation {loaded.generation})"
            cond = self.condition(loaded, ok=True, reason="Populated", message=message)
        elif job_failed(job):
            message = f"Job {name} failed: {_failure(job)}"
            if previous is None or previous.get("reason") != "JobFailed":
                self.warn(loaded, "PopulateJailFailed", message)
            cond = self.condition(loaded, ok=False, reason="JobFailed", message=message)
        else:
            reason = "Overwriting" if overwrite else "Populating"
            cond = self.condition(loaded, ok=False, reason=reason, message=self._running(name, overwrite))
        await self.write_status(loaded, {"conditions": [cond]})

    @staticmethod
    def _running(name: str, overwrite: bool) -> str:
        what = "overwriting the jail (spec.populateJail.overwrite)" if overwrite else "copying the jail image"
        return f"Job {name} is {what}"
