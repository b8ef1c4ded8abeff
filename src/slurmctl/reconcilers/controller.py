"""The `controller` component: slurmctld's StatefulSet and Service (and the standby's StatefulSet), and the
ControllerReady condition."""

from __future__ import annotations

from slurmctl.api.v1 import Condition, Reason, SlurmClusterStatus, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import ready_replicas
from slurmctl.render import meta
from slurmctl.render.controller import controller_statefulset_names
from slurmctl.render.kinds import STATEFULSET


class ControllerReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        ids = await self.secret_ids(loaded, meta.munge_secret(loaded.name), meta.jwt_key_secret(loaded.name))
        if ids is None:
            return
        munge_key_id, jwt_key_id = ids
        await self.apply(loaded, self.desired(self.inputs(loaded, munge_key_id=munge_key_id, jwt_key_id=jwt_key_id)))
        # The standby's StatefulSet once spec.controller.standby is off (its pod goes; the state claim is the
        # primary's, and claims are never deleted).
        await self.prune(loaded, STATEFULSET, keep=controller_statefulset_names(loaded.cluster))
        ctl = loaded.cluster.spec.controller
        c, ns = loaded.name, loaded.namespace
        primary_sts = self.live(STATEFULSET, meta.controller(c), ns)
        backup_sts = self.live(STATEFULSET, meta.controller_backup(c), ns) if ctl.standby else None
        primary = min(ctl.size, ready_replicas(primary_sts))
        backup = min(ctl.size, ready_replicas(backup_sts))
        desired = ctl.size * (2 if ctl.standby else 1)
        ready = primary + backup
        cond = self._condition(loaded, primary=primary, backup=backup)
        if ready < desired and (refused := await self.pods_refused(loaded, primary_sts, backup_sts)) is not None:
            cond = refused
        await self.write_status(
            loaded, SlurmClusterStatus(conditions=[cond], controller_ready=ready_summary(ready, desired))
        )

    def _condition(self, loaded: Loaded, *, primary: int, backup: int) -> Condition:
        ctl = loaded.cluster.spec.controller
        if ctl.size == 0:
            return self.condition(loaded, ok=False, reason=Reason.STOPPED, message="spec.controller.size is 0")
        if not ctl.standby:
            if primary:
                return self.condition(loaded, ok=True, reason=Reason.READY, message="slurmctld is ready")
            return self.condition(loaded, ok=False, reason=Reason.NOT_READY, message="slurmctld is not ready yet")
        primary_pod = f"{meta.controller(loaded.name)}-0"
        backup_pod = f"{meta.controller_backup(loaded.name)}-0"
        if primary and backup:
            message = f"slurmctld ({primary_pod}) and its standby ({backup_pod}) are ready"
            return self.condition(loaded, ok=True, reason=Reason.READY, message=message)
        if primary:
            message = f"slurmctld ({primary_pod}) is ready, its standby ({backup_pod}) is not: no failover until it is"
        elif backup:
            message = (
                f"the primary slurmctld ({primary_pod}) is not ready; its standby ({backup_pod}) is, and takes "
                "control once the primary has not answered for SlurmctldTimeout"
            )
        else:
            message = f"neither slurmctld ({primary_pod}) nor its standby ({backup_pod}) is ready yet"
        return self.condition(loaded, ok=False, reason=Reason.NOT_READY, message=message)
