"""The `login` component: the sshd ConfigMap, the login Services and StatefulSet, and LoginReady."""

from __future__ import annotations

from slurmctl.api.v1 import Reason, SlurmClusterStatus, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.jail_gate import jail_gate_open
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import data_keys, ready_replicas
from slurmctl.render import meta
from slurmctl.render.kinds import SECRET, SERVICE, STATEFULSET
from slurmctl.render.sshd import host_key_types


class LoginReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        c, ns = loaded.name, loaded.namespace
        ids = await self.secret_ids(loaded, meta.munge_secret(c), meta.ssh_host_keys_secret(c))
        if ids is None:
            return
        munge_key_id, host_keys_id = ids
        host_keys = host_key_types(data_keys(self.live(SECRET, meta.ssh_host_keys_secret(c), ns)))
        if not jail_gate_open(self.cache, loaded) and not self.owned(loaded, STATEFULSET):
            message = "waiting for the populate-jail Job to succeed"
            await self.report(loaded, ok=False, reason=Reason.WAITING_FOR_JAIL, message=message)
            return
        intents = self.desired(
            self.inputs(loaded, munge_key_id=munge_key_id, host_keys_id=host_keys_id, host_keys=host_keys)
        )
        await self.apply(loaded, intents)
        # A login pod's own Service (render/login.py) goes with the pod when the set shrinks.
        await self.prune(loaded, SERVICE, keep=[o["metadata"]["name"] for o in intents if o["kind"] == SERVICE.kind])
        desired = loaded.cluster.spec.login.size
        statefulset = self.live(STATEFULSET, meta.login(c), ns)
        ready = min(desired, ready_replicas(statefulset))
        if ready == desired:
            message = "no login nodes requested" if desired == 0 else f"all {desired} login nodes are ready"
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message=message)
        elif (refused := await self.pods_refused(loaded, statefulset)) is not None:
            cond = refused
        else:
            message = f"login nodes ready: {ready}/{desired}"
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message=message)
        await self.write_status(
            loaded, SlurmClusterStatus(conditions=[cond], login_ready=ready_summary(ready, desired))
        )
