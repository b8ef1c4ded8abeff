"""The `controller` component: slurmctld's StatefulSet and Service, and the ControllerReady condition."""

from __future__ import annotations

from slurmctl.api.v1 import CONTROLLER_READY, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler, Loaded, statefulset_ready
from slurmctl.render import meta
from slurmctl.render.controller import render_controller


class ControllerReconciler(ComponentReconciler):
    component = "controller"
    condition_type = CONTROLLER_READY

    async def reconcile_valid(self, loaded: Loaded) -> None:
        ids = await self.secret_ids(loaded, meta.munge_secret(loaded.name))
        if ids is None:
            return
        (munge_key_id,) = ids
        await self.apply(loaded, render_controller(loaded.cluster, munge_key_id=munge_key_id))
        desired = loaded.cluster.spec.controller.size
        ready = min(
            desired,
            statefulset_ready(self.live("apps/v1", "StatefulSet", meta.controller(loaded.name), loaded.namespace)),
        )
        if desired == 0:
            cond = self.condition(loaded, ok=False, reason="Stopped", message="spec.controller.size is 0")
        elif ready == desired:
            cond = self.condition(loaded, ok=True, reason="Ready", message="slurmctld is ready")
        else:
            cond = self.condition(loaded, ok=False, reason="NotReady", message="slurmctld is not ready yet")
        await self.write_status(loaded, {"conditions": [cond], "controllerReady": ready_summary(ready, desired)})
