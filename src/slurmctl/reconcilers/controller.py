"""The `controller` component: slurmctld's StatefulSet and Service, and the ControllerReady condition."""

from __future__ import annotations

from slurmctl.api.v1 import Reason, SlurmClusterStatus, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler, Loaded
from slurmctl.reconcilers.observed import ready_replicas
from slurmctl.render import meta
from slurmctl.render.kinds import STATEFULSET


class ControllerReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        ids = await self.secret_ids(loaded, meta.munge_secret(loaded.name), meta.jwt_key_secret(loaded.name))
        if ids is None:
            return
        munge_key_id, jwt_key_id = ids
        await self.apply(loaded, self.desired(self.inputs(loaded, munge_key_id=munge_key_id, jwt_key_id=jwt_key_id)))
        desired = loaded.cluster.spec.controller.size
        ready = min(desired, ready_replicas(self.live(STATEFULSET, meta.controller(loaded.name), loaded.namespace)))
        if desired == 0:
            cond = self.condition(loaded, ok=False, reason=Reason.STOPPED, message="spec.controller.size is 0")
        elif ready == desired:
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message="slurmctld is ready")
        else:
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message="slurmctld is not ready yet")
        await self.write_status(
            loaded, SlurmClusterStatus(conditions=[cond], controller_ready=ready_summary(ready, desired))
        )
