"""The `login` component: the sshd ConfigMap, the login Services and StatefulSet, and LoginReady."""

from __future__ import annotations

from slurmctl.api.v1 import LOGIN_READY, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler, Loaded, statefulset_ready
from slurmctl.reconcilers.populate_jail import jail_gate_open
from slurmctl.render import meta
from slurmctl.render.login import COMPONENT, render_login


class LoginReconciler(ComponentReconciler):
    component = "login"
    condition_type = LOGIN_READY

    async def reconcile_valid(self, loaded: Loaded) -> None:
        c, ns = loaded.name, loaded.namespace
        ids = await self.secret_ids(loaded, meta.munge_secret(c), meta.ssh_host_keys_secret(c))
        if ids is None:
            return
        munge_key_id, host_keys_id = ids
        if not jail_gate_open(self, loaded) and not self.owned(loaded, "apps/v1", "StatefulSet", COMPONENT):
            await self.wait(loaded, reason="WaitingForJail", message="waiting for the populate-jail Job to succeed")
            return
        await self.apply(loaded, render_login(loaded.cluster, munge_key_id=munge_key_id, host_keys_id=host_keys_id))
        desired = loaded.cluster.spec.login.size
        ready = min(desired, statefulset_ready(self.live("apps/v1", "StatefulSet", meta.login(c), ns)))
        if ready == desired:
            message = "no login nodes requested" if desired == 0 else f"all {desired} login nodes are ready"
            cond = self.condition(loaded, ok=True, reason="Ready", message=message)
        else:
            cond = self.condition(loaded, ok=False, reason="NotReady", message=f"login nodes ready: {ready}/{desired}")
        await self.write_status(loaded, {"conditions": [cond], "loginReady": ready_summary(ready, desired)})
