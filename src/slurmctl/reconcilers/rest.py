"""The `rest` component: slurmrestd's Deployment and Service, and RestReady.

slurmrestd needs no key of its own (slurmctld verifies the callers' tokens) and mounts only the configs ConfigMap, so
nothing gates it; disabling it removes both objects (the JWT key stays: slurmctld still verifies users' tokens).
"""

from __future__ import annotations

from slurmctl.api.v1 import Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import available_replicas
from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, SERVICE


class RestReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        if not loaded.cluster.spec.rest.enabled:
            await self._remove(loaded)
            return
        await self.apply(loaded, self.desired(self.inputs(loaded)))
        deployment = self.live(DEPLOYMENT, meta.rest(loaded.name), loaded.namespace)
        if available_replicas(deployment) >= 1:
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message="slurmrestd is ready")
        elif (refused := await self.pods_refused(loaded, deployment)) is not None:
            cond = refused
        else:
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message="slurmrestd is not ready yet")
        await self.write_status(loaded, SlurmClusterStatus(conditions=[cond]))

    async def _remove(self, loaded: Loaded) -> None:
        for kind in (DEPLOYMENT, SERVICE):
            await self.prune(loaded, kind, keep=[])
        if loaded.condition(self.condition_type) is not None:  # it was enabled once
            await self.report(loaded, ok=False, reason=Reason.DISABLED, message="spec.rest.enabled is false")
